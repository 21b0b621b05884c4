//! `speedmatrix run`: the main job. Flags → the runner's options → one call that measures
//! the whole matrix into a folder (run.json, report.md, report.html, measurements.csv,
//! telemetry.jsonl and the journal) → a summary and an exit code.
//!
//! `args.rs` holds the flags, `words.rs` every sentence the command says (errors, notices, the
//! plan, step summaries) and `progress.rs` the progress display.

mod args;
mod progress;
pub(crate) mod provenance;
mod summary;
pub(crate) mod words;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use speedmatrix_runner::host;
use speedmatrix_runner::options::{HostFacts, RunOptions};
use speedmatrix_runner::output::{JOURNAL, RunDir, TELEMETRY_SAMPLES};
use speedmatrix_runner::{LoadMode, RunConfig, RunOutcome};
use tokio_util::sync::CancellationToken;

pub(crate) use self::args::Args;
pub(crate) use self::progress::Progress;
use crate::cmd::UsageError;
use crate::out::{say, tell};

/// Pins the client (`--client-cores`), raises the open-file limit for the
/// widest cell, and sizes the runtime (see [`speedmatrix_runner::host`]).
pub(crate) fn prepare_client(args: &Args) -> anyhow::Result<Option<usize>> {
    let embedded = args.run.embedded();
    if let Some(cores) = &args.client_cores {
        host::pin(cores).map_err(UsageError)?;
    }
    let m = args.run.matrix().map_err(|e| words::error(e, None))?;
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
    host::open_files_for(sockets).map_err(UsageError)?;
    let usable = host::allowed_cores()
        .map(|c| c.0.len())
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1);
    Ok(match (args.client_threads, embedded) {
        (Some(n), _) => Some(n.get()),
        // The simulator shares the runtime: it gets every core.
        (None, true) => None,
        (None, false) => Some(host::default_threads(widest, usable)),
    })
}

/// Runs `speedmatrix run`.
pub(crate) async fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    let earlier = continue_flags(&mut args)?;
    args.run.register_secrets();
    let provenance = args
        .invocation
        .as_ref()
        .map(|now| provenance::record(now, earlier.as_ref()));
    let host = HostFacts {
        client_pinned: args.client_cores.is_some(),
        tool: Some(provenance::tool()),
        provenance,
    };
    let config = args.run.resolve(&host).map_err(|e| words::error(e, None))?;
    warn_plain_http_with_key(&args.run);
    if args.dry_run {
        return dry_run(config).await;
    }
    let dir = match &args.resume {
        Some(d) => RunDir::resume(d.clone()),
        None => RunDir::create(args.out.clone().unwrap_or_else(default_out), args.force),
    }
    .map_err(|e| words::error(e, None))?;
    let progress = Progress::new(args.quiet);
    let cancel = cancel_on_signal();
    let key = config.api_key.clone();
    let outcome =
        speedmatrix_runner::output::run_into(config, &dir, &progress, cancel, &words::notice).await;
    progress.finish();
    let outcome = outcome.map_err(|e| words::error(e, key.as_ref()))?;
    let code = summarize(dir.path(), &outcome);
    if args.json {
        let failed = u8::from(code != ExitCode::SUCCESS);
        crate::cmd::report::write_stdout(&summary::json_line(dir.path(), &outcome, failed))?;
    }
    Ok(code)
}

/// With `--resume DIR`: the flags the journal recorded, each flag given now replacing its
/// own, become the run's options; the journal's provenance, which the new one continues.
/// A journal that recorded none (an older one) leaves the flags as given.
fn continue_flags(args: &mut Args) -> anyhow::Result<Option<speedmatrix_report::Provenance>> {
    let (Some(dir), Some(now)) = (&args.resume, &args.invocation) else {
        return Ok(None);
    };
    let journal = dir.join(JOURNAL);
    if !journal.is_file() {
        // RunDir::resume says what is wrong with the folder.
        return Ok(None);
    }
    let Some(earlier) =
        speedmatrix_runner::journal_provenance(&journal).map_err(|e| words::error(e, None))?
    else {
        return Ok(None);
    };
    let merged = provenance::resumed(&earlier, now)?;
    args.run = provenance::options(&merged, args.run.api_key.take())?;
    args.invocation = Some(merged);
    Ok(Some(earlier))
}

/// A token that Ctrl-C (SIGINT), SIGTERM and SIGHUP fire alike: a run writes its partial
/// report, a study stops its point's server, whatever stopped them.
pub(crate) fn cancel_on_signal() -> CancellationToken {
    use tokio::signal::unix::{SignalKind, signal};
    let cancel = CancellationToken::new();
    for kind in [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
    ] {
        let on_signal = cancel.clone();
        match signal(kind) {
            Ok(mut s) => {
                tokio::spawn(async move {
                    if s.recv().await.is_some() {
                        on_signal.cancel();
                    }
                });
            }
            Err(e) => tracing::warn!("cannot watch signal {kind:?}: {e}"),
        }
    }
    cancel
}

/// `speedmatrix-runs/<UTC time>`.
fn default_out() -> PathBuf {
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(':', "-");
    PathBuf::from("speedmatrix-runs").join(stamp)
}

async fn dry_run(config: RunConfig) -> anyhow::Result<ExitCode> {
    let plan = speedmatrix_runner::dry_run(&config)
        .await
        .map_err(|e| words::error(e, config.api_key.as_ref()))?;
    say!("{}", words::plan(&plan, &config.matrix));
    Ok(ExitCode::SUCCESS)
}

/// Says what the run wrote and how it ended; the exit code.
pub(crate) fn summarize(dir: &Path, outcome: &RunOutcome) -> ExitCode {
    if let Some(tail) = &outcome.journal_damage {
        let saved = tail
            .saved_to
            .as_ref()
            .map(|p| format!(" (saved to {})", p.display()))
            .unwrap_or_default();
        tell!(
            "note: the journal's line {} was damaged ({}); kept the {} bytes before it, dropped the {} bytes from there on{saved}, and ran those steps again",
            tail.line,
            tail.reason,
            tail.offset,
            tail.dropped_bytes
        );
    }
    let r = &outcome.report;
    let statuses: Vec<&speedmatrix_report::CellStatus> = match &r.load {
        Some(load) => load.cells.iter().map(|c| &c.status).collect(),
        None => r.decode.iter().map(|c| &c.status).collect(),
    };
    let kind = match &r.load {
        Some(load) => load.mode.as_str(),
        None => "decode",
    };
    let is_error = |s: &speedmatrix_report::CellStatus| {
        matches!(s, speedmatrix_report::CellStatus::Error { .. })
    };
    let valid = statuses.iter().filter(|s| s.is_valid()).count();
    let errors = statuses.iter().filter(|s| is_error(s)).count();
    let samples = if dir.join(TELEMETRY_SAMPLES).is_file() {
        format!(", {TELEMETRY_SAMPLES}")
    } else {
        String::new()
    };
    tell!(
        "{valid} {kind} cells measured, {errors} errors; wrote {}/{{run.json, report.md, report.html, measurements.csv, {JOURNAL}{samples}}}",
        dir.display()
    );
    let prefill_errors = r.prefill.iter().filter(|p| is_error(&p.status)).count();
    if prefill_errors > 0 {
        tell!("{prefill_errors} prefill points failed; their errors are in the report");
    }
    let measured = r.prefill.iter().any(|p| p.status.is_valid()) || valid > 0;
    match &outcome.stopped {
        // A complete run that measured nothing (every step failed) did not do its job.
        None if !measured && (errors + prefill_errors) > 0 => {
            tell!(
                "every step that ran failed (first: {}); see {}/report.md",
                first_error(outcome).unwrap_or_default(),
                dir.display()
            );
            ExitCode::FAILURE
        }
        None => ExitCode::SUCCESS,
        Some(speedmatrix_runner::StopReason::Cancelled) => {
            tell!(
                "the run was interrupted; continue it with: speedmatrix run --resume {}",
                dir.display()
            );
            ExitCode::FAILURE
        }
        Some(reason) => {
            tell!(
                "the run stopped early: {reason}; finished cells are in the report. Continue it with: speedmatrix run --resume {}",
                dir.display()
            );
            ExitCode::FAILURE
        }
    }
}

fn first_error(outcome: &RunOutcome) -> Option<String> {
    outcome.statuses().find_map(|s| match s {
        speedmatrix_report::CellStatus::Error {
            error_kind,
            message,
            ..
        } => Some(format!("{error_kind}: {message}")),
        _ => None,
    })
}

/// Warns before any connection is made when an API key would cross the
/// network in clear text.
pub(crate) fn warn_plain_http_with_key(options: &RunOptions) {
    let (Some(url), Some(_)) = (&options.url, &options.api_key) else {
        return;
    };
    if let Some(host) = plain_http_host(url)
        && !is_loopback(host)
    {
        tell!(
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
