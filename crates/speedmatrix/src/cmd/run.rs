//! `speedmatrix run`: the main job. Measures the whole speed test matrix and
//! writes run.json, report.md, report.html, measurements.csv and the journal.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use speedmatrix_runner::{
    Api, CapacityHints, JournalOptions, MatrixSpec, PrefillMode, Preset, PromptSharing, RunConfig,
    RunError, RunLabels, RunOutcome, Target,
};
use speedmatrix_units::{Concurrency, Tokens};
use tokio_util::sync::CancellationToken;

use crate::cmd::UsageError;
use crate::cmd::engine_flags::{EngineArgs, PredictedEngine};
use crate::hardware;
use crate::progress::Progress;

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

/// Flags of `speedmatrix run`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct Args {
    /// Base URL of an OpenAI-compatible server (e.g. http://127.0.0.1:8000). Without it the
    /// built-in simulator runs in-process (no GPU, no network).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// Simulator profile used when no --url is given: a built-in name
    /// (rtx3090-qwen3.5-4b-fp8, tiny) or a profile JSON file.
    #[arg(
        long,
        value_name = "NAME|FILE",
        default_value = "rtx3090-qwen3.5-4b-fp8"
    )]
    sim_profile: String,
    /// Served model name; defaults to the first model the server lists.
    #[arg(long)]
    model: Option<String>,
    /// API key sent as a bearer token; never written to logs or reports.
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// The served model's tokenizer: a tokenizer.json, a model folder, a Hugging Face id in the
    /// local HF cache, or `bundled`. Prompts are sized with it, so it must match the server's.
    /// Required with --url; the simulator uses `bundled`.
    #[arg(long, value_name = "PATH|HUB_ID|bundled")]
    tokenizer: Option<String>,
    /// Endpoint for every request.
    #[arg(long, value_enum, default_value = "completions")]
    api: Api,
    /// Matrix preset; the flags below override its parts. Default: quick with the simulator,
    /// seed with --url.
    #[arg(long, value_enum)]
    preset: Option<PresetArg>,
    /// Decode context lengths (rows), e.g. 0,16k,32k,64k,128k,248k (k = 1,024 tokens).
    #[arg(long, value_delimiter = ',')]
    contexts: Option<Vec<Tokens>>,
    /// Simultaneous requests (columns), e.g. 1,2,4,8,16,32,64,128.
    #[arg(long, value_delimiter = ',', alias = "max-concurrency")]
    concurrency: Option<Vec<Concurrency>>,
    /// Cold prefill context lengths, e.g. 8k,16k,32k,64k,128k; `none` for no prefill rows.
    #[arg(long, value_delimiter = ',', value_parser = parse_prefill)]
    prefill_contexts: Option<Vec<PrefillArg>>,
    /// Cold prefill requests per context; the median is reported.
    #[arg(long)]
    prefill_repeats: Option<u32>,
    /// How prefill is measured: `cold` (separate requests) or `warmup` (the first, cold warm-up
    /// request of each context's decode cells, as the seed page).
    #[arg(long, value_enum, default_value = "cold")]
    prefill_mode: PrefillModeArg,
    /// Measurement window per decode cell, e.g. 30s, 2m.
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// max_tokens of every decode request (ignore_eos is always set).
    #[arg(long)]
    max_tokens: Option<Tokens>,
    /// Whether the streams of a cell share one prompt.
    #[arg(long, value_enum, default_value = "unique")]
    prompt_sharing: PromptSharing,
    /// Seed of the prompt text.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Also send min_tokens = max_tokens (for servers that ignore ignore_eos).
    #[arg(long)]
    min_tokens: bool,
    /// A JSON object merged into every request body, for engine-specific fields, e.g.
    /// '{"chat_template_kwargs": {"enable_thinking": false}}'. Its fields override speedmatrix's
    /// own; it is recorded in the report.
    #[arg(long, value_name = "JSON")]
    extra_body: Option<String>,

    /// KV cache capacity in tokens, when the server does not report it.
    #[arg(long, value_name = "TOKENS")]
    kv_capacity_tokens: Option<Tokens>,
    /// The model's config.json, to predict the KV capacity offline when the server does not
    /// report it, by the rules of the engine --engine names (vLLM when it names none we
    /// model) with the engine flags below, the same as `speedmatrix capacity` takes.
    #[arg(long, value_name = "PATH")]
    model_config: Option<PathBuf>,
    #[command(
        flatten,
        next_help_heading = "Engine flags for the capacity prediction (with --model-config)"
    )]
    engine_flags: EngineArgs,

    /// Output directory; default `speedmatrix-runs/<UTC time>`.
    #[arg(long, short, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Write into --out even if it already holds files.
    #[arg(long)]
    force: bool,
    /// Continue the run whose output directory is DIR (same flags), skipping finished cells.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["out", "force"])]
    resume: Option<PathBuf>,
    /// Print the plan (cells, capacity source, estimated duration) and exit.
    #[arg(long)]
    dry_run: bool,
    /// No progress display.
    #[arg(long, short)]
    quiet: bool,

    /// Skip TLS certificate verification (recorded in the report).
    #[arg(long)]
    insecure: bool,
    /// Connect timeout.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    connect_timeout: Duration,
    /// Longest silence allowed between two chunks of a stream (and before response headers).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "120s")]
    idle_timeout: Duration,

    /// The server's launch command, copied into the report.
    #[arg(long)]
    launch_command: Option<String>,
    /// Weight quantization, for the report (e.g. FP8).
    #[arg(long)]
    quantization: Option<String>,
    /// Engine name for the report when the server does not tell (vllm, sglang, llama.cpp); with
    /// --model-config, also whose KV rules the prediction follows.
    #[arg(long)]
    engine: Option<String>,
    /// GPU name for the report's hardware section (detected with nvidia-smi when present).
    #[arg(long)]
    hardware_gpu: Option<String>,
}

const AFTER_HELP: &str = "\
Examples:
  speedmatrix run                                   # quick matrix on the built-in simulator
  speedmatrix run --preset seed                     # the seed page's matrix on the simulator
  speedmatrix run --url http://127.0.0.1:8000 --tokenizer Qwen/Qwen3.5-4B --preset seed
  speedmatrix run --resume speedmatrix-runs/2026-11-30T07-00-00Z

Exit codes: 0 every planned step ran (failed cells are marked Error in the report); 1 the run
stopped early (Ctrl-C, server gone) and the partial report was written, or every step failed;
2 bad input (nothing is written).

Requests answered 429 or 503 are retried up to 3 times after the server's Retry-After.";

/// A prefill context, or `none`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PrefillArg(Option<Tokens>);

fn parse_prefill(s: &str) -> Result<PrefillArg, String> {
    if s.eq_ignore_ascii_case("none") {
        return Ok(PrefillArg(None));
    }
    s.parse::<Tokens>()
        .map(|t| PrefillArg(Some(t)))
        .map_err(|e| e.to_string())
}

/// Runs `speedmatrix run`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let embedded = args.url.is_none();
    let matrix = matrix(&args, embedded);
    let tokenizer = load_tokenizer(&args, embedded)?;
    let target = match &args.url {
        Some(url) => Target::Url(url.clone()),
        None => Target::Embedded(Box::new(
            speedmatrix_sim::Profile::load(&args.sim_profile)
                .map_err(|e| UsageError(format!("--sim-profile {}: {e}", args.sim_profile)))?,
        )),
    };
    let config = RunConfig {
        target,
        api_key: args.api_key.clone().map(speedmatrix_client::ApiKey::new),
        insecure: args.insecure,
        model: args.model.clone(),
        tokenizer,
        api: args.api,
        matrix,
        prompt_sharing: args.prompt_sharing,
        seed: args.seed,
        capacity: capacity_hints(&args)?,
        timeouts: speedmatrix_client::Timeouts::new(
            args.connect_timeout,
            args.idle_timeout,
            args.idle_timeout,
        ),
        send_min_tokens: args.min_tokens,
        extra_body: extra_body(args.extra_body.as_deref())?,
        labels: labels(&args, embedded),
    };
    speedmatrix_runner::validate(&config).map_err(|e| UsageError(e.to_string()))?;
    warn_plain_http_with_key(&args);
    if args.dry_run {
        return dry_run(config).await;
    }
    let (dir, resume, created) = output_dir(&args)?;
    let journal = JournalOptions {
        path: Some(dir.join(JOURNAL)),
        resume,
    };
    let progress = Progress::new(args.quiet);
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
    let key = config.api_key.clone();
    let outcome = speedmatrix_runner::run(config, journal, &progress, cancel).await;
    progress.finish();
    if outcome.is_err() && created {
        // Nothing ran: leave no empty output directory behind (remove_dir
        // refuses a folder that holds anything).
        let _ = std::fs::remove_dir(&dir);
    }
    let outcome = outcome.map_err(|e| into_cli_error(e, key.as_ref()))?;
    write_outputs(&dir, &outcome)?;
    Ok(summarize(&dir, &outcome))
}

const JOURNAL: &str = "journal.jsonl";

fn matrix(args: &Args, embedded: bool) -> MatrixSpec {
    let preset = args.preset.unwrap_or(if embedded {
        PresetArg::Quick
    } else {
        PresetArg::Seed
    });
    let mut m = match preset {
        PresetArg::Quick => Preset::Quick.matrix(),
        PresetArg::Seed => Preset::Seed.matrix(),
    };
    if let Some(c) = &args.contexts {
        m.contexts = c.clone();
    }
    if let Some(c) = &args.concurrency {
        m.concurrencies = c.clone();
    }
    if let Some(p) = &args.prefill_contexts {
        m.prefill_contexts = p.iter().filter_map(|p| p.0).collect();
    }
    if let Some(r) = args.prefill_repeats {
        m.prefill_repeats = r;
    }
    m.prefill_mode = match args.prefill_mode {
        PrefillModeArg::Cold => PrefillMode::Cold,
        PrefillModeArg::Warmup => PrefillMode::Warmup,
    };
    if let Some(d) = args.duration {
        m.duration = d;
    }
    if let Some(t) = args.max_tokens {
        m.max_tokens = t;
    }
    m
}

fn extra_body(text: Option<&str>) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
    let Some(text) = text else {
        return Ok(serde_json::Map::new());
    };
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(UsageError(
            "--extra-body must be a JSON object, e.g. '{\"top_k\": 1}'".into(),
        )
        .into()),
        Err(e) => Err(UsageError(format!("--extra-body is not valid JSON: {e}")).into()),
    }
}

fn load_tokenizer(args: &Args, embedded: bool) -> anyhow::Result<speedmatrix_workload::Tokenizer> {
    let source = match (&args.tokenizer, embedded) {
        (Some(s), _) => s.as_str(),
        (None, true) => speedmatrix_workload::BUNDLED_NAME,
        (None, false) => {
            return Err(UsageError(
                "with --url, pass --tokenizer: the served model's tokenizer.json, its model folder, \
                 or its Hugging Face id in the local HF cache, so prompts have exact token counts"
                    .into(),
            )
            .into());
        }
    };
    speedmatrix_workload::Tokenizer::load(source)
        .map_err(|e| UsageError(format!("--tokenizer {source}: {e}")).into())
}

fn capacity_hints(args: &Args) -> anyhow::Result<CapacityHints> {
    let prediction = match &args.model_config {
        None => None,
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                UsageError(format!(
                    "--model-config {}: cannot read it ({e}); pass the path of the model's config.json",
                    path.display()
                ))
            })?;
            let model = speedmatrix_capacity::ModelConfig::from_json(&text)
                .map_err(|e| UsageError(format!("--model-config {}: {e}", path.display())))?;
            let engine_flags = &args.engine_flags;
            let gpu = engine_flags
                .gpu()
                .map_err(|e| UsageError(format!("--gpu {}: {e}", engine_flags.gpu)))?;
            let engine = args
                .engine
                .as_deref()
                .and_then(PredictedEngine::from_name)
                .unwrap_or(PredictedEngine::Vllm);
            let flags = engine_flags.engine_flags(engine)?;
            let p = speedmatrix_capacity::predict(&model, &gpu, &flags)
                .map_err(|e| UsageError(format!("could not predict the KV capacity: {e}")))?;
            Some(p)
        }
    };
    Ok(CapacityHints {
        prediction,
        kv_capacity_tokens: args.kv_capacity_tokens,
    })
}

fn labels(args: &Args, embedded: bool) -> RunLabels {
    let mut hardware = hardware::detect();
    if embedded {
        // The numbers are the profile's, not this machine's GPU's: say so where
        // the page names the hardware.
        hardware.kind = Some("Simulated engine (speedmatrix-sim) on this machine's CPU".into());
        hardware.gpus = vec![speedmatrix_report::Gpu {
            name: format!("{} (simulated)", args.sim_profile),
            memory_bytes: None,
            count: 1,
        }];
    }
    if let Some(gpu) = &args.hardware_gpu {
        hardware.gpus = vec![speedmatrix_report::Gpu {
            name: gpu.clone(),
            memory_bytes: None,
            count: 1,
        }];
    }
    RunLabels {
        hardware,
        model: None,
        launch_command: args.launch_command.clone().or_else(|| {
            embedded.then(|| format!("speedmatrix sim --profile {}", args.sim_profile))
        }),
        quantization: args.quantization.clone(),
        engine: args.engine.clone(),
        revision: None,
        tokenizer: args.tokenizer.clone(),
    }
}

/// Warns before any connection is made when an API key would cross the
/// network in clear text.
fn warn_plain_http_with_key(args: &Args) {
    let (Some(url), Some(_)) = (&args.url, &args.api_key) else {
        return;
    };
    if let Some(host) = plain_http_host(url)
        && !is_loopback(host)
    {
        eprintln!(
            "warning: sending an API key over plain http:// to {host}; anyone on the path can read it (use https://)"
        );
    }
}

/// The host of an `http://` URL (brackets kept for IPv6), `None` for other schemes.
fn plain_http_host(url: &str) -> Option<&str> {
    let scheme_end = url.find("://")?;
    if !url[..scheme_end].eq_ignore_ascii_case("http") {
        return None;
    }
    let rest = &url[scheme_end + 3..];
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = match host_port.strip_prefix('[') {
        Some(v6) => &host_port[..v6.find(']').map_or(host_port.len(), |i| i + 2)],
        None => host_port.split(':').next().unwrap_or_default(),
    };
    (!host.is_empty()).then_some(host)
}

fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The output directory, whether the run resumes, and whether this call created the directory.
fn output_dir(args: &Args) -> anyhow::Result<(PathBuf, bool, bool)> {
    if let Some(dir) = &args.resume {
        if !dir.join(JOURNAL).is_file() {
            return Err(UsageError(format!(
                "--resume {}: no {JOURNAL} there; give the output directory of an earlier run",
                dir.display()
            ))
            .into());
        }
        return Ok((dir.clone(), true, false));
    }
    let dir = args.out.clone().unwrap_or_else(|| {
        let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
            .to_string()
            .replace(':', "-");
        PathBuf::from("speedmatrix-runs").join(stamp)
    });
    let existed = dir.exists();
    if dir.is_dir() {
        let non_empty = std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(false);
        if non_empty && !args.force {
            return Err(UsageError(format!(
                "--out {} already holds files; pass --force to overwrite them, --resume {} to continue that run, or choose another directory",
                dir.display(),
                dir.display()
            ))
            .into());
        }
        if args.force {
            let _ = std::fs::remove_file(dir.join(JOURNAL));
        }
    }
    std::fs::create_dir_all(&dir).map_err(|e| {
        UsageError(format!(
            "cannot create the output directory {}: {e}; choose a writable folder with --out",
            dir.display()
        ))
    })?;
    let probe = dir.join(".speedmatrix-write-test");
    std::fs::write(&probe, b"").map_err(|e| {
        UsageError(format!(
            "cannot write into the output directory {}: {e}; choose a writable folder with --out",
            dir.display()
        ))
    })?;
    let _ = std::fs::remove_file(probe);
    Ok((dir, false, !existed))
}

async fn dry_run(config: RunConfig) -> anyhow::Result<ExitCode> {
    let plan = speedmatrix_runner::dry_run(&config)
        .await
        .map_err(|e| into_cli_error(e, config.api_key.as_ref()))?;
    println!(
        "{}",
        speedmatrix_runner::describe_plan(&plan, &config.matrix)
    );
    Ok(ExitCode::SUCCESS)
}

/// The runner's error for the user; a server that echoes the API key in an
/// error body does not get it printed.
fn into_cli_error(e: RunError, key: Option<&speedmatrix_client::ApiKey>) -> anyhow::Error {
    let redact = |text: String| match key.map(|k| k.expose()) {
        Some(k) if !k.is_empty() => text.replace(k, "[redacted]"),
        _ => text,
    };
    match e {
        RunError::InvalidConfig(_)
        | RunError::ModelNotFound { .. }
        | RunError::NoModel { .. }
        | RunError::ResumeMismatch { .. }
        | RunError::NotAJournal { .. } => UsageError(redact(e.to_string())).into(),
        RunError::Server { url, source } => {
            UsageError(redact(server_error_line(&url, &source))).into()
        }
        other => anyhow::Error::new(other),
    }
}

/// One line saying what went wrong reaching the server and what to do.
fn server_error_line(url: &str, e: &speedmatrix_client::Error) -> String {
    use speedmatrix_client::ErrorKind;
    match e.kind() {
        ErrorKind::Config => format!("--url {url}: {e}"),
        ErrorKind::Connect | ErrorKind::TimeoutConnect => format!(
            "cannot reach the server at {url}: {e}; start it (or `speedmatrix sim`), fix --url, or omit --url to use the built-in simulator"
        ),
        _ => format!(
            "the server at {url} did not answer the probe (GET /v1/models, /version, /metrics) properly: {e}; check that --url points at an OpenAI-compatible server"
        ),
    }
}

fn write_outputs(dir: &Path, outcome: &RunOutcome) -> anyhow::Result<()> {
    let r = &outcome.report;
    let json = r.to_json().context("could not serialize the report")?;
    write(dir, "run.json", &json)?;
    write(dir, "report.md", &speedmatrix_report::to_markdown(r))?;
    write(dir, "report.html", &speedmatrix_report::to_html(r))?;
    write(dir, "measurements.csv", &speedmatrix_report::to_csv(r))?;
    Ok(())
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<()> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("could not write {}", path.display()))
}

fn summarize(dir: &Path, outcome: &RunOutcome) -> ExitCode {
    if let Some(tail) = &outcome.journal_damage {
        let saved = tail
            .saved_to
            .as_ref()
            .map(|p| format!(" (saved to {})", p.display()))
            .unwrap_or_default();
        eprintln!(
            "note: the journal's line {} was damaged ({}); kept the {} bytes before it, dropped the {} bytes from there on{saved}, and ran those steps again",
            tail.line, tail.reason, tail.offset, tail.dropped_bytes
        );
    }
    let valid = outcome
        .report
        .decode
        .iter()
        .filter(|c| c.status.is_valid())
        .count();
    let errors = outcome
        .report
        .decode
        .iter()
        .filter(|c| matches!(c.status, speedmatrix_report::CellStatus::Error { .. }))
        .count();
    eprintln!(
        "{} decode cells measured, {} errors; wrote {}/{{run.json, report.md, report.html, measurements.csv, {JOURNAL}}}",
        valid,
        errors,
        dir.display()
    );
    let is_error = |s: &speedmatrix_report::CellStatus| {
        matches!(s, speedmatrix_report::CellStatus::Error { .. })
    };
    let r = &outcome.report;
    let prefill_errors = r.prefill.iter().filter(|p| is_error(&p.status)).count();
    if prefill_errors > 0 {
        eprintln!("{prefill_errors} prefill points failed; their errors are in the report");
    }
    let measured = r.prefill.iter().any(|p| p.status.is_valid()) || valid > 0;
    match &outcome.stopped {
        // A complete run that measured nothing (every step failed) did not do its job.
        None if !measured && (errors + prefill_errors) > 0 => {
            eprintln!(
                "every step that ran failed (first: {}); see {}/report.md",
                first_error(r).unwrap_or_default(),
                dir.display()
            );
            ExitCode::FAILURE
        }
        None => ExitCode::SUCCESS,
        Some(speedmatrix_runner::StopReason::Cancelled) => {
            eprintln!(
                "the run was interrupted; continue it with: speedmatrix run --resume {} (same flags)",
                dir.display()
            );
            ExitCode::FAILURE
        }
        Some(reason) => {
            eprintln!(
                "the run stopped early: {reason}; finished cells are in the report. Continue it with: speedmatrix run --resume {} (same flags)",
                dir.display()
            );
            ExitCode::FAILURE
        }
    }
}

fn first_error(r: &speedmatrix_report::Report) -> Option<String> {
    let statuses = r
        .prefill
        .iter()
        .map(|p| &p.status)
        .chain(r.decode.iter().map(|c| &c.status));
    statuses.into_iter().find_map(|s| match s {
        speedmatrix_report::CellStatus::Error {
            error_kind,
            message,
            ..
        } => Some(format!("{error_kind}: {message}")),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::{is_loopback, plain_http_host};

    #[test]
    fn plain_http_hosts_are_found_and_loopback_is_recognised() {
        assert_eq!(plain_http_host("http://10.0.0.5:8000/v1"), Some("10.0.0.5"));
        assert_eq!(
            plain_http_host("HTTP://user:pw@gpu-box:8000"),
            Some("gpu-box")
        );
        assert_eq!(plain_http_host("http://[::1]:8000"), Some("[::1]"));
        assert_eq!(plain_http_host("https://gpu-box"), None);
        assert_eq!(plain_http_host("gpu-box:8000"), None);
        assert!(is_loopback("[::1]") && is_loopback("127.0.0.2") && is_loopback("LOCALHOST"));
        assert!(
            !is_loopback("10.0.0.5") && !is_loopback("gpu-box") && !is_loopback("127.example.com")
        );
    }
}
