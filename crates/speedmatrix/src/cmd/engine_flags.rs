//! The engine flags an offline KV-capacity prediction follows, shared by
//! `speedmatrix capacity` and `speedmatrix run --model-config`: one set of
//! flags, spelled as the engines spell them, so both commands predict the
//! same server the same way.

use std::path::{Path, PathBuf};

use speedmatrix_capacity::{
    CapacityError, CheckpointTensors, EngineFlags, GgmlKvType, Gpu, GpuCatalog, KvCacheDtype,
    LlamaCppFlags, MambaCacheMode, ModelConfig, OverheadOverrides, SglangFlags, SpeculativeConfig,
    SpeculativeMethod, VllmDevice, VllmFlags, VllmVersion, weights_from_safetensors_index,
};
use speedmatrix_units::{ByteSize, Tokens};

use crate::cmd::UsageError;

/// Engines whose KV sizing is modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum PredictedEngine {
    /// vLLM (v1 engine).
    Vllm,
    /// SGLang.
    Sglang,
    /// llama.cpp llama-server.
    Llamacpp,
}

impl PredictedEngine {
    /// The engine's name in reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            PredictedEngine::Vllm => "vllm",
            PredictedEngine::Sglang => "sglang",
            PredictedEngine::Llamacpp => "llama.cpp",
        }
    }

    /// The engine an engine name (as `run --engine` takes it) stands for;
    /// `None` for one whose KV sizing is not modelled.
    pub(crate) fn from_name(name: &str) -> Option<PredictedEngine> {
        match name
            .to_ascii_lowercase()
            .replace(['.', '-', '_'], "")
            .as_str()
        {
            "vllm" => Some(PredictedEngine::Vllm),
            "sglang" => Some(PredictedEngine::Sglang),
            "llamacpp" | "llamaserver" => Some(PredictedEngine::Llamacpp),
            _ => None,
        }
    }
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

/// The server's engine flags, for the capacity prediction.
#[derive(Debug, clap::Args)]
pub(crate) struct EngineArgs {
    /// GPU: a catalog key (rtx3090, rtx5090, l40s, a100-80, h100, h200, b200, gb10, mi300x,
    /// arc-pro-b60…; `speedmatrix capacity --list-gpus` lists all 79), the name nvidia-smi,
    /// rocm-smi or xpu-smi prints ("NVIDIA GeForce RTX 3090", "NVIDIA A100-SXM4-80GB", "AMD
    /// Instinct MI300X", "Intel(R) Arc(TM) Pro B60 Graphics"), or the memory the runtime sees
    /// on it (e.g. 23.5GiB).
    #[arg(long, default_value = "rtx3090")]
    pub(crate) gpu: String,
    /// A JSON file of GPUs that adds to the built-in catalog or overrides its entries, in the
    /// catalog's own shape: {"gpus": [{"key": "my-card", "names": ["ACME T9000"], "memory":
    /// {"gib": 47.5, "source": "torch.cuda.mem_get_info on our driver"}, "bandwidth_gb_s": 900,
    /// "dense_tflops": {"bf16": 200}}]}.
    #[arg(long, value_name = "FILE")]
    pub(crate) gpu_catalog: Option<PathBuf>,
    /// vLLM --gpu-memory-utilization.
    #[arg(long, default_value_t = 0.9)]
    pub(crate) gpu_memory_utilization: f64,
    /// --max-model-len (default: the config's max_position_embeddings).
    #[arg(long)]
    pub(crate) max_model_len: Option<Tokens>,
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
    /// --tensor-parallel-size: KV heads, weights and linear layers split over ranks (KV heads
    /// are replicated when there are more ranks than heads; an MLA latent is on every rank).
    #[arg(long, default_value_t = 1)]
    tensor_parallel_size: u32,
    /// vLLM --pipeline-parallel-size: layers split over stages as vLLM does (get_pp_indices);
    /// each stage sizes its own pool and the one with the fewest blocks decides.
    #[arg(long, default_value_t = 1)]
    pipeline_parallel_size: u32,
    /// vLLM --data-parallel-size: replicas with a KV pool each (the prediction is one
    /// replica's; the server holds this many times as many requests).
    #[arg(long, default_value_t = 1)]
    data_parallel_size: u32,
    /// vLLM --enable-expert-parallel: routed experts spread whole over tensor × data ranks.
    #[arg(long)]
    enable_expert_parallel: bool,
    /// Speculative tokens (MTP/EAGLE), when --speculative-config does not give them.
    #[arg(long, default_value_t = 0)]
    num_speculative_tokens: u64,
    /// vLLM --speculative-config, the same JSON, e.g. '{"method": "mtp",
    /// "num_speculative_tokens": 2}': MTP drafter layers join the KV groups, and every method
    /// widens recurrent (GDN/Mamba2) states by the speculative tokens. EAGLE, DFlash and
    /// draft-model drafters join with their own heads when their config.json is found: in the
    /// "model" folder, or given by --draft-config.
    #[arg(long, value_name = "JSON")]
    speculative_config: Option<String>,
    /// The drafter's config.json (EAGLE, DFlash or draft model), when --speculative-config's
    /// "model" is not a local folder.
    #[arg(long, value_name = "PATH")]
    draft_config: Option<PathBuf>,
    /// vLLM --language-model-only (skip the vision tower).
    #[arg(long)]
    language_model_only: bool,
    /// vLLM --disable-hybrid-kv-cache-manager.
    #[arg(long)]
    disable_hybrid_kv_cache_manager: bool,
    /// vLLM version whose behaviour to model, as `vllm --version` or its log prints it (PEP 440:
    /// 0.21.0, 0.21.0rc1, 0.20.1rc1.dev16+g1a2b3c4, 0.21.0+cu130) or `nightly`. A pre-release sorts
    /// below its release, so that release's rule changes are not applied (the output says so).
    /// [default: 0.32.0, or the version a --from-log log names]
    #[arg(long)]
    pub(crate) vllm_version: Option<String>,
    /// vLLM CPU backend: VLLM_CPU_KVCACHE_SPACE in GiB (selects the CPU path).
    #[arg(long)]
    cpu_kvcache_space_gib: Option<u64>,
    /// model.safetensors.index.json: the checkpoint's exact total bytes (split over ranks like
    /// the counted weights) instead of counting from shapes.
    #[arg(long, value_name = "PATH")]
    safetensors_index: Option<PathBuf>,
    /// The model folder (or Hugging Face cache snapshot): the headers of its *.safetensors
    /// files give each tensor's exact bytes, placed on ranks by name (embedding, LM head,
    /// vision tower, MTP layers, experts, layer index). Only the headers are read.
    #[arg(long, value_name = "DIR")]
    checkpoint: Option<PathBuf>,
    /// Calibrated activation peak (e.g. 1.2GiB) instead of the estimate.
    #[arg(long)]
    activation_peak: Option<ByteSize>,
    /// Calibrated non-torch memory instead of the estimate.
    #[arg(long)]
    non_torch_memory: Option<ByteSize>,
    /// Calibrated CUDA-graph memory instead of the estimate.
    #[arg(long)]
    cudagraph_memory: Option<ByteSize>,

    /// SGLang --mem-fraction-static [default: derived as SGLang does from the GPU's memory,
    /// --tensor-parallel-size and the chunked-prefill and CUDA-graph sizes; e.g. 0.83 on an H100].
    #[arg(long)]
    mem_fraction_static: Option<f64>,
    /// SGLang --chunked-prefill-size [default: SGLang's for the GPU's memory: 2048 under 20 GiB,
    /// 4096 under 60 GiB, 8192 under 160 GiB, else 16384].
    #[arg(long)]
    chunked_prefill_size: Option<u64>,
    /// SGLang --page-size.
    #[arg(long, default_value_t = 1)]
    page_size: u64,
    /// SGLang --max-running-requests.
    #[arg(long)]
    pub(crate) max_running_requests: Option<u32>,

    /// llama.cpp --ctx-size (0: the model's training context, per slot with --fit on).
    #[arg(long, default_value_t = 0)]
    ctx_size: u64,
    /// llama.cpp --parallel [default: llama-server's auto: 4 slots sharing a unified cache].
    #[arg(long)]
    parallel: Option<u32>,
    /// llama.cpp --kv-unified.
    #[arg(long)]
    kv_unified: bool,
    /// llama.cpp --swa-full: sliding-window layers keep every cell.
    #[arg(long)]
    swa_full: bool,
    /// llama.cpp --ubatch-size (sliding-window caches hold one ubatch beyond the window).
    #[arg(long, default_value_t = 512)]
    ubatch_size: u64,
    /// llama.cpp --fit off: with --ctx-size 0 the training context is shared by the slots
    /// instead of given to each.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    fit: String,
    /// llama.cpp -ctk / -ctv.
    #[arg(long, default_value = "f16")]
    cache_type: String,
}

impl EngineArgs {
    /// The catalog the flags name: the built-in one, extended by --gpu-catalog.
    pub(crate) fn gpu_catalog(&self) -> anyhow::Result<GpuCatalog> {
        let builtin = GpuCatalog::builtin().map_err(usage)?;
        let Some(path) = &self.gpu_catalog else {
            return Ok(builtin.clone());
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            UsageError(format!("cannot read --gpu-catalog {}: {e}", path.display()))
        })?;
        let user = GpuCatalog::from_json(&text)
            .map_err(|e| UsageError(format!("--gpu-catalog {}: {e}", path.display())))?;
        Ok(builtin.extended_by(&user))
    }

    /// The GPU the flags name.
    pub(crate) fn gpu(&self) -> anyhow::Result<Gpu> {
        self.gpu_catalog()?
            .lookup(&self.gpu)
            .map_err(|e| UsageError(format!("--gpu {}: {e}", self.gpu)).into())
    }

    /// The engine flags of `engine` for the predictor.
    pub(crate) fn engine_flags(&self, engine: PredictedEngine) -> anyhow::Result<EngineFlags> {
        let args = self;
        let tp = args.tensor_parallel_size.max(1);
        let checkpoint_total = match &args.safetensors_index {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    UsageError(format!(
                        "cannot read --safetensors-index {}: {e}",
                        path.display()
                    ))
                })?;
                Some(weights_from_safetensors_index(&text).map_err(usage)?)
            }
            None => None,
        };
        // SGLang ranks split the whole checkpoint by tensor parallelism alone.
        let weights = checkpoint_total.map(|t| ByteSize::new(t.get() / u64::from(tp)));
        let draft_model = draft_model(args.draft_config.as_deref(), speculative_model(args))?;
        let checkpoint = match &args.checkpoint {
            Some(dir) => Some(read_checkpoint(dir)?),
            None => None,
        };
        let speculative = match &args.speculative_config {
            Some(json) => {
                let s = SpeculativeConfig::parse(json).map_err(usage)?;
                if args.num_speculative_tokens != 0
                    && args.num_speculative_tokens != s.num_speculative_tokens
                {
                    return Err(UsageError(format!(
                        "--num-speculative-tokens {} disagrees with --speculative-config's {}; give one",
                        args.num_speculative_tokens, s.num_speculative_tokens
                    ))
                    .into());
                }
                Some(s)
            }
            None => None,
        };
        Ok(match engine {
            PredictedEngine::Vllm => EngineFlags::Vllm(VllmFlags {
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
                pipeline_parallel_size: args.pipeline_parallel_size.max(1),
                data_parallel_size: args.data_parallel_size.max(1),
                enable_expert_parallel: args.enable_expert_parallel,
                num_speculative_tokens: speculative
                    .as_ref()
                    .map_or(args.num_speculative_tokens, |s| s.num_speculative_tokens),
                speculative_method: speculative.map(|s| s.method).or_else(|| {
                    // Speculative tokens alone are vLLM's MTP default for a model with MTP layers.
                    (args.num_speculative_tokens > 0).then_some(SpeculativeMethod::Mtp)
                }),
                language_model_only: args.language_model_only,
                disable_hybrid_kv_cache_manager: args.disable_hybrid_kv_cache_manager,
                version: match &args.vllm_version {
                    Some(v) => VllmVersion::parse(v).map_err(usage)?,
                    None => VllmVersion::LATEST,
                },
                device: match args.cpu_kvcache_space_gib {
                    Some(g) => VllmDevice::Cpu {
                        kvcache_space: ByteSize::gib(g),
                    },
                    None => VllmDevice::Gpu,
                },
                checkpoint: checkpoint.clone(),
                draft_model,
                overhead: OverheadOverrides {
                    activation_peak: args.activation_peak,
                    non_torch: args.non_torch_memory,
                    cudagraph: args.cudagraph_memory,
                    weights: None,
                    checkpoint_total,
                },
            }),
            PredictedEngine::Sglang => EngineFlags::Sglang(SglangFlags {
                mem_fraction_static: args.mem_fraction_static,
                chunked_prefill_size: args.chunked_prefill_size,
                tensor_parallel_size: tp,
                fp8_kv: KvCacheDtype::parse(&args.kv_cache_dtype).map_err(usage)?
                    != KvCacheDtype::Auto,
                page_size: args.page_size,
                max_running_requests: args.max_running_requests,
                context_length: args.max_model_len.map(Tokens::get),
                weights,
                checkpoint,
                ..SglangFlags::default()
            }),
            PredictedEngine::Llamacpp => {
                let t = GgmlKvType::parse(&args.cache_type).map_err(usage)?;
                EngineFlags::LlamaCpp(LlamaCppFlags {
                    n_ctx: args.ctx_size,
                    n_parallel: args.parallel,
                    unified: args.kv_unified,
                    cache_type_k: t,
                    cache_type_v: t,
                    swa_full: args.swa_full,
                    n_ubatch: args.ubatch_size,
                    fit: args.fit == "on",
                })
            }
        })
    }
}

/// The `model` of --speculative-config, if any.
fn speculative_model(args: &EngineArgs) -> Option<String> {
    let json = args.speculative_config.as_deref()?;
    SpeculativeConfig::parse(json).ok()?.model
}

/// The drafter's config: --draft-config, else config.json in the
/// speculative config's `model` when that is a local folder.
fn draft_model(
    flag: Option<&Path>,
    model: Option<String>,
) -> anyhow::Result<Option<Box<ModelConfig>>> {
    let path = match (flag, model) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(m)) if Path::new(&m).join("config.json").is_file() => {
            Path::new(&m).join("config.json")
        }
        _ => return Ok(None),
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        UsageError(format!(
            "cannot read the drafter's config {}: {e}",
            path.display()
        ))
    })?;
    let config = ModelConfig::from_json(&text)
        .map_err(|e| UsageError(format!("the drafter's config {}: {e}", path.display())))?;
    Ok(Some(Box::new(config)))
}

/// Largest safetensors header read (real ones are a few MB).
const MAX_HEADER: u64 = 256 << 20;

/// The tensors of the `*.safetensors` files in `dir`, from their headers.
fn read_checkpoint(dir: &Path) -> anyhow::Result<CheckpointTensors> {
    let bad = |why: String| UsageError(format!("--checkpoint {}: {why}", dir.display()));
    let entries = std::fs::read_dir(dir).map_err(|e| bad(format!("cannot read it ({e})")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(bad("has no *.safetensors files; pass the model folder".into()).into());
    }
    let mut headers = Vec::with_capacity(files.len());
    for path in &files {
        headers
            .push(safetensors_header(path).map_err(|e| bad(format!("{}: {e}", path.display())))?);
    }
    CheckpointTensors::from_headers(headers.iter().map(String::as_str))
        .map_err(|e| bad(e.to_string()).into())
}

/// The JSON header of a `.safetensors` file: an 8-byte little-endian length, then the text.
fn safetensors_header(path: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .map_err(|e| format!("too short for a safetensors file ({e})"))?;
    let n = u64::from_le_bytes(len);
    if n > MAX_HEADER {
        return Err(format!("a header of {n} bytes is not a safetensors header"));
    }
    let mut text = String::new();
    file.take(n)
        .read_to_string(&mut text)
        .map_err(|e| format!("unreadable header ({e})"))?;
    Ok(text)
}

fn usage(e: CapacityError) -> anyhow::Error {
    UsageError(e.to_string()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_names_map_to_modelled_engines() {
        assert_eq!(
            PredictedEngine::from_name("vLLM"),
            Some(PredictedEngine::Vllm)
        );
        assert_eq!(
            PredictedEngine::from_name("llama.cpp"),
            Some(PredictedEngine::Llamacpp)
        );
        assert_eq!(
            PredictedEngine::from_name("sglang"),
            Some(PredictedEngine::Sglang)
        );
        assert_eq!(PredictedEngine::from_name("tgi"), None);
    }
}
