//! `speedmatrix calibrate RUN.json -o profile.json`: fits the simulator's step-time model to a
//! measured run (the runner's `profiles::calibrate`), so that a what-if run (more streams,
//! longer contexts, a bigger KV cache) can start from it; prints each cell's residual.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use speedmatrix_report::Report;
use speedmatrix_runner::profiles::CalibratedProfile;

use crate::cmd::UsageError;
use crate::cmd::run::words;
use crate::out::{say, say_raw};

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
    #[arg(long, default_value_t = 2048, value_name = "TOKENS", value_parser = speedmatrix_runner::limits::max_num_batched_tokens::parse)]
    max_num_batched_tokens: u64,
    /// KV-cache tokens of the profile, instead of the run's measured or predicted
    /// capacity: ask what a bigger (or smaller) cache would allow.
    #[arg(long, value_name = "TOKENS", value_parser = speedmatrix_runner::limits::kv_capacity_tokens::parse)]
    kv_cache_tokens: Option<speedmatrix_units::Tokens>,
    /// Overwrite the output if it already exists (every command's outputs are refused
    /// otherwise).
    #[arg(long)]
    force: bool,
}

/// Runs `speedmatrix calibrate`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.run)
        .map_err(|e| UsageError(format!("cannot read {}: {e}", args.run.display())))?;
    let report =
        Report::from_json(&text).map_err(|e| UsageError(format!("{}: {e}", args.run.display())))?;
    let c = speedmatrix_runner::profiles::calibrate(
        &report,
        &args.run.display().to_string(),
        args.max_num_batched_tokens,
        args.kv_cache_tokens,
    )
    .map_err(|e| words::error(e, None))?;
    speedmatrix_runner::output::claim_file(&args.out, "--out", args.force)
        .map_err(|e| words::error(e, None))?;
    let json = serde_json::to_string_pretty(&c.profile).context("serializing the profile")?;
    speedmatrix_runner::output::write_path(&args.out, &(json + "\n"))?;
    say_raw!("{}", residuals(&c));
    say_raw!("{}", ttft_residuals(&c));
    say!(
        "wrote {} (fitted on {} decode cells and {} prefill rows)",
        args.out.display(),
        c.decode.len(),
        c.prefill.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Each cell's error under the fitted model.
fn residuals(c: &CalibratedProfile) -> String {
    let mut out = String::from("Fitted step-time model, per cell (model / measured − 1):\n");
    for ((label, _), e) in c.decode.iter().zip(&c.fit.decode_errors) {
        let _ = writeln!(out, "  decode  {label:<14} {:+6.1} %", e * 100.0);
    }
    for (p, e) in c.prefill.iter().zip(&c.fit.prefill_errors) {
        let _ = writeln!(
            out,
            "  prefill {:<14} {:+6.1} %",
            speedmatrix_units::Tokens::new(p.prompt).to_string(),
            e * 100.0
        );
    }
    let worst = c
        .fit
        .decode_errors
        .iter()
        .chain(&c.fit.prefill_errors)
        .fold(0.0f64, |w, e| w.max(e.abs()));
    let _ = writeln!(out, "  worst {:.1} %", worst * 100.0);
    out
}

/// The warm TTFTs' errors under the fitted front end: a rougher fit (a
/// line through the cells' medians), printed apart from the speed's.
fn ttft_residuals(c: &CalibratedProfile) -> String {
    let with: Vec<&String> = c
        .decode
        .iter()
        .filter(|(_, d)| d.warm_ttft.is_some())
        .map(|(l, _)| l)
        .collect();
    if with.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "Fitted front end (requests pass it one at a time), warm TTFT p50 per cell:\n",
    );
    for (label, e) in with.iter().zip(&c.fit.ttft_errors) {
        let _ = writeln!(out, "  ttft    {label:<14} {:+6.1} %", e * 100.0);
    }
    out
}
