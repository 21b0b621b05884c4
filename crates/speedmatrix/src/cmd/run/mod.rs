//! `speedmatrix run`: the main job. Measures the whole speed test matrix and
//! writes run.json, report.md, report.html, measurements.csv and the journal.
//!
//! `args.rs` holds the flags, `config.rs` turns them into the runner's
//! configuration, `words.rs` every sentence the command says (errors,
//! notices, the plan, step summaries), and this file the run itself, its
//! output directory and files, and its exit code.

mod args;
mod config;
mod progress;
mod what_if;
mod words;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use speedmatrix_runner::{JournalOptions, LoadMode, RunConfig, RunOutcome, Target};
use tokio_util::sync::CancellationToken;

pub(crate) use self::args::Args;
use self::config::{
    capacity_hints, extra_body, labels, load_tokenizer, matrix, warn_plain_http_with_key,
};
use self::progress::Progress;
use crate::cmd::UsageError;

/// Pins the client (`--client-cores`), raises the open-file limit for the
/// widest cell, and sizes the runtime (see [`crate::client_host`]).
pub(crate) fn prepare_client(args: &Args) -> anyhow::Result<Option<usize>> {
    use crate::client_host;
    let embedded = args.url.is_none();
    if let Some(cores) = &args.client_cores {
        client_host::pin(cores).map_err(UsageError)?;
    }
    let m = matrix(args, embedded)?;
    let widest = match &m.load {
        LoadMode::Sustained | LoadMode::Conversation(_) => {
            m.concurrencies.iter().map(|c| c.get()).max()
        }
        LoadMode::Burst(b) => b
            .max_concurrency
            .map(|c| c.get())
            .or_else(|| b.requests.iter().copied().max()),
        // An open-loop cell's requests in flight are what it measures: room for many.
        LoadMode::Rate(r) => Some(r.max_in_flight.map_or(1_024, |c| c.get())),
    }
    .unwrap_or(1);
    // The built-in simulator's end of each connection is in this process too.
    let sockets = u64::from(widest) * if embedded { 2 } else { 1 };
    client_host::open_files_for(sockets).map_err(UsageError)?;
    let usable = client_host::allowed_cores()
        .map(|c| c.0.len())
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1);
    Ok(match (args.client_threads, embedded) {
        (Some(n), _) => Some(n.get()),
        // The simulator shares the runtime: it gets every core.
        (None, true) => None,
        (None, false) => Some(client_host::default_threads(widest, usable)),
    })
}

/// The capacity grid a run's flags predict offline (`--model-config` and the
/// engine flags), `None` without a model config: for plans printed before any
/// server is up (`study run --dry-run`).
pub(crate) fn predicted_grid(
    args: &Args,
) -> anyhow::Result<Option<speedmatrix_capacity::CapacityGrid>> {
    let hints = capacity_hints(args)?;
    let Some(prediction) = hints.prediction else {
        return Ok(None);
    };
    let default = speedmatrix_runner::Preset::Seed.matrix();
    let spec = speedmatrix_capacity::GridSpec {
        contexts: args.contexts.clone().unwrap_or(default.contexts),
        concurrencies: args.concurrency.clone().unwrap_or(default.concurrencies),
        max_output: args.max_tokens.unwrap_or(default.max_tokens),
    };
    Ok(Some(speedmatrix_capacity::capacity_grid(
        Some(&prediction),
        None,
        speedmatrix_capacity::ServerLimits::default(),
        &spec,
    )?))
}

/// `speedmatrix run`'s flags parsed from `argv` (without the program name),
/// for commands that run matrices themselves (`predict --simulate`, `study`).
pub(crate) fn parse_args(argv: impl IntoIterator<Item = String>) -> Result<Args, clap::Error> {
    #[derive(Debug, clap::Parser)]
    struct RunFlags {
        #[command(flatten)]
        args: Args,
    }
    <RunFlags as clap::Parser>::try_parse_from(
        std::iter::once("speedmatrix run".to_owned()).chain(argv),
    )
    .map(|f| f.args)
}

/// Runs `speedmatrix run`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let embedded = args.url.is_none();
    let matrix = matrix(&args, embedded)?;
    let tokenizer = load_tokenizer(&args, embedded)?;
    let target = match &args.url {
        Some(url) => Target::Url(url.clone()),
        None => Target::Embedded(Box::new(
            speedmatrix_sim::Profile::load(&args.sim_profile)
                .map_err(|e| UsageError(format!("--sim-profile {}: {e}", args.sim_profile)))?,
        )),
    };
    let origin = match &target {
        Target::Embedded(p) => p.origin.clone(),
        Target::Url(_) => None,
    };
    let capacity = match (&target, &args.model_config) {
        // A profile that stands for a real model (the built-in seed one, a hybrid) lays its
        // KV cache out as that model would: its layout decides the cells.
        (Target::Embedded(p), None) => match &p.model {
            Some(m) => config::profile_capacity_hints(m)?,
            None => capacity_hints(&args)?,
        },
        _ => capacity_hints(&args)?,
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
        capacity,
        timeouts: speedmatrix_client::Timeouts::new(
            args.connect_timeout,
            args.idle_timeout,
            args.idle_timeout,
        ),
        send_min_tokens: args.min_tokens,
        extra_body: extra_body(args.extra_body.as_deref())?,
        labels: labels(&args, embedded),
        telemetry: telemetry_config(&args)?,
    };
    speedmatrix_runner::validate(&config).map_err(|e| words::error(e, None))?;
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
    let mut outcome = outcome.map_err(|e| words::error(e, key.as_ref()))?;
    if let (Some(samples), Some(t)) = (&outcome.telemetry, outcome.report.telemetry.as_mut()) {
        write(&dir, TELEMETRY_SAMPLES, &samples.to_jsonl())?;
        t.samples_file = Some(TELEMETRY_SAMPLES.to_owned());
    }
    // The report speaks as the command does: its notes name the flags.
    outcome.report.notes = outcome.notices.iter().map(words::notice).collect();
    if let Some(origin) = &origin {
        what_if::mark(&mut outcome.report, origin);
    }
    write_outputs(&dir, &outcome)?;
    Ok(summarize(&dir, &outcome))
}

const JOURNAL: &str = "journal.jsonl";

/// Every GPU and host sample of the run (see `speedmatrix_telemetry::SAMPLES_SCHEMA`).
const TELEMETRY_SAMPLES: &str = "telemetry.jsonl";

fn telemetry_config(args: &Args) -> anyhow::Result<speedmatrix_runner::TelemetryConfig> {
    if args.telemetry_interval < std::time::Duration::from_millis(10) {
        return Err(UsageError(
            "--telemetry-interval must be at least 10ms; GPU counters do not change faster".into(),
        )
        .into());
    }
    if args.metrics_interval < std::time::Duration::from_millis(50) {
        return Err(UsageError(
            "--metrics-interval must be at least 50ms, or the scrapes would load the server".into(),
        )
        .into());
    }
    Ok(speedmatrix_runner::TelemetryConfig {
        gpu: args.telemetry,
        interval: args.telemetry_interval,
        metrics_interval: args.metrics_interval,
    })
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
        .map_err(|e| words::error(e, config.api_key.as_ref()))?;
    println!("{}", words::plan(&plan, &config.matrix));
    Ok(ExitCode::SUCCESS)
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
    let statuses: Vec<&speedmatrix_report::CellStatus> = match &outcome.report.load {
        Some(load) => load.cells.iter().map(|c| &c.status).collect(),
        None => outcome.report.decode.iter().map(|c| &c.status).collect(),
    };
    let kind = match &outcome.report.load {
        Some(load) => load.mode.as_str(),
        None => "decode",
    };
    let valid = statuses.iter().filter(|s| s.is_valid()).count();
    let errors = statuses
        .iter()
        .filter(|s| matches!(s, speedmatrix_report::CellStatus::Error { .. }))
        .count();
    let samples = if dir.join(TELEMETRY_SAMPLES).is_file() {
        format!(", {TELEMETRY_SAMPLES}")
    } else {
        String::new()
    };
    eprintln!(
        "{} {kind} cells measured, {} errors; wrote {}/{{run.json, report.md, report.html, measurements.csv, {JOURNAL}{samples}}}",
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
        .chain(r.decode.iter().map(|c| &c.status))
        .chain(
            r.load
                .iter()
                .flat_map(|l| l.cells.iter().map(|c| &c.status)),
        );
    statuses.into_iter().find_map(|s| match s {
        speedmatrix_report::CellStatus::Error {
            error_kind,
            message,
            ..
        } => Some(format!("{error_kind}: {message}")),
        _ => None,
    })
}
