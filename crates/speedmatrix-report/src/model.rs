//! The run document: what was measured, on what, how, and the numbers.
//!
//! Every field that carries a unit names it (`ttft_ms`, `window_duration_s`,
//! `total_tokens_per_s`); token counts are [`Tokens`], request counts are
//! [`Concurrency`] or plain integers, memory is [`ByteSize`] in bytes.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use speedmatrix_units::{ByteSize, Concurrency, Tokens};

/// The version of the document layout this crate writes.
///
/// Bump it on any change that an older reader would misread. Version 2 added
/// partial cells, estimated token counts and the prefill mode; version 1
/// documents are still read (see [`Report::from_json`]).
pub const SCHEMA_VERSION: u32 = 2;

/// The oldest document version [`Report::from_json`] reads.
pub const OLDEST_READABLE_VERSION: u32 = 1;

/// One speed test matrix run: the document `speedmatrix run` writes as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// Layout version of this document; always [`SCHEMA_VERSION`] when written by this crate.
    pub schema_version: u32,
    /// The machine the server ran on.
    pub hardware: Hardware,
    /// The inference engine as the server reports it and as it was launched.
    pub engine: Engine,
    /// What was asked of the server.
    pub run: RunSettings,
    /// The KV-cache capacity that decided which cells ran, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Capacity>,
    /// Cold prefill measurements, one per prefill context, in the order of `run.prefill_contexts`.
    pub prefill: Vec<PrefillRow>,
    /// Sustained-decode cells, one per context × concurrency, row by row.
    pub decode: Vec<DecodeCell>,
    /// Free-form remarks shown at the end of the report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The machine the server ran on, as detected or given by the user.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hardware {
    /// What kind of accelerator, e.g. `Discrete GPU`, `Apple unified memory`, `CPU only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The accelerators; several identical ones are one entry with a count.
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    /// CPU model name, e.g. `AMD Ryzen 9 7900X`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Physical CPU cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_cores: Option<u32>,
    /// System memory in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<u64>")]
    pub ram_bytes: Option<ByteSize>,
    /// Operating system name and version, e.g. `Ubuntu 24.04.5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
}

/// One kind of accelerator in the machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    /// Marketing name, e.g. `RTX 3090`.
    pub name: String,
    /// Memory of one device in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<u64>")]
    pub memory_bytes: Option<ByteSize>,
    /// How many of these devices serve the model.
    pub count: u32,
}

/// The inference engine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Engine {
    /// Engine name as the server reports it, e.g. `vllm`.
    pub name: String,
    /// Engine version as the server reports it, e.g. `0.32.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Weight quantization, e.g. `FP8`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    /// Compute backend, e.g. `cuda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// Source repository of the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Build or container image, e.g. `vllm/vllm-openai:v0.32.0-x86_64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
    /// The command that started the server, as the user gave it (comments included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_command: Option<String>,
}

pub use speedmatrix_units::Api;

/// The benchmark tool that produced the document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// Tool name, e.g. `speedmatrix`.
    pub name: String,
    /// Tool version, e.g. `0.1.0`.
    pub version: String,
}

/// What was asked of the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    /// The model that was launched, e.g. `InternScience/Agents-A1-4B-FP8`.
    pub model: String,
    /// The model name requests were sent to (`--served-model-name`), e.g. `bench`.
    pub served_model: String,
    /// Model revision, e.g. `main`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// Endpoint used.
    pub api: Api,
    /// How prompts were built, e.g. `unique` (no prefix shared between streams).
    pub prompt_mode: String,
    /// Tokenizer used to size prompts exactly, e.g. a HuggingFace repository name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// The benchmark tool.
    pub tool: Tool,
    /// Context lengths of the decode matrix rows, ascending.
    #[schemars(with = "Vec<u64>")]
    pub contexts: Vec<Tokens>,
    /// Simultaneous requests of the decode matrix columns, ascending.
    #[schemars(with = "Vec<std::num::NonZeroU32>")]
    pub concurrencies: Vec<Concurrency>,
    /// Context lengths of the prefill measurements, ascending.
    #[schemars(with = "Vec<u64>")]
    pub prefill_contexts: Vec<Tokens>,
    /// Cold prefill requests per context; rows report their median.
    pub prefill_repeats: u32,
    /// How prefill was measured: separate cold requests, or the first
    /// (cold) warm-up request of each context's decode cells.
    #[serde(default)]
    pub prefill_mode: PrefillMode,
    /// Length of each decode cell's measurement window in seconds.
    pub window_duration_s: f64,
    /// `max_tokens` of every decode request.
    #[schemars(with = "u64")]
    pub max_output_tokens: Tokens,
    /// Whether each decode cell's prompts were sent once before its window, so the
    /// server's prompt cache holds them and TTFT mostly excludes prefill.
    pub decode_cache_warmed: bool,
    /// When the run started, RFC 3339 (e.g. `2026-11-30T07:30:00Z`).
    pub started_at: String,
    /// When the run finished, RFC 3339.
    pub finished_at: String,
}

/// How the prefill rows were measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PrefillMode {
    /// One separate request per context with a never-seen prompt.
    #[default]
    Cold,
    /// The first warm-up request of the first cell of each context (nothing
    /// of its prompt cached), as the seed page's "Measured during decode warm-up".
    Warmup,
}

impl PrefillMode {
    /// The words the report shows, as the seed page spells its mode.
    pub fn describe(self) -> &'static str {
        match self {
            PrefillMode::Cold => "Separate cold request",
            PrefillMode::Warmup => "Measured during decode warm-up",
        }
    }
}

/// How many tokens the server's KV cache holds, by measurement and by prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Capacity {
    /// What the server reported or what was observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<KvCapacity>,
    /// What the offline predictor computed from the model and the hardware.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<KvCapacity>,
    /// The rule that marked cells over capacity, in words,
    /// e.g. `concurrency × (context + max output) > KV cache tokens`.
    pub rule: String,
}

/// One capacity figure and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KvCapacity {
    /// Tokens the KV cache holds.
    #[schemars(with = "u64")]
    pub kv_cache_tokens: Tokens,
    /// Where the figure came from, e.g. `vllm /metrics cache_config_info`.
    pub source: String,
}

impl Capacity {
    /// `predicted / measured − 1` (e.g. `0.03` = prediction 3 % high), when both are known.
    pub fn difference(&self) -> Option<f64> {
        let measured = self.measured.as_ref()?.kv_cache_tokens.get();
        let predicted = self.predicted.as_ref()?.kv_cache_tokens.get();
        (measured > 0).then(|| predicted as f64 / measured as f64 - 1.0)
    }
}

/// Whether a cell or prefill point produced numbers, and if not why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CellStatus {
    /// Measured; the numbers are trustworthy.
    Valid,
    /// Measured, but some requests failed: the numbers cover the good
    /// requests only (failed ones are counted, never averaged in), and at
    /// least one stream ran the whole window.
    Partial {
        /// Requests that failed.
        failed_requests: u64,
        /// Requests that completed or were still streaming when the window closed.
        good_requests: u64,
        /// Failed requests by the client's error kind (`disconnected`, `http_status`, ...).
        error_kinds: BTreeMap<String, u64>,
        /// The first error as the client saw it.
        message: String,
    },
    /// Not run: the requests would not fit the server's KV cache.
    OverCapacity {
        /// The rule or figure that excluded it, e.g. `4 × 136K > 348K KV tokens`.
        reason: String,
    },
    /// Run, but requests failed.
    Error {
        /// Short machine-readable class, e.g. `timeout`, `http_500`, `stream`.
        error_kind: String,
        /// The first error as the client saw it.
        message: String,
        /// Requests that failed.
        failed_requests: u64,
        /// Requests that completed or were still streaming when the window closed.
        good_requests: u64,
    },
    /// Not run for another reason (interrupted, excluded by a flag).
    Skipped {
        /// Why, in words.
        reason: String,
    },
}

impl CellStatus {
    /// Short label for tables: `Valid`, `Partial`, `Over capacity`, `Error`, `Skipped`.
    pub fn label(&self) -> &'static str {
        match self {
            CellStatus::Valid => "Valid",
            CellStatus::Partial { .. } => "Partial",
            CellStatus::OverCapacity { .. } => "Over capacity",
            CellStatus::Error { .. } => "Error",
            CellStatus::Skipped { .. } => "Skipped",
        }
    }

    /// Whether this is [`CellStatus::Valid`].
    pub fn is_valid(&self) -> bool {
        matches!(self, CellStatus::Valid)
    }

    /// Whether the cell was measured: valid, or partial (some requests failed).
    pub fn is_measured(&self) -> bool {
        matches!(self, CellStatus::Valid | CellStatus::Partial { .. })
    }

    /// The reason or message behind a non-valid status, empty for `Valid`.
    pub fn detail(&self) -> String {
        match self {
            CellStatus::Valid => String::new(),
            CellStatus::OverCapacity { reason } | CellStatus::Skipped { reason } => reason.clone(),
            CellStatus::Error {
                error_kind,
                message,
                failed_requests,
                good_requests,
            } => format!(
                "{error_kind}: {message} ({failed_requests} failed, {good_requests} good requests)"
            ),
            CellStatus::Partial {
                failed_requests,
                good_requests,
                error_kinds,
                message,
            } => {
                let kinds: Vec<String> = error_kinds
                    .iter()
                    .map(|(kind, n)| format!("{n} {kind}"))
                    .collect();
                format!(
                    "{failed_requests} of {} requests failed ({}); numbers from the {good_requests} good ones; first error: {message}",
                    failed_requests + good_requests,
                    kinds.join(", ")
                )
            }
        }
    }
}

/// One cold prefill measurement: a prompt of `context` tokens, nothing cached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrefillRow {
    /// Prompt length asked for.
    #[schemars(with = "u64")]
    pub context: Tokens,
    /// Outcome.
    pub status: CellStatus,
    /// Server-reported prompt tokens / TTFT, median over repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_per_s: Option<f64>,
    /// Time to first token in milliseconds, median over repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Prompt tokens the benchmark built.
    #[schemars(with = "u64")]
    pub prompt_tokens_requested: Tokens,
    /// Prompt tokens the server reported in `usage`, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<u64>")]
    pub prompt_tokens_reported: Option<Tokens>,
    /// Cold requests measured.
    pub repeats: u32,
}

impl DecodeMeasurements {
    /// Whether the window's output tokens are (partly) estimates.
    pub fn is_estimated(&self) -> bool {
        self.token_count
            .as_ref()
            .map_or_else(|| self.token_count_source.is_estimate(), |t| t.estimated)
    }

    /// Whether the estimate is too uncertain to show the cell as plainly valid.
    pub fn is_too_uncertain(&self) -> bool {
        self.token_count.as_ref().map_or_else(
            || self.token_count_source.is_estimate(),
            TokenCount::is_too_uncertain,
        )
    }

    /// The estimate's mark for tables (`est. ±0.4 %`), empty when exact.
    pub fn estimate_mark(&self) -> String {
        match &self.token_count {
            Some(t) => t.mark(),
            None if self.token_count_source.is_estimate() => "est., uncalibrated".to_owned(),
            None => String::new(),
        }
    }
}

impl DecodeCell {
    /// The status as tables show it: `Valid`, `Partial`, or `Estimated`
    /// for a measured cell whose token count is an estimate with more than
    /// [`MAX_PLAIN_UNCERTAINTY_PCT`] or unknown uncertainty; with the
    /// estimate's mark (`Valid (est. ±0.4 %)`) whenever it is one.
    pub fn status_label(&self) -> String {
        let Some(m) = self
            .measurements
            .as_ref()
            .filter(|_| self.status.is_measured())
        else {
            return self.status.label().to_owned();
        };
        let mark = m.estimate_mark();
        match (&self.status, m.is_too_uncertain()) {
            (CellStatus::Valid, true) => {
                format!(
                    "Estimated ({})",
                    mark.trim_start_matches("est.")
                        .trim_start_matches([',', ' '])
                )
            }
            (status, _) if mark.is_empty() => status.label().to_owned(),
            (status, _) => format!("{} ({mark})", status.label()),
        }
    }
}

/// One sustained-decode cell: `concurrency` streams of `context`-token prompts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecodeCell {
    /// Prompt length of every stream.
    #[schemars(with = "u64")]
    pub context: Tokens,
    /// Streams kept in flight.
    #[schemars(with = "std::num::NonZeroU32")]
    pub concurrency: Concurrency,
    /// Outcome.
    pub status: CellStatus,
    /// The numbers; present when `status` is valid, optional (partial) for errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurements: Option<DecodeMeasurements>,
}

/// Median, 90th and 99th percentile of one latency, all in the unit the field names.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Where output-token counts came from, from most to least exact.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TokenCountSource {
    /// Cumulative `usage` on every chunk (vLLM and SGLang `continuous_usage_stats`).
    UsagePerChunk,
    /// A running count the engine put in every chunk besides `usage`
    /// (llama.cpp `timings.predicted_n`; TGI's one event per token).
    EngineCount,
    /// `usage` at the end of a finished request: exact in sum, shared out
    /// over its chunks by their tokenized text.
    FinalUsage,
    /// Estimated: the request's whole text tokenized with the run's
    /// tokenizer, scaled by the cell's calibration.
    Tokenizer,
    /// Estimated: chunks with text, scaled by the cell's calibration.
    ChunkCount,
}

impl TokenCountSource {
    /// Words for footnotes.
    pub fn describe(self) -> &'static str {
        match self {
            TokenCountSource::UsagePerChunk => "server-reported usage on every chunk",
            TokenCountSource::EngineCount => "the engine's running token count on every chunk",
            TokenCountSource::FinalUsage => "server-reported usage at the end of each request",
            TokenCountSource::Tokenizer => {
                "the streamed text re-tokenized with the run's tokenizer (an estimate)"
            }
            TokenCountSource::ChunkCount => "streamed chunks counted (an estimate)",
        }
    }

    /// The name used in JSON and CSV (`usage_per_chunk`, `tokenizer`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TokenCountSource::UsagePerChunk => "usage_per_chunk",
            TokenCountSource::EngineCount => "engine_count",
            TokenCountSource::FinalUsage => "final_usage",
            TokenCountSource::Tokenizer => "tokenizer",
            TokenCountSource::ChunkCount => "chunk_count",
        }
    }

    /// Whether counts from this source are estimates.
    pub fn is_estimate(self) -> bool {
        matches!(
            self,
            TokenCountSource::Tokenizer | TokenCountSource::ChunkCount
        )
    }
}

/// The largest uncertainty of an estimated token count that is still shown
/// as plainly valid, percent.
pub const MAX_PLAIN_UNCERTAINTY_PCT: f64 = 1.0;

/// How a cell's output tokens were counted, in detail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenCount {
    /// Requests with tokens in the window by how they were counted
    /// ([`TokenCountSource::as_str`] → requests).
    pub requests_by_source: BTreeMap<String, u64>,
    /// Whether some of the window's tokens are estimates.
    pub estimated: bool,
    /// Share of the window's output tokens that are estimates, percent.
    pub estimated_share_pct: f64,
    /// What the estimates counted (`tokenizer` or `chunk_count`), when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_method: Option<TokenCountSource>,
    /// Server tokens per estimated token, from the calibration requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_factor: Option<f64>,
    /// Finished requests with a server count that calibrated the estimate.
    #[serde(default)]
    pub calibration_requests: u64,
    /// Half-width of the 95 % interval of the window's output-token count
    /// (and so of its tok/s), percent: 0 when every count is exact, absent
    /// when an estimate could not be calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty_pct: Option<f64>,
}

impl TokenCount {
    /// Every count of the window was the server's own.
    pub fn exact(source: TokenCountSource, requests: u64) -> TokenCount {
        TokenCount {
            requests_by_source: BTreeMap::from([(source.as_str().to_owned(), requests)]),
            estimated: false,
            estimated_share_pct: 0.0,
            estimate_method: None,
            calibration_factor: None,
            calibration_requests: 0,
            uncertainty_pct: Some(0.0),
        }
    }

    /// Whether the count is too uncertain to call the cell plainly valid:
    /// estimated with more than [`MAX_PLAIN_UNCERTAINTY_PCT`] or an unknown uncertainty.
    pub fn is_too_uncertain(&self) -> bool {
        self.estimated
            && self
                .uncertainty_pct
                .is_none_or(|u| u > MAX_PLAIN_UNCERTAINTY_PCT)
    }

    /// A short mark for tables: `est. ±0.4 %`, `est., uncalibrated`; empty when exact.
    pub fn mark(&self) -> String {
        if !self.estimated {
            return String::new();
        }
        match self.uncertainty_pct {
            Some(u) => format!("est. ±{u:.1} %"),
            None => "est., uncalibrated".to_owned(),
        }
    }
}

/// The numbers of one decode cell's measurement window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecodeMeasurements {
    /// Output tokens of all streams arriving inside the window / window length.
    pub total_tokens_per_s: f64,
    /// Median over streams of each stream's output tokens per second inside the window.
    pub per_request_tokens_per_s: f64,
    /// Time to first token of requests started inside the window, milliseconds.
    pub ttft_ms: Percentiles,
    /// Time between output tokens inside the window, milliseconds.
    pub time_between_tokens_ms: Percentiles,
    /// Time-weighted mean of requests in flight.
    pub average_active_requests: f64,
    /// Requests that finished inside the window.
    pub completed_requests: u64,
    /// Output tokens that arrived inside the window.
    #[schemars(with = "u64")]
    pub output_tokens: Tokens,
    /// Length of the measured window, seconds.
    pub measured_s: f64,
    /// The server queued requests (waiting > 0) during the window.
    pub queueing_detected: bool,
    /// Requests whose server-reported prompt tokens differ from the prompt built.
    pub prompt_token_mismatches: u64,
    /// Where output-token counts came from: the least exact source among
    /// the requests with tokens in the window.
    pub token_count_source: TokenCountSource,
    /// How output tokens were counted in detail: sources, estimate and its
    /// uncertainty. Absent in documents of schema version 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_count: Option<TokenCount>,
    /// How requests ended: finish reason → count (`length`, `stop`, `abort`).
    #[serde(default)]
    pub finish_reasons: BTreeMap<String, u64>,
    /// The server's own count of output tokens over the window, for cross-checking
    /// `total_tokens_per_s`: the increase of vLLM's `vllm:generation_tokens_total`
    /// (summed over label sets) between a scrape at the window's start and one at
    /// its end. Absent when the server exports no such counter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_counter: Option<ServerCounter>,
}

/// The increase of a server-side token counter between two scrapes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerCounter {
    /// Output tokens the server counted between the two scrapes.
    #[schemars(with = "u64")]
    pub generation_tokens: Tokens,
    /// Time between the two scrapes' answers, seconds (≈ `measured_s`; scraping
    /// never lengthens the window).
    pub between_scrapes_s: f64,
}

impl ServerCounter {
    /// The server's output rate over the scrapes' interval, tokens per second.
    pub fn tokens_per_s(&self) -> f64 {
        if self.between_scrapes_s > 0.0 {
            self.generation_tokens.get() as f64 / self.between_scrapes_s
        } else {
            0.0
        }
    }
}
