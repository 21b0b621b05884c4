//! `speedmatrix capacity`: which matrix cells fit a server's KV cache, predicted
//! offline from config.json, a GPU and the engine's flags.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use speedmatrix_capacity::{
    CapacityError, CapacityGrid, CellVerdict, EngineFlags, GgmlKvType, Gpu, GridSpec, KvCacheDtype,
    LlamaCppFlags, MambaCacheMode, MeasuredCapacity, ModelConfig, OverheadOverrides, Prediction,
    ServerLimits, SglangFlags, VllmDevice, VllmFlags, VllmPrediction, VllmVersion, capacity_grid,
    predict, weights_from_safetensors_index,
};
use speedmatrix_units::{ByteSize, Concurrency, Tokens, group_thousands};

use crate::cmd::UsageError;

/// Engines whose KV sizing is modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Engine {
    /// vLLM (v1 engine).
    Vllm,
    /// SGLang.
    Sglang,
    /// llama.cpp llama-server.
    Llamacpp,
}

/// vLLM `--mamba-cache-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MambaMode {
    /// One state per running request.
    None,
    /// States at block boundaries (default with prefix caching).
    Align,
    /// A state for every cached block.
    All,
}

/// Flags of `speedmatrix capacity`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The model's Hugging Face config.json.
    #[arg(long, value_name = "PATH")]
    config: PathBuf,
    /// GPU: rtx3090, rtx4090, rtx5090, a10g, l4, l40s, a100-40, a100-80, h100, h200, b200,
    /// mi300x, or a size as the runtime sees it (e.g. 23.5GiB).
    #[arg(long, default_value = "rtx3090")]
    gpu: String,
    /// Inference engine.
    #[arg(long, value_enum, default_value = "vllm")]
    engine: Engine,
    /// Emit JSON (prediction, measured vs predicted, every cell) instead of tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    flags: Box<Flags>,
}

/// Grid and engine flags (boxed: they are many).
#[derive(Debug, clap::Args)]
pub(crate) struct Flags {
    /// Prompt lengths to decide (rows), e.g. 0,16k,32k,64k,128k,248k.
    #[arg(long, value_delimiter = ',', default_value = "0,16k,32k,64k,128k,248k")]
    contexts: Vec<Tokens>,
    /// Requests at once (columns).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128")]
    concurrency: Vec<Concurrency>,
    /// Output tokens each request may generate.
    #[arg(long, default_value = "8192")]
    max_tokens: Tokens,

    /// vLLM --gpu-memory-utilization.
    #[arg(long, default_value_t = 0.9)]
    gpu_memory_utilization: f64,
    /// --max-model-len (default: the config's max_position_embeddings).
    #[arg(long)]
    max_model_len: Option<Tokens>,
    /// vLLM --max-num-seqs.
    #[arg(long)]
    max_num_seqs: Option<u32>,
    /// vLLM --max-num-batched-tokens.
    #[arg(long)]
    max_num_batched_tokens: Option<u64>,
    /// --kv-cache-dtype (auto, fp8, fp8_e5m2, fp8_per_token_head, nvfp4).
    #[arg(long, default_value = "auto")]
    kv_cache_dtype: String,
    /// vLLM --block-size.
    #[arg(long)]
    block_size: Option<u64>,
    /// vLLM --enable-prefix-caching.
    #[arg(long)]
    enable_prefix_caching: bool,
    /// vLLM --mamba-cache-mode.
    #[arg(long, value_enum)]
    mamba_cache_mode: Option<MambaMode>,
    /// vLLM --enforce-eager (no CUDA graphs).
    #[arg(long)]
    enforce_eager: bool,
    /// vLLM --kv-cache-memory-bytes (e.g. 12GiB).
    #[arg(long)]
    kv_cache_memory_bytes: Option<ByteSize>,
    /// --tensor-parallel-size.
    #[arg(long, default_value_t = 1)]
    tensor_parallel_size: u32,
    /// Speculative tokens (MTP/EAGLE).
    #[arg(long, default_value_t = 0)]
    num_speculative_tokens: u64,
    /// vLLM --language-model-only (skip the vision tower).
    #[arg(long)]
    language_model_only: bool,
    /// vLLM --disable-hybrid-kv-cache-manager.
    #[arg(long)]
    disable_hybrid_kv_cache_manager: bool,
    /// vLLM release whose behaviour to model.
    #[arg(long, default_value = "0.32.0")]
    vllm_version: String,
    /// vLLM CPU backend: VLLM_CPU_KVCACHE_SPACE in GiB (selects the CPU path).
    #[arg(long)]
    cpu_kvcache_space_gib: Option<u64>,
    /// model.safetensors.index.json: exact weight bytes instead of counting from shapes.
    #[arg(long, value_name = "PATH")]
    safetensors_index: Option<PathBuf>,
    /// Calibrated activation peak (e.g. 1.2GiB) instead of the estimate.
    #[arg(long)]
    activation_peak: Option<ByteSize>,
    /// Calibrated non-torch memory instead of the estimate.
    #[arg(long)]
    non_torch_memory: Option<ByteSize>,
    /// Calibrated CUDA-graph memory instead of the estimate.
    #[arg(long)]
    cudagraph_memory: Option<ByteSize>,

    /// SGLang --mem-fraction-static.
    #[arg(long, default_value_t = 0.88)]
    mem_fraction_static: f64,
    /// SGLang --page-size.
    #[arg(long, default_value_t = 1)]
    page_size: u64,
    /// SGLang --max-running-requests.
    #[arg(long)]
    max_running_requests: Option<u32>,

    /// llama.cpp --ctx-size (0: the model's context).
    #[arg(long, default_value_t = 0)]
    ctx_size: u64,
    /// llama.cpp --parallel.
    #[arg(long, default_value_t = 1)]
    parallel: u32,
    /// llama.cpp --kv-unified.
    #[arg(long)]
    kv_unified: bool,
    /// llama.cpp -ctk / -ctv.
    #[arg(long, default_value = "f16")]
    cache_type: String,

    /// Measured vLLM num_gpu_blocks (from vllm:cache_config_info): decide cells from it.
    #[arg(long, requires = "measured_block_size")]
    measured_blocks: Option<u64>,
    /// Measured vLLM block_size.
    #[arg(long, requires = "measured_blocks")]
    measured_block_size: Option<u64>,
    /// Measured SGLang max_total_num_tokens.
    #[arg(long)]
    measured_tokens: Option<u64>,
}

/// Runs `speedmatrix capacity`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.config).map_err(|e| {
        UsageError(format!(
            "cannot read --config {}: {e}",
            args.config.display()
        ))
    })?;
    let model = ModelConfig::from_json(&text).map_err(usage)?;
    let gpu = Gpu::lookup(&args.gpu).map_err(usage)?;
    let flags = engine_flags(args.engine, &args.flags)?;
    let prediction = predict(&model, &gpu, &flags).map_err(usage)?;
    let measured = measured(&args.flags);
    let f = &args.flags;
    let spec = GridSpec {
        contexts: f.contexts.clone(),
        concurrencies: f.concurrency.clone(),
        max_output: f.max_tokens,
    };
    let grid = capacity_grid(
        Some(&prediction),
        measured.as_ref(),
        ServerLimits::default(),
        &spec,
    )
    .map_err(usage)?;
    if args.json {
        let out = serde_json::json!({ "model": model, "gpu": gpu, "prediction": prediction, "grid": grid });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).context("serializing the capacity report")?
        );
    } else {
        print!("{}", render(&model, &gpu, &prediction, &grid, &spec));
    }
    Ok(ExitCode::SUCCESS)
}

fn usage(e: CapacityError) -> anyhow::Error {
    UsageError(e.to_string()).into()
}

fn engine_flags(engine: Engine, args: &Flags) -> anyhow::Result<EngineFlags> {
    let tp = args.tensor_parallel_size.max(1);
    let weights = match &args.safetensors_index {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                UsageError(format!(
                    "cannot read --safetensors-index {}: {e}",
                    path.display()
                ))
            })?;
            Some(ByteSize::new(
                weights_from_safetensors_index(&text).map_err(usage)?.get() / u64::from(tp),
            ))
        }
        None => None,
    };
    Ok(match engine {
        Engine::Vllm => EngineFlags::Vllm(VllmFlags {
            gpu_memory_utilization: args.gpu_memory_utilization,
            max_model_len: args.max_model_len.map(Tokens::get),
            max_num_seqs: args.max_num_seqs,
            max_num_batched_tokens: args.max_num_batched_tokens,
            kv_cache_dtype: KvCacheDtype::parse(&args.kv_cache_dtype).map_err(usage)?,
            block_size: args.block_size,
            mamba_block_size: None,
            enable_prefix_caching: args.enable_prefix_caching,
            mamba_cache_mode: args.mamba_cache_mode.map(|m| match m {
                MambaMode::None => MambaCacheMode::None,
                MambaMode::Align => MambaCacheMode::Align,
                MambaMode::All => MambaCacheMode::All,
            }),
            enforce_eager: args.enforce_eager,
            kv_cache_memory_bytes: args.kv_cache_memory_bytes,
            num_gpu_blocks_override: None,
            tensor_parallel_size: tp,
            num_speculative_tokens: args.num_speculative_tokens,
            language_model_only: args.language_model_only,
            disable_hybrid_kv_cache_manager: args.disable_hybrid_kv_cache_manager,
            version: VllmVersion::parse(&args.vllm_version).map_err(usage)?,
            device: match args.cpu_kvcache_space_gib {
                Some(g) => VllmDevice::Cpu {
                    kvcache_space: ByteSize::gib(g),
                },
                None => VllmDevice::Gpu,
            },
            overhead: OverheadOverrides {
                activation_peak: args.activation_peak,
                non_torch: args.non_torch_memory,
                cudagraph: args.cudagraph_memory,
                weights,
            },
        }),
        Engine::Sglang => EngineFlags::Sglang(SglangFlags {
            mem_fraction_static: args.mem_fraction_static,
            tensor_parallel_size: tp,
            fp8_kv: KvCacheDtype::parse(&args.kv_cache_dtype).map_err(usage)? != KvCacheDtype::Auto,
            page_size: args.page_size,
            max_running_requests: args.max_running_requests,
            context_length: args.max_model_len.map(Tokens::get),
            weights,
            ..SglangFlags::default()
        }),
        Engine::Llamacpp => {
            let t = GgmlKvType::parse(&args.cache_type).map_err(usage)?;
            EngineFlags::LlamaCpp(LlamaCppFlags {
                n_ctx: args.ctx_size,
                n_parallel: args.parallel,
                unified: args.kv_unified,
                cache_type_k: t,
                cache_type_v: t,
            })
        }
    })
}

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
        max_running_requests: args.max_running_requests,
    })
}

fn render(
    model: &ModelConfig,
    gpu: &Gpu,
    prediction: &Prediction,
    grid: &CapacityGrid,
    spec: &GridSpec,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Model: {} ({} layers: {})",
        display_arch(model),
        model.layers.len(),
        layer_summary(model)
    );
    let _ = writeln!(
        out,
        "GPU: {} — {} visible to the runtime ({})",
        gpu.name, gpu.memory, gpu.memory_source
    );
    match prediction {
        Prediction::Vllm(v) => vllm_breakdown(&mut out, v),
        Prediction::Sglang(s) => {
            let _ = writeln!(
                out,
                "\nSGLang: free before weights {} (estimate), weights {}, rest {}",
                s.free_before_weights, s.weights, s.rest
            );
            let _ = writeln!(
                out,
                "  cell size {} B/token; max_total_num_tokens {}",
                group_thousands(s.cell_bytes),
                group_thousands(s.max_total_num_tokens)
            );
            if let Some(slots) = s.mamba_slots {
                let _ = writeln!(
                    out,
                    "  recurrent-state slots (max_mamba_cache_size): {slots}"
                );
            }
        }
        Prediction::LlamaCpp(l) => {
            let _ = writeln!(
                out,
                "\nllama.cpp: n_ctx {} ({} per slot × {} slots{}), KV {}",
                group_thousands(l.n_ctx),
                group_thousands(l.n_ctx_seq),
                l.n_parallel,
                if l.unified { ", unified" } else { "" },
                l.kv_bytes
            );
        }
        _ => {}
    }
    if let Some(c) = &grid.comparison {
        let _ = writeln!(
            out,
            "\nMeasured vs predicted pool: {} vs {} tokens ({:+} tokens, {:+.1}%)",
            group_thousands(c.measured_tokens),
            group_thousands(c.predicted_tokens),
            c.difference_tokens,
            c.difference_pct
        );
        if let (Some(mb), Some(pb)) = (c.measured_blocks, c.predicted_blocks) {
            let _ = writeln!(
                out,
                "  blocks {mb} measured vs {pb} predicted; block size {:?} vs {:?}",
                c.measured_block_size, c.predicted_block_size
            );
        }
    }
    let _ = writeln!(
        out,
        "\nCells ({:?} capacity, max output {} tokens; ℓ = context + max output):",
        grid.source,
        group_thousands(spec.max_output.get())
    );
    table(&mut out, grid, spec);
    out
}

fn display_arch(model: &ModelConfig) -> String {
    if model.architecture.is_empty() {
        model.model_type.clone()
    } else {
        model.architecture.clone()
    }
}

fn layer_summary(model: &ModelConfig) -> String {
    model
        .layer_counts()
        .iter()
        .map(|(k, n)| format!("{n} {k:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn vllm_breakdown(out: &mut String, v: &VllmPrediction) {
    let b = &v.budget;
    let _ = writeln!(out, "\nvLLM memory budget (per GPU):");
    let _ = writeln!(
        out,
        "  requested = ceil({} × {}) = {}",
        b.device_total, b.utilization, b.requested
    );
    for (name, e) in [
        ("weights", &b.weights),
        ("activation peak", &b.activation_peak),
        ("non-torch", &b.non_torch),
        ("CUDA graphs", &b.cudagraph),
    ] {
        let tag = if e.estimated { "ESTIMATE" } else { "given" };
        let _ = writeln!(
            out,
            "  − {name:<16} {:>10}  [{tag}] {}",
            e.bytes.to_string(),
            e.basis
        );
    }
    let _ = writeln!(
        out,
        "  = available KV  {:>10}  ({:?})",
        b.available_kv.to_string(),
        b.source
    );
    let l = &v.layout;
    let _ = writeln!(out, "\nKV layout:");
    for c in &l.layer_costs {
        match (c.bytes_per_token, c.state_bytes) {
            (Some(t), _) => {
                let _ = writeln!(
                    out,
                    "  {:>3} × {:?}: {} B per token per layer",
                    c.layers,
                    c.kind,
                    group_thousands(t)
                );
            }
            (_, Some(s)) => {
                let _ = writeln!(
                    out,
                    "  {:>3} × {:?}: {} B state per sequence per layer",
                    c.layers,
                    c.kind,
                    group_thousands(s)
                );
            }
            _ => {}
        }
    }
    let _ = writeln!(
        out,
        "  block size {} tokens: {}",
        l.block_size, l.block_size_reason
    );
    let _ = writeln!(
        out,
        "  {} groups ({}), {} padding layers; page {} B, {} B per block",
        l.groups.len(),
        l.groups
            .iter()
            .map(|g| format!("{:?}×{}", g.kind, g.layers))
            .collect::<Vec<_>>()
            .join(", "),
        l.padding_layers,
        group_thousands(l.page_bytes),
        group_thousands(l.bytes_per_block)
    );
    let _ = writeln!(
        out,
        "  num_gpu_blocks {} (block 0 is the null block)",
        group_thousands(v.num_blocks)
    );
    let _ = writeln!(
        out,
        "  blocks per request of max_model_len {}: {}",
        group_thousands(v.max_model_len),
        v.blocks_per_request_at_max_len
    );
    let _ = writeln!(
        out,
        "  log: \"GPU KV cache size: {} tokens\" ({:?})",
        group_thousands(v.kv_cache_size_tokens),
        v.log_formula
    );
    let _ = writeln!(
        out,
        "  log: \"Maximum concurrency for {} tokens per request: {:.2}x\"",
        group_thousands(v.max_model_len),
        v.max_concurrency
    );
    if !v.startup.fits {
        let _ = writeln!(
            out,
            "  vLLM would NOT start: one max-length request needs {} but {} is usable; estimated maximum model length {}",
            v.startup.needed,
            v.startup.usable,
            group_thousands(v.startup.estimated_max_model_len)
        );
    }
}

fn table(out: &mut String, grid: &CapacityGrid, spec: &GridSpec) {
    let _ = write!(out, "| Context |");
    for n in &spec.concurrencies {
        let _ = write!(out, " {n} |");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "|---|{}", "---|".repeat(spec.concurrencies.len()));
    let width = spec.concurrencies.len().max(1);
    for row in grid.cells.chunks(width) {
        let Some(first) = row.first() else { continue };
        let _ = write!(out, "| {} |", first.context);
        for cell in row {
            let _ = write!(out, " {} |", cell_text(cell));
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out, "\nDeciding rules:");
    let mut seen = Vec::new();
    for c in &grid.cells {
        if !seen.contains(&c.rule) {
            seen.push(c.rule);
            let _ = writeln!(
                out,
                "  {:?}: {} ({})",
                c.rule,
                c.rule.describe(),
                c.rule.unit()
            );
        }
    }
}

fn cell_text(cell: &CellVerdict) -> String {
    let state = if cell.fits { "Valid" } else { "Over capacity" };
    format!(
        "{state} ({}/{})",
        group_thousands(cell.needed),
        group_thousands(cell.limit)
    )
}
