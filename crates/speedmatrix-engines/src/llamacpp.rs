//! llama.cpp's `llama-server`: `GET /props`, `llamacpp:` metrics, `timings` on chunks.
//!
//! From `tools/server/server-context.cpp` and `server-task.cpp`: `/props` gives one
//! slot's window (`default_generation_settings.n_ctx`) and the slot count
//! (`total_slots`); with `--kv-unified` (its default when it picks the slot
//! count) the slots share that window. Streams carry no continuous usage, but
//! with `timings_per_token: true` every chunk has `timings.predicted_n`, the
//! running output count. `/metrics` needs `--metrics`; its token counters move
//! only when a request ends.

use serde_json::{Value, json};
use speedmatrix_units::Tokens;

/// The endpoint that tells llama.cpp and its KV cache.
pub const PROPS: &str = "/props";
/// Requests being processed.
pub const RUNNING: &str = "llamacpp:requests_processing";
/// Requests deferred for lack of a free slot.
pub const WAITING: &str = "llamacpp:requests_deferred";
/// Share of the KV cache in use (builds before mid-2025 only; llama.cpp
/// pull request 13660 removed it).
pub const KV_CACHE_USAGE: &str = "llamacpp:kv_cache_usage_ratio";
/// Prompt tokens computed, cached ones excluded (moves when a request ends).
pub const PROMPT_TOKENS: &str = "llamacpp:prompt_tokens_total";
/// Prompt tokens reused from a slot's cache (newest builds only).
pub const PROMPT_TOKENS_CACHED: &str = "llamacpp:prompt_tokens_cached_total";
/// Speculative drafts proposed (newest builds; moves when a request ends).
pub const SPEC_DRAFTS: &str = "llamacpp:spec_decode_num_drafts_total";
/// Draft tokens proposed.
pub const SPEC_DRAFT_TOKENS: &str = "llamacpp:spec_decode_num_draft_tokens_total";
/// Draft tokens accepted.
pub const SPEC_ACCEPTED_TOKENS: &str = "llamacpp:spec_decode_num_accepted_tokens_total";
/// Output tokens generated (moves when a request ends).
pub const GENERATION_TOKENS: &str = "llamacpp:tokens_predicted_total";

/// What llama.cpp's `GET /props` says about its KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Props {
    /// KV cells one request may use (`default_generation_settings.n_ctx`).
    pub slot_n_ctx: Tokens,
    /// Requests served at once (`total_slots`).
    pub total_slots: u32,
    /// `kv_unified`, when the server reports it.
    pub kv_unified: Option<bool>,
}

impl Props {
    /// Reads the fields from a `/props` answer; `None` when they are missing.
    pub fn from_json(props: &Value) -> Option<Props> {
        let slot_n_ctx = props
            .pointer("/default_generation_settings/n_ctx")?
            .as_u64()?;
        let total_slots = u32::try_from(props.get("total_slots")?.as_u64()?).ok()?;
        Some(Props {
            slot_n_ctx: Tokens::new(slot_n_ctx),
            total_slots,
            kv_unified: props.get("kv_unified").and_then(Value::as_bool),
        })
    }

    /// The pool's tokens: one slot's window when the slots share it (the
    /// cautious reading when the server does not say), all slots' otherwise.
    pub fn pool_tokens(&self) -> u64 {
        if self.kv_unified.unwrap_or(true) {
            self.slot_n_ctx.get()
        } else {
            self.slot_n_ctx.get() * u64::from(self.total_slots)
        }
    }
}

/// A `/props` answer in the shape `llama-server --kv-unified` sends.
pub fn props_json(n_ctx: u64, total_slots: u32, model: &str, build_info: &str) -> Value {
    json!({
        "default_generation_settings": { "n_ctx": n_ctx, "params": { "n_predict": -1 } },
        "total_slots": total_slots,
        "model_alias": model,
        "model_path": format!("/models/{model}.gguf"),
        "build_info": build_info,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn props_read_slot_window_and_slots() {
        let p = Props::from_json(&props_json(32_768, 8, "m", "b1")).unwrap();
        assert_eq!(p.slot_n_ctx, Tokens::new(32_768));
        assert_eq!(p.total_slots, 8);
        assert_eq!(p.kv_unified, None);
        assert_eq!(p.pool_tokens(), 32_768);
        assert!(Props::from_json(&json!({"total_slots": 8})).is_none());
        let negative = json!({"default_generation_settings": {"n_ctx": -1}, "total_slots": 1});
        assert!(Props::from_json(&negative).is_none());
        let split = json!({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4, "kv_unified": false});
        assert_eq!(Props::from_json(&split).unwrap().pool_tokens(), 16_384);
    }
}
