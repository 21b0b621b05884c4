//! The speed matrix on the real server: `speedmatrix run --url …` on a CPU-sized preset, then
//! what its report must agree on with the server's own figures.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use speedmatrix_report::{CellStatus, DecodeCell, Report};

use crate::util::{WORKSPACE_TESTS, cargo, project_root, run as sh};

/// Largest difference allowed between a cell's total tok/s and the server's
/// `vllm:generation_tokens_total` increase over the same window.
pub(crate) const COUNTER_TOLERANCE: f64 = 0.03;

/// The CPU-sized matrix.
#[derive(Debug, Clone)]
pub(crate) struct Preset {
    /// Decode rows, as `--contexts` takes them.
    pub(crate) contexts: String,
    /// Decode columns, as `--concurrency` takes them.
    pub(crate) concurrency: String,
    /// Cold prefill points, as `--prefill-contexts` takes them.
    pub(crate) prefill: String,
    /// Window of each cell.
    pub(crate) duration: Duration,
    /// `max_tokens` of every decode request.
    pub(crate) max_tokens: u64,
}

/// What the run must agree with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expected {
    /// KV tokens the server reported on `/metrics` (already checked against its log and the
    /// predictor).
    pub(crate) kv_tokens: u64,
    /// KV blocks and tokens per block, to recompute which cells fit.
    pub(crate) blocks: u64,
    /// Tokens per block.
    pub(crate) block_size: u64,
}

/// Builds the binary, runs the matrix into `out`, and returns the report.
pub(crate) fn run(
    url: &str,
    tokenizer: &Path,
    preset: &Preset,
    engine: &str,
    launch_command: &str,
    out: &Path,
) -> anyhow::Result<Report> {
    // The binary as `cargo xtask ci` built it (nothing to compile after CI).
    let build = [WORKSPACE_TESTS, &["--no-run", "--quiet"]].concat();
    sh(&mut cargo(&build))?;
    let bin = binary()?;
    let mut cmd = std::process::Command::new(&bin);
    cmd.args(["run", "--url", url, "--tokenizer"])
        .arg(tokenizer)
        .args(["--api", "completions"])
        .args(["--contexts", &preset.contexts])
        .args(["--concurrency", &preset.concurrency])
        .args([
            "--prefill-contexts",
            &preset.prefill,
            "--prefill-repeats",
            "1",
        ])
        .arg("--duration")
        .arg(format!("{}s", preset.duration.as_secs()))
        .arg("--max-tokens")
        .arg(preset.max_tokens.to_string())
        .args(["--engine", engine])
        .arg("--launch-command")
        .arg(launch_command)
        .args(["--quiet", "--force", "--out"])
        .arg(out)
        .env_remove("OPENAI_API_KEY");
    sh(&mut cmd).context("`speedmatrix run` against the server failed")?;
    let path = out.join("run.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Report::from_json(&text).with_context(|| format!("parsing {}", path.display()))
}

/// `target/debug/speedmatrix` (or under `CARGO_TARGET_DIR`).
pub(crate) fn binary() -> anyhow::Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| project_root().join("target"));
    let bin = target.join("debug").join("speedmatrix");
    ensure!(bin.is_file(), "{} was not built", bin.display());
    Ok(bin)
}

/// Everything a vLLM report must agree on; one line per failure (empty when all hold).
pub(crate) fn check(report: &Report, expected: Expected, max_tokens: u64) -> Vec<String> {
    let mut failures = check_common(report);
    let measured = report
        .capacity
        .as_ref()
        .and_then(|c| c.measured.as_ref())
        .map(|m| m.kv_cache_tokens.get());
    if measured != Some(expected.kv_tokens) {
        failures.push(format!(
            "the report's measured capacity is {measured:?}, the server's /metrics {}",
            expected.kv_tokens
        ));
    }
    for cell in &report.decode {
        let fits = fits(cell, expected, max_tokens);
        let over = matches!(cell.status, CellStatus::OverCapacity { .. });
        if fits == over {
            failures.push(format!(
                "{} × {}: {}, but the block rule says it {}",
                cell.context,
                cell.concurrency,
                cell.status.label(),
                if fits { "fits" } else { "does not fit" }
            ));
        }
        if cell.status.is_valid() {
            failures.extend(check_counter(cell));
        }
    }
    failures
}

/// vLLM's rule: `N × cdiv(prompt + max_tokens, block) ≤ blocks − 1` (one null block).
fn fits(cell: &DecodeCell, e: Expected, max_tokens: u64) -> bool {
    let prompt = speedmatrix_runner::prompt_len(cell.context).get();
    let per_request = (prompt + max_tokens).div_ceil(e.block_size.max(1));
    u64::from(cell.concurrency.get()) * per_request < e.blocks
}

/// The server's token counter and queue over a valid cell's window.
fn check_counter(cell: &DecodeCell) -> Vec<String> {
    let name = format!("{} × {}", cell.context, cell.concurrency);
    let Some(m) = &cell.measurements else {
        return vec![format!("{name}: Valid without measurements")];
    };
    let mut failures = Vec::new();
    if m.queueing_detected {
        failures.push(format!("{name}: the server queued requests"));
    }
    match m.server_counter {
        None => failures.push(format!(
            "{name}: no vllm:generation_tokens_total reading over the window"
        )),
        Some(c) => {
            let diff = m.total_tokens_per_s / c.tokens_per_s() - 1.0;
            if diff.is_nan() || diff.abs() > COUNTER_TOLERANCE {
                failures.push(format!(
                    "{name}: {:.1} tok/s measured, the server counted {:.1} tok/s ({:+.1} %, limit ±{} %)",
                    m.total_tokens_per_s,
                    c.tokens_per_s(),
                    diff * 100.0,
                    COUNTER_TOLERANCE * 100.0
                ));
            }
        }
    }
    failures
}

/// The key figures of a run, one line per step.
pub(crate) fn summary(report: &Report) -> String {
    let mut out = String::new();
    if let Some(c) = report.capacity.as_ref().and_then(|c| c.measured.as_ref()) {
        let _ = writeln!(
            out,
            "KV capacity {} tokens ({})",
            c.kv_cache_tokens, c.source
        );
    }
    for row in &report.prefill {
        let _ = writeln!(
            out,
            "prefill {:>5}: {} — {:.0} prompt tok/s, TTFT {:.0} ms, server counted {} of {} prompt tokens",
            row.context.to_string(),
            row.status.label(),
            row.prompt_tokens_per_s.unwrap_or(f64::NAN),
            row.ttft_ms.unwrap_or(f64::NAN),
            row.prompt_tokens_reported
                .map_or_else(|| "none".to_owned(), |t| t.get().to_string()),
            row.prompt_tokens_requested.get()
        );
    }
    for cell in &report.decode {
        let head = format!(
            "decode {:>5} × {:<3}",
            cell.context.to_string(),
            cell.concurrency.to_string()
        );
        let _ = match (&cell.measurements, cell.status.is_valid()) {
            (Some(m), true) => {
                let server = m.server_counter.map_or_else(String::new, |c| {
                    let rate = c.tokens_per_s();
                    format!(
                        ", server counter {rate:>7.1} tok/s ({:+.2} %)",
                        (m.total_tokens_per_s / rate - 1.0) * 100.0
                    )
                });
                writeln!(
                    out,
                    "{head}: {:>7.1} tok/s{server}, TTFT p50 {:.0} ms, TBT p50 {:.1} ms, mismatches {}",
                    m.total_tokens_per_s,
                    m.ttft_ms.p50,
                    m.time_between_tokens_ms.p50,
                    m.prompt_token_mismatches
                )
            }
            _ => writeln!(
                out,
                "{head}: {} {}",
                cell.status.label(),
                cell.status.detail()
            ),
        };
    }
    out
}

/// Checks of a report that hold on any engine: every prefill point valid with the prompt
/// tokens the server counted equal to those sent, no decode cell in error or skipped, no
/// prompt-token mismatch, at least one cell over capacity.
pub(crate) fn check_common(report: &Report) -> Vec<String> {
    let mut failures = Vec::new();
    for row in &report.prefill {
        if !row.status.is_valid() || row.prompt_tokens_reported != Some(row.prompt_tokens_requested)
        {
            failures.push(format!(
                "prefill {}: {} {}, server counted {:?} of {} prompt tokens",
                row.context,
                row.status.label(),
                row.status.detail(),
                row.prompt_tokens_reported.map(|t| t.get()),
                row.prompt_tokens_requested
            ));
        }
    }
    for cell in &report.decode {
        let name = format!("{} × {}", cell.context, cell.concurrency);
        match (&cell.status, &cell.measurements) {
            (CellStatus::OverCapacity { .. }, _) => {}
            (CellStatus::Valid, Some(m)) if m.prompt_token_mismatches == 0 => {}
            (CellStatus::Valid, Some(m)) => failures.push(format!(
                "{name}: {} requests were counted with another prompt length",
                m.prompt_token_mismatches
            )),
            (status, _) => failures.push(format!("{name}: {} {}", status.label(), status.detail())),
        }
    }
    if !report
        .decode
        .iter()
        .any(|c| matches!(c.status, CellStatus::OverCapacity { .. }))
    {
        failures.push("no cell was planned over capacity; the preset must have one".into());
    }
    failures
}

/// Fails with every failure listed.
pub(crate) fn verdict(failures: &[String], out: &Path) -> anyhow::Result<()> {
    if failures.is_empty() {
        return Ok(());
    }
    bail!(
        "{} matrix check(s) failed (report: {}):\n  {}",
        failures.len(),
        out.display(),
        failures.join("\n  ")
    )
}
