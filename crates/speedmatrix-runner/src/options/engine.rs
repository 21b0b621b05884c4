//! The engine's launch flags an offline KV-capacity prediction follows, spelled as the engines
//! spell them: shared by `speedmatrix run --model-config`, `capacity`, `predict` and a study's
//! `[run]` table, so every command predicts the same server the same way.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use speedmatrix_capacity::{
    CheckpointTensors, EngineFlags, GgmlKvType, Gpu, GpuCatalog, KvCacheDtype, LlamaCppFlags,
    MambaCacheMode, ModelConfig, OverheadOverrides, SglangFlags, SpeculativeConfig,
    SpeculativeMethod, VllmDevice, VllmFlags, VllmVersion, weights_from_safetensors_index,
};
use speedmatrix_units::{ByteSize, Engine, Tokens};

use super::{limits, text};
use crate::RunnerError;

/// vLLM `--mamba-cache-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum MambaMode {
    /// One state per running request.
    None,
    /// States at block boundaries (default with prefix caching).
    Align,
    /// A state for every cached block.
    All,
}

/// On or off (llama.cpp's `--fit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Switch {
    /// On.
    #[default]
    On,
    /// Off.
    Off,
}

/// llama.cpp's `--flash-attn` (`-fa`): `auto` (llama-server's default since 2025) turns the
/// fused kernels on wherever the backend has them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum FlashAttn {
    /// On where the backend supports it.
    #[default]
    Auto,
    /// On.
    On,
    /// Off: attention writes its score matrix to memory (priced by `predict`).
    Off,
}

impl FlashAttn {
    /// How `engine` computes attention under this flag: only llama.cpp (and Ollama's
    /// llama.cpp runner) can be told to write the scores to memory; the others' kernels are
    /// always fused.
    pub fn attention(self, engine: Engine) -> speedmatrix_predict::AttentionKernel {
        match (self, engine) {
            (FlashAttn::Off, Engine::LlamaCpp | Engine::Ollama) => {
                speedmatrix_predict::AttentionKernel::Materialized
            }
            _ => speedmatrix_predict::AttentionKernel::Fused,
        }
    }
}

/// The server's engine flags, for the capacity prediction. Field by field the flags of
/// `speedmatrix capacity`; in a study's `[run]` table the same names without dashes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::Args))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub struct EngineOptions {
    /// GPU: a catalog key (rtx3090, rtx5090, l40s, a100-80, h100, h200, b200, gb10, mi300x,
    /// arc-pro-b60…; `speedmatrix capacity --list-gpus` lists all), the name nvidia-smi,
    /// rocm-smi or xpu-smi prints ("NVIDIA GeForce RTX 3090", "NVIDIA A100-SXM4-80GB", "AMD
    /// Instinct MI300X", "Intel(R) Arc(TM) Pro B60 Graphics"), or the memory the runtime sees
    /// on it (e.g. 23.5GiB).
    #[cfg_attr(feature = "clap", arg(long, default_value = "rtx3090"))]
    pub gpu: String,
    /// A JSON file of GPUs that adds to the built-in catalog or overrides its entries, in the
    /// catalog's own shape: {"gpus": [{"key": "my-card", "names": ["ACME T9000"], "memory":
    /// {"gib": 47.5, "source": "torch.cuda.mem_get_info on our driver"}, "bandwidth_gb_s": 900,
    /// "dense_tflops": {"bf16": 200}}]}.
    #[cfg_attr(feature = "clap", arg(long, value_name = "FILE"))]
    pub gpu_catalog: Option<PathBuf>,
    /// vLLM --gpu-memory-utilization.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::gpu_memory_utilization::parse, default_value_t = 0.9))]
    #[serde(deserialize_with = "limits::gpu_memory_utilization::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub gpu_memory_utilization: f64,
    /// --max-model-len (default: the config's max_position_embeddings).
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::max_model_len::parse))]
    #[serde(deserialize_with = "limits::max_model_len::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub max_model_len: Option<Tokens>,
    /// vLLM --max-num-seqs.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::max_num_seqs::parse))]
    #[serde(deserialize_with = "limits::max_num_seqs::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub max_num_seqs: Option<u32>,
    /// vLLM --max-num-batched-tokens.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::max_num_batched_tokens::parse))]
    #[serde(deserialize_with = "limits::max_num_batched_tokens::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub max_num_batched_tokens: Option<u64>,
    /// --kv-cache-dtype (auto, fp8, fp8_e5m2, fp8_per_token_head, nvfp4).
    #[cfg_attr(feature = "clap", arg(long, default_value = "auto"))]
    pub kv_cache_dtype: String,
    /// vLLM --block-size.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::block_size::parse))]
    #[serde(deserialize_with = "limits::block_size::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub block_size: Option<u64>,
    /// vLLM --enable-prefix-caching.
    #[cfg_attr(feature = "clap", arg(long))]
    pub enable_prefix_caching: bool,
    /// vLLM --mamba-cache-mode.
    #[cfg_attr(feature = "clap", arg(long, value_enum))]
    pub mamba_cache_mode: Option<MambaMode>,
    /// vLLM --enforce-eager (no CUDA graphs).
    #[cfg_attr(feature = "clap", arg(long))]
    pub enforce_eager: bool,
    /// vLLM --kv-cache-memory-bytes (e.g. 12GiB).
    #[cfg_attr(feature = "clap", arg(long))]
    #[serde(deserialize_with = "text::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub kv_cache_memory_bytes: Option<ByteSize>,
    /// --tensor-parallel-size: KV heads, weights and linear layers split over ranks (KV heads
    /// are replicated when there are more ranks than heads; an MLA latent is on every rank).
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::tensor_parallel_size::parse, default_value_t = 1))]
    #[serde(deserialize_with = "limits::tensor_parallel_size::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub tensor_parallel_size: u32,
    /// vLLM --pipeline-parallel-size: layers split over stages as vLLM does (get_pp_indices);
    /// each stage sizes its own pool and the one with the fewest blocks decides.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::pipeline_parallel_size::parse, default_value_t = 1))]
    #[serde(deserialize_with = "limits::pipeline_parallel_size::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub pipeline_parallel_size: u32,
    /// vLLM --data-parallel-size: replicas with a KV pool each (the prediction is one
    /// replica's; the server holds this many times as many requests).
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::data_parallel_size::parse, default_value_t = 1))]
    #[serde(deserialize_with = "limits::data_parallel_size::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub data_parallel_size: u32,
    /// vLLM --enable-expert-parallel: routed experts spread whole over tensor × data ranks.
    #[cfg_attr(feature = "clap", arg(long))]
    pub enable_expert_parallel: bool,
    /// Speculative tokens (MTP/EAGLE), when --speculative-config does not give them.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::num_speculative_tokens::parse, default_value_t = 0))]
    #[serde(deserialize_with = "limits::num_speculative_tokens::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub num_speculative_tokens: u64,
    /// vLLM --speculative-config, the same JSON, e.g. '{"method": "mtp",
    /// "num_speculative_tokens": 2}': MTP drafter layers join the KV groups, and every method
    /// widens recurrent (GDN/Mamba2) states by the speculative tokens. EAGLE, DFlash and
    /// draft-model drafters join with their own heads when their config.json is found: in the
    /// "model" folder, or given by --draft-config.
    #[cfg_attr(feature = "clap", arg(long, value_name = "JSON"))]
    pub speculative_config: Option<String>,
    /// The drafter's config.json (EAGLE, DFlash or draft model), when --speculative-config's
    /// "model" is not a local folder.
    #[cfg_attr(feature = "clap", arg(long, value_name = "PATH"))]
    pub draft_config: Option<PathBuf>,
    /// vLLM --language-model-only (skip the vision tower).
    #[cfg_attr(feature = "clap", arg(long))]
    pub language_model_only: bool,
    /// vLLM --disable-hybrid-kv-cache-manager.
    #[cfg_attr(feature = "clap", arg(long))]
    pub disable_hybrid_kv_cache_manager: bool,
    /// vLLM version whose behaviour to model, as `vllm --version` or its log prints it (PEP 440:
    /// 0.21.0, 0.21.0rc1, 0.20.1rc1.dev16+g1a2b3c4, 0.21.0+cu130) or `nightly`. A pre-release sorts
    /// below its release, so that release's rule changes are not applied (the output says so).
    /// [default: 0.32.0, or the version a --from-log log names]
    #[cfg_attr(feature = "clap", arg(long))]
    #[serde(deserialize_with = "text::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub vllm_version: Option<String>,
    /// vLLM CPU backend: VLLM_CPU_KVCACHE_SPACE in GiB (selects the CPU path).
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::cpu_kvcache_space_gib::parse))]
    #[serde(deserialize_with = "limits::cpu_kvcache_space_gib::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub cpu_kvcache_space_gib: Option<u64>,
    /// model.safetensors.index.json: the checkpoint's exact total bytes (split over ranks like
    /// the counted weights) instead of counting from shapes.
    #[cfg_attr(feature = "clap", arg(long, value_name = "PATH"))]
    pub safetensors_index: Option<PathBuf>,
    /// The model folder (or Hugging Face cache snapshot): the headers of its *.safetensors
    /// files give each tensor's exact bytes, placed on ranks by name (embedding, LM head,
    /// vision tower, MTP layers, experts, layer index). Only the headers are read.
    #[cfg_attr(feature = "clap", arg(long, value_name = "DIR"))]
    pub checkpoint: Option<PathBuf>,
    /// Calibrated activation peak (e.g. 1.2GiB) instead of the estimate.
    #[cfg_attr(feature = "clap", arg(long))]
    #[serde(deserialize_with = "text::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub activation_peak: Option<ByteSize>,
    /// Calibrated non-torch memory instead of the estimate.
    #[cfg_attr(feature = "clap", arg(long))]
    #[serde(deserialize_with = "text::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub non_torch_memory: Option<ByteSize>,
    /// Calibrated CUDA-graph memory instead of the estimate.
    #[cfg_attr(feature = "clap", arg(long))]
    #[serde(deserialize_with = "text::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub cudagraph_memory: Option<ByteSize>,

    /// SGLang --mem-fraction-static [default: derived as SGLang does from the GPU's memory,
    /// --tensor-parallel-size and the chunked-prefill and CUDA-graph sizes; e.g. 0.83 on an H100].
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::mem_fraction_static::parse))]
    #[serde(deserialize_with = "limits::mem_fraction_static::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub mem_fraction_static: Option<f64>,
    /// SGLang --chunked-prefill-size [default: SGLang's for the GPU's memory: 2048 under 20 GiB,
    /// 4096 under 60 GiB, 8192 under 160 GiB, else 16384].
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::chunked_prefill_size::parse))]
    #[serde(deserialize_with = "limits::chunked_prefill_size::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub chunked_prefill_size: Option<u64>,
    /// SGLang --page-size.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::page_size::parse, default_value_t = 1))]
    #[serde(deserialize_with = "limits::page_size::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub page_size: u64,
    /// SGLang --max-running-requests.
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::max_running_requests::parse))]
    #[serde(deserialize_with = "limits::max_running_requests::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub max_running_requests: Option<u32>,

    /// llama.cpp --ctx-size (0: the model's training context, per slot with --fit on).
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::ctx_size::parse, default_value_t = 0))]
    #[serde(deserialize_with = "limits::ctx_size::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub ctx_size: u64,
    /// llama.cpp --parallel [default: llama-server's auto: 4 slots sharing a unified cache].
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::parallel::parse))]
    #[serde(deserialize_with = "limits::parallel::opt")]
    #[cfg_attr(feature = "schemars", schemars(with = "Option<text::ScalarText>"))]
    pub parallel: Option<u32>,
    /// llama.cpp --kv-unified.
    #[cfg_attr(feature = "clap", arg(long))]
    pub kv_unified: bool,
    /// llama.cpp --swa-full: sliding-window layers keep every cell.
    #[cfg_attr(feature = "clap", arg(long))]
    pub swa_full: bool,
    /// llama.cpp --ubatch-size (sliding-window caches hold one ubatch beyond the window;
    /// `predict` prefills in chunks of it).
    #[cfg_attr(feature = "clap", arg(long, value_parser = limits::ubatch_size::parse, default_value_t = 512))]
    #[serde(deserialize_with = "limits::ubatch_size::one")]
    #[cfg_attr(feature = "schemars", schemars(with = "text::ScalarText"))]
    pub ubatch_size: u64,
    /// llama.cpp --flash-attn: off makes `predict` price attention's score matrix going
    /// through memory (slower prefill and long-context decode).
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value = "auto"))]
    pub flash_attn: FlashAttn,
    /// llama.cpp --fit off: with --ctx-size 0 the training context is shared by the slots
    /// instead of given to each.
    #[cfg_attr(feature = "clap", arg(long, value_enum, default_value = "on"))]
    pub fit: Switch,
    /// llama.cpp -ctk / -ctv.
    #[cfg_attr(feature = "clap", arg(long, default_value = "f16"))]
    pub cache_type: String,
}

impl Default for EngineOptions {
    /// The flags' defaults.
    fn default() -> Self {
        EngineOptions {
            gpu: "rtx3090".into(),
            gpu_catalog: None,
            gpu_memory_utilization: 0.9,
            max_model_len: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            kv_cache_dtype: "auto".into(),
            block_size: None,
            enable_prefix_caching: false,
            mamba_cache_mode: None,
            enforce_eager: false,
            kv_cache_memory_bytes: None,
            tensor_parallel_size: 1,
            pipeline_parallel_size: 1,
            data_parallel_size: 1,
            enable_expert_parallel: false,
            num_speculative_tokens: 0,
            speculative_config: None,
            draft_config: None,
            language_model_only: false,
            disable_hybrid_kv_cache_manager: false,
            vllm_version: None,
            cpu_kvcache_space_gib: None,
            safetensors_index: None,
            checkpoint: None,
            activation_peak: None,
            non_torch_memory: None,
            cudagraph_memory: None,
            mem_fraction_static: None,
            chunked_prefill_size: None,
            page_size: 1,
            max_running_requests: None,
            ctx_size: 0,
            parallel: None,
            kv_unified: false,
            swa_full: false,
            ubatch_size: 512,
            flash_attn: FlashAttn::Auto,
            fit: Switch::On,
            cache_type: "f16".into(),
        }
    }
}

/// An unusable option, in the flag's words.
fn bad(message: String) -> RunnerError {
    RunnerError::BadOption(message)
}

impl EngineOptions {
    /// The catalog the options name: the built-in one, extended by `--gpu-catalog`.
    pub fn gpu_catalog(&self) -> Result<GpuCatalog, RunnerError> {
        let builtin = GpuCatalog::builtin().map_err(|e| bad(e.to_string()))?;
        let Some(path) = &self.gpu_catalog else {
            return Ok(builtin.clone());
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(format!("cannot read --gpu-catalog {}: {e}", path.display())))?;
        let user = GpuCatalog::from_json(&text)
            .map_err(|e| bad(format!("--gpu-catalog {}: {e}", path.display())))?;
        Ok(builtin.extended_by(&user))
    }

    /// The GPU the options name.
    pub fn gpu(&self) -> Result<Gpu, RunnerError> {
        self.gpu_catalog()?
            .lookup(&self.gpu)
            .map_err(|e| bad(format!("--gpu {}: {e}", self.gpu)))
    }

    /// The flags of `engine` for the capacity predictor; an engine whose KV sizing is not
    /// modelled is an error naming those that are.
    pub fn engine_flags(&self, engine: Engine) -> Result<EngineFlags, RunnerError> {
        let tp = self.tensor_parallel_size.max(1);
        let checkpoint_total = match &self.safetensors_index {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    bad(format!(
                        "cannot read --safetensors-index {}: {e}",
                        path.display()
                    ))
                })?;
                Some(weights_from_safetensors_index(&text).map_err(|e| bad(e.to_string()))?)
            }
            None => None,
        };
        // SGLang ranks split the whole checkpoint by tensor parallelism alone.
        let weights = checkpoint_total.map(|t| ByteSize::new(t.get() / u64::from(tp)));
        let draft_model = draft_model(self.draft_config.as_deref(), self.speculative_model())?;
        let checkpoint = match &self.checkpoint {
            Some(dir) => Some(read_checkpoint(dir)?),
            None => None,
        };
        let speculative = self.speculative()?;
        let kv_dtype = || KvCacheDtype::parse(&self.kv_cache_dtype).map_err(|e| bad(e.to_string()));
        Ok(match engine {
            Engine::Vllm => EngineFlags::Vllm(VllmFlags {
                gpu_memory_utilization: self.gpu_memory_utilization,
                max_model_len: self.max_model_len.map(Tokens::get),
                max_num_seqs: self.max_num_seqs,
                max_num_batched_tokens: self.max_num_batched_tokens,
                kv_cache_dtype: kv_dtype()?,
                block_size: self.block_size,
                mamba_block_size: None,
                enable_prefix_caching: self.enable_prefix_caching,
                mamba_cache_mode: self.mamba_cache_mode.map(|m| match m {
                    MambaMode::None => MambaCacheMode::None,
                    MambaMode::Align => MambaCacheMode::Align,
                    MambaMode::All => MambaCacheMode::All,
                }),
                enforce_eager: self.enforce_eager,
                kv_cache_memory_bytes: self.kv_cache_memory_bytes,
                num_gpu_blocks_override: None,
                tensor_parallel_size: tp,
                pipeline_parallel_size: self.pipeline_parallel_size.max(1),
                data_parallel_size: self.data_parallel_size.max(1),
                enable_expert_parallel: self.enable_expert_parallel,
                num_speculative_tokens: speculative
                    .as_ref()
                    .map_or(self.num_speculative_tokens, |s| s.num_speculative_tokens),
                speculative_method: speculative.map(|s| s.method).or_else(|| {
                    // Speculative tokens alone are vLLM's MTP default for a model with MTP layers.
                    (self.num_speculative_tokens > 0).then_some(SpeculativeMethod::Mtp)
                }),
                language_model_only: self.language_model_only,
                disable_hybrid_kv_cache_manager: self.disable_hybrid_kv_cache_manager,
                version: match &self.vllm_version {
                    Some(v) => VllmVersion::parse(v).map_err(|e| bad(e.to_string()))?,
                    None => VllmVersion::LATEST,
                },
                device: match self.cpu_kvcache_space_gib {
                    Some(g) => VllmDevice::Cpu {
                        kvcache_space: ByteSize::gib(g),
                    },
                    None => VllmDevice::Gpu,
                },
                checkpoint: checkpoint.clone(),
                draft_model,
                overhead: OverheadOverrides {
                    activation_peak: self.activation_peak,
                    non_torch: self.non_torch_memory,
                    cudagraph: self.cudagraph_memory,
                    weights: None,
                    checkpoint_total,
                },
            }),
            Engine::Sglang => EngineFlags::Sglang(SglangFlags {
                mem_fraction_static: self.mem_fraction_static,
                chunked_prefill_size: self.chunked_prefill_size,
                tensor_parallel_size: tp,
                fp8_kv: kv_dtype()? != KvCacheDtype::Auto,
                page_size: self.page_size,
                max_running_requests: self.max_running_requests,
                context_length: self.max_model_len.map(Tokens::get),
                weights,
                checkpoint,
                ..SglangFlags::default()
            }),
            Engine::LlamaCpp => {
                let t = GgmlKvType::parse(&self.cache_type).map_err(|e| bad(e.to_string()))?;
                EngineFlags::LlamaCpp(LlamaCppFlags {
                    n_ctx: self.ctx_size,
                    n_parallel: self.parallel,
                    unified: self.kv_unified,
                    cache_type_k: t,
                    cache_type_v: t,
                    swa_full: self.swa_full,
                    n_ubatch: self.ubatch_size,
                    fit: self.fit == Switch::On,
                })
            }
            other => {
                return Err(bad(format!(
                    "--engine {other}: KV capacity is predicted by the rules of {}, {} and {} \
                     only; name one of them or leave the prediction out",
                    Engine::Vllm,
                    Engine::Sglang,
                    Engine::LlamaCpp
                )));
            }
        })
    }

    /// `--speculative-config`, checked against `--num-speculative-tokens`.
    fn speculative(&self) -> Result<Option<SpeculativeConfig>, RunnerError> {
        let Some(json) = &self.speculative_config else {
            return Ok(None);
        };
        let s = SpeculativeConfig::parse(json).map_err(|e| bad(e.to_string()))?;
        if self.num_speculative_tokens != 0
            && self.num_speculative_tokens != s.num_speculative_tokens
        {
            return Err(bad(format!(
                "--num-speculative-tokens {} disagrees with --speculative-config's {}; give one",
                self.num_speculative_tokens, s.num_speculative_tokens
            )));
        }
        Ok(Some(s))
    }

    /// The `model` of `--speculative-config`, if any.
    fn speculative_model(&self) -> Option<String> {
        let json = self.speculative_config.as_deref()?;
        SpeculativeConfig::parse(json).ok()?.model
    }
}

/// The drafter's config: `--draft-config`, else config.json in the
/// speculative config's `model` when that is a local folder.
fn draft_model(
    flag: Option<&Path>,
    model: Option<String>,
) -> Result<Option<Box<ModelConfig>>, RunnerError> {
    let path = match (flag, model) {
        (Some(p), _) => p.to_path_buf(),
        (None, Some(m)) if Path::new(&m).join("config.json").is_file() => {
            Path::new(&m).join("config.json")
        }
        _ => return Ok(None),
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        bad(format!(
            "cannot read the drafter's config {}: {e}",
            path.display()
        ))
    })?;
    let config = ModelConfig::from_json(&text)
        .map_err(|e| bad(format!("the drafter's config {}: {e}", path.display())))?;
    Ok(Some(Box::new(config)))
}

/// Largest safetensors header read (real ones are a few MB).
const MAX_HEADER: u64 = 256 << 20;

/// The tensors of the `*.safetensors` files in `dir`, from their headers.
fn read_checkpoint(dir: &Path) -> Result<CheckpointTensors, RunnerError> {
    let fail = |why: String| bad(format!("--checkpoint {}: {why}", dir.display()));
    let entries = std::fs::read_dir(dir).map_err(|e| fail(format!("cannot read it ({e})")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(fail(
            "has no *.safetensors files; pass the model folder".into(),
        ));
    }
    let mut headers = Vec::with_capacity(files.len());
    for path in &files {
        headers
            .push(safetensors_header(path).map_err(|e| fail(format!("{}: {e}", path.display())))?);
    }
    CheckpointTensors::from_headers(headers.iter().map(String::as_str))
        .map_err(|e| fail(e.to_string()))
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
