//! Typed request bodies for `/v1/completions` and `/v1/chat/completions`.

use serde::Serialize;
use serde_json::{Map, Value};
use speedmatrix_units::Tokens;

use crate::ClientError;

/// A completion prompt: text, or token ids the server uses as they are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Prompt {
    /// Text the server tokenizes.
    Text(String),
    /// Token ids, bypassing the server's tokenizer.
    TokenIds(Vec<u32>),
}

impl From<String> for Prompt {
    fn from(text: String) -> Self {
        Prompt::Text(text)
    }
}

impl From<&str> for Prompt {
    fn from(text: &str) -> Self {
        Prompt::Text(text.to_owned())
    }
}

impl From<Vec<u32>> for Prompt {
    fn from(ids: Vec<u32>) -> Self {
        Prompt::TokenIds(ids)
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// `"system"`, `"user"` or `"assistant"`.
    pub role: String,
    /// The message text.
    pub content: String,
}

impl Message {
    /// A message with any role.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }
}

/// `stream_options` of an OpenAI streaming request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StreamOptions {
    /// Ask for a final usage-only chunk with the totals.
    pub include_usage: bool,
    /// Ask for cumulative usage in every chunk (vLLM and SGLang extension).
    pub continuous_usage_stats: bool,
}

/// Generation settings shared by both endpoints. `None` fields are left out
/// of the body so the server's defaults apply.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Generation {
    /// Most tokens to generate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<Tokens>,
    /// Keep generating past end-of-sequence (vLLM extension).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// Fewest tokens to generate before stopping is allowed (vLLM extension).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<Tokens>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Sampling seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Ask for a server-sent event stream. The streaming client methods force it on.
    pub stream: bool,
    /// Usage reporting in the stream; only sent when `stream` is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Extra fields merged into the body last, overriding typed ones
    /// (engine-specific knobs such as `top_k` or `cache_prompt`).
    #[serde(skip)]
    pub extra: Map<String, Value>,
}

impl Default for Generation {
    /// Streaming with a final usage chunk; everything else left to the server.
    fn default() -> Self {
        Generation {
            max_tokens: None,
            ignore_eos: None,
            min_tokens: None,
            temperature: None,
            seed: None,
            stream: true,
            stream_options: Some(StreamOptions {
                include_usage: true,
                continuous_usage_stats: false,
            }),
            extra: Map::new(),
        }
    }
}

/// Adds the chainable [`Generation`] setters to a request type.
macro_rules! generation_setters {
    ($ty:ty) => {
        impl $ty {
            /// Sets `max_tokens`.
            pub fn max_tokens(mut self, n: Tokens) -> Self {
                self.generation.max_tokens = Some(n);
                self
            }

            /// Sets `ignore_eos`.
            pub fn ignore_eos(mut self, on: bool) -> Self {
                self.generation.ignore_eos = Some(on);
                self
            }

            /// Sets `min_tokens`.
            pub fn min_tokens(mut self, n: Tokens) -> Self {
                self.generation.min_tokens = Some(n);
                self
            }

            /// Sets `temperature`.
            pub fn temperature(mut self, t: f64) -> Self {
                self.generation.temperature = Some(t);
                self
            }

            /// Sets `seed`.
            pub fn seed(mut self, seed: u64) -> Self {
                self.generation.seed = Some(seed);
                self
            }

            /// Sets `stream_options` (`None` leaves it out).
            pub fn stream_options(mut self, options: Option<StreamOptions>) -> Self {
                self.generation.stream_options = options;
                self
            }

            /// Turns per-chunk cumulative usage (`continuous_usage_stats`) on or off,
            /// keeping the final usage chunk.
            pub fn continuous_usage(mut self, on: bool) -> Self {
                self.generation.stream_options = Some(StreamOptions {
                    include_usage: true,
                    continuous_usage_stats: on,
                });
                self
            }

            /// Adds one pass-through body field; it overrides a typed field of the same name.
            pub fn extra(mut self, key: impl Into<String>, value: Value) -> Self {
                self.generation.extra.insert(key.into(), value);
                self
            }

            /// The JSON body, with `extra` merged in.
            pub fn to_body(&self) -> Result<Vec<u8>, ClientError> {
                body_with_extra(self, &self.generation)
            }
        }
    };
}

/// Body of `POST /v1/completions`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct CompletionRequest {
    /// Model id as the server lists it.
    pub model: String,
    /// The prompt.
    pub prompt: Prompt,
    /// Generation settings.
    #[serde(flatten)]
    pub generation: Generation,
}

impl CompletionRequest {
    /// A streaming request with default [`Generation`].
    pub fn new(model: impl Into<String>, prompt: impl Into<Prompt>) -> Self {
        CompletionRequest {
            model: model.into(),
            prompt: prompt.into(),
            generation: Generation::default(),
        }
    }
}

generation_setters!(CompletionRequest);

/// Body of `POST /v1/chat/completions`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ChatRequest {
    /// Model id as the server lists it.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// Generation settings.
    #[serde(flatten)]
    pub generation: Generation,
}

impl ChatRequest {
    /// A streaming request with default [`Generation`].
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        ChatRequest {
            model: model.into(),
            messages,
            generation: Generation::default(),
        }
    }
}

generation_setters!(ChatRequest);

fn body_with_extra<T: Serialize>(
    request: &T,
    generation: &Generation,
) -> Result<Vec<u8>, ClientError> {
    let invalid = |err: serde_json::Error| ClientError::InvalidRequest {
        reason: format!("cannot encode the request as JSON: {err}"),
    };
    let needs_edit =
        !generation.extra.is_empty() || (!generation.stream && generation.stream_options.is_some());
    if !needs_edit {
        // The common case straight to bytes: a long prompt (or 100k token
        // ids) is not worth a detour through `serde_json::Value`.
        return serde_json::to_vec(request).map_err(invalid);
    }
    let mut value = serde_json::to_value(request).map_err(invalid)?;
    if let Value::Object(map) = &mut value {
        if !generation.stream {
            map.remove("stream_options");
        }
        for (key, extra) in &generation.extra {
            map.insert(key.clone(), extra.clone());
        }
    }
    serde_json::to_vec(&value).map_err(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_has_typed_fields_and_extra_overrides() {
        let req = CompletionRequest::new("m", vec![1, 2, 3])
            .max_tokens(Tokens::new(8))
            .ignore_eos(true)
            .continuous_usage(true)
            .extra("top_k", Value::from(5))
            .extra("max_tokens", Value::from(9));
        let body: Value = serde_json::from_slice(&req.to_body().unwrap()).unwrap();
        assert_eq!(body["prompt"], serde_json::json!([1, 2, 3]));
        assert_eq!(body["max_tokens"], 9);
        assert_eq!(body["top_k"], 5);
        assert_eq!(body["ignore_eos"], true);
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"]["continuous_usage_stats"], true);
        assert!(body.get("temperature").is_none());
    }

    #[test]
    fn non_streaming_body_drops_stream_options() {
        let mut req = CompletionRequest::new("m", "p");
        req.generation.stream = false;
        let body: Value = serde_json::from_slice(&req.to_body().unwrap()).unwrap();
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
        let plain: Value =
            serde_json::from_slice(&CompletionRequest::new("m", "p").to_body().unwrap()).unwrap();
        assert_eq!(plain["stream_options"]["include_usage"], true);
    }

    #[test]
    fn chat_body_has_messages() {
        let req = ChatRequest::new("m", vec![Message::user("hi")]).seed(7);
        let body: Value = serde_json::from_slice(&req.to_body().unwrap()).unwrap();
        assert_eq!(body["messages"][0]["role"], "user");
        assert_eq!(body["messages"][0]["content"], "hi");
        assert_eq!(body["seed"], 7);
    }
}
