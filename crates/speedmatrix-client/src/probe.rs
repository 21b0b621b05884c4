//! What a server says about itself: models, version, metrics, tokenizer.

use http::Method;
use serde::{Deserialize, Serialize};
use speedmatrix_units::Tokens;

use crate::engine::Engine;
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
    /// llama.cpp's `GET /props`.
    pub llamacpp_props: Option<LlamaCppProps>,
    /// SGLang's `GET /get_server_info`.
    pub sglang: Option<SglangServerInfo>,
    /// Hugging Face TGI's `GET /info`.
    pub tgi: Option<TgiInfo>,
    /// Ollama's `GET /api/version`.
    pub ollama_version: Option<String>,
    /// Optional endpoints that answered but could not be used, one line each.
    pub warnings: Vec<String>,
}

impl ServerInfo {
    /// vLLM's KV cache settings, when `/metrics` exports them.
    pub fn cache_config(&self) -> Option<CacheConfig> {
        self.metrics.as_ref()?.cache_config()
    }

    /// Which engine answered, by the endpoints only it has (see [`Engine::identify`]).
    pub fn engine(&self) -> Engine {
        Engine::identify(self)
    }
}

/// What Hugging Face TGI's `GET /info` says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TgiInfo {
    /// The served model (`model_id`).
    pub model_id: String,
    /// The router's version (`version`).
    pub version: Option<String>,
    /// Longest prompt + output of one request (`max_total_tokens`).
    pub max_total_tokens: Option<Tokens>,
    /// Requests the router accepts at once (`max_concurrent_requests`).
    pub max_concurrent_requests: Option<u32>,
}

impl TgiInfo {
    /// Reads `/info`; `None` unless it is TGI's (a `model_id` beside the
    /// router's `text-generation-router` name or its `max_total_tokens`).
    pub fn from_json(info: &serde_json::Value) -> Option<TgiInfo> {
        let model_id = info.get("model_id")?.as_str()?.to_owned();
        let is_router = info.get("router").and_then(serde_json::Value::as_str)
            == Some("text-generation-router");
        let max_total_tokens = info
            .get("max_total_tokens")
            .and_then(serde_json::Value::as_u64);
        if !is_router && max_total_tokens.is_none() {
            return None;
        }
        Some(TgiInfo {
            model_id,
            version: info
                .get("version")
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned),
            max_total_tokens: max_total_tokens.map(Tokens::new),
            max_concurrent_requests: info
                .get("max_concurrent_requests")
                .and_then(serde_json::Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
        })
    }
}

/// What llama.cpp's `GET /props` says about its KV cache.
///
/// `/props` reports the context window of one slot
/// (`default_generation_settings.n_ctx`) and the number of slots
/// (`total_slots`, the server's `--parallel`); whether the slots share one
/// cache (`--kv-unified`) is reported only by servers that add `kv_unified`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LlamaCppProps {
    /// KV cells one request may use (`default_generation_settings.n_ctx`).
    pub slot_n_ctx: Tokens,
    /// Requests served at once (`total_slots`).
    pub total_slots: u32,
    /// `kv_unified`, when the server reports it.
    pub kv_unified: Option<bool>,
}

/// What SGLang's `GET /get_server_info` says about its KV pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SglangServerInfo {
    /// Tokens the KV pool holds (`max_total_num_tokens`).
    pub max_total_num_tokens: Tokens,
    /// The scheduler's cap on running requests (`max_running_requests`), when set.
    pub max_running_requests: Option<u32>,
}

impl LlamaCppProps {
    /// Reads the fields from a `/props` answer; `None` when they are missing.
    pub fn from_json(props: &serde_json::Value) -> Option<LlamaCppProps> {
        let slot_n_ctx = props
            .pointer("/default_generation_settings/n_ctx")?
            .as_u64()?;
        let total_slots = u32::try_from(props.get("total_slots")?.as_u64()?).ok()?;
        Some(LlamaCppProps {
            slot_n_ctx: Tokens::new(slot_n_ctx),
            total_slots,
            kv_unified: props.get("kv_unified").and_then(serde_json::Value::as_bool),
        })
    }
}

impl SglangServerInfo {
    /// Reads the fields from a `/get_server_info` answer; `None` when
    /// `max_total_num_tokens` is missing. Older servers put the scheduler's
    /// figures at the top level, newer ones under `internal_states[0]`.
    pub fn from_json(info: &serde_json::Value) -> Option<SglangServerInfo> {
        let field = |name: &str| {
            info.get(name)
                .and_then(serde_json::Value::as_u64)
                .or_else(|| {
                    info.pointer(&format!("/internal_states/0/{name}"))?
                        .as_u64()
                })
        };
        Some(SglangServerInfo {
            max_total_num_tokens: Tokens::new(field("max_total_num_tokens")?),
            max_running_requests: field("max_running_requests").and_then(|n| u32::try_from(n).ok()),
        })
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

    /// `GET path` as JSON; `None` when the server has no such endpoint.
    pub async fn get_json(&self, path: &str) -> Result<Option<serde_json::Value>, Error> {
        let Some(body) = self.fetch_optional(Method::GET, path, None).await? else {
            return Ok(None);
        };
        decode(&body, &format!("the {path} answer")).map(Some)
    }

    /// llama.cpp's `GET /props`; `None` when the server has no such endpoint
    /// or its answer lacks the KV fields.
    pub async fn llamacpp_props(&self) -> Result<Option<LlamaCppProps>, Error> {
        Ok(self
            .get_json("/props")
            .await?
            .as_ref()
            .and_then(LlamaCppProps::from_json))
    }

    /// SGLang's `GET /get_server_info`; `None` when the server has no such
    /// endpoint or its answer lacks `max_total_num_tokens`.
    pub async fn sglang_server_info(&self) -> Result<Option<SglangServerInfo>, Error> {
        Ok(self
            .get_json("/get_server_info")
            .await?
            .as_ref()
            .and_then(SglangServerInfo::from_json))
    }

    /// Hugging Face TGI's `GET /info`; `None` when the server has no such
    /// endpoint or its answer is not TGI's.
    pub async fn tgi_info(&self) -> Result<Option<TgiInfo>, Error> {
        Ok(self
            .get_json("/info")
            .await?
            .as_ref()
            .and_then(TgiInfo::from_json))
    }

    /// Ollama's `GET /api/version`; `None` when the server has no such endpoint.
    pub async fn ollama_version(&self) -> Result<Option<String>, Error> {
        let Some(body) = self
            .fetch_optional(Method::GET, "/api/version", None)
            .await?
        else {
            return Ok(None);
        };
        Ok(serde_json::from_slice::<Version>(&body)
            .ok()
            .map(|v| v.version))
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

    /// Asks models, version, metrics and the engines' own endpoints
    /// (`/props`, `/get_server_info`, `/info`, `/api/version`) at once.
    ///
    /// Fails only if the server cannot be reached or `/v1/models` fails;
    /// problems with the optional endpoints land in [`ServerInfo::warnings`].
    pub async fn probe(&self) -> Result<ServerInfo, Error> {
        let (models, version, metrics, props, sglang, tgi, ollama) = tokio::join!(
            self.models(),
            self.version(),
            self.metrics(),
            self.llamacpp_props(),
            self.sglang_server_info(),
            self.tgi_info(),
            self.ollama_version(),
        );
        let mut warnings = Vec::new();
        let version = optional(&mut warnings, "/version", version);
        let metrics = optional(&mut warnings, "/metrics", metrics);
        let llamacpp_props = optional(&mut warnings, "/props", props);
        let sglang = optional(&mut warnings, "/get_server_info", sglang);
        // Other engines answer /info and /api/version with pages of their own:
        // anything but TGI's or Ollama's answer just means "not this engine".
        let tgi = tgi.ok().flatten();
        let ollama_version = ollama.ok().flatten();
        Ok(ServerInfo {
            base_url: self.base_url().to_owned(),
            models: models?,
            version,
            metrics,
            llamacpp_props,
            sglang,
            tgi,
            ollama_version,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn llamacpp_props_read_slot_window_and_slots() {
        let props = json!({
            "default_generation_settings": {"n_ctx": 32768, "params": {}},
            "total_slots": 8,
            "model_path": "m.gguf"
        });
        let p = LlamaCppProps::from_json(&props).unwrap();
        assert_eq!(p.slot_n_ctx, Tokens::new(32_768));
        assert_eq!(p.total_slots, 8);
        assert_eq!(p.kv_unified, None);
        assert!(LlamaCppProps::from_json(&json!({"total_slots": 8})).is_none());
        let negative = json!({"default_generation_settings": {"n_ctx": -1}, "total_slots": 1});
        assert!(LlamaCppProps::from_json(&negative).is_none());
    }

    #[test]
    fn tgi_info_is_told_from_other_info_pages() {
        let info = json!({"model_id": "m", "router": "text-generation-router", "version": "3.3.6",
            "max_total_tokens": 4096, "max_concurrent_requests": 128});
        let t = TgiInfo::from_json(&info).unwrap();
        assert_eq!(t.max_total_tokens, Some(Tokens::new(4_096)));
        assert_eq!(t.max_concurrent_requests, Some(128));
        assert!(TgiInfo::from_json(&json!({"model_id": "m"})).is_none());
        assert!(TgiInfo::from_json(&json!({"name": "other"})).is_none());
    }

    fn bare() -> ServerInfo {
        ServerInfo {
            base_url: "http://127.0.0.1".into(),
            models: None,
            version: None,
            metrics: None,
            llamacpp_props: None,
            sglang: None,
            tgi: None,
            ollama_version: None,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn engines_are_told_by_their_own_endpoints() {
        assert_eq!(bare().engine(), Engine::Unknown);
        let mut i = bare();
        i.metrics = Some(ServerMetrics::parse("vllm:num_requests_running 0\n"));
        assert_eq!(i.engine(), Engine::Vllm);
        i.ollama_version = Some("0.12.0".into());
        assert_eq!(i.engine(), Engine::Ollama);
        i.llamacpp_props = LlamaCppProps::from_json(
            &json!({"default_generation_settings": {"n_ctx": 8}, "total_slots": 1}),
        );
        assert_eq!(i.engine(), Engine::LlamaCpp);
        assert_eq!(
            Engine::LlamaCpp.stream_fields().get("timings_per_token"),
            Some(&serde_json::Value::Bool(true))
        );
        i.tgi = TgiInfo::from_json(&json!({"model_id": "m", "max_total_tokens": 8}));
        assert_eq!(i.engine(), Engine::Tgi);
        assert!(Engine::Tgi.one_event_per_token());
        assert!(Engine::Vllm.stream_fields().is_empty());
    }

    #[test]
    fn sglang_info_reads_top_level_or_internal_states() {
        let flat = json!({"max_total_num_tokens": 123456, "max_running_requests": 64});
        let nested = json!({"internal_states": [{"max_total_num_tokens": 123456}]});
        let a = SglangServerInfo::from_json(&flat).unwrap();
        assert_eq!(a.max_total_num_tokens, Tokens::new(123_456));
        assert_eq!(a.max_running_requests, Some(64));
        let b = SglangServerInfo::from_json(&nested).unwrap();
        assert_eq!(b.max_total_num_tokens, Tokens::new(123_456));
        assert_eq!(b.max_running_requests, None);
        assert!(SglangServerInfo::from_json(&json!({"version": "0.5"})).is_none());
    }
}
