//! vLLM: `/version`, `vllm:`-named metrics, the KV cache in `vllm:cache_config_info`.
//!
//! Names and labels as vLLM 0.32 exports them (`vllm/v1/metrics/loggers.py`);
//! continuous usage is asked with `stream_options.continuous_usage_stats`.

use std::collections::BTreeMap;

use speedmatrix_units::Tokens;

use crate::ServerMetrics;

/// Requests in model execution batches.
pub const RUNNING: &str = "vllm:num_requests_running";
/// Requests waiting to be scheduled.
pub const WAITING: &str = "vllm:num_requests_waiting";
/// Output tokens generated, counted as each step produces them.
pub const GENERATION_TOKENS: &str = "vllm:generation_tokens_total";
/// Prompt tokens processed.
pub const PROMPT_TOKENS: &str = "vllm:prompt_tokens_total";
/// Fraction of KV blocks in use.
pub const KV_CACHE_USAGE: &str = "vllm:kv_cache_usage_perc";
/// The same under its older name (shown by default up to 0.10, gone from 0.12).
pub const GPU_CACHE_USAGE: &str = "vllm:gpu_cache_usage_perc";
/// Speculative drafts proposed.
pub const SPEC_DRAFTS: &str = "vllm:spec_decode_num_drafts_total";
/// Draft tokens proposed.
pub const SPEC_DRAFT_TOKENS: &str = "vllm:spec_decode_num_draft_tokens_total";
/// Draft tokens accepted.
pub const SPEC_ACCEPTED_TOKENS: &str = "vllm:spec_decode_num_accepted_tokens_total";
/// Preemptions.
pub const PREEMPTIONS: &str = "vllm:num_preemptions_total";
/// Prompt tokens looked up in the local prefix cache (tokens, not blocks).
pub const PREFIX_CACHE_QUERIES: &str = "vllm:prefix_cache_queries_total";
/// Of those, tokens found.
pub const PREFIX_CACHE_HITS: &str = "vllm:prefix_cache_hits_total";
/// [`PREFIX_CACHE_QUERIES`] under its older name (to 0.10, gone from 0.12).
pub const GPU_PREFIX_CACHE_QUERIES: &str = "vllm:gpu_prefix_cache_queries_total";
/// [`PREFIX_CACHE_HITS`] under its older name.
pub const GPU_PREFIX_CACHE_HITS: &str = "vllm:gpu_prefix_cache_hits_total";
/// Tokens a KV connector found that the local cache missed (from 0.11.1);
/// its lookups are the local misses, so only hits add.
pub const EXTERNAL_PREFIX_CACHE_HITS: &str = "vllm:external_prefix_cache_hits_total";
/// Finished requests by `finished_reason`.
pub const REQUEST_SUCCESS: &str = "vllm:request_success_total";
/// The cache configuration as labels of a constant gauge.
pub const CACHE_CONFIG_INFO: &str = "vllm:cache_config_info";

/// Whether a `/metrics` page is vLLM's.
pub fn is_vllm(metrics: &ServerMetrics) -> bool {
    metrics.has_prefix("vllm:")
}

/// vLLM's `vllm:cache_config_info` labels, when exported.
pub fn cache_config(metrics: &ServerMetrics) -> Option<CacheConfig> {
    let sample = metrics.find(CACHE_CONFIG_INFO).next()?;
    let labels: BTreeMap<String, String> = sample.labels.iter().cloned().collect();
    let number = |key: &str| labels.get(key).and_then(|v| parse_count(v));
    Some(CacheConfig {
        num_gpu_blocks: number("num_gpu_blocks"),
        block_size: number("block_size"),
        num_cpu_blocks: number("num_cpu_blocks"),
        gpu_memory_utilization: labels
            .get("gpu_memory_utilization")
            .and_then(|v| v.parse::<f64>().ok()),
        cache_dtype: labels.get("cache_dtype").cloned(),
        labels,
    })
}

/// KV cache settings vLLM exports as labels of `vllm:cache_config_info`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CacheConfig {
    /// KV cache blocks on the GPU(s).
    pub num_gpu_blocks: Option<u64>,
    /// Tokens per block.
    pub block_size: Option<u64>,
    /// CPU swap blocks.
    pub num_cpu_blocks: Option<u64>,
    /// Fraction of GPU memory vLLM was allowed to use.
    pub gpu_memory_utilization: Option<f64>,
    /// KV cache data type (`auto`, `fp8`, ...).
    pub cache_dtype: Option<String>,
    /// All labels as exported, for anything not typed above.
    pub labels: BTreeMap<String, String>,
}

impl CacheConfig {
    /// Tokens the KV cache holds: `num_gpu_blocks × block_size`.
    pub fn kv_cache_tokens(&self) -> Option<Tokens> {
        Tokens::new(self.num_gpu_blocks?).checked_mul(self.block_size?)
    }
}

/// A whole number from a label value such as `"2048"` or `"2048.0"`; `None` for `"None"`.
fn parse_count(text: &str) -> Option<u64> {
    if let Ok(n) = text.parse::<u64>() {
        return Some(n);
    }
    let f = text.parse::<f64>().ok()?;
    (f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f <= u64::MAX as f64).then_some(f as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_config_labels_are_typed() {
        let page = "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",\
                    gpu_memory_utilization=\"0.9\",num_cpu_blocks=\"None\",num_gpu_blocks=\"27000\"} 1.0\n";
        let cache = cache_config(&ServerMetrics::parse(page)).unwrap();
        assert_eq!(cache.num_gpu_blocks, Some(27_000));
        assert_eq!(cache.block_size, Some(16));
        assert_eq!(cache.num_cpu_blocks, None);
        assert_eq!(cache.gpu_memory_utilization, Some(0.9));
        assert_eq!(cache.cache_dtype.as_deref(), Some("auto"));
        assert_eq!(cache.kv_cache_tokens(), Some(Tokens::new(432_000)));
        assert_eq!(parse_count("2048.0"), Some(2_048));
    }
}
