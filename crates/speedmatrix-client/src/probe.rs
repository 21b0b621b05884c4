//! What a server says about itself: models, version, metrics, tokenizer.

use http::Method;
use serde::{Deserialize, Serialize};
use speedmatrix_units::Tokens;

use crate::error::snippet;
use crate::prometheus::{CacheConfig, ServerMetrics};
use crate::request::Message;
use crate::{Client, Error};

/// One entry of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelInfo {
    /// The id to put in requests.
    pub id: String,
    /// Context length the server allows (vLLM's `max_model_len`).
    #[serde(default)]
    pub max_model_len: Option<Tokens>,
    /// Where the weights came from (vLLM's `root`).
    #[serde(default)]
    pub root: Option<String>,
    /// `owned_by` as reported.
    #[serde(default)]
    pub owned_by: Option<String>,
}

/// Body of vLLM's `POST /tokenize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum TokenizeRequest {
    /// Tokenize plain text.
    Prompt {
        /// Model id.
        model: String,
        /// The text.
        prompt: String,
        /// Whether to add BOS and the like (server default when `None`).
        #[serde(skip_serializing_if = "Option::is_none")]
        add_special_tokens: Option<bool>,
    },
    /// Tokenize a conversation through the chat template.
    Chat {
        /// Model id.
        model: String,
        /// The conversation.
        messages: Vec<Message>,
        /// Whether to append the assistant turn opener (server default when `None`).
        #[serde(skip_serializing_if = "Option::is_none")]
        add_generation_prompt: Option<bool>,
    },
}

impl TokenizeRequest {
    /// Tokenize `prompt` with the server's defaults.
    pub fn prompt(model: impl Into<String>, prompt: impl Into<String>) -> Self {
        TokenizeRequest::Prompt {
            model: model.into(),
            prompt: prompt.into(),
            add_special_tokens: None,
        }
    }

    /// Tokenize `messages` through the chat template with the server's defaults.
    pub fn chat(model: impl Into<String>, messages: Vec<Message>) -> Self {
        TokenizeRequest::Chat {
            model: model.into(),
            messages,
            add_generation_prompt: None,
        }
    }
}

/// Answer of `POST /tokenize`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct Tokenized {
    /// Number of tokens.
    pub count: Tokens,
    /// The token ids.
    #[serde(default)]
    pub tokens: Vec<u32>,
    /// The server's context limit, when reported.
    #[serde(default)]
    pub max_model_len: Option<Tokens>,
}

/// Everything [`Client::probe`] learned. Endpoints the server lacks are `None`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerInfo {
    /// The normalized base URL probed.
    pub base_url: String,
    /// `GET /v1/models`.
    pub models: Option<Vec<ModelInfo>>,
    /// `GET /version` (vLLM: the engine version).
    pub version: Option<String>,
    /// `GET /metrics`.
    pub metrics: Option<ServerMetrics>,
    /// Optional endpoints that answered but could not be used, one line each.
    pub warnings: Vec<String>,
}

impl ServerInfo {
    /// vLLM's KV cache settings, when `/metrics` exports them.
    pub fn cache_config(&self) -> Option<CacheConfig> {
        self.metrics.as_ref()?.cache_config()
    }
}

#[derive(Deserialize)]
struct ModelList {
    data: Vec<ModelInfo>,
}

#[derive(Deserialize)]
struct Version {
    version: String,
}

fn decode<'a, T: Deserialize<'a>>(body: &'a [u8], what: &str) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|err| Error::Protocol {
        reason: format!("{what} is not the expected JSON ({err})"),
        snippet: snippet(body),
    })
}

impl Client {
    /// `GET /v1/models`; `None` when the server has no such endpoint.
    pub async fn models(&self) -> Result<Option<Vec<ModelInfo>>, Error> {
        let Some(body) = self.fetch_optional(Method::GET, "/v1/models", None).await? else {
            return Ok(None);
        };
        decode::<ModelList>(&body, "the /v1/models answer").map(|list| Some(list.data))
    }

    /// `GET /version`: the engine version string.
    pub async fn version(&self) -> Result<Option<String>, Error> {
        let Some(body) = self.fetch_optional(Method::GET, "/version", None).await? else {
            return Ok(None);
        };
        decode::<Version>(&body, "the /version answer").map(|v| Some(v.version))
    }

    /// `GET /metrics` parsed as Prometheus text.
    pub async fn metrics(&self) -> Result<Option<ServerMetrics>, Error> {
        let Some(body) = self.fetch_optional(Method::GET, "/metrics", None).await? else {
            return Ok(None);
        };
        Ok(Some(ServerMetrics::parse(&String::from_utf8_lossy(&body))))
    }

    /// vLLM's `POST /tokenize`.
    pub async fn tokenize(&self, request: &TokenizeRequest) -> Result<Option<Tokenized>, Error> {
        let body = serde_json::to_vec(request).map_err(|err| Error::InvalidRequest {
            reason: format!("cannot encode the tokenize request: {err}"),
        })?;
        let Some(answer) = self
            .fetch_optional(Method::POST, "/tokenize", Some(body))
            .await?
        else {
            return Ok(None);
        };
        decode::<Tokenized>(&answer, "the /tokenize answer").map(Some)
    }

    /// Asks models, version and metrics at once.
    ///
    /// Fails only if the server cannot be reached or `/v1/models` fails;
    /// problems with the optional endpoints land in [`ServerInfo::warnings`].
    pub async fn probe(&self) -> Result<ServerInfo, Error> {
        let (models, version, metrics) =
            tokio::join!(self.models(), self.version(), self.metrics());
        let mut warnings = Vec::new();
        let version = optional(&mut warnings, "/version", version);
        let metrics = optional(&mut warnings, "/metrics", metrics);
        Ok(ServerInfo {
            base_url: self.base_url().to_owned(),
            models: models?,
            version,
            metrics,
            warnings,
        })
    }
}

/// The value of an optional endpoint; its failure becomes a warning.
fn optional<T>(
    warnings: &mut Vec<String>,
    what: &str,
    result: Result<Option<T>, Error>,
) -> Option<T> {
    match result {
        Ok(value) => value,
        Err(err) => {
            warnings.push(format!("{what}: {err}"));
            None
        }
    }
}
