//! The run document: what was measured, on what, how, and the numbers.
//!
//! Every field that carries a unit names it (`ttft_ms`, `window_duration_s`,
//! `total_tokens_per_s`); token counts are [`Tokens`], request counts are
//! [`Concurrency`] or plain integers, memory is [`ByteSize`] in bytes.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use speedmatrix_units::{ByteSize, Concurrency, Tokens};

/// The version of the document layout this crate reads and writes.
///
/// Bump it on any change that an older reader would misread.
pub const SCHEMA_VERSION: u32 = 1;

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

/// Which OpenAI endpoint carried the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
}

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
    /// Short label for tables: `Valid`, `Over capacity`, `Error`, `Skipped`.
    pub fn label(&self) -> &'static str {
        match self {
            CellStatus::Valid => "Valid",
            CellStatus::OverCapacity { .. } => "Over capacity",
            CellStatus::Error { .. } => "Error",
            CellStatus::Skipped { .. } => "Skipped",
        }
    }

    /// Whether this is [`CellStatus::Valid`].
    pub fn is_valid(&self) -> bool {
        matches!(self, CellStatus::Valid)
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

/// Where output-token counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenCountSource {
    /// Cumulative `usage` on every chunk (vLLM `continuous_usage_stats`).
    UsagePerChunk,
    /// `usage` on the final chunk only; per-chunk arrivals spread evenly.
    FinalUsage,
    /// One token per content chunk (no usage reported).
    ChunkCount,
}

impl TokenCountSource {
    /// Words for footnotes.
    pub fn describe(self) -> &'static str {
        match self {
            TokenCountSource::UsagePerChunk => "server-reported usage on every chunk",
            TokenCountSource::FinalUsage => "server-reported usage at the end of each request",
            TokenCountSource::ChunkCount => "one token per streamed chunk (no usage reported)",
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
    /// Where output-token counts came from.
    pub token_count_source: TokenCountSource,
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
