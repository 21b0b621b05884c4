//! `speedmatrix calibrate RUN.json -o profile.json`: fits the simulator's
//! step-time model to a measured run, so that a what-if run (more streams,
//! longer contexts, a bigger KV cache) can start from it.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use speedmatrix_report::{CellStatus, Report};
use speedmatrix_sim::fit::{DecodeObservation, PrefillObservation, fit_cost};
use speedmatrix_sim::{Profile, ProfileOrigin};

use crate::cmd::UsageError;

/// Flags of `speedmatrix calibrate`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A measured run document (run.json).
    #[arg(value_name = "RUN.json")]
    run: PathBuf,
    /// Where to write the fitted profile (JSON): run it with
    /// `speedmatrix run --sim-profile FILE`, or `speedmatrix sim --profile FILE`.
    #[arg(short, long, value_name = "FILE")]
    out: PathBuf,
    /// The engine's prefill token budget per step (vLLM --max-num-batched-tokens) during
    /// the run: prefill chunks of this size.
    #[arg(long, default_value_t = 2048, value_name = "TOKENS")]
    max_num_batched_tokens: u64,
    /// KV-cache tokens of the profile, instead of the run's measured or predicted
    /// capacity: ask what a bigger (or smaller) cache would allow.
    #[arg(long, value_name = "TOKENS")]
    kv_cache_tokens: Option<speedmatrix_units::Tokens>,
}

/// Runs `speedmatrix calibrate`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.run)
        .map_err(|e| UsageError(format!("cannot read {}: {e}", args.run.display())))?;
    let report =
        Report::from_json(&text).map_err(|e| UsageError(format!("{}: {e}", args.run.display())))?;
    if report.prediction.is_some() {
        return Err(UsageError(format!(
            "{} is a predicted or simulated document, not a measurement: calibrate on a measured run",
            args.run.display()
        ))
        .into());
    }
    let (decode, labels) = decode_observations(&report);
    let prefill = prefill_observations(&report);
    let fit = fit_cost(&decode, &prefill, args.max_num_batched_tokens)
        .map_err(|e| UsageError(format!("{}: {e}", args.run.display())))?;
    let profile = profile(&report, &args, fit.cost.clone())?;
    let json = serde_json::to_string_pretty(&profile).context("serializing the profile")?;
    std::fs::write(&args.out, json + "\n")
        .with_context(|| format!("could not write {}", args.out.display()))?;
    print!(
        "{}",
        residuals(&labels, &fit.decode_errors, &prefill, &fit.prefill_errors)
    );
    print!("{}", ttft_residuals(&labels, &decode, &fit.ttft_errors));
    println!(
        "wrote {} (fitted on {} decode cells and {} prefill rows)",
        args.out.display(),
        decode.len(),
        prefill.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// A Valid decode cell's step time at the mean context of its window: the
/// streams' contexts grow a token a step, so the middle of the window stands
/// for it.
fn decode_observations(report: &Report) -> (Vec<DecodeObservation>, Vec<String>) {
    let mut obs = Vec::new();
    let mut labels = Vec::new();
    for cell in &report.decode {
        let (CellStatus::Valid, Some(m)) = (&cell.status, &cell.measurements) else {
            continue;
        };
        if !(m.per_request_tokens_per_s.is_finite() && m.per_request_tokens_per_s > 0.0) {
            continue;
        }
        let grown = m.per_request_tokens_per_s * m.measured_s / 2.0;
        obs.push(DecodeObservation {
            batch: u64::from(cell.concurrency.get()),
            context: cell.context.get() + grown as u64,
            step: Duration::from_secs_f64(1.0 / m.per_request_tokens_per_s),
            warm_ttft: (m.ttft_ms.p50.is_finite() && m.ttft_ms.p50 > 0.0).then(|| {
                (
                    cell.context.get(),
                    Duration::from_secs_f64(m.ttft_ms.p50 / 1e3),
                )
            }),
        });
        labels.push(format!("{} × {}", cell.context, cell.concurrency));
    }
    (obs, labels)
}

fn prefill_observations(report: &Report) -> Vec<PrefillObservation> {
    report
        .prefill
        .iter()
        .filter(|r| r.status == CellStatus::Valid)
        .filter_map(|r| {
            let ms = r.ttft_ms.filter(|t| t.is_finite() && *t > 0.0)?;
            Some(PrefillObservation {
                prompt: r.context.get(),
                ttft: Duration::from_secs_f64(ms / 1e3),
            })
        })
        .collect()
}

/// The profile: the fitted speed, the run's limits and KV capacity.
fn profile(
    report: &Report,
    args: &Args,
    cost: speedmatrix_sim::CostModel,
) -> anyhow::Result<Profile> {
    let mut p =
        Profile::builtin(speedmatrix_sim::RTX3090_QWEN35_4B_FP8).context("the built-in profile")?;
    p.name = format!("calibrated from {}", args.run.display());
    p.served_model_name = report.run.served_model.clone();
    p.cost = cost;
    p.max_num_batched_tokens = u32::try_from(args.max_num_batched_tokens)
        .map_err(|_| UsageError("--max-num-batched-tokens is too large".into()))?;
    // A plain pool of 16-token blocks: the fitted profile knows the run's capacity, not its
    // model's layout.
    p.model = None;
    p.state_blocks_per_request = 0;
    p.block_size = 16;
    let capacity = report
        .capacity
        .as_ref()
        .and_then(|c| c.measured.as_ref().or(c.predicted.as_ref()))
        .map(|k| k.kv_cache_tokens.get() / 16);
    let blocks = args
        .kv_cache_tokens
        .map(|t| t.get() / 16)
        .or(capacity)
        .or_else(|| grid_blocks(report, 16))
        .ok_or_else(|| {
            UsageError(
                "the run says nothing of its KV cache (no capacity, no Valid cell): give \
                 --kv-cache-tokens"
                    .into(),
            )
        })?;
    p.num_gpu_blocks = u32::try_from(blocks + 1)
        .map_err(|_| UsageError("the KV cache is too large for the simulator".into()))?;
    let longest = report
        .run
        .contexts
        .iter()
        .chain(&report.run.prefill_contexts)
        .map(|t| t.get())
        .max()
        .unwrap_or(0)
        + report.run.max_output_tokens.get();
    p.max_model_len = u32::try_from(longest.max(u64::from(p.max_model_len))).unwrap_or(u32::MAX);
    let measured = |c: &&speedmatrix_report::DecodeCell| c.status == CellStatus::Valid;
    p.origin = Some(ProfileOrigin {
        kind: "calibrated".into(),
        source: format!(
            "{} on {}, fitted by speedmatrix calibrate",
            report.run.model,
            report
                .hardware
                .gpus
                .first()
                .map_or("an unnamed machine", |g| g.name.as_str())
        ),
        fitted_concurrency_max: report
            .decode
            .iter()
            .filter(measured)
            .map(|c| c.concurrency.get())
            .max(),
        fitted_context_max: report
            .decode
            .iter()
            .filter(measured)
            .map(|c| c.context.get())
            .max(),
        fitted_prompt_max: report
            .prefill
            .iter()
            .filter(|r| r.status == CellStatus::Valid)
            .map(|r| r.context.get())
            .max(),
    });
    p.validate()
        .map_err(|e| UsageError(format!("the fitted profile: {e}")))?;
    Ok(p)
}

/// The warm TTFTs' errors under the fitted front end: a rougher fit (a
/// line through the cells' medians), printed apart from the speed's.
fn ttft_residuals(labels: &[String], decode: &[DecodeObservation], errors: &[f64]) -> String {
    let with: Vec<&String> = labels
        .iter()
        .zip(decode)
        .filter(|(_, d)| d.warm_ttft.is_some())
        .map(|(l, _)| l)
        .collect();
    if with.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "Fitted front end (requests pass it one at a time), warm TTFT p50 per cell:\n",
    );
    for (label, e) in with.iter().zip(errors) {
        let _ = writeln!(out, "  ttft    {label:<14} {:+6.1} %", e * 100.0);
    }
    out
}

/// The smallest pool of `block`-token blocks in which every Valid cell of
/// the run fits: its requests' blocks at the widest one.
fn grid_blocks(report: &Report, block: u64) -> Option<u64> {
    let output = report.run.max_output_tokens.get();
    report
        .decode
        .iter()
        .filter(|c| c.status == CellStatus::Valid)
        .map(|c| u64::from(c.concurrency.get()) * (c.context.get() + output).div_ceil(block))
        .max()
}

/// Each cell's error under the fitted model.
fn residuals(
    labels: &[String],
    decode: &[f64],
    prefill: &[PrefillObservation],
    prefill_errors: &[f64],
) -> String {
    let mut out = String::from("Fitted step-time model, per cell (model / measured − 1):\n");
    for (label, e) in labels.iter().zip(decode) {
        let _ = writeln!(out, "  decode  {label:<14} {:+6.1} %", e * 100.0);
    }
    for (p, e) in prefill.iter().zip(prefill_errors) {
        let _ = writeln!(
            out,
            "  prefill {:<14} {:+6.1} %",
            speedmatrix_units::Tokens::new(p.prompt).to_string(),
            e * 100.0
        );
    }
    let worst = decode
        .iter()
        .chain(prefill_errors)
        .fold(0.0f64, |w, e| w.max(e.abs()));
    let _ = writeln!(out, "  worst {:.1} %", worst * 100.0);
    out
}
