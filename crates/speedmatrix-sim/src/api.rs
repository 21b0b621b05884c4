//! The OpenAI/vLLM JSON shapes the server reads and writes.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
#[cfg(test)]
use serde_json::Value;
use serde_json::json;

use crate::engine::{FinishReason, Usage};
use crate::text::Message;

/// A completions or chat completions request (fields the simulator uses; others are ignored).
#[derive(Debug, Deserialize)]
pub(crate) struct GenerateRequest {
    #[serde(default)]
    pub(crate) model: Option<String>,
    #[serde(default)]
    pub(crate) prompt: Option<PromptInput>,
    #[serde(default)]
    pub(crate) messages: Option<Vec<Message>>,
    #[serde(default)]
    pub(crate) max_tokens: Option<u32>,
    #[serde(default)]
    pub(crate) max_completion_tokens: Option<u32>,
    #[serde(default)]
    pub(crate) min_tokens: Option<u32>,
    #[serde(default)]
    pub(crate) ignore_eos: Option<bool>,
    #[serde(default)]
    pub(crate) stream: Option<bool>,
    #[serde(default)]
    pub(crate) stream_options: Option<StreamOptions>,
    /// llama.cpp's request for `timings` (with the running output count) on every chunk.
    #[serde(default)]
    pub(crate) timings_per_token: Option<bool>,
    /// Faults for this request, as in the `x-sim-fault` header (which wins when both are given).
    #[serde(default)]
    pub(crate) sim_fault: Option<String>,
}

/// A text prompt or a list of token ids.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum PromptInput {
    Text(String),
    Ids(Vec<u32>),
}

/// `stream_options`.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub(crate) struct StreamOptions {
    #[serde(default)]
    pub(crate) include_usage: Option<bool>,
    #[serde(default)]
    pub(crate) continuous_usage_stats: Option<bool>,
}

/// `POST /tokenize`.
#[derive(Debug, Deserialize)]
pub(crate) struct TokenizeRequest {
    #[serde(default)]
    pub(crate) model: Option<String>,
    #[serde(default)]
    pub(crate) prompt: Option<String>,
    #[serde(default)]
    pub(crate) messages: Option<Vec<Message>>,
    #[serde(default)]
    pub(crate) add_generation_prompt: Option<bool>,
    #[serde(default)]
    pub(crate) return_token_strs: Option<bool>,
}

/// Which endpoint a generation came through.
pub(crate) use speedmatrix_units::Api;

/// vLLM's error body: `{"error": {"message", "type", "param", "code"}}` with `code` the HTTP status.
pub(crate) fn error_body(status: u16, message: &str) -> Bytes {
    let kind = match status {
        400 => "BadRequestError",
        404 => "NotFoundError",
        405 => "MethodNotAllowed",
        413 => "RequestEntityTooLarge",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalServerError",
    };
    json_bytes(
        &json!({ "error": { "message": message, "type": kind, "param": null, "code": status } }),
    )
}

pub(crate) fn json_bytes(value: &impl Serialize) -> Bytes {
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[derive(Debug, Serialize, Clone, Copy)]
pub(crate) struct UsageJson {
    prompt_tokens: u32,
    total_tokens: u32,
    completion_tokens: u32,
}

impl UsageJson {
    pub(crate) fn new(prompt_tokens: u32, completion_tokens: u32) -> Self {
        UsageJson {
            prompt_tokens,
            total_tokens: prompt_tokens.saturating_add(completion_tokens),
            completion_tokens,
        }
    }
}

impl From<Usage> for UsageJson {
    fn from(u: Usage) -> Self {
        UsageJson::new(u.prompt_tokens, u.completion_tokens)
    }
}

/// Identity of one response, shared by all its chunks.
#[derive(Debug, Clone)]
pub(crate) struct ResponseMeta {
    pub(crate) api: Api,
    pub(crate) id: String,
    pub(crate) created: u64,
    pub(crate) model: String,
    /// `data: {"id":…,"object":…,"created":…,"model":…,"choices":[`, rendered once: chunks are
    /// written per token, so they are assembled from fixed pieces rather than JSON values.
    head: Vec<u8>,
}

impl ResponseMeta {
    pub(crate) fn new(api: Api, id: u64, model: &str) -> Self {
        let prefix = match api {
            Api::Completions => "cmpl",
            Api::Chat => "chatcmpl",
        };
        let id = format!("{prefix}-{id:016x}");
        let created = unix_now();
        let object = match api {
            Api::Completions => "text_completion",
            Api::Chat => "chat.completion.chunk",
        };
        let mut head = b"data: {\"id\":".to_vec();
        push_json(&mut head, &id);
        head.extend_from_slice(
            format!(",\"object\":\"{object}\",\"created\":{created},\"model\":").as_bytes(),
        );
        push_json(&mut head, model);
        head.extend_from_slice(b",\"choices\":[");
        ResponseMeta {
            api,
            id,
            created,
            model: model.to_owned(),
            head,
        }
    }

    /// One SSE event: `data: {chunk}\n\n`. `role` is set for the chat role chunk.
    pub(crate) fn chunk(
        &self,
        text: &str,
        role: bool,
        finish: Option<FinishReason>,
        usage: Option<UsageJson>,
    ) -> Bytes {
        let mut out = Vec::with_capacity(self.head.len() + text.len() + 192);
        out.extend_from_slice(&self.head);
        match (self.api, role) {
            (Api::Completions, _) => {
                out.extend_from_slice(b"{\"index\":0,\"text\":");
                push_json(&mut out, text);
                out.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":");
                push_finish(&mut out, finish);
                out.extend_from_slice(b",\"stop_reason\":null}");
            }
            (Api::Chat, true) => {
                out.extend_from_slice(b"{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}");
            }
            (Api::Chat, false) => {
                out.extend_from_slice(b"{\"index\":0,\"delta\":{\"content\":");
                push_json(&mut out, text);
                out.extend_from_slice(b"},\"logprobs\":null,\"finish_reason\":");
                push_finish(&mut out, finish);
                out.push(b'}');
            }
        }
        self.close(out, usage)
    }

    /// One chat event of reasoning text: `delta.reasoning_content`, as vLLM's reasoning
    /// parser streams a model's thinking.
    pub(crate) fn reasoning_chunk(&self, text: &str, usage: Option<UsageJson>) -> Bytes {
        let mut out = Vec::with_capacity(self.head.len() + text.len() + 192);
        out.extend_from_slice(&self.head);
        out.extend_from_slice(b"{\"index\":0,\"delta\":{\"reasoning_content\":");
        push_json(&mut out, text);
        out.extend_from_slice(b"},\"logprobs\":null,\"finish_reason\":null}");
        self.close(out, usage)
    }

    /// The final usage-only chunk (`choices: []`).
    pub(crate) fn usage_chunk(&self, usage: UsageJson) -> Bytes {
        self.close(self.head.clone(), Some(usage))
    }

    fn close(&self, mut out: Vec<u8>, usage: Option<UsageJson>) -> Bytes {
        out.push(b']');
        if let Some(u) = usage {
            out.extend_from_slice(b",\"usage\":");
            let _ = serde_json::to_writer(&mut out, &u);
        }
        out.extend_from_slice(b"}\n\n");
        Bytes::from(out)
    }

    fn object(&self) -> &'static str {
        match self.api {
            Api::Completions => "text_completion",
            Api::Chat => "chat.completion",
        }
    }

    /// The whole non-streaming response.
    pub(crate) fn full(&self, text: &str, finish: FinishReason, usage: Usage) -> Bytes {
        let choice = match self.api {
            Api::Completions => json!({
                "index": 0, "text": text, "logprobs": null, "finish_reason": finish.as_str(),
                "stop_reason": null, "prompt_logprobs": null,
            }),
            Api::Chat => json!({
                "index": 0,
                "message": { "role": "assistant", "content": text, "tool_calls": [] },
                "logprobs": null, "finish_reason": finish.as_str(), "stop_reason": null,
            }),
        };
        json_bytes(&json!({
            "id": self.id, "object": self.object(), "created": self.created, "model": self.model,
            "choices": [choice], "usage": UsageJson::from(usage),
        }))
    }
}

/// `GET /v1/models`.
pub(crate) fn models(model: &str, max_model_len: u32) -> Bytes {
    let created = unix_now();
    json_bytes(&json!({
        "object": "list",
        "data": [{
            "id": model, "object": "model", "created": created, "owned_by": "vllm", "root": model,
            "parent": null, "max_model_len": max_model_len,
            "permission": [{
                "id": format!("modelperm-{created:016x}"), "object": "model_permission", "created": created,
                "allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true,
                "allow_search_indices": false, "allow_view": true, "allow_fine_tuning": false,
                "organization": "*", "group": null, "is_blocking": false,
            }],
        }],
    }))
}

fn push_json(out: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(out, s);
}

fn push_finish(out: &mut Vec<u8>, finish: Option<FinishReason>) {
    match finish {
        Some(f) => {
            out.push(b'"');
            out.extend_from_slice(f.as_str().as_bytes());
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunk: &Bytes) -> Value {
        let text = std::str::from_utf8(chunk).unwrap();
        let json = text
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn completion_chunks_are_valid_json_in_vllm_shape() {
        let meta = ResponseMeta::new(Api::Completions, 7, "m\"odel");
        let v = parse(&meta.chunk(
            " a \"quoted\"\n word",
            false,
            Some(FinishReason::Length),
            Some(UsageJson::new(3, 2)),
        ));
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["model"], "m\"odel");
        assert_eq!(v["choices"][0]["text"], " a \"quoted\"\n word");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        assert_eq!(v["usage"]["total_tokens"], 5);
        let u = parse(&meta.usage_chunk(UsageJson::new(3, 4)));
        assert_eq!(u["choices"].as_array().unwrap().len(), 0);
        assert_eq!(u["usage"]["completion_tokens"], 4);
        assert!(
            parse(&meta.chunk("x", false, None, None))
                .get("usage")
                .is_none()
        );
    }

    #[test]
    fn chat_chunks_carry_role_then_content() {
        let meta = ResponseMeta::new(Api::Chat, 7, "m");
        let role = parse(&meta.chunk("", true, None, None));
        assert_eq!(role["object"], "chat.completion.chunk");
        assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
        let content = parse(&meta.chunk(" hi", false, None, None));
        assert_eq!(content["choices"][0]["delta"]["content"], " hi");
        assert!(content["choices"][0]["finish_reason"].is_null());
    }
}
