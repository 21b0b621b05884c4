//! The run document: what was measured, on what, how, and the numbers.
//!
//! Every field that carries a unit names it (`ttft_ms`, `window_s`,
//! `total_tokens_per_s`); token counts are [`Tokens`], request counts are
//! [`Concurrency`] or plain integers, memory is [`ByteSize`] in bytes.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use speedmatrix_units::{ByteSize, Concurrency, Interval, Tokens};

mod cells;
mod load;
mod telemetry;

pub use self::cells::{
    CellStatus, ClientCpu, DecodeCell, DecodeIntervals, DecodeMeasurements, Interference,
    MAX_PLAIN_UNCERTAINTY_PCT, Percentiles, PredictionBand, RepeatFigure, Repeats, ServerCounter,
    TimelinePoint, TokenCount, TokenCountSource,
};
pub use self::load::{
    ArrivalSetup, KneeResult, KneeStep, LengthBin, LoadCell, LoadMeasurements, LoadRun, SloResult,
    SloTermResult, TokenLengths, TurnStats, Workload,
};
pub use self::telemetry::{
    CellSeries, CellTelemetry, CellVerdict, GpuDetail, GpuUse, HostUse, ServerStats,
    TelemetrySetup, ThrottledSeconds, VerdictThresholds,
};

/// The version of the document layout this crate writes.
///
/// Bump it on any change that an older reader would misread. Version 2 added
/// partial cells, estimated token counts and the prefill mode; version 3 the
/// client's setup and its CPU use per cell; version 4 telemetry (GPUs, host
/// and server counters per cell, verdicts) and load runs (bursts and
/// open-loop request rates); version 5 names the window `window_s` (it was
/// `window_duration_s`) as every crate names it; version 6 adds the run's
/// provenance and the cells' confidence intervals and repeats. Older
/// documents are still read (see [`Report::from_json`]), each version by a
/// test of its own.
pub const SCHEMA_VERSION: u32 = 6;

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
    pub engine: EngineInfo,
    /// What was asked of the server.
    pub run: RunSettings,
    /// How the benchmark client ran: its threads and cores, and a server
    /// process on the same host. Absent before schema version 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientSetup>,
    /// How GPU, host and server telemetry was gathered. Absent before schema
    /// version 4 and when the run gathered none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<TelemetrySetup>,
    /// The KV-cache capacity that decided which cells ran, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Capacity>,
    /// Cold prefill measurements, one per prefill context, in the order of `run.prefill_contexts`.
    pub prefill: Vec<PrefillRow>,
    /// Bursts or open-loop request-rate cells, when the run measured them.
    /// Absent before schema version 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadRun>,
    /// Sustained-decode cells, one per context × concurrency, row by row.
    pub decode: Vec<DecodeCell>,
    /// Free-form remarks shown at the end of the report.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// How the run was made: command lines, flags, host. Absent before schema version 6
    /// and in documents not made by `speedmatrix run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// Present when no number of the document was measured: it was
    /// predicted by `speedmatrix predict` or extrapolated by `calibrate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prediction: Option<PredictionInfo>,
}

/// How a predicted document's numbers were made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PredictionInfo {
    /// The method in a line, e.g. `speedmatrix cost model (docs/predict.md)`.
    pub method: String,
    /// The efficiency factors by name.
    pub factors: BTreeMap<String, f64>,
    /// What the factors were fitted on.
    pub fitted_on: String,
    /// The figures and assumptions the prediction rests on, one per line.
    pub assumptions: Vec<String>,
}

/// How the benchmark client ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientSetup {
    /// Threads of the client's async runtime.
    pub runtime_threads: u32,
    /// The cores the client could run on, as a CPU list (`0-3,8`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<String>,
    /// Whether those cores were chosen with `--client-cores`.
    #[serde(default)]
    pub pinned: bool,
    /// The server process, when it listened on this host and could be seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_server: Option<LocalServer>,
}

/// A server process on the client's host.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LocalServer {
    /// Its process id.
    pub pid: u32,
    /// The cores it could run on, as a CPU list.
    pub cores: String,
    /// The cores both it and the client could run on, as a CPU list; absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_cores: Option<String>,
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
pub struct EngineInfo {
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

pub use speedmatrix_units::{Api, LoadKind, PrefillMode};

/// The benchmark tool that produced the document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// Tool name, e.g. `speedmatrix`.
    pub name: String,
    /// Tool version, e.g. `0.1.0`.
    pub version: String,
    /// The commit it was built from, e.g. `3ee437e8572a` (`, modified` when the tree held
    /// uncommitted changes). Absent before schema version 6 and when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The build profile, `release` or `debug` (a debug build measures its own overhead).
    /// Absent before schema version 6 and when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_profile: Option<String>,
}

/// How a run was made: the command lines that made it, every flag's value and the host the
/// client ran on. Secrets are removed before it is built (`speedmatrix_client::redact`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// The command lines, shell-quoted, secrets replaced by `[redacted]`: the first started
    /// the run, each later one continued it (`--resume`).
    pub invocations: Vec<String>,
    /// Every run flag by its name without dashes (as a study's `[run]` table spells it) and
    /// its value as text, given or default; the API key is never among them.
    pub options: BTreeMap<String, serde_json::Value>,
    /// The flags of `options` that were given (on the command line, or by the journal a
    /// resumed run continued), not defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub given: Vec<String>,
    /// The host the benchmark client ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<ClientHost>,
}

/// The host the benchmark client ran on (the server may run elsewhere: see `hardware`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientHost {
    /// Its name, e.g. `bench-01`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Operating system and kernel, e.g. `linux 6.8.0-49-generic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<String>,
    /// CPU architecture, e.g. `x86_64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// Logical CPUs the client could use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u32>,
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
    /// Length of each decode cell's measurement window in seconds (before
    /// version 5: `window_duration_s`).
    #[serde(alias = "window_duration_s")]
    pub window_s: f64,
    /// The most output tokens of every decode request (its `max_tokens`).
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
    /// In a predicted document: the 80 % band of `prompt_tokens_per_s` (see
    /// [`PredictionBand`]). Absent in measured documents and before schema version 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_per_s_band: Option<Interval>,
}
