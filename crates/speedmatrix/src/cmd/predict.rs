//! `speedmatrix predict`: the whole matrix from config.json, a GPU and the
//! engine's flags, before the GPU is rented — a report document marked
//! predicted, and with `--simulate` a what-if run of the real runner on a
//! simulator profile made from the prediction.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use speedmatrix_capacity::{
    CapacityGrid, EngineFlags, Gpu, GridSpec, ModelConfig, ServerLimits, VllmFlags, capacity_grid,
    predict,
};
use speedmatrix_predict::{CostModel, DecodeEstimate, FactorsFile, PrefillEstimate, WeightBytes};
use speedmatrix_report::{
    Capacity, CellStatus, DecodeCell, DecodeMeasurements, Engine, Hardware, KvCapacity,
    Percentiles, PredictionInfo, PrefillRow, Report, RunSettings, SCHEMA_VERSION, TokenCountSource,
    Tool,
};
use speedmatrix_sim::fit::{DecodeObservation, PrefillObservation, fit_cost};
use speedmatrix_sim::{Profile, ProfileOrigin};
use speedmatrix_units::{Concurrency, Tokens};

use crate::cmd::UsageError;
use crate::cmd::engine_flags::{EngineArgs, PredictedEngine};

/// Flags of `speedmatrix predict`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The model's Hugging Face config.json.
    #[arg(long, value_name = "PATH")]
    config: PathBuf,
    /// The model's name in the report (default: the config's folder name).
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// Inference engine: its KV rules decide the grid, its fitted factors the speed
    /// (llama.cpp has its own; SGLang uses vLLM's).
    #[arg(long, value_enum, default_value = "vllm")]
    engine: PredictedEngine,
    /// Decode contexts (rows).
    #[arg(long, value_delimiter = ',', default_value = "0,16k,32k,64k,128k,248k")]
    contexts: Vec<Tokens>,
    /// Decode concurrencies (columns).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128")]
    concurrency: Vec<Concurrency>,
    /// Cold prefill prompt lengths (`none` for no prefill rows).
    #[arg(long, default_value = "8k,16k,32k,64k,128k", value_parser = parse_prefill)]
    prefill_contexts: PrefillList,
    /// Output tokens each request may generate.
    #[arg(long, default_value = "8192")]
    max_tokens: Tokens,
    /// The decode window each cell is predicted over (and measured over with --simulate).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    duration: Duration,
    /// The GGUF file type when the weights are a GGUF (q4_0, q4_k_m, q5_k_m, q6_k, q8_0,
    /// iq4_xs, f16): config.json cannot say it.
    #[arg(long, value_name = "TYPE")]
    gguf_type: Option<String>,
    /// Efficiency factors to use instead of the built-in fitted ones (the shape of
    /// speedmatrix-predict's data/factors.json).
    #[arg(long, value_name = "FILE")]
    factors: Option<PathBuf>,
    /// Where to write run.json, report.md, report.html and measurements.csv.
    #[arg(short, long, value_name = "DIR", default_value = "predicted")]
    out: PathBuf,
    /// Also turn the prediction into a simulator profile (DIR/profile.json) and run the real
    /// runner against it with the same matrix (a what-if run into DIR/simulated/; it takes
    /// the windows' time).
    #[arg(long)]
    simulate: bool,
    #[command(flatten)]
    engine_args: EngineArgs,
}

/// Prefill lengths, or none.
#[derive(Debug, Clone)]
pub(crate) struct PrefillList(Vec<Tokens>);

fn parse_prefill(s: &str) -> Result<PrefillList, String> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(PrefillList(Vec::new()));
    }
    s.split(',')
        .map(|t| t.trim().parse::<Tokens>().map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()
        .map(PrefillList)
}

/// Runs `speedmatrix predict`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.config).map_err(|e| {
        UsageError(format!(
            "cannot read --config {}: {e}",
            args.config.display()
        ))
    })?;
    let model = ModelConfig::from_json(&text).map_err(|e| UsageError(e.to_string()))?;
    let gpu = args.engine_args.gpu()?;
    let flags = args.engine_args.engine_flags(args.engine)?;
    let vllm_flags = match args.engine_args.engine_flags(PredictedEngine::Vllm)? {
        EngineFlags::Vllm(f) => f,
        _ => VllmFlags::default(),
    };
    let capacity = predict(&model, &gpu, &flags).map_err(|e| UsageError(e.to_string()))?;
    let spec = GridSpec {
        contexts: args.contexts.clone(),
        concurrencies: args.concurrency.clone(),
        max_output: args.max_tokens,
    };
    let grid = capacity_grid(Some(&capacity), None, ServerLimits::default(), &spec)
        .map_err(|e| UsageError(e.to_string()))?;
    let family = match args.engine {
        PredictedEngine::Llamacpp => "llamacpp",
        _ => "vllm",
    };
    let file = match &args.factors {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                UsageError(format!("cannot read --factors {}: {e}", path.display()))
            })?;
            FactorsFile::from_json(&text)
                .map_err(|e| UsageError(format!("--factors {}: {e}", path.display())))?
        }
        None => FactorsFile::builtin()?,
    };
    let (set, fell_back) = file
        .for_engine(family)
        .ok_or_else(|| UsageError("the factors file names no engine".into()))?;
    let mut cost = CostModel::new(&model, &gpu, &vllm_flags, set.factors)
        .map_err(|e| UsageError(e.to_string()))?;
    if let Some(t) = &args.gguf_type {
        let bytes = WeightBytes::gguf(t).ok_or_else(|| {
            UsageError(format!(
                "--gguf-type {t}: give q4_0, q4_k_m, q5_k_m, q6_k, q8_0, iq4_xs or f16"
            ))
        })?;
        cost = cost.with_weight_bytes(bytes);
    }
    if args.engine == PredictedEngine::Llamacpp {
        cost.chunk = 512;
    }
    let prefill: Vec<PrefillEstimate> = args
        .prefill_contexts
        .0
        .iter()
        .map(|&c| cost.prefill_row(c))
        .collect();
    let decode: Vec<(DecodeEstimate, &speedmatrix_capacity::CellVerdict)> = grid
        .cells
        .iter()
        .map(|v| {
            let e = cost.decode_cell(
                v.context,
                v.concurrency,
                args.max_tokens,
                args.duration,
                block_size(&capacity),
            );
            (e, v)
        })
        .collect();
    let report = document(
        &args, &model, &gpu, &cost, set, fell_back, &grid, &prefill, &decode,
    );
    report
        .validate()
        .context("the predicted document does not validate")?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("could not create {}", args.out.display()))?;
    write_outputs(&args.out, &report)?;
    print!("{}", summary(&report, &cost));
    println!(
        "wrote {}/{{run.json, report.md, report.html, measurements.csv}}",
        args.out.display()
    );
    if args.simulate {
        return simulate(&args, &cost, &capacity, &grid, &prefill, &decode).await;
    }
    Ok(ExitCode::SUCCESS)
}

fn block_size(p: &speedmatrix_capacity::Prediction) -> u64 {
    match p {
        speedmatrix_capacity::Prediction::Vllm(v) => v.layout.block_size,
        _ => 16,
    }
}

fn write_outputs(dir: &Path, r: &Report) -> anyhow::Result<()> {
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("could not write {}", path.display()))
    };
    write("run.json", r.to_json().context("serializing the report")?)?;
    write("report.md", speedmatrix_report::to_markdown(r))?;
    write("report.html", speedmatrix_report::to_html(r))?;
    write("measurements.csv", speedmatrix_report::to_csv(r))?;
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn flat(v: f64) -> Percentiles {
    Percentiles {
        p50: v,
        p90: v,
        p99: v,
    }
}

#[allow(clippy::too_many_arguments)]
fn document(
    args: &Args,
    model: &ModelConfig,
    gpu: &Gpu,
    cost: &CostModel,
    set: &speedmatrix_predict::EngineFactors,
    fell_back: bool,
    grid: &CapacityGrid,
    prefill: &[PrefillEstimate],
    decode: &[(DecodeEstimate, &speedmatrix_capacity::CellVerdict)],
) -> Report {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let tp = cost.machine.tensor_parallel;
    let window = args.duration.as_secs_f64();
    let max_len = decode_max_len(grid);
    let prefill_rows = prefill
        .iter()
        .map(|p| {
            let too_long = max_len.is_some_and(|m| p.context.get() + 1 > m);
            PrefillRow {
                context: p.context,
                status: if too_long {
                    CellStatus::OverCapacity {
                        reason: format!("{} + 1 token > max_model_len", p.context),
                    }
                } else {
                    CellStatus::Valid
                },
                prompt_tokens_per_s: (!too_long).then_some(p.prompt_tokens_per_s),
                ttft_ms: (!too_long).then(|| ms(p.ttft)),
                prompt_tokens_requested: p.context,
                prompt_tokens_reported: None,
                repeats: 1,
            }
        })
        .collect();
    let cells = decode
        .iter()
        .map(|(e, v)| DecodeCell {
            context: e.context,
            concurrency: e.concurrency,
            status: if v.fits {
                CellStatus::Valid
            } else {
                CellStatus::OverCapacity {
                    reason: format!(
                        "{} × {} needs {} {} > {}",
                        v.concurrency,
                        v.request_tokens,
                        v.needed,
                        v.rule.unit(),
                        v.limit
                    ),
                }
            },
            measurements: v.fits.then(|| DecodeMeasurements {
                total_tokens_per_s: e.total_tokens_per_s,
                per_request_tokens_per_s: e.per_request_tokens_per_s,
                ttft_ms: flat(ms(e.ttft)),
                time_between_tokens_ms: flat(ms(e.time_between_tokens)),
                average_active_requests: f64::from(e.concurrency.get()),
                completed_requests: 0,
                output_tokens: Tokens::new((e.total_tokens_per_s * window).round() as u64),
                measured_s: window,
                queueing_detected: false,
                prompt_token_mismatches: 0,
                token_count_source: TokenCountSource::UsagePerChunk,
                token_count: None,
                finish_reasons: BTreeMap::new(),
                server_counter: None,
                client: None,
                telemetry: None,
                interference: None,
            }),
        })
        .collect();
    let f = cost.factors;
    let factors = BTreeMap::from([
        ("bandwidth_efficiency".to_owned(), f.bandwidth_efficiency),
        ("compute_efficiency".to_owned(), f.compute_efficiency),
        ("step_overhead_ms".to_owned(), f.step_overhead_ms),
        ("sequence_overhead_us".to_owned(), f.sequence_overhead_us),
        ("allreduce_latency_us".to_owned(), f.allreduce_latency_us),
        ("request_overhead_ms".to_owned(), f.request_overhead_ms),
        (
            "consumer_compute_ratio".to_owned(),
            f.consumer_compute_ratio,
        ),
    ]);
    let m = &cost.machine;
    let mut assumptions = vec![
        format!(
            "GPU: {} × {tp}: {:.0} GB/s peak bandwidth, {:.0} TFLOPS dense {} ({}).",
            gpu.name,
            m.bandwidth_bytes_s / 1e9,
            m.peak_flops / 1e12,
            m.compute_dtype,
            gpu.spec_source
        ),
        format!(
            "Per rank: {:.2} GB of weights every step reads, {} routed experts of {:.1} MB, \
             {:.1} KB of KV per context token, {:.1} MB of recurrent state per sequence; \
             prefill in chunks of {} tokens.",
            cost.shape.params.dense_bytes / 1e9,
            cost.shape.params.num_experts,
            cost.shape.params.expert_bytes / 1e6,
            cost.shape.kv_bytes(1) / 1e3,
            cost.shape.state_bytes_per_sequence / 1e6,
            cost.chunk
        ),
        "Decode cells: each step's time integrated over the window as the context grows; \
         their TTFT is a warm-cache estimate (the last partial block prefilled plus one step)."
            .to_owned(),
        format!(
            "The grid: speedmatrix capacity's prediction for {} ({} tokens of KV cache).",
            args.engine.name(),
            grid.pool_tokens
        ),
        "Not modelled: speculative decoding, CPU offload, pipeline parallelism, enforce-eager, \
         queueing past max_num_seqs."
            .to_owned(),
    ];
    if fell_back {
        assumptions.push(format!(
            "{} has no fitted factors of its own: vLLM's are used.",
            args.engine.name()
        ));
    }
    Report {
        schema_version: SCHEMA_VERSION,
        hardware: Hardware {
            kind: Some("Predicted (no machine ran)".into()),
            gpus: vec![speedmatrix_report::Gpu {
                name: gpu.name.clone(),
                memory_bytes: Some(gpu.memory),
                count: tp,
            }],
            ..Hardware::default()
        },
        engine: Engine {
            name: args.engine.name().to_owned(),
            quantization: Some(format!("{:?}", model.quantization)),
            ..Engine::default()
        },
        run: RunSettings {
            model: args.model.clone().unwrap_or_else(|| {
                args.config
                    .parent()
                    .and_then(|p| p.file_name())
                    .map_or_else(
                        || model.architecture.clone(),
                        |n| n.to_string_lossy().into_owned(),
                    )
            }),
            served_model: model.architecture.clone(),
            revision: None,
            api: speedmatrix_report::Api::Completions,
            prompt_mode: "predicted".into(),
            tokenizer: None,
            tool: Tool {
                name: "speedmatrix predict".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            contexts: args.contexts.clone(),
            concurrencies: args.concurrency.clone(),
            prefill_contexts: args.prefill_contexts.0.clone(),
            prefill_repeats: 1,
            prefill_mode: speedmatrix_report::PrefillMode::default(),
            window_duration_s: window,
            max_output_tokens: args.max_tokens,
            decode_cache_warmed: true,
            started_at: now.clone(),
            finished_at: now,
        },
        client: None,
        telemetry: None,
        capacity: Some(Capacity {
            measured: None,
            predicted: Some(KvCapacity {
                kv_cache_tokens: Tokens::new(grid.pool_tokens),
                source: format!("speedmatrix capacity's {} prediction", args.engine.name()),
            }),
            rule: grid
                .cells
                .iter()
                .find(|c| !c.fits)
                .map_or_else(|| "every cell fits".to_owned(), |c| format!("{:?}", c.rule)),
        }),
        prefill: prefill_rows,
        load: None,
        decode: cells,
        notes: Vec::new(),
        prediction: Some(PredictionInfo {
            method: "speedmatrix's cost model (docs/predict.md)".into(),
            factors,
            fitted_on: set.fitted_on.clone(),
            assumptions,
        }),
    }
}

/// The longest request the server takes, when the grid knows it.
fn decode_max_len(grid: &CapacityGrid) -> Option<u64> {
    grid.cells
        .iter()
        .find(|c| c.rule == speedmatrix_capacity::FitRule::MaxModelLen && !c.fits)
        .map(|c| c.limit)
}

/// The matrix in the terminal: total tok/s per cell, prefill rows.
fn summary(report: &Report, cost: &CostModel) -> String {
    let mut out = format!(
        "Predicted on {} × {} ({}-bound steps at 1 stream)\n",
        cost.machine.gpu,
        cost.machine.tensor_parallel,
        match cost.decode_step(1, 0).bound {
            speedmatrix_predict::Bound::Memory => "memory",
            speedmatrix_predict::Bound::Compute => "compute",
        }
    );
    for r in &report.prefill {
        if let (Some(t), Some(ms)) = (r.prompt_tokens_per_s, r.ttft_ms) {
            let _ = writeln!(
                out,
                "  prefill {:>6}: {t:>9.0} tok/s, TTFT {ms:>9.0} ms",
                r.context.to_string()
            );
        }
    }
    let _ = write!(out, "  {:>6} |", "ctx");
    for n in &report.run.concurrencies {
        let _ = write!(out, " {:>8}", n.get());
    }
    out.push('\n');
    for &ctx in &report.run.contexts {
        let _ = write!(out, "  {:>6} |", ctx.to_string());
        for n in &report.run.concurrencies {
            let cell = report
                .decode
                .iter()
                .find(|c| c.context == ctx && c.concurrency == *n);
            let text = cell.and_then(|c| c.measurements.as_ref()).map_or_else(
                || "over".to_owned(),
                |m| format!("{:.0}", m.total_tokens_per_s),
            );
            let _ = write!(out, " {text:>8}");
        }
        out.push('\n');
    }
    out.push_str("  (total output tok/s; over = over capacity)\n");
    out
}

/// The prediction as a simulator profile, then a real run against it.
async fn simulate(
    args: &Args,
    cost: &CostModel,
    capacity: &speedmatrix_capacity::Prediction,
    grid: &CapacityGrid,
    prefill: &[PrefillEstimate],
    decode: &[(DecodeEstimate, &speedmatrix_capacity::CellVerdict)],
) -> anyhow::Result<ExitCode> {
    let window = args.duration.as_secs_f64();
    let obs: Vec<DecodeObservation> = decode
        .iter()
        .filter(|(_, v)| v.fits)
        .map(|(e, _)| DecodeObservation {
            batch: u64::from(e.concurrency.get()),
            context: e.context.get() + (e.per_request_tokens_per_s * window / 2.0) as u64,
            step: Duration::from_secs_f64(1.0 / e.per_request_tokens_per_s.max(1e-9)),
            // The prediction's decode-cell TTFT is no estimate to fit a front end on.
            warm_ttft: None,
        })
        .collect();
    let pre: Vec<PrefillObservation> = prefill
        .iter()
        .map(|p| PrefillObservation {
            prompt: p.context.get(),
            ttft: p.ttft,
        })
        .collect();
    let fit = fit_cost(&obs, &pre, cost.chunk).map_err(|e| UsageError(e.to_string()))?;
    let mut p = Profile::builtin(speedmatrix_sim::TINY).context("the built-in profile")?;
    p.name = format!(
        "predicted: {} on {}",
        args.config.display(),
        cost.machine.gpu
    );
    p.served_model_name = "predicted".into();
    p.cost = fit.cost;
    p.max_num_batched_tokens = u32::try_from(cost.chunk).unwrap_or(u32::MAX);
    p.block_size = 16;
    p.num_gpu_blocks = u32::try_from(grid.pool_tokens / 16 + 1).unwrap_or(u32::MAX);
    let (max_len, max_seqs) = match capacity {
        speedmatrix_capacity::Prediction::Vllm(v) => (v.max_model_len, v.max_num_seqs),
        _ => (
            args.contexts.iter().map(|c| c.get()).max().unwrap_or(0) + args.max_tokens.get(),
            256,
        ),
    };
    p.max_model_len = u32::try_from(max_len).unwrap_or(u32::MAX);
    p.max_num_seqs = max_seqs;
    p.eos_after_tokens = None;
    p.origin = Some(ProfileOrigin {
        kind: "predicted".into(),
        source: format!(
            "speedmatrix predict for {} on {} × {}",
            args.config.display(),
            cost.machine.gpu,
            cost.machine.tensor_parallel
        ),
        fitted_concurrency_max: None,
        fitted_context_max: None,
        fitted_prompt_max: None,
    });
    p.validate()
        .map_err(|e| UsageError(format!("the predicted profile: {e}")))?;
    let worst = fit
        .decode_errors
        .iter()
        .chain(&fit.prefill_errors)
        .fold(0.0f64, |w, e| w.max(e.abs()));
    let path = args.out.join("profile.json");
    std::fs::write(&path, serde_json::to_string_pretty(&p)? + "\n")
        .with_context(|| format!("could not write {}", path.display()))?;
    println!(
        "wrote {} (the simulator's step model within {:.1} % of the prediction on every cell)",
        path.display(),
        worst * 100.0
    );
    let join = |v: &[String]| v.join(",");
    let contexts: Vec<String> = args.contexts.iter().map(|c| c.get().to_string()).collect();
    let concurrency: Vec<String> = args
        .concurrency
        .iter()
        .map(|c| c.get().to_string())
        .collect();
    let prefill: Vec<String> = args
        .prefill_contexts
        .0
        .iter()
        .map(|c| c.get().to_string())
        .collect();
    let out = args.out.join("simulated");
    let mut argv: Vec<String> = vec![
        "--sim-profile".into(),
        path.display().to_string(),
        "--contexts".into(),
        join(&contexts),
        "--concurrency".into(),
        join(&concurrency),
        "--max-tokens".into(),
        args.max_tokens.get().to_string(),
        "--duration".into(),
        humantime::format_duration(args.duration).to_string(),
        "--prefill-contexts".into(),
        if prefill.is_empty() {
            "none".into()
        } else {
            join(&prefill)
        },
        "--out".into(),
        out.display().to_string(),
    ];
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        argv.push("--quiet".into());
    }
    let run = crate::cmd::run::parse_args(argv)
        .map_err(|e| UsageError(format!("the what-if run's flags: {e}")))?;
    crate::cmd::run::run(run).await
}
