//! What the GPUs, the host and the server did during the run and each cell
//! (schema version 4): sources, per-cell summaries and verdicts.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use speedmatrix_units::ByteSize;

/// How telemetry was gathered for the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySetup {
    /// The GPU source: `NVML`, `nvidia-smi` or `amd-smi`; absent when none could be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_source: Option<String>,
    /// Why there is no GPU source (each tried source's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_unavailable: Option<String>,
    /// Time between GPU and host samples, milliseconds.
    pub interval_ms: u64,
    /// Time between scrapes of the server's `/metrics` inside a window, milliseconds.
    pub metrics_interval_ms: u64,
    /// The GPUs as their source describes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuDetail>,
    /// The file beside this document with every raw sample (JSON Lines), when written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_file: Option<String>,
    /// The thresholds the cells' verdicts were given by.
    pub verdict_rules: VerdictThresholds,
}

/// The thresholds of the verdict rules, as used for this run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VerdictThresholds {
    /// `throttled` when a GPU throttled this share of the window or more, percent.
    pub throttled_pct: f64,
    /// `client_bound` when the client's runtime threads were busy this share or more, percent.
    pub client_busy_pct: f64,
    /// `server_queued` when the mean running requests fell below this share of N, percent.
    pub running_pct: f64,
    /// `server_queued` also when the mean waiting requests reached this many.
    pub waiting_mean: f64,
    /// `cache_cold` when the hit rate was this many percentage points or more below the intended one.
    pub cache_gap_points: f64,
}

/// One GPU's static facts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuDetail {
    /// Index as the source numbers it.
    pub index: u32,
    /// Name as the source prints it.
    pub name: String,
    /// Total memory, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<u64>")]
    pub memory_bytes: Option<ByteSize>,
    /// Driver version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// CUDA (or ROCm) version the driver supports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_version: Option<String>,
    /// Enforced power limit, watts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
    /// Current PCIe generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_generation: Option<u32>,
    /// Current PCIe width, lanes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_width: Option<u32>,
}

/// What the GPUs, the host and the server did during one cell's window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CellTelemetry {
    /// Each GPU over the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuUse>,
    /// Energy of all GPUs over the window, joules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// `energy_j` / the window's output tokens, joules per token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joules_per_output_token: Option<f64>,
    /// The host over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostUse>,
    /// The server's own counters over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerStats>,
    /// What the window's numbers say about the cell, each with its rule
    /// (docs/metrics.md, "Verdicts").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<CellVerdict>,
    /// Sources that were missing for this cell, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// The window as a time series, for the page's per-cell charts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<CellSeries>,
}

/// One cell's window cut into equal parts: per part, the mean of what was
/// read in it (a part with no reading holds the last one; `null` before the
/// first). Small enough to embed in the page; every raw sample is in the
/// samples file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CellSeries {
    /// Length of each part, seconds.
    pub part_s: f64,
    /// Output tokens per second of all streams, from our own token curves
    /// (the parts' tokens add up to the cell's).
    pub output_tokens_per_s: Vec<f64>,
    /// Requests the server said were running.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running: Vec<Option<f64>>,
    /// Requests the server said were waiting.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<Option<f64>>,
    /// KV-cache usage the server reported, percent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kv_usage_pct: Vec<Option<f64>>,
    /// GPU utilization, mean over the GPUs, percent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_utilization_pct: Vec<Option<f64>>,
    /// Power of all GPUs together, watts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_power_w: Vec<Option<f64>>,
}

/// One GPU over one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuUse {
    /// Which GPU.
    pub index: u32,
    /// Samples inside the window.
    pub samples: u32,
    /// Time-weighted mean utilization, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_mean_pct: Option<f64>,
    /// Highest sampled utilization, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization_max_pct: Option<f64>,
    /// Time-weighted mean board power, watts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_mean_w: Option<f64>,
    /// Highest sampled board power, watts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_max_w: Option<f64>,
    /// Energy over the window, joules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// `counter` (the driver's energy counter) or `integrated_power`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_source: Option<String>,
    /// Most memory in use at a sample, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<u64>")]
    pub memory_peak_bytes: Option<ByteSize>,
    /// Lowest sampled SM clock, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_min_mhz: Option<u32>,
    /// Seconds each reason held the clocks down; absent when the source gives none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled: Option<ThrottledSeconds>,
}

/// Seconds of a window each throttle reason held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThrottledSeconds {
    /// Software power cap.
    pub power_cap_s: f64,
    /// Thermal slowdown.
    pub thermal_s: f64,
    /// Hardware slowdown or power brake.
    pub hw_slowdown_s: f64,
    /// Any of them.
    pub any_s: f64,
}

/// The host over one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostUse {
    /// Mean busy share of all cores, percent.
    pub cpu_mean_pct: f64,
    /// Busy share of the busiest core, percent.
    pub cpu_busiest_core_pct: f64,
    /// Most memory in use at a reading, bytes.
    #[schemars(with = "u64")]
    pub memory_used_peak_bytes: ByteSize,
}

/// The server's own counters over one window, from its `/metrics` scraped
/// at the window's edges and inside it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerStats {
    /// Scrapes inside the window.
    pub scrapes: u32,
    /// Highest KV-cache usage scraped, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_usage_max_pct: Option<f64>,
    /// Preemptions (vLLM) or retractions (SGLang) over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<f64>,
    /// Prefix-cache lookups of the cell's requests, tokens: from the
    /// streams' start (after the warm-up) to the window's close, so the N
    /// requests that start before the window count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_queries: Option<f64>,
    /// Of those, tokens found in the cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hits: Option<f64>,
    /// Hits / queries (counter deltas, not lifetime totals).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hit_rate: Option<f64>,
    /// Speculative drafts over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_drafts: Option<f64>,
    /// Draft tokens proposed over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_draft_tokens: Option<f64>,
    /// Draft tokens accepted over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accepted_tokens: Option<f64>,
    /// Accepted / proposed draft tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_acceptance_rate: Option<f64>,
    /// Tokens each verification step yields: 1 + accepted / drafts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_mean_accepted_length: Option<f64>,
    /// The engine's token, cache and speculative counters move only when a
    /// request ends (llama.cpp, older SGLang): the deltas cover the requests
    /// that finished in the window.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub counted_at_finish: bool,
}

/// A verdict on a cell and the rule that gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CellVerdict {
    /// `throttled`, `client_bound`, `server_queued`, `preempted` or `cache_cold`.
    pub kind: String,
    /// The numbers that triggered it, in words.
    pub why: String,
}
