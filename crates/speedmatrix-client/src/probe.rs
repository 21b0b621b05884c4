//! What a server says about itself: models, version, metrics, tokenizer.

use http::Method;
use serde::{Deserialize, Serialize};
use speedmatrix_units::Tokens;

use speedmatrix_engines::{
    Endpoints, Engine, PROBE_PATHS, ReportedCapacity, ServerMetrics, ollama, tgi,
};

use crate::error::snippet;
use crate::request::Message;
use crate::{Client, ClientError};

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
    /// What the engines' own endpoints (`/version`, `/metrics`, `/props`,
    /// `/get_server_info`, `/info`, `/api/version`) answered, parsed.
    pub endpoints: Endpoints,
    /// Optional endpoints that answered but could not be used, one line each.
    pub warnings: Vec<String>,
}

impl ServerInfo {
    /// Which engine answered (see [`Endpoints::engine`]).
    pub fn engine(&self) -> Engine {
        self.endpoints.engine()
    }

    /// The engine version `/version` reports.
    pub fn version(&self) -> Option<&str> {
        self.endpoints.version.as_deref()
    }

    /// `GET /metrics`, parsed.
    pub fn metrics(&self) -> Option<&ServerMetrics> {
        self.endpoints.metrics.as_ref()
    }

    /// The KV capacity the server reports, from whichever engine's endpoint has it.
    pub fn capacity(&self) -> Option<ReportedCapacity> {
        self.endpoints.capacity()
    }
}

#[derive(Deserialize)]
struct ModelList {
    data: Vec<ModelInfo>,
}

fn decode<'a, T: Deserialize<'a>>(body: &'a [u8], what: &str) -> Result<T, ClientError> {
    serde_json::from_slice(body).map_err(|err| ClientError::Protocol {
        reason: format!("{what} is not the expected JSON ({err})"),
        snippet: snippet(body),
    })
}

impl Client {
    /// `GET /v1/models`; `None` when the server has no such endpoint.
    pub async fn models(&self) -> Result<Option<Vec<ModelInfo>>, ClientError> {
        let Some(body) = self.fetch_optional(Method::GET, "/v1/models", None).await? else {
            return Ok(None);
        };
        decode::<ModelList>(&body, "the /v1/models answer").map(|list| Some(list.data))
    }

    /// `GET /metrics` parsed as Prometheus text.
    pub async fn metrics(&self) -> Result<Option<ServerMetrics>, ClientError> {
        let Some(body) = self.fetch_optional(Method::GET, "/metrics", None).await? else {
            return Ok(None);
        };
        Ok(Some(ServerMetrics::parse(&String::from_utf8_lossy(&body))))
    }

    /// `GET path` as JSON; `None` when the server has no such endpoint.
    pub async fn get_json(&self, path: &str) -> Result<Option<serde_json::Value>, ClientError> {
        let Some(body) = self.fetch_optional(Method::GET, path, None).await? else {
            return Ok(None);
        };
        decode(&body, &format!("the {path} answer")).map(Some)
    }

    /// vLLM's `POST /tokenize`.
    pub async fn tokenize(
        &self,
        request: &TokenizeRequest,
    ) -> Result<Option<Tokenized>, ClientError> {
        let body = serde_json::to_vec(request).map_err(|err| ClientError::InvalidRequest {
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

    /// Asks `/v1/models` and every engine's own endpoint
    /// ([`speedmatrix_engines::PROBE_PATHS`]) at once.
    ///
    /// Fails only if the server cannot be reached or `/v1/models` fails;
    /// problems with the optional endpoints land in [`ServerInfo::warnings`].
    pub async fn probe(&self) -> Result<ServerInfo, ClientError> {
        let answers = futures_util::future::join_all(
            PROBE_PATHS.map(|path| self.fetch_optional(Method::GET, path, None)),
        );
        let (models, answers) = tokio::join!(self.models(), answers);
        let mut warnings = Vec::new();
        let mut endpoints = Endpoints::default();
        for (path, answer) in PROBE_PATHS.iter().zip(answers) {
            // Other engines answer /info and /api/version with pages and
            // errors of their own: those only mean "not this engine".
            let quiet = matches!(*path, tgi::INFO | ollama::VERSION);
            match answer {
                Ok(Some(body)) => {
                    if let Err(e) = endpoints.read(path, &body) {
                        warnings.push(e.to_string());
                    }
                }
                Ok(None) => {}
                Err(err) if !quiet => warnings.push(format!("{path}: {err}")),
                Err(_) => {}
            }
        }
        // A server that answers /v1/models with an error still answers: what it serves is
        // then unknown (the caller may name the model), not a reason to stop.
        let models = match models {
            Err(e) if e.status().is_some() => {
                warnings.push(format!("/v1/models: {e}"));
                None
            }
            other => other?,
        };
        endpoints.model_owners = models
            .iter()
            .flatten()
            .filter_map(|m| m.owned_by.clone())
            .collect();
        Ok(ServerInfo {
            base_url: self.base_url().to_owned(),
            models,
            endpoints,
            warnings,
        })
    }
}
