//! `speedmatrix predict`: the whole matrix from config.json, a GPU and the engine's flags,
//! before the GPU is rented (the runner's `predicted`), a report marked predicted; with
//! `--simulate` the prediction as a simulator profile and a what-if run of the real runner on it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use speedmatrix_capacity::{EngineFlags, ModelConfig, VllmFlags};
use speedmatrix_predict::{FactorsFile, Speculation};
use speedmatrix_runner::limits;
use speedmatrix_runner::options::{ContextOrNone, EngineOptions, HostFacts, RunOptions};
use speedmatrix_runner::output::{RunDir, write_file, write_report};
use speedmatrix_runner::predicted::{MeasuredRun, PredictInputs, predict_matrix};
use speedmatrix_units::{Concurrency, Engine, Tokens};

use crate::cmd::UsageError;
use crate::cmd::run::{Progress, cancel_on_signal, summarize, words};
use crate::out::{say, say_raw};

/// Flags of `speedmatrix predict`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The model's Hugging Face config.json.
    #[arg(long, value_name = "PATH")]
    config: PathBuf,
    /// The model's name in the report (default: the config's folder name).
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// Inference engine: its KV rules decide the grid, its family's fitted factors the speed
    /// (vLLM's for vLLM and TGI, SGLang's own, llama.cpp's for llama.cpp and Ollama, which
    /// runs llama.cpp's kernels).
    #[arg(long, value_enum, default_value = "vllm")]
    engine: Engine,
    /// Decode contexts (rows).
    #[arg(long, value_delimiter = ',', default_value = "0,16k,32k,64k,128k,248k", value_parser = limits::contexts::parse)]
    contexts: Vec<Tokens>,
    /// Decode concurrencies (columns).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128", value_parser = limits::concurrency::parse)]
    concurrency: Vec<Concurrency>,
    /// Cold prefill prompt lengths (`none` for no prefill rows).
    #[arg(long, value_delimiter = ',', default_value = "8k,16k,32k,64k,128k", value_parser = limits::prefill_contexts::parse)]
    prefill_contexts: Vec<ContextOrNone>,
    /// Output tokens each request may generate.
    #[arg(long, default_value = "8192", value_parser = limits::max_tokens::parse)]
    max_tokens: Tokens,
    /// The decode window each cell is predicted over (and measured over with --simulate).
    #[arg(long, value_parser = limits::window::parse, default_value = "30s")]
    duration: Duration,
    /// The GGUF file type when the weights are a GGUF (q4_0, q4_1, q4_k_m, q3_k_m, q5_k_m,
    /// q6_k, q8_0, iq4_xs, mxfp4, f16, Unsloth's ud-q4_k_xl, …; a wrong name lists them all):
    /// config.json cannot say it.
    #[arg(long, value_name = "TYPE")]
    gguf_type: Option<String>,
    /// Efficiency factors to use instead of the built-in fitted ones (the shape of
    /// speedmatrix-predict's data/factors.json).
    #[arg(long, value_name = "FILE")]
    factors: Option<PathBuf>,
    /// A measured run of this model on this GPU and engine (its run.json or folder), even a
    /// partial one (say four cells): the engine family's factors are calibrated on its decode
    /// cells and prefill rows (docs/predict.md) and the rest of the matrix is predicted with
    /// them, each figure with a band from leaving each measured figure out in turn.
    #[arg(long, value_name = "RUN")]
    calibrate_from: Option<PathBuf>,
    /// Price speculative decoding (--speculative-config) at this acceptance rate: the share
    /// of drafted tokens the model accepts, as vLLM's "Avg Draft acceptance rate" prints it
    /// (0.62 or 62%). Each decode step then runs the drafter's passes and one verifying pass
    /// of k + 1 tokens a stream and emits 1 + rate × k tokens a stream. Without it (or
    /// --acceptance-length) a speculating server's decode is priced a token a step.
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    acceptance_rate: Option<f64>,
    /// The same as vLLM's "Mean acceptance length": tokens a step emits a stream, from 1
    /// (nothing accepted) to k + 1 (every drafted token accepted).
    #[arg(long, value_name = "TOKENS", conflicts_with = "acceptance_rate")]
    acceptance_length: Option<f64>,
    /// Where to write run.json, report.md, report.html and measurements.csv.
    #[arg(short, long, value_name = "DIR", default_value = "predicted")]
    out: PathBuf,
    /// Also turn the prediction into a simulator profile (DIR/profile.json) and run the real
    /// runner against it with the same matrix (a what-if run into DIR/simulated/; it takes
    /// the windows' time).
    #[arg(long)]
    simulate: bool,
    /// Overwrite the output if it already exists (every command's outputs are refused
    /// otherwise).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    engine_args: EngineOptions,
}

/// Runs `speedmatrix predict`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let inputs = inputs(&args)?;
    let predicted = predict_matrix(&inputs).map_err(|e| words::error(e, None))?;
    speedmatrix_runner::output::claim_dir(&args.out, "--out", args.force)
        .map_err(|e| words::error(e, None))?;
    write_report(&args.out, &predicted.report)?;
    if let Some(cal) = &predicted.calibration {
        say_raw!(
            "{}",
            speedmatrix_runner::predicted::calibration_summary(cal)
        );
    }
    say_raw!("{}", predicted.summary());
    say!(
        "wrote {}/{{run.json, report.md, report.html, measurements.csv}}",
        args.out.display()
    );
    if !args.simulate {
        return Ok(ExitCode::SUCCESS);
    }
    let name = args.config.display().to_string();
    let (profile, worst) = speedmatrix_runner::profiles::predicted_profile(&predicted, &name)
        .map_err(|e| words::error(e, None))?;
    let path = args.out.join("profile.json");
    write_file(
        &args.out,
        "profile.json",
        &(serde_json::to_string_pretty(&profile)? + "\n"),
    )?;
    say!(
        "wrote {} (the simulator's step model within {:.1} % of the prediction on every cell)",
        path.display(),
        worst * 100.0
    );
    simulate(&args, path).await
}

/// What the prediction is made from, read from the flags' files.
fn inputs(args: &Args) -> anyhow::Result<PredictInputs> {
    if args.duration.is_zero() {
        return Err(UsageError("--duration must be longer than zero".into()).into());
    }
    let text = std::fs::read_to_string(&args.config).map_err(|e| {
        UsageError(format!(
            "cannot read --config {}: {e}",
            args.config.display()
        ))
    })?;
    let model = ModelConfig::from_json(&text).map_err(|e| UsageError(e.to_string()))?;
    let opt = |r| words::error(r, None);
    let gpu = args.engine_args.gpu().map_err(opt)?;
    let flags = args.engine_args.engine_flags(args.engine).map_err(opt)?;
    let vllm_flags = match args.engine_args.engine_flags(Engine::Vllm).map_err(opt)? {
        EngineFlags::Vllm(f) => f,
        _ => VllmFlags::default(),
    };
    let factors = match &args.factors {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                UsageError(format!("cannot read --factors {}: {e}", path.display()))
            })?;
            FactorsFile::from_json(&text)
                .map_err(|e| UsageError(format!("--factors {}: {e}", path.display())))?
        }
        None => FactorsFile::builtin()?,
    };
    let drafted = vllm_flags.num_speculative_tokens;
    let acceptance_rate = match (args.acceptance_rate, args.acceptance_length) {
        (None, None) => None,
        _ if drafted == 0 => {
            return Err(UsageError(
                "--acceptance-rate and --acceptance-length price speculative decoding: give \
                 --speculative-config (or --num-speculative-tokens) too"
                    .into(),
            )
            .into());
        }
        (Some(rate), _) => Some(rate),
        (None, Some(length)) => Some(Speculation::rate_from_length(length, drafted).ok_or_else(
            || {
                UsageError(format!(
                    "--acceptance-length {length}: with {drafted} drafted tokens a step it \
                     lies between 1 and {}",
                    drafted + 1
                ))
            },
        )?),
    };
    let model_name = args.model.clone().unwrap_or_else(|| {
        args.config
            .parent()
            .and_then(|p| p.file_name())
            .map_or_else(
                || model.architecture.clone(),
                |n| n.to_string_lossy().into_owned(),
            )
    });
    Ok(PredictInputs {
        model,
        model_name,
        gpu,
        engine: args.engine,
        flags,
        vllm_flags,
        contexts: args.contexts.clone(),
        concurrencies: args.concurrency.clone(),
        prefill_contexts: args.prefill_contexts.iter().filter_map(|c| c.0).collect(),
        max_output: args.max_tokens,
        window: args.duration,
        gguf_type: args.gguf_type.clone(),
        attention: args.engine_args.flash_attn.attention(args.engine),
        factors,
        acceptance_rate,
        calibrate_from: match &args.calibrate_from {
            Some(path) => {
                let file = if path.is_dir() {
                    path.join("run.json")
                } else {
                    path.clone()
                };
                Some(MeasuredRun {
                    name: file.display().to_string(),
                    report: crate::cmd::report::load(&file)?,
                })
            }
            None => None,
        },
    })
}

/// An acceptance rate: a share (`0.62`) or a percentage (`62%`), within 0–1.
fn parse_rate(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (number, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 100.0),
        None => (t, 1.0),
    };
    let v = number
        .parse::<f64>()
        .map_err(|_| format!("`{text}` is not a share (0.62) or a percentage (62%)"))?
        / scale;
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("`{text}` is not within 0–1 (0 %–100 %)"))
    }
}

/// The same matrix, measured by the real runner on the prediction's profile.
async fn simulate(args: &Args, profile: PathBuf) -> anyhow::Result<ExitCode> {
    let options = RunOptions {
        sim_profile: profile.display().to_string(),
        contexts: Some(args.contexts.clone()),
        concurrency: Some(args.concurrency.clone()),
        prefill_contexts: Some(args.prefill_contexts.clone()),
        max_output: Some(args.max_tokens),
        window: Some(args.duration),
        ..RunOptions::default()
    };
    let config = options
        .resolve(&HostFacts::default())
        .map_err(|e| words::error(e, None))?;
    let dir = RunDir::create(args.out.join("simulated"), args.force)
        .map_err(|e| words::error(e, None))?;
    let quiet = !std::io::IsTerminal::is_terminal(&std::io::stderr());
    let progress = Progress::new(quiet);
    let outcome = speedmatrix_runner::output::run_into(
        config,
        &dir,
        &progress,
        cancel_on_signal(),
        &words::notice,
    )
    .await;
    progress.finish();
    let outcome = outcome.map_err(|e| words::error(e, None))?;
    Ok(summarize(dir.path(), &outcome))
}
