//! What a run is asked to measure, as its user says it: [`RunOptions`], one definition for the
//! `speedmatrix run` flags (clap, behind the `clap` feature), a study file's `[run]` table
//! (serde, each value as the flag's text or the scalar that prints as it) and its JSON Schema
//! (behind `schemars`). [`RunOptions::resolve`] turns them into the [`crate::RunConfig`] the runner
//! measures: it loads the tokenizer, reads the model's config.json, predicts the KV capacity and
//! detects the hardware. Every message names the option as the command line spells it.

mod engine;
mod labels;
pub mod limits;
mod load;
mod resolve;
pub(crate) mod text;
mod values;

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use speedmatrix_units::{
    Api, Concurrency, Engine, LoadKind, PrefillMode, PromptSharing, ReasoningParser, Tokens,
};

pub use self::engine::{EngineOptions, FlashAttn, MambaMode, Switch};
pub use self::labels::{HostFacts, client_host, detect_hardware};
pub use self::load::ArrivalKind;
pub(crate) use self::resolve::bad;
pub use self::resolve::from_value;
pub use self::values::{ContextOrNone, ExtraBody, Percent};
use crate::{Preset, SharedPrefix};

/// The built-in simulator profile a run without `--url` measures by default.
pub const DEFAULT_SIM_PROFILE: &str = "rtx3090-qwen3.5-4b-fp8";

/// Everything `speedmatrix run` can be told about what to measure and against what; the
/// command line's own concerns (output folder, resume, progress, the client's cores) are
/// the binary's. The field docs are the flags' help.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::Args))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct RunOptions {
    /// Base URL of an OpenAI-compatible server (e.g. http://127.0.0.1:8000). Without it the
    /// built-in simulator runs in-process (no GPU, no network).
    #[cfg_attr(feature = "clap", arg(long, value_name = "URL"))]
    pub url: Option<String>,
    /// Simulator profile used when no --url is given: a built-in name
    /// (rtx3090-qwen3.5-4b-fp8, tiny, free-running) or a profile JSON file.
    #[cfg_attr(feature = "clap", arg(long, value_name = "NAME|FILE", default_value = DEFAULT_SIM_PROFILE))]
    pub sim_profile: String,
    /// Served model name; defaults to the first model the server lists.
    #[cfg_attr(feature = "clap", arg(long))]
    pub model: Option<String>,
    /// API key sent as a bearer token; never written to logs or reports (never read from a
    /// study file: give it in the environment).
    #[cfg_attr(
        feature = "clap",
        arg(long, env = "OPENAI_API_KEY", hide_env_values = true)
    )]
    #[serde(skip)]
    #[cfg_attr(feature = "schemars", schemars(skip))]
    pub api_key: Option<String>,
    /// The served model's tokenizer: a tokenizer.json, a model folder, a Hugging Face id in the
    /// local HF cache, or `bundled`. Prompts are sized with it, so it must match the server's.
    /// Required with --url; the simulator uses `bundled`.
    #[cfg_attr(feature = "clap", arg(long, value_name = "PATH|HUB_ID|bundled"))]
    pub tokenizer: Option<String>,
    /// Endpoint for every request.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value = "completions"))]
    pub api: Api,
    /// Matrix preset; the flags below override its parts. Default: quick with the simulator,
    /// seed with --url.
    #[cfg_attr(feature = "clap", arg(long, value_enum))]
    pub preset: Option<Preset>,
    /// Decode context lengths (rows), e.g. 0,16k,32k,64k,128k,248k (k = 1,024 tokens).
    #[cfg_attr(feature = "clap", arg(long, value_delimiter = ',', value_parser = limits::contexts::parse))]
    #[serde(deserialize_with = "limits::contexts::opt_list")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ListText>"))]
    pub contexts: Option<Vec<Tokens>>,
    /// Simultaneous requests (columns), e.g. 1,2,4,8,16,32,64,128.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_delimiter = ',', alias = "max-concurrency", value_parser = limits::concurrency::parse)
    )]
    #[serde(deserialize_with = "limits::concurrency::opt_list")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ListText>"))]
    pub concurrency: Option<Vec<Concurrency>>,
    /// Cold prefill context lengths, e.g. 8k,16k,32k,64k,128k; `none` for no prefill rows.
    #[cfg_attr(feature = "clap", arg(long, value_delimiter = ',', value_parser = limits::prefill_contexts::parse))]
    #[serde(deserialize_with = "limits::prefill_contexts::opt_list")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ListText>"))]
    pub prefill_contexts: Option<Vec<ContextOrNone>>,
    /// Cold prefill requests per context; the median is reported.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::prefill_repeats::parse))]
    #[serde(deserialize_with = "limits::prefill_repeats::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub prefill_repeats: Option<u32>,
    /// How prefill is measured: `cold` (separate requests) or `warmup` (the first, cold warm-up
    /// request of each context's decode cells, as the seed page).
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value = "cold"))]
    pub prefill_mode: PrefillMode,
    /// Measure each sustained-decode cell this many times back to back (one warm-up, fresh
    /// streams each time) and report the repeats' mean, its 95 % interval and their
    /// coefficient of variation.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::repeats::parse))]
    #[serde(default, deserialize_with = "limits::repeats::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub repeats: Option<u32>,
    /// Measurement window per decode cell, e.g. 30s, 2m.
    #[cfg_attr(feature = "clap", arg(long = "duration", value_parser = limits::window::parse))]
    #[serde(rename = "duration", deserialize_with = "limits::window::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<String>"))]
    pub window: Option<Duration>,
    /// max_tokens of every decode request (ignore_eos is always set).
    #[cfg_attr(feature = "clap", arg(long = "max-tokens", value_parser = limits::max_tokens::parse))]
    #[serde(rename = "max-tokens", deserialize_with = "limits::max_tokens::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub max_output: Option<Tokens>,
    /// Whether the streams of a cell share one prompt.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value = "unique"))]
    pub prompt_sharing: PromptSharing,
    /// Seed of the prompt text.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0))]
    #[serde(deserialize_with = "text::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub seed: u64,
    /// Also send min_tokens = max_tokens (for servers that ignore ignore_eos).
    #[cfg_attr(feature = "clap", arg(long))]
    pub min_tokens: bool,
    /// Reasoning left in the answer text as <think> tags (a server without a reasoning
    /// parser): `think` takes <think>…</think> at the start of an answer as reasoning,
    /// `deepseek-r1` everything before </think>. Reasoning the server sends apart
    /// (delta.reasoning_content, delta.reasoning) is always read. It sets what time to first
    /// content (TTFC) and reasoning tokens per request measure.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value = "none"))]
    #[serde(default)]
    pub reasoning_parser: ReasoningParser,
    /// A JSON object merged into every request body, for engine-specific fields, e.g.
    /// '{"chat_template_kwargs": {"enable_thinking": false}}'. Its fields override speedmatrix's
    /// own; it is recorded in the report.
    #[cfg_attr(feature = "clap", arg(long, value_name = "JSON"))]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<serde_json::Value>"))]
    pub extra_body: Option<ExtraBody>,

    /// KV cache capacity in tokens, when the server does not report it.
    #[cfg_attr(feature = "clap", arg(long, value_name = "TOKENS", value_parser = limits::kv_capacity_tokens::parse))]
    #[serde(deserialize_with = "limits::kv_capacity_tokens::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub kv_capacity_tokens: Option<Tokens>,
    /// The model's config.json, to predict the KV capacity offline when the server does not
    /// report it, by the rules of the engine --engine names (vLLM when none is named) with the
    /// engine flags below, the same as `speedmatrix capacity` takes.
    #[cfg_attr(feature = "clap", arg(long, value_name = "PATH"))]
    pub model_config: Option<PathBuf>,
    /// The engine's launch flags, for the capacity prediction.
    #[cfg_attr(
        feature = "clap",
        command(
            flatten,
            next_help_heading = "Engine flags for the capacity prediction (with --model-config)"
        )
    )]
    #[serde(flatten)]
    pub engine_options: EngineOptions,

    /// GPU telemetry beside every window: auto (NVIDIA's NVML, else nvidia-smi, else amd-smi,
    /// else rocm-smi), nvml, smi (the command-line tools only) or off (no GPU and no host
    /// sampling). Per cell the report then gives GPU utilization, power, energy and joules per
    /// output token, the lowest clock, seconds throttled by reason, host CPU, the server's own
    /// tok/s, KV usage, prefix-cache hit rate, speculative acceptance and preemptions, and
    /// verdicts (throttled, client-bound, server queued, preempted, cache cold); every raw
    /// sample goes to telemetry.jsonl. A missing driver or tool is recorded, never an error.
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_name = "MODE",
            default_value = "auto",
            help_heading = "Telemetry"
        )
    )]
    #[serde(deserialize_with = "text::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "String"))]
    pub telemetry: speedmatrix_telemetry::TelemetryMode,
    /// Time between GPU and host samples.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::telemetry_interval::parse, default_value = "250ms", help_heading = "Telemetry"))]
    #[serde(deserialize_with = "limits::telemetry_interval::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "String"))]
    pub telemetry_interval: Duration,
    /// Time between scrapes of the server's /metrics inside a window (running, waiting and KV
    /// usage); its counters are also read at each window's edges.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::metrics_interval::parse, default_value = "1s", help_heading = "Telemetry"))]
    #[serde(deserialize_with = "limits::metrics_interval::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "String"))]
    pub metrics_interval: Duration,

    /// What each cell measures: `sustained` (N streams busy through a window), `burst` (N
    /// requests at once, end to end), `rate` (requests arriving at a rate, each latency
    /// measured from its drawn send time so a late client cannot hide queueing) or
    /// `conversation` (multi-turn conversations). In burst and rate modes one --concurrency
    /// value caps the requests in flight (a request past it waits, and the wait counts in its
    /// latency).
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_enum,
            default_value = "sustained",
            help_heading = "Load modes"
        )
    )]
    pub mode: LoadKind,
    /// Burst sizes, e.g. 1,8,64 (--mode burst); with --mode rate, one number: the requests each
    /// rate cell sends, instead of sending for --duration.
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_delimiter = ',',
            value_name = "N",
            help_heading = "Load modes",
            value_parser = limits::requests::parse
        )
    )]
    #[serde(deserialize_with = "limits::requests::opt_list")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ListText>"))]
    pub requests: Option<Vec<Concurrency>>,
    /// Requests per second, e.g. 0.5,1,2,4 (--mode rate); each rate cell sends for --duration.
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_delimiter = ',',
            value_name = "PER_S",
            help_heading = "Load modes",
            value_parser = limits::request_rate::parse
        )
    )]
    #[serde(deserialize_with = "limits::request_rate::opt_list")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ListText>"))]
    pub request_rate: Option<Vec<speedmatrix_units::RequestRate>>,
    /// How arrivals are spaced (--mode rate).
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_enum,
            default_value = "poisson",
            help_heading = "Load modes"
        )
    )]
    pub arrival: ArrivalKind,
    /// The gamma shape of --arrival gamma: 1 is Poisson, below 1 burstier, above 1 more even.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "B", help_heading = "Load modes", value_parser = limits::burstiness::parse)
    )]
    #[serde(deserialize_with = "limits::burstiness::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub burstiness: Option<f64>,
    /// Seed of the arrival schedule (default: --seed); the same seed sends at the same times.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "S", help_heading = "Load modes")
    )]
    #[serde(deserialize_with = "text::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub arrival_seed: Option<u64>,
    /// How long a rate cell waits, after its last send, for the requests still running; those
    /// still running then are cancelled and counted as unfinished.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::drain::parse, default_value = "120s", help_heading = "Load modes"))]
    #[serde(deserialize_with = "limits::drain::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "String"))]
    pub drain: Duration,
    /// Burst and rate modes: send every prompt once first (max_tokens 1) so that the prefix
    /// cache holds it; by default every prompt is new to the server.
    #[cfg_attr(feature = "clap", arg(long, help_heading = "Load modes"))]
    pub warm_cache: bool,
    /// Burst, rate and conversation modes: let the model end its answers (no ignore_eos, no
    /// min_tokens): each cell then reports how long the answers were (output tokens per
    /// request). Sustained cells always run to max_tokens (the matrix method).
    #[cfg_attr(feature = "clap", arg(long, help_heading = "Load modes"))]
    pub respect_eos: bool,
    /// Burst and rate modes: prompts from a file, used as given (nothing is downloaded):
    /// ShareGPT-style JSON (.json: each conversation's first user turn, its answer's length as
    /// max_tokens), JSONL (.jsonl: {"prompt": …} or {"messages": […]} per line, optional
    /// "output_tokens") or a plain text corpus (.txt: cut into prompts of --input-tokens).
    /// The file's SHA-256 and the sample are recorded so the run can be repeated exactly.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "FILE", help_heading = "Workload")
    )]
    pub dataset: Option<PathBuf>,
    /// The --dataset file's format when its extension does not say: sharegpt, jsonl or text.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "FORMAT", help_heading = "Workload")
    )]
    #[serde(deserialize_with = "text::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<String>"))]
    pub dataset_format: Option<speedmatrix_workload::DatasetFormat>,
    /// Send N records of --dataset drawn by --seed (without replacement) instead of all of
    /// them, in the order drawn.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "N", help_heading = "Workload")
    )]
    pub dataset_sample: Option<usize>,
    /// Burst and rate modes: each prompt's length drawn from a distribution (by --seed), each
    /// prompt still exactly that long: a count (1k), uniform:512..2048, normal:MEAN,SD or
    /// lognormal:MEDIAN,SIGMA, in tokens. Replaces --contexts (the cells' row is the median);
    /// with a text --dataset, the lengths its prompts are cut to.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "DIST", help_heading = "Workload")
    )]
    #[serde(deserialize_with = "text::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<String>"))]
    pub input_tokens: Option<speedmatrix_workload::LengthDistribution>,
    /// Rate mode: replay a request trace at its own times (JSONL, one request per line):
    /// Mooncake's {"timestamp": MS, "input_length": N, "output_length": N, "hash_ids": […]}
    /// (prompts rebuilt block by block, so requests share exactly the prefix blocks their
    /// hash_ids share) or {"timestamp": MS, "input_tokens": N, "output_tokens": N} (or a
    /// "prompt" text, or chat "messages", sent as written). One cell:
    /// latencies from each request's intended time, achieved against intended load. Limit it
    /// with --requests N (the first N) or --duration (what is sent within it).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "FILE", help_heading = "Workload")
    )]
    pub trace: Option<PathBuf>,
    /// Replay --trace this many times faster (2: half the gaps; 0.5: twice as long).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "X", help_heading = "Workload", value_parser = limits::trace_speed::parse)
    )]
    #[serde(deserialize_with = "limits::trace_speed::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub trace_speed: Option<f64>,
    /// Tokens per hash_ids block of --trace (Mooncake's traces: 512).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "TOKENS", help_heading = "Workload", value_parser = limits::trace_block_tokens::parse)
    )]
    #[serde(deserialize_with = "limits::trace_block_tokens::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub trace_block_tokens: Option<Tokens>,
    /// A service-level objective for burst and rate cells, e.g. ttft_p99=2s,itl_p99=100ms
    /// (latencies ttft, itl, tpot, e2e at any percentile). Each cell reports whether its
    /// percentiles meet it, the share of requests that meet it on their own figures, and those
    /// requests per second (goodput).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "TERMS", help_heading = "Load modes")
    )]
    #[serde(deserialize_with = "text::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<String>"))]
    pub slo: Option<speedmatrix_metrics::Slo>,
    /// Find, per context, the highest load that meets --slo instead of measuring each given
    /// load: from the lowest --requests, --request-rate or --concurrency up to the highest
    /// (without bound when one is given), doubling to bracket the knee and bisecting to it,
    /// each try a journaled cell. Needs --slo (or --search-floor) and a load mode (burst,
    /// rate, conversation).
    #[cfg_attr(feature = "clap", arg(long, help_heading = "Load modes"))]
    pub search: bool,
    /// With --search: instead of the knee, find the load whose requests are fastest (median
    /// decode speed, 1 / TPOT p50) while the cell's output still reaches this many tok/s
    /// (and meets --slo, when given) — the lowest load that reaches the floor, by the same
    /// bracketing and bisection.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "TOK/S", help_heading = "Load modes", value_parser = limits::search_floor::parse)
    )]
    #[serde(deserialize_with = "limits::search_floor::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub search_floor: Option<f64>,
    /// Burst and rate modes: every request's prompt begins with a prefix shared by the cell's
    /// requests, a share of the prompt (50%) or a number of tokens (2k), cached by one request
    /// sent before the cell; each cell reports the hit rate that should give beside the
    /// server's own (its counters over the cell).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "PCT|TOKENS", help_heading = "Load modes")
    )]
    #[serde(deserialize_with = "text::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub shared_prefix: Option<SharedPrefix>,
    /// Turns of each conversation (--mode conversation).
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_name = "N",
            default_value_t = 4,
            help_heading = "Load modes",
            value_parser = limits::turns::parse
        )
    )]
    #[serde(deserialize_with = "limits::turns::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub turns: u32,
    /// Tokens of each new question after a conversation's first turn (--mode conversation).
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_name = "TOKENS",
            default_value = "128",
            help_heading = "Load modes",
            value_parser = limits::question_tokens::parse
        )
    )]
    #[serde(deserialize_with = "limits::question_tokens::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub question_tokens: Tokens,
    /// Sustained mode: after each cell's window, send one cold prompt of this many tokens
    /// (max_tokens 1) into the running streams, e.g. 32k: its TTFT alone and under load, and
    /// the streams' tok/s before, during and after it, their stall and the tokens they lost
    /// (the seed tool's mixed-prefill phase).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "TOKENS", help_heading = "Load modes", value_parser = limits::inject::parse)
    )]
    #[serde(deserialize_with = "limits::inject::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub inject: Option<Tokens>,
    /// How long the streams are watched after the injected prompt's first token.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::inject_settle::parse, default_value = "3s", help_heading = "Load modes"))]
    #[serde(deserialize_with = "limits::inject_settle::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "String"))]
    pub inject_settle: Duration,
    /// At most this many cells per context's search.
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_name = "N",
            default_value_t = 12,
            help_heading = "Load modes",
            value_parser = limits::search_steps::parse
        )
    )]
    #[serde(deserialize_with = "limits::search_steps::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub search_steps: usize,
    /// The search stops when the lowest failing load is within this share of the highest
    /// passing one, e.g. 5%.
    #[cfg_attr(
        feature = "clap",
        arg(
            long,
            value_name = "PCT",
            default_value = "5%",
            help_heading = "Load modes"
        )
    )]
    #[serde(deserialize_with = "text::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub search_tolerance: Percent,

    /// Skip TLS certificate verification (recorded in the report).
    #[cfg_attr(feature = "clap", arg(long))]
    pub insecure: bool,
    /// Connect timeout.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::connect_timeout::parse, default_value = "10s"))]
    #[serde(deserialize_with = "limits::connect_timeout::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "String"))]
    pub connect_timeout: Duration,
    /// Longest silence allowed between two chunks of a stream (and before response headers).
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::idle_timeout::parse, default_value = "120s"))]
    #[serde(deserialize_with = "limits::idle_timeout::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "String"))]
    pub idle_timeout: Duration,

    /// The server's launch command, copied into the report.
    #[cfg_attr(feature = "clap", arg(long))]
    pub launch_command: Option<String>,
    /// Weight quantization, for the report (e.g. FP8).
    #[cfg_attr(feature = "clap", arg(long))]
    pub quantization: Option<String>,
    /// The engine, when the server does not tell (it names the engine in the report), and
    /// with --model-config whose KV rules the prediction follows (default vllm): vllm, sglang,
    /// llama.cpp, tgi or ollama.
    #[cfg_attr(feature = "clap", arg(long, value_enum))]
    pub engine: Option<Engine>,
    /// GPU name for the report's hardware section (detected with nvidia-smi when present).
    #[cfg_attr(feature = "clap", arg(long))]
    pub hardware_gpu: Option<String>,
}

impl Default for RunOptions {
    /// The flags' defaults: `speedmatrix run` with no flag.
    fn default() -> Self {
        RunOptions {
            url: None,
            sim_profile: DEFAULT_SIM_PROFILE.into(),
            model: None,
            api_key: None,
            tokenizer: None,
            api: Api::Completions,
            preset: None,
            contexts: None,
            concurrency: None,
            prefill_contexts: None,
            prefill_repeats: None,
            repeats: None,
            prefill_mode: PrefillMode::Cold,
            window: None,
            max_output: None,
            prompt_sharing: PromptSharing::Unique,
            seed: 0,
            min_tokens: false,
            reasoning_parser: ReasoningParser::None,
            extra_body: None,
            kv_capacity_tokens: None,
            model_config: None,
            engine_options: EngineOptions::default(),
            telemetry: speedmatrix_telemetry::TelemetryMode::Auto,
            telemetry_interval: Duration::from_millis(250),
            metrics_interval: Duration::from_secs(1),
            mode: LoadKind::Sustained,
            requests: None,
            request_rate: None,
            arrival: ArrivalKind::Poisson,
            burstiness: None,
            arrival_seed: None,
            drain: Duration::from_secs(120),
            warm_cache: false,
            respect_eos: false,
            dataset: None,
            dataset_format: None,
            dataset_sample: None,
            input_tokens: None,
            trace: None,
            trace_speed: None,
            trace_block_tokens: None,
            slo: None,
            search: false,
            search_floor: None,
            shared_prefix: None,
            turns: 4,
            question_tokens: Tokens::new(128),
            inject: None,
            inject_settle: Duration::from_secs(3),
            search_steps: 12,
            search_tolerance: Percent(0.05),
            insecure: false,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            launch_command: None,
            quantization: None,
            engine: None,
            hardware_gpu: None,
        }
    }
}
