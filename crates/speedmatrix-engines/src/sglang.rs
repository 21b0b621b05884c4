//! SGLang: `GET /get_server_info`, `sglang:` metrics.
//!
//! From `python/sglang/srt/entrypoints/http_server.py`: `/get_server_info`
//! (newer versions also `/server_info`) returns the server arguments with the
//! scheduler's figures, at the top level in older versions and under
//! `internal_states[0]` in newer ones. Chat streams honour
//! `continuous_usage_stats`; completions send usage at the end only.

use serde_json::{Value, json};
use speedmatrix_units::Tokens;

/// The endpoint that tells SGLang and its KV pool.
pub const SERVER_INFO: &str = "/get_server_info";
/// Requests running.
pub const RUNNING: &str = "sglang:num_running_reqs";
/// Requests queued.
pub const WAITING: &str = "sglang:num_queue_reqs";
/// Share of the token pool in use.
pub const TOKEN_USAGE: &str = "sglang:token_usage";
/// Prompt tokens of finished requests (moves when a request ends).
pub const PROMPT_TOKENS: &str = "sglang:prompt_tokens_total";
/// Of those, tokens served from the radix cache (moves when a request ends).
pub const CACHED_TOKENS: &str = "sglang:cached_tokens_total";
/// Output tokens of finished requests (moves when a request ends).
pub const GENERATION_TOKENS: &str = "sglang:generation_tokens_total";
/// Requests retracted for lack of KV memory, cumulative (from 0.5.7; the
/// `sglang:num_retracted_reqs` gauge resets at each report, so it is not read).
pub const RETRACTIONS: &str = "sglang:num_retracted_requests_total";
/// Tokens per prefill batch by `mode`: `input` computed, `device_hit`,
/// `host_hit`, `storage_hit` found in a cache tier (from 0.5.20).
pub const PREFILL_EFFECTIVE_TOKENS: &str = "sglang:prefill_effective_tokens_total";
/// Tokens per batch by `mode`: `prefill_compute`, `prefill_cache`, `decode` (from 0.5.7).
pub const REALTIME_TOKENS: &str = "sglang:realtime_tokens_total";
/// Speculative verification steps (moves when a request ends; from 0.5.16).
pub const SPEC_VERIFY_CALLS: &str = "sglang:spec_verify_calls_total";

/// What SGLang's `GET /get_server_info` says about its KV pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerInfo {
    /// Tokens the KV pool holds (`max_total_num_tokens`).
    pub max_total_num_tokens: Tokens,
    /// The scheduler's cap on running requests (`max_running_requests`), when set.
    pub max_running_requests: Option<u32>,
}

impl ServerInfo {
    /// Reads the fields; `None` when `max_total_num_tokens` is missing.
    pub fn from_json(info: &Value) -> Option<ServerInfo> {
        let field = |name: &str| {
            info.get(name).and_then(Value::as_u64).or_else(|| {
                info.pointer(&format!("/internal_states/0/{name}"))?
                    .as_u64()
            })
        };
        Some(ServerInfo {
            max_total_num_tokens: Tokens::new(field("max_total_num_tokens")?),
            max_running_requests: field("max_running_requests").and_then(|n| u32::try_from(n).ok()),
        })
    }
}

/// A `/get_server_info` answer in the older, flat shape.
pub fn server_info_json(
    max_total_num_tokens: u64,
    max_running_requests: u32,
    context_length: u32,
    model: &str,
    version: &str,
) -> Value {
    json!({
        "model_path": model,
        "context_length": context_length,
        "max_running_requests": max_running_requests,
        "max_total_num_tokens": max_total_num_tokens,
        "page_size": 1,
        "version": version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_reads_top_level_or_internal_states() {
        let a = ServerInfo::from_json(&server_info_json(123_456, 64, 4_096, "m", "0.5")).unwrap();
        assert_eq!(a.max_total_num_tokens, Tokens::new(123_456));
        assert_eq!(a.max_running_requests, Some(64));
        let nested = json!({"internal_states": [{"max_total_num_tokens": 123456}]});
        let b = ServerInfo::from_json(&nested).unwrap();
        assert_eq!(b.max_total_num_tokens, Tokens::new(123_456));
        assert_eq!(b.max_running_requests, None);
        assert!(ServerInfo::from_json(&json!({"version": "0.5"})).is_none());
    }
}
