//! Hugging Face text-generation-inference: `GET /info`, `tgi_` metrics, one event per token.
//!
//! From `router/src/server.rs` and `backends/v3/src/backend.rs`: `/info` names
//! the router (`text-generation-router`) and its limits; `send_responses` sends
//! one stream event per generated token, speculated tokens included, with empty
//! text while a character is incomplete, so counting events counts tokens.
//! Legacy completions chunks say `finish_reason: ""` until the last.

use serde_json::{Value, json};
use speedmatrix_units::Tokens;

/// The endpoint that tells TGI.
pub const INFO: &str = "/info";
/// Requests in the running batch.
pub const RUNNING: &str = "tgi_batch_current_size";
/// Requests queued.
pub const WAITING: &str = "tgi_queue_size";

/// What TGI's `GET /info` says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Info {
    /// The served model (`model_id`).
    pub model_id: String,
    /// The router's version (`version`).
    pub version: Option<String>,
    /// Longest prompt + output of one request (`max_total_tokens`).
    pub max_total_tokens: Option<Tokens>,
    /// Requests the router accepts at once (`max_concurrent_requests`).
    pub max_concurrent_requests: Option<u32>,
}

impl Info {
    /// Reads `/info`; `None` unless it is TGI's (a `model_id` beside the
    /// router's `text-generation-router` name or its `max_total_tokens`).
    pub fn from_json(info: &Value) -> Option<Info> {
        let model_id = info.get("model_id")?.as_str()?.to_owned();
        let is_router =
            info.get("router").and_then(Value::as_str) == Some("text-generation-router");
        let max_total_tokens = info.get("max_total_tokens").and_then(Value::as_u64);
        if !is_router && max_total_tokens.is_none() {
            return None;
        }
        Some(Info {
            model_id,
            version: info
                .get("version")
                .and_then(Value::as_str)
                .map(str::to_owned),
            max_total_tokens: max_total_tokens.map(Tokens::new),
            max_concurrent_requests: info
                .get("max_concurrent_requests")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
        })
    }
}

/// An `/info` answer in TGI 3's shape.
pub fn info_json(
    model: &str,
    max_total_tokens: u32,
    max_concurrent_requests: u32,
    version: &str,
) -> Value {
    json!({
        "model_id": model,
        "model_sha": null,
        "max_concurrent_requests": max_concurrent_requests,
        "max_input_tokens": max_total_tokens.saturating_sub(1),
        "max_total_tokens": max_total_tokens,
        "router": "text-generation-router",
        "version": version,
        "sha": null,
        "docker_label": null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_is_told_from_other_info_pages() {
        let t = Info::from_json(&info_json("m", 4_096, 128, "3.3.6")).unwrap();
        assert_eq!(t.max_total_tokens, Some(Tokens::new(4_096)));
        assert_eq!(t.max_concurrent_requests, Some(128));
        assert_eq!(t.version.as_deref(), Some("3.3.6"));
        assert!(Info::from_json(&json!({"model_id": "m"})).is_none());
        assert!(Info::from_json(&json!({"name": "other"})).is_none());
    }
}
