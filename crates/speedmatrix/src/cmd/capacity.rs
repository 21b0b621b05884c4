//! `speedmatrix capacity`: which matrix cells fit a server's KV cache, predicted offline from
//! config.json, a GPU and the engine's flags (speedmatrix-capacity), printed as text or JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use speedmatrix_capacity::text::BesideLog;
use speedmatrix_capacity::{
    EngineFlags, GridSpec, MeasuredCapacity, ModelConfig, Prediction, ServerLimits,
    SglangStartupLog, VllmStartupLog, capacity_grid, predict,
};
use speedmatrix_runner::limits;
use speedmatrix_runner::options::EngineOptions;
use speedmatrix_units::{Concurrency, Engine, Tokens};

use crate::cmd::UsageError;
use crate::cmd::run::words;
use crate::out::{say, say_raw, tell};

/// Flags of `speedmatrix capacity`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The model's Hugging Face config.json.
    #[arg(long, value_name = "PATH", required_unless_present = "list_gpus")]
    config: Option<PathBuf>,
    /// List the GPU catalog (with --gpu-catalog's entries): key, printed name, memory as the
    /// runtime sees it and where that figure comes from, bandwidth, peak dense bf16/fp8/fp4.
    #[arg(long)]
    list_gpus: bool,
    /// Inference engine whose KV rules to follow: vllm, sglang or llama.cpp.
    #[arg(long, value_enum, default_value = "vllm")]
    engine: Engine,
    /// Emit JSON (prediction, measured vs predicted, every cell) instead of tables.
    #[arg(long)]
    json: bool,
    /// A vLLM startup log: its figures (weights, available KV memory, block size, padding
    /// layers, GPU KV cache size, maximum concurrency) are printed beside the prediction, and
    /// beside the layout arithmetic from the log's own available KV memory; its version is
    /// the one modelled unless --vllm-version says otherwise, and its max_seq_len the
    /// max_model_len unless --max-model-len does.
    #[arg(long, value_name = "FILE")]
    from_log: Option<PathBuf>,
    #[command(flatten)]
    flags: Box<Flags>,
}

/// Grid and engine flags (boxed: they are many).
#[derive(Debug, clap::Args)]
pub(crate) struct Flags {
    /// Prompt lengths to decide (rows), e.g. 0,16k,32k,64k,128k,248k.
    #[arg(long, value_delimiter = ',', default_value = "0,16k,32k,64k,128k,248k", value_parser = limits::contexts::parse)]
    contexts: Vec<Tokens>,
    /// Requests at once (columns).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128", value_parser = limits::concurrency::parse)]
    concurrency: Vec<Concurrency>,
    /// Output tokens each request may generate.
    #[arg(long, default_value = "8192", value_parser = limits::max_tokens::parse)]
    max_tokens: Tokens,

    #[command(flatten)]
    engine: EngineOptions,

    /// Measured vLLM num_gpu_blocks (from vllm:cache_config_info): decide cells from it.
    #[arg(long, requires = "measured_block_size", value_parser = clap::value_parser!(u64).range(1..))]
    measured_blocks: Option<u64>,
    /// Measured vLLM block_size.
    #[arg(long, requires = "measured_blocks", value_parser = limits::block_size::parse)]
    measured_block_size: Option<u64>,
    /// Measured SGLang max_total_num_tokens.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    measured_tokens: Option<u64>,
}

/// Runs `speedmatrix capacity`.
pub(crate) async fn run(mut args: Args) -> anyhow::Result<ExitCode> {
    let Some(config) = args.config.clone().filter(|_| !args.list_gpus) else {
        let gpus = options(args.flags.engine.gpu_catalog())?.gpus();
        if args.json {
            let text =
                serde_json::to_string_pretty(&gpus).context("serializing the GPU catalog")?;
            say!("{text}");
        } else {
            say_raw!("{}", speedmatrix_capacity::text::catalog(&gpus));
        }
        return Ok(ExitCode::SUCCESS);
    };
    let text = std::fs::read_to_string(&config)
        .map_err(|e| UsageError(format!("cannot read --config {}: {e}", config.display())))?;
    let model = ModelConfig::from_json(&text).map_err(|e| UsageError(e.to_string()))?;
    let log_text =
        match &args.from_log {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
                UsageError(format!("cannot read --from-log {}: {e}", path.display()))
            })?),
            None => None,
        };
    let log = log_text
        .as_deref()
        .filter(|_| args.engine == Engine::Vllm)
        .map(VllmStartupLog::parse);
    let sglang_log = log_text
        .as_deref()
        .filter(|_| args.engine == Engine::Sglang)
        .map(SglangStartupLog::parse);
    // The log's own version and length are the ones modelled unless the flags say otherwise.
    let engine = &mut args.flags.engine;
    if engine.vllm_version.is_none() {
        engine.vllm_version = log.as_ref().and_then(|l| l.version.clone());
    }
    if engine.max_model_len.is_none() {
        engine.max_model_len = log
            .as_ref()
            .and_then(|l| l.max_model_len)
            .or(sglang_log.as_ref().and_then(|l| l.context_len))
            .map(Tokens::new);
    }
    let gpu = options(args.flags.engine.gpu())?;
    let flags = options(args.flags.engine.engine_flags(args.engine))?;
    let prediction = predict(&model, &gpu, &flags).map_err(|e| UsageError(e.to_string()))?;
    let f = &args.flags;
    let spec = GridSpec {
        contexts: f.contexts.clone(),
        concurrencies: f.concurrency.clone(),
        max_output: f.max_tokens,
    };
    let grid = capacity_grid(
        Some(&prediction),
        measured(f).as_ref(),
        ServerLimits::default(),
        &spec,
    )
    .map_err(|e| UsageError(e.to_string()))?;
    let beside_log = match (&log, &sglang_log, &prediction, &flags) {
        (Some(log), _, Prediction::Vllm(p), EngineFlags::Vllm(vflags)) => Some(BesideLog {
            full: log.compare(p),
            given_memory: log.compare_given_memory(p, vflags),
            engine: Engine::Vllm,
        }),
        (_, Some(log), Prediction::Sglang(p), _) => Some(BesideLog {
            full: log.compare(p),
            given_memory: None,
            engine: Engine::Sglang,
        }),
        _ => None,
    };
    if args.from_log.is_some() && beside_log.is_none() {
        tell!(
            "note: --from-log reads vLLM and SGLang startup logs, not {} ones",
            args.engine
        );
    }
    if args.json {
        let out = serde_json::json!({
            "model": model, "gpu": gpu, "prediction": prediction, "grid": grid,
            "log": log, "sglang_log": sglang_log, "beside_log": beside_log,
        });
        say!(
            "{}",
            serde_json::to_string_pretty(&out).context("serializing the capacity report")?
        );
    } else {
        let text = speedmatrix_capacity::text::prediction(&model, &gpu, &prediction, &grid, &spec);
        say_raw!("{text}");
        if let Some(b) = &beside_log {
            say_raw!("{}", speedmatrix_capacity::text::beside_log(b));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// An option error, as the command line says it.
fn options<T>(r: Result<T, speedmatrix_runner::RunnerError>) -> anyhow::Result<T> {
    r.map_err(|e| words::error(e, None))
}

/// A capacity the flags say was measured.
fn measured(args: &Flags) -> Option<MeasuredCapacity> {
    if let (Some(num_gpu_blocks), Some(block_size)) =
        (args.measured_blocks, args.measured_block_size)
    {
        return Some(MeasuredCapacity::Vllm {
            num_gpu_blocks,
            block_size,
        });
    }
    args.measured_tokens.map(|t| MeasuredCapacity::Sglang {
        max_total_num_tokens: t,
        max_running_requests: args.engine.max_running_requests,
    })
}
