//! What a run measures: the typed configuration the binary fills from flags.

use std::time::Duration;

use speedmatrix_metrics::TokensPerSecond;
use speedmatrix_units::{Concurrency, Tokens};

pub use speedmatrix_units::{Api, LoadKind, PrefillMode, PromptSharing};

/// A named set of contexts, concurrencies and timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Preset {
    /// A reduced matrix (contexts 0/1K/4K × 1/4/16/64, 10 s windows, prefill 4K/8K):
    /// about two minutes against the simulator.
    Quick,
    /// The seed page's exact matrix: contexts 0–248K × 1–128, prefill 8K–128K, 30 s, 8,192.
    Seed,
}

/// The matrix: which cells and prefill points, and how long each is measured.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixSpec {
    /// Context lengths of the sustained-decode rows.
    pub contexts: Vec<Tokens>,
    /// Simultaneous requests of the sustained-decode columns.
    pub concurrencies: Vec<Concurrency>,
    /// Context lengths of the cold prefill measurements.
    pub prefill_contexts: Vec<Tokens>,
    /// Cold prefill requests per context; the median is reported.
    pub prefill_repeats: u32,
    /// Separate cold requests, or the decode cells' first warm-up requests.
    pub prefill_mode: PrefillMode,
    /// Measurements of each sustained-decode cell, back to back after one
    /// warm-up (`--repeats`); 1 measures each once.
    pub repeats: u32,
    /// Length of each decode cell's measurement window.
    pub window: Duration,
    /// The most output tokens of every decode request (its `max_tokens`).
    pub max_output: Tokens,
    /// What the cells over `contexts` measure: the sustained-decode window
    /// (over `concurrencies`), bursts, or an open-loop request rate.
    pub load: LoadMode,
    /// A service-level objective the load cells are judged by.
    pub slo: Option<speedmatrix_metrics::Slo>,
    /// Search each context for the highest load that meets `slo`, instead of
    /// measuring every given load (burst and rate modes).
    pub search: Option<SearchSpec>,
    /// In burst and rate cells, every request's prompt begins with this
    /// shared prefix (warmed once before the cell); the rest is its own.
    pub shared_prefix: Option<SharedPrefix>,
    /// After each sustained-decode window, one cold long prompt sent into
    /// the running streams: its TTFT alone and under load, and the streams'
    /// stall (sustained mode).
    pub inject: Option<InjectSpec>,
    /// Burst, rate and conversation requests may end where the model ends its answer (no
    /// `ignore_eos`, no `min_tokens`); sustained cells always run to `max_output`.
    pub respect_eos: bool,
}

/// How much of each prompt a load cell's requests share.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SharedPrefix {
    /// This share of the prompt, 0–1.
    Share(f64),
    /// This many tokens (at most the prompt).
    Tokens(Tokens),
}

impl SharedPrefix {
    /// The shared tokens of a prompt of `prompt` tokens.
    pub fn tokens_of(self, prompt: Tokens) -> Tokens {
        match self {
            SharedPrefix::Share(s) => {
                Tokens::new((prompt.get() as f64 * s.clamp(0.0, 1.0)).round() as u64)
            }
            SharedPrefix::Tokens(t) => t.min(prompt),
        }
    }
}

/// The prefill–decode interference probe of each sustained-decode cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InjectSpec {
    /// Prompt length of the injected request (it asks for one token).
    pub tokens: Tokens,
    /// How long the streams are watched after the injected request's first
    /// token, for their recovery.
    pub settle: Duration,
}

/// How the knee search runs (see `search.rs`): from the lowest given load,
/// up to the highest (or without bound when only one is given).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchSpec {
    /// At most this many cells per context.
    pub max_steps: usize,
    /// Converged when the lowest failure is within this share of the highest pass.
    pub relative_tolerance: f64,
    /// What the search looks for.
    pub goal: SearchGoal,
}

/// What a search looks for.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum SearchGoal {
    /// The highest load whose cell meets the objective (`--slo`).
    #[default]
    MostLoadMeetingSlo,
    /// The fastest requests (median decode speed, 1 / TPOT p50) among loads
    /// whose output tok/s reach `floor` (and meet `--slo`, when given). The
    /// search brackets and bisects the lowest load that reaches the floor:
    /// with more load, totals grow and each request slows.
    PerRequestAtFloor {
        /// Output tok/s the cell must reach over its span.
        floor: TokensPerSecond,
    },
}

/// What the cells of a run measure.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum LoadMode {
    /// N streams kept busy through a fixed window (the seed page's matrix).
    #[default]
    Sustained,
    /// N requests sent at once; each cell ends when the last one does.
    Burst(BurstSpec),
    /// Requests arriving at a rate, at send times drawn before the cell.
    Rate(RateSpec),
    /// N multi-turn conversations at once (over `concurrencies`): each turn's
    /// prompt is the last one's, its answer and a new question.
    Conversation(ConversationSpec),
}

/// Multi-turn conversations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConversationSpec {
    /// Turns per conversation.
    pub turns: u32,
    /// Tokens of each new question after the first turn.
    pub question: Tokens,
}

/// Bursts: one cell per context × request count.
#[derive(Debug, Clone, PartialEq)]
pub struct BurstSpec {
    /// Requests in each burst (the cells' columns).
    pub requests: Vec<u32>,
    /// At most this many in flight at once; the rest wait for a free slot.
    pub max_concurrency: Option<Concurrency>,
    /// Send every prompt once first (max_tokens 1) so that the server's
    /// prefix cache holds it; otherwise every prompt is new to the server.
    pub warm_cache: bool,
}

/// Open-loop request rates: one cell per context × rate.
#[derive(Debug, Clone, PartialEq)]
pub struct RateSpec {
    /// Requests per second (the cells' columns).
    pub rates: Vec<speedmatrix_units::RequestRate>,
    /// How the gaps between arrivals are drawn.
    pub arrival: speedmatrix_workload::ArrivalProcess,
    /// The schedule's seed.
    pub seed: u64,
    /// How long, or how many requests, each cell sends.
    pub length: RateLength,
    /// At most this many in flight at once; an arrival beyond it waits, and
    /// its wait counts in its latency (it is measured from its drawn time).
    pub max_in_flight: Option<Concurrency>,
    /// How long to wait for the requests still running after the last send
    /// before cancelling them.
    pub drain: Duration,
    /// Send every prompt once first, as [`BurstSpec::warm_cache`].
    pub warm_cache: bool,
}

/// How much each rate cell sends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateLength {
    /// Every arrival drawn within this time from the cell's start.
    Duration(Duration),
    /// This many arrivals.
    Requests(u64),
}

impl LoadMode {
    /// The kind of load: `sustained`, `burst`, `rate` or `conversation`.
    pub fn kind(&self) -> LoadKind {
        match self {
            LoadMode::Sustained => LoadKind::Sustained,
            LoadMode::Burst(_) => LoadKind::Burst,
            LoadMode::Rate(_) => LoadKind::Rate,
            LoadMode::Conversation(_) => LoadKind::Conversation,
        }
    }
}

impl Preset {
    /// The matrix this preset stands for.
    pub fn matrix(self) -> MatrixSpec {
        let conc = |ns: &[u32]| ns.iter().filter_map(|&n| Concurrency::new(n)).collect();
        match self {
            // Small contexts keep cache warm-up short next to the windows, so
            // the run spends its time measuring; the 64 column shows Over capacity
            // on the seed-calibrated simulator.
            Preset::Quick => MatrixSpec {
                contexts: vec![Tokens::ZERO, Tokens::kibi(1), Tokens::kibi(4)],
                concurrencies: conc(&[1, 4, 16, 64]),
                prefill_contexts: vec![Tokens::kibi(4), Tokens::kibi(8)],
                prefill_repeats: 1,
                repeats: 1,
                prefill_mode: PrefillMode::Cold,
                window: Duration::from_secs(10),
                max_output: Tokens::new(8192),
                load: LoadMode::Sustained,
                slo: None,
                search: None,
                shared_prefix: None,
                inject: None,
                respect_eos: false,
            },
            Preset::Seed => MatrixSpec {
                contexts: [0, 16, 32, 64, 128, 248].map(Tokens::kibi).to_vec(),
                concurrencies: conc(&[1, 2, 4, 8, 16, 32, 64, 128]),
                prefill_contexts: [8, 16, 32, 64, 128].map(Tokens::kibi).to_vec(),
                prefill_repeats: 1,
                repeats: 1,
                prefill_mode: PrefillMode::Cold,
                window: Duration::from_secs(30),
                max_output: Tokens::new(8192),
                load: LoadMode::Sustained,
                slo: None,
                search: None,
                shared_prefix: None,
                inject: None,
                respect_eos: false,
            },
        }
    }
}

/// Which server to measure.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Target {
    /// A running server's base URL, e.g. `http://127.0.0.1:8000`.
    Url(String),
    /// The built-in simulator, started in-process from a profile (the `embedded` feature).
    #[cfg(feature = "embedded")]
    Embedded(Box<speedmatrix_sim::Profile>),
}

impl Target {
    /// Whether the target is the built-in simulator.
    pub fn is_embedded(&self) -> bool {
        match self {
            Target::Url(_) => false,
            #[cfg(feature = "embedded")]
            Target::Embedded(_) => true,
        }
    }
}

/// How the runner learns the server's KV capacity when the server does not say.
#[derive(Debug, Clone, Default)]
pub struct CapacityHints {
    /// An offline prediction from the model's config.json, GPU and launch flags.
    pub prediction: Option<speedmatrix_capacity::Prediction>,
    /// What a vLLM `prediction` was made from, so that the runner predicts
    /// again under the release the server reports on `/version` when the
    /// caller named none.
    pub vllm_inputs: Option<VllmInputs>,
    /// A capacity in tokens the user states (`--kv-capacity-tokens`).
    pub kv_capacity_tokens: Option<Tokens>,
}

/// The inputs of an offline vLLM prediction.
#[derive(Debug, Clone)]
pub struct VllmInputs {
    /// The model's config.
    pub model: speedmatrix_capacity::ModelConfig,
    /// The GPU.
    pub gpu: speedmatrix_capacity::Gpu,
    /// The server's flags; `flags.version` is the release assumed.
    pub flags: speedmatrix_capacity::VllmFlags,
    /// Whether the caller named the release (then `/version` does not override it).
    pub version_given: bool,
}

/// Descriptive facts the runner cannot measure, copied into the result.
#[derive(Debug, Clone, Default)]
pub struct RunLabels {
    /// The hardware, as detected or given by the caller.
    pub hardware: speedmatrix_report::Hardware,
    /// The model's name as the user knows it (defaults to the served model).
    pub model: Option<String>,
    /// The server's launch command, as the user gives it.
    pub launch_command: Option<String>,
    /// Weight quantization, as the user gives it (e.g. `FP8`).
    pub quantization: Option<String>,
    /// Engine name when the server does not tell (e.g. `vllm`, `sglang`).
    pub engine: Option<String>,
    /// Model revision.
    pub revision: Option<String>,
    /// Name of the tokenizer used to size prompts, for the report.
    pub tokenizer: Option<String>,
    /// How the client runs (threads, cores, a local server's cores), for the report.
    pub client: Option<speedmatrix_report::ClientSetup>,
    /// The server's name in the journal's key when its URL is no identity: a study point's
    /// server, whose port changes from attempt to attempt. `None`: the URL (without
    /// credentials) or the simulator profile.
    pub server_key: Option<String>,
    /// The program that measures, for the report (its version, commit and build); `None`:
    /// the runner's own version.
    pub tool: Option<speedmatrix_report::Tool>,
    /// How the run was made (command lines, flags, host), for the report and the journal.
    pub provenance: Option<speedmatrix_report::Provenance>,
}

/// Everything one run needs. The binary fills it from flags; embedders build it directly.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The server to measure.
    pub target: Target,
    /// API key sent as a bearer token (never logged or recorded).
    pub api_key: Option<speedmatrix_client::ApiKey>,
    /// Skip TLS certificate verification (recorded in the result).
    pub insecure: bool,
    /// Served model name; the server's first model when `None`.
    pub model: Option<String>,
    /// The tokenizer prompts are sized with; must match the server's model.
    pub tokenizer: speedmatrix_workload::Tokenizer,
    /// Endpoint used for every request.
    pub api: Api,
    /// The matrix to measure.
    pub matrix: MatrixSpec,
    /// Prompt sharing between the streams of a decode cell.
    pub prompt_sharing: PromptSharing,
    /// Seed of the prompt text generator.
    pub seed: u64,
    /// Capacity sources used when the server does not report its own.
    pub capacity: CapacityHints,
    /// Client timeouts (connect, response headers, idle gap between chunks).
    pub timeouts: speedmatrix_client::Timeouts,
    /// Also send `min_tokens = max_tokens` (for servers that honour it but not `ignore_eos`).
    pub send_min_tokens: bool,
    /// How `<think>` tags in the answer text are read (reasoning or content).
    pub reasoning_parser: speedmatrix_units::ReasoningParser,
    /// Engine-specific fields merged into every request body, e.g.
    /// `{"chat_template_kwargs": {"enable_thinking": false}}`; they override
    /// the runner's own fields of the same name. Recorded in the report.
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Descriptive labels for the result document.
    pub labels: RunLabels,
    /// What is sampled beside the windows: GPUs, the host, the server's counters.
    pub telemetry: TelemetryConfig,
    /// Burst and rate prompts from a dataset or a length distribution (`--dataset`,
    /// `--input-tokens`) instead of the run's own at each context.
    pub workload: Option<crate::Workload>,
}

/// What a run samples beside its windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// The GPU source (`--telemetry off|auto|nvml|smi`); the host is sampled unless `off`.
    pub gpu: speedmatrix_telemetry::TelemetryMode,
    /// Time between GPU and host samples (`--telemetry-interval`).
    pub interval: Duration,
    /// Time between scrapes of the server's `/metrics` inside a window (`--metrics-interval`).
    pub metrics_interval: Duration,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            gpu: speedmatrix_telemetry::TelemetryMode::Auto,
            interval: Duration::from_millis(250),
            metrics_interval: Duration::from_secs(1),
        }
    }
}
