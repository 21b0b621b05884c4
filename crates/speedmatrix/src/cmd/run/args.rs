//! The flags of `speedmatrix run`.

use std::path::PathBuf;
use std::time::Duration;

use speedmatrix_units::{Api, Concurrency, PromptSharing, Tokens};

use crate::cmd::engine_flags::EngineArgs;

/// A named matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PresetArg {
    /// Contexts 0/1K/4K × 1/4/16/64 streams, 10 s windows, prefill 4K/8K: about two minutes.
    Quick,
    /// The seed page's matrix: contexts 0–248K × 1–128, prefill 8K–128K, 30 s windows, 8,192 tokens.
    Seed,
}

/// How the prefill rows are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PrefillModeArg {
    /// A separate request per prefill context, with a never-seen prompt, before the decode cells.
    Cold,
    /// The first warm-up request of each context's first decode cell, sent alone with nothing
    /// cached (the seed page's "Measured during decode warm-up"); prefill contexts without a
    /// decode row get a cold request.
    Warmup,
}

/// What the cells measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModeArg {
    /// N streams kept busy through a fixed window, the prefix cache warmed first (the seed page).
    Sustained,
    /// N requests sent at once per cell (--requests); the cell lasts until the last one ends.
    Burst,
    /// Requests arriving at --request-rate, at send times drawn before the cell (open loop).
    Rate,
    /// --concurrency multi-turn conversations at once (--turns): each turn's prompt is the last
    /// one's, its answer and a new question, so the prefix cache holds all but the new text.
    Conversation,
}

/// How open-loop arrivals are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ArrivalArg {
    /// Exponential gaps: arrivals at random.
    Poisson,
    /// Equal gaps.
    Constant,
    /// Gamma gaps of shape --burstiness (below 1 burstier than Poisson).
    Gamma,
}

/// Flags of `speedmatrix run`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct Args {
    /// Base URL of an OpenAI-compatible server (e.g. http://127.0.0.1:8000). Without it the
    /// built-in simulator runs in-process (no GPU, no network).
    #[arg(long, value_name = "URL")]
    pub(crate) url: Option<String>,
    /// Simulator profile used when no --url is given: a built-in name
    /// (rtx3090-qwen3.5-4b-fp8, tiny) or a profile JSON file.
    #[arg(
        long,
        value_name = "NAME|FILE",
        default_value = "rtx3090-qwen3.5-4b-fp8"
    )]
    pub(crate) sim_profile: String,
    /// Served model name; defaults to the first model the server lists.
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// API key sent as a bearer token; never written to logs or reports.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub(crate) api_key: Option<String>,
    /// The served model's tokenizer: a tokenizer.json, a model folder, a Hugging Face id in the
    /// local HF cache, or `bundled`. Prompts are sized with it, so it must match the server's.
    /// Required with --url; the simulator uses `bundled`.
    #[arg(long, value_name = "PATH|HUB_ID|bundled")]
    pub(crate) tokenizer: Option<String>,
    /// Endpoint for every request.
    #[arg(long, value_enum, default_value = "completions")]
    pub(crate) api: Api,
    /// Matrix preset; the flags below override its parts. Default: quick with the simulator,
    /// seed with --url.
    #[arg(long, value_enum)]
    pub(crate) preset: Option<PresetArg>,
    /// Decode context lengths (rows), e.g. 0,16k,32k,64k,128k,248k (k = 1,024 tokens).
    #[arg(long, value_delimiter = ',')]
    pub(crate) contexts: Option<Vec<Tokens>>,
    /// Simultaneous requests (columns), e.g. 1,2,4,8,16,32,64,128.
    #[arg(long, value_delimiter = ',', alias = "max-concurrency")]
    pub(crate) concurrency: Option<Vec<Concurrency>>,
    /// Cold prefill context lengths, e.g. 8k,16k,32k,64k,128k; `none` for no prefill rows.
    #[arg(long, value_delimiter = ',', value_parser = parse_prefill)]
    pub(crate) prefill_contexts: Option<Vec<PrefillArg>>,
    /// Cold prefill requests per context; the median is reported.
    #[arg(long)]
    pub(crate) prefill_repeats: Option<u32>,
    /// How prefill is measured: `cold` (separate requests) or `warmup` (the first, cold warm-up
    /// request of each context's decode cells, as the seed page).
    #[arg(long, value_enum, default_value = "cold")]
    pub(crate) prefill_mode: PrefillModeArg,
    /// Measurement window per decode cell, e.g. 30s, 2m.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub(crate) duration: Option<Duration>,
    /// max_tokens of every decode request (ignore_eos is always set).
    #[arg(long)]
    pub(crate) max_tokens: Option<Tokens>,
    /// Whether the streams of a cell share one prompt.
    #[arg(long, value_enum, default_value = "unique")]
    pub(crate) prompt_sharing: PromptSharing,
    /// Seed of the prompt text.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Also send min_tokens = max_tokens (for servers that ignore ignore_eos).
    #[arg(long)]
    pub(crate) min_tokens: bool,
    /// A JSON object merged into every request body, for engine-specific fields, e.g.
    /// '{"chat_template_kwargs": {"enable_thinking": false}}'. Its fields override speedmatrix's
    /// own; it is recorded in the report.
    #[arg(long, value_name = "JSON")]
    pub(crate) extra_body: Option<String>,

    /// KV cache capacity in tokens, when the server does not report it.
    #[arg(long, value_name = "TOKENS")]
    pub(crate) kv_capacity_tokens: Option<Tokens>,
    /// The model's config.json, to predict the KV capacity offline when the server does not
    /// report it, by the rules of the engine --engine names (vLLM when it names none we
    /// model) with the engine flags below, the same as `speedmatrix capacity` takes.
    #[arg(long, value_name = "PATH")]
    pub(crate) model_config: Option<PathBuf>,
    #[command(
        flatten,
        next_help_heading = "Engine flags for the capacity prediction (with --model-config)"
    )]
    pub(crate) engine_flags: EngineArgs,

    /// Output directory; default `speedmatrix-runs/<UTC time>`.
    #[arg(long, short, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
    /// Write into --out even if it already holds files.
    #[arg(long)]
    pub(crate) force: bool,
    /// Continue the run whose output directory is DIR (same flags), skipping finished cells.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["out", "force"])]
    pub(crate) resume: Option<PathBuf>,
    /// Print the plan (cells, capacity source, estimated duration) and exit.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// No progress display.
    #[arg(long, short)]
    pub(crate) quiet: bool,

    /// Runtime threads of the client. Default against --url: one per 512 streams, at most half
    /// the usable cores, 1 to 4, so the engine keeps the rest; with the built-in simulator, one
    /// per core. The report says per cell how busy they were ("client-bound" past 80 %).
    #[arg(long, value_name = "N", help_heading = "Client")]
    pub(crate) client_threads: Option<std::num::NonZeroUsize>,
    /// Pin the client to these cores, a CPU list such as 0-3,8 (see `lscpu`, `taskset`), away
    /// from the engine's; the report warns when a server on this host may use the same cores.
    #[arg(long, value_name = "LIST", help_heading = "Client")]
    pub(crate) client_cores: Option<crate::client_host::Cores>,

    /// GPU telemetry beside every window: auto (NVIDIA's NVML, else nvidia-smi, else amd-smi,
    /// else rocm-smi), nvml, smi (the command-line tools only) or off (no GPU and no host
    /// sampling). Per cell the report then gives GPU utilization, power, energy and joules per
    /// output token, the lowest clock, seconds throttled by reason, host CPU, the server's own
    /// tok/s, KV usage, prefix-cache hit rate, speculative acceptance and preemptions, and
    /// verdicts (throttled, client-bound, server queued, preempted, cache cold); every raw
    /// sample goes to telemetry.jsonl. A missing driver or tool is recorded, never an error.
    #[arg(
        long,
        value_name = "MODE",
        default_value = "auto",
        help_heading = "Telemetry"
    )]
    pub(crate) telemetry: speedmatrix_telemetry::TelemetryMode,
    /// Time between GPU and host samples.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "250ms", help_heading = "Telemetry")]
    pub(crate) telemetry_interval: Duration,
    /// Time between scrapes of the server's /metrics inside a window (running, waiting and KV
    /// usage); its counters are also read at each window's edges.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s", help_heading = "Telemetry")]
    pub(crate) metrics_interval: Duration,

    /// What each cell measures: `sustained` (N streams busy through a window), `burst` (N
    /// requests at once, end to end) or `rate` (requests arriving at a rate, each latency
    /// measured from its drawn send time so a late client cannot hide queueing). In burst and
    /// rate modes one --concurrency value caps the requests in flight (a request past it waits,
    /// and the wait counts in its latency).
    #[arg(
        long,
        value_enum,
        default_value = "sustained",
        help_heading = "Load modes"
    )]
    pub(crate) mode: ModeArg,
    /// Burst sizes, e.g. 1,8,64 (--mode burst); with --mode rate, one number: the requests each
    /// rate cell sends, instead of sending for --duration.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "N",
        help_heading = "Load modes"
    )]
    pub(crate) requests: Option<Vec<Concurrency>>,
    /// Requests per second, e.g. 0.5,1,2,4 (--mode rate); each rate cell sends for --duration.
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "PER_S",
        help_heading = "Load modes"
    )]
    pub(crate) request_rate: Option<Vec<speedmatrix_units::RequestRate>>,
    /// How arrivals are spaced (--mode rate).
    #[arg(
        long,
        value_enum,
        default_value = "poisson",
        help_heading = "Load modes"
    )]
    pub(crate) arrival: ArrivalArg,
    /// The gamma shape of --arrival gamma: 1 is Poisson, below 1 burstier, above 1 more even.
    #[arg(long, value_name = "B", help_heading = "Load modes")]
    pub(crate) burstiness: Option<f64>,
    /// Seed of the arrival schedule (default: --seed); the same seed sends at the same times.
    #[arg(long, value_name = "S", help_heading = "Load modes")]
    pub(crate) arrival_seed: Option<u64>,
    /// How long a rate cell waits, after its last send, for the requests still running; those
    /// still running then are cancelled and counted as unfinished.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "120s", help_heading = "Load modes")]
    pub(crate) drain: Duration,
    /// Burst and rate modes: send every prompt once first (max_tokens 1) so that the prefix
    /// cache holds it; by default every prompt is new to the server.
    #[arg(long, help_heading = "Load modes")]
    pub(crate) warm_cache: bool,
    /// A service-level objective for burst and rate cells, e.g. ttft_p99=2s,itl_p99=100ms
    /// (latencies ttft, itl, tpot, e2e at any percentile). Each cell reports whether its
    /// percentiles meet it, the share of requests that meet it on their own figures, and those
    /// requests per second (goodput).
    #[arg(long, value_name = "TERMS", help_heading = "Load modes")]
    pub(crate) slo: Option<speedmatrix_metrics::Slo>,
    /// Find, per context, the highest load that meets --slo instead of measuring each given
    /// load: from the lowest --requests, --request-rate or --concurrency up to the highest
    /// (without bound when one is given), doubling to bracket the knee and bisecting to it,
    /// each try a journaled cell. Needs --slo (or --search-floor) and a load mode (burst,
    /// rate, conversation).
    #[arg(long, help_heading = "Load modes")]
    pub(crate) search: bool,
    /// With --search: instead of the knee, find the load whose requests are fastest (median
    /// decode speed, 1 / TPOT p50) while the cell's output still reaches this many tok/s
    /// (and meets --slo, when given) — the lowest load that reaches the floor, by the same
    /// bracketing and bisection.
    #[arg(long, value_name = "TOK/S", help_heading = "Load modes")]
    pub(crate) search_floor: Option<f64>,
    /// Burst and rate modes: every request's prompt begins with a prefix shared by the cell's
    /// requests, a share of the prompt (50%) or a number of tokens (2k), cached by one request
    /// sent before the cell; each cell reports the hit rate that should give beside the
    /// server's own (its counters over the cell).
    #[arg(long, value_name = "PCT|TOKENS", value_parser = parse_shared_prefix, help_heading = "Load modes")]
    pub(crate) shared_prefix: Option<speedmatrix_runner::SharedPrefix>,
    /// Turns of each conversation (--mode conversation).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4,
        help_heading = "Load modes"
    )]
    pub(crate) turns: u32,
    /// Tokens of each new question after a conversation's first turn (--mode conversation).
    #[arg(
        long,
        value_name = "TOKENS",
        default_value = "128",
        help_heading = "Load modes"
    )]
    pub(crate) question_tokens: Tokens,
    /// Sustained mode: after each cell's window, send one cold prompt of this many tokens
    /// (max_tokens 1) into the running streams, e.g. 32k: its TTFT alone and under load, and
    /// the streams' tok/s before, during and after it, their stall and the tokens they lost
    /// (the seed tool's mixed-prefill phase).
    #[arg(long, value_name = "TOKENS", help_heading = "Load modes")]
    pub(crate) inject: Option<Tokens>,
    /// How long the streams are watched after the injected prompt's first token.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s", help_heading = "Load modes")]
    pub(crate) inject_settle: Duration,
    /// At most this many cells per context's search.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 12,
        help_heading = "Load modes"
    )]
    pub(crate) search_steps: usize,
    /// The search stops when the lowest failing load is within this share of the highest
    /// passing one, e.g. 5%.
    #[arg(long, value_name = "PCT", default_value = "5%", value_parser = parse_percent, help_heading = "Load modes")]
    pub(crate) search_tolerance: f64,

    /// Skip TLS certificate verification (recorded in the report).
    #[arg(long)]
    pub(crate) insecure: bool,
    /// Connect timeout.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub(crate) connect_timeout: Duration,
    /// Longest silence allowed between two chunks of a stream (and before response headers).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "120s")]
    pub(crate) idle_timeout: Duration,

    /// The server's launch command, copied into the report.
    #[arg(long)]
    pub(crate) launch_command: Option<String>,
    /// Weight quantization, for the report (e.g. FP8).
    #[arg(long)]
    pub(crate) quantization: Option<String>,
    /// Engine name for the report when the server does not tell (vllm, sglang, llama.cpp); with
    /// --model-config, also whose KV rules the prediction follows.
    #[arg(long)]
    pub(crate) engine: Option<String>,
    /// GPU name for the report's hardware section (detected with nvidia-smi when present).
    #[arg(long)]
    pub(crate) hardware_gpu: Option<String>,
}

const AFTER_HELP: &str = "\
Examples:
  speedmatrix run                                   # quick matrix on the built-in simulator
  speedmatrix run --preset seed                     # the seed page's matrix on the simulator
  speedmatrix run --mode burst --requests 1,8,64 --contexts 1k --max-tokens 256
  speedmatrix run --mode rate --request-rate 1,2,4 --duration 60s --slo ttft_p99=2s,itl_p99=100ms
  speedmatrix run --url http://127.0.0.1:8000 --tokenizer Qwen/Qwen3.5-4B --preset seed
  speedmatrix run --resume speedmatrix-runs/2026-11-30T07-00-00Z

Exit codes: 0 every planned step ran (failed cells are marked Error in the report); 1 the run
stopped early (Ctrl-C, server gone) and the partial report was written, or every step failed;
2 bad input (nothing is written).

Requests answered 429 or 503 are retried up to 3 times after the server's Retry-After.";

/// `50%` as a share of the prompt, else a number of tokens (`2k`).
fn parse_shared_prefix(s: &str) -> Result<speedmatrix_runner::SharedPrefix, String> {
    if s.trim().ends_with('%') {
        let share = parse_percent(s)?;
        return Ok(speedmatrix_runner::SharedPrefix::Share(share));
    }
    s.parse::<Tokens>()
        .map(speedmatrix_runner::SharedPrefix::Tokens)
        .map_err(|e| format!("{e}; or a share of the prompt such as 50%"))
}

/// `5%` or `5` as the share 0.05.
fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a percentage such as 5%"))?;
    if !(0.0..100.0).contains(&v) {
        return Err(format!("`{s}` must be at least 0 % and below 100 %"));
    }
    Ok(v / 100.0)
}

/// A prefill context, or `none`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PrefillArg(pub(crate) Option<Tokens>);

fn parse_prefill(s: &str) -> Result<PrefillArg, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(PrefillArg(None));
    }
    s.parse::<Tokens>()
        .map(|t| PrefillArg(Some(t)))
        .map_err(|e| e.to_string())
}
