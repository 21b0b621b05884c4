//! vLLM (v1 engine): block size, KV groups, memory budget, number of blocks and the
//! two startup log figures, following `kv_cache_interface.py`, `kv_cache_planning.py`,
//! `Platform._align_hybrid_block_size`, `gpu_worker.py` and `cpu_worker.py`.

use serde::Serialize;
use speedmatrix_units::ByteSize;

use crate::config::{LayerKind, ModelConfig};
use crate::gpu::{Gpu, gib_bytes};
use crate::{CapacityError, Dtype, KvCacheDtype};

mod groups;
mod layout;
mod log;
mod memory;
mod version;

pub use self::groups::pipeline_partition;
pub use self::layout::{GroupKind, KvGroup, LayerCost, PipelineStage, VllmLayout};
pub use self::log::{LoggedFigure, VllmStartupLog};
pub use self::memory::{Estimate, KvBudgetSource, MemoryBudget, TermKind, batch_defaults};
use self::memory::{Stage, memory_budget};
use self::version::{
    BATCH_TIER_160, CHUNKED_HMA_OFF, CHUNKED_HMA_ON, COHERE2_WINDOW_PLUS_ONE, CUDAGRAPH_BUDGET,
    GROUP_RATIO_1_5, IN_FLIGHT_TOKENS, LOG_CONCURRENCY, LOG_PER_GROUP, MAMBA2_SPEC_ROWS,
    PAGE_UNIFICATION, SAMPLER_FLASHINFER, SAMPLER_NATIVE_SORT, SAMPLER_TRITON, SNAPSHOT_AFTER_NCCL,
};
pub use self::version::{PreRelease, RuleUse, VLLM_RULES, VllmRule, VllmVersion, rules_for};
use crate::weights::{CheckpointTensors, WeightPlacement};

/// How vLLM keeps recurrent (Mamba/GDN) states for prefix caching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MambaCacheMode {
    /// One state per running request (no prefix caching).
    None,
    /// States at block boundaries; the default with `--enable-prefix-caching`.
    Align,
    /// A state per block for every cached block.
    All,
}

/// How vLLM drafts speculative tokens (`--speculative-config`'s `method`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpeculativeMethod {
    /// The model's own multi-token-prediction layers (`mtp`, and the older
    /// per-model names such as `deepseek_mtp`, `qwen3_next_mtp`): their
    /// full-attention layers join the model's KV groups.
    Mtp,
    /// EAGLE / EAGLE-3 heads and DFlash drafters: a separate small
    /// checkpoint whose attention layers join the KV groups (given its config).
    Eagle,
    /// A separate draft model: its attention layers join the KV groups
    /// (given its config).
    DraftModel,
    /// N-gram or suffix decoding: no drafter, no KV.
    NoDrafter,
    /// Any other method, by its name: its drafter's KV is not modelled.
    Other(String),
}

/// vLLM's `--speculative-config` JSON, the fields capacity depends on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpeculativeConfig {
    /// The method.
    pub method: SpeculativeMethod,
    /// Tokens drafted per step.
    pub num_speculative_tokens: u64,
    /// The drafter checkpoint (`model`), for EAGLE, DFlash and draft models.
    pub model: Option<String>,
}

impl SpeculativeConfig {
    /// Parses the JSON object given to vLLM's `--speculative-config`, e.g.
    /// `{"method": "mtp", "num_speculative_tokens": 2}`. Without a `method`,
    /// vLLM infers one from `model`: a name with `eagle` is EAGLE, another
    /// model a draft model, none at all MTP.
    ///
    /// # Errors
    /// [`CapacityError::BadFlag`] for text that is not such an object.
    pub fn parse(json: &str) -> Result<Self, CapacityError> {
        let bad = |why| CapacityError::BadFlag {
            flag: "--speculative-config",
            value: json.to_owned(),
            why,
        };
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|_| bad("expected a JSON object"))?;
        let obj = v.as_object().ok_or_else(|| bad("expected a JSON object"))?;
        let n = obj
            .get("num_speculative_tokens")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| bad("needs num_speculative_tokens, a whole number"))?;
        let model = obj.get("model").and_then(serde_json::Value::as_str);
        let method = match obj.get("method").and_then(serde_json::Value::as_str) {
            Some(m) => SpeculativeMethod::from_name(m),
            None => match model {
                Some(m) if m.to_ascii_lowercase().contains("eagle") => SpeculativeMethod::Eagle,
                Some(_) => SpeculativeMethod::DraftModel,
                None => SpeculativeMethod::Mtp,
            },
        };
        Ok(SpeculativeConfig {
            method,
            num_speculative_tokens: n,
            model: model.map(str::to_owned),
        })
    }
}

impl SpeculativeMethod {
    fn from_name(name: &str) -> Self {
        let n = name.trim().to_ascii_lowercase();
        match n.as_str() {
            "mtp" => SpeculativeMethod::Mtp,
            _ if n.ends_with("_mtp") => SpeculativeMethod::Mtp,
            "eagle" | "eagle3" | "dflash" | "dspark" => SpeculativeMethod::Eagle,
            "draft_model" => SpeculativeMethod::DraftModel,
            "ngram" | "suffix" | "ngram_gpu" => SpeculativeMethod::NoDrafter,
            _ => SpeculativeMethod::Other(n),
        }
    }
}

/// Where vLLM runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VllmDevice {
    /// A CUDA/ROCm GPU: the budget comes from utilization and profiling.
    Gpu,
    /// The CPU backend with `VLLM_CPU_KVCACHE_SPACE` set: the KV cache gets exactly
    /// that many bytes, the block size defaults to 128 and KV quantization is off.
    Cpu {
        /// `VLLM_CPU_KVCACHE_SPACE` in bytes (the variable is in GiB).
        kvcache_space: ByteSize,
    },
}

/// Overrides for the non-KV terms that cannot be derived from a config (calibrate
/// them from one boot log of the same GPU, model and version).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct OverheadOverrides {
    /// Transient torch peak of the profiling forward + sampler warm-up.
    pub activation_peak: Option<ByteSize>,
    /// Non-torch allocations (cuBLAS/attention workspaces, NCCL, allocator slack).
    pub non_torch: Option<ByteSize>,
    /// CUDA-graph memory estimate.
    pub cudagraph: Option<ByteSize>,
    /// Exact weight bytes per rank (e.g. 'Model loading took').
    pub weights: Option<ByteSize>,
    /// The whole checkpoint's bytes (`metadata.total_size` of
    /// `model.safetensors.index.json`): each rank's share follows the counted
    /// weights' split.
    pub checkpoint_total: Option<ByteSize>,
}

/// The vLLM flags that change KV capacity. `Default` is `vllm serve` with no flags.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VllmFlags {
    /// `--gpu-memory-utilization` (default 0.9).
    pub gpu_memory_utilization: f64,
    /// `--max-model-len`; default: the config's `max_position_embeddings`.
    pub max_model_len: Option<u64>,
    /// `--max-num-seqs`; default 256, or 1024 on GPUs ≥ 70 GiB other than A100.
    pub max_num_seqs: Option<u32>,
    /// `--max-num-batched-tokens`; default 2048, or 8192 on GPUs ≥ 70 GiB other than A100.
    pub max_num_batched_tokens: Option<u64>,
    /// `--kv-cache-dtype`.
    pub kv_cache_dtype: KvCacheDtype,
    /// `--block-size` (default 16 on GPU, 128 on CPU; hybrid models raise it).
    pub block_size: Option<u64>,
    /// `--mamba-block-size` (only with mamba cache mode `all`).
    pub mamba_block_size: Option<u64>,
    /// `--enable-prefix-caching`.
    pub enable_prefix_caching: bool,
    /// `--mamba-cache-mode`; default: `align` with prefix caching, else `none`.
    pub mamba_cache_mode: Option<MambaCacheMode>,
    /// `--enforce-eager`: no CUDA graphs.
    pub enforce_eager: bool,
    /// `--kv-cache-memory-bytes`: the KV budget verbatim.
    pub kv_cache_memory_bytes: Option<ByteSize>,
    /// `--num-gpu-blocks-override`.
    pub num_gpu_blocks_override: Option<u64>,
    /// `--tensor-parallel-size`.
    pub tensor_parallel_size: u32,
    /// `--pipeline-parallel-size`: layers are split over stages (`get_pp_indices`)
    /// and the stage with the fewest blocks decides.
    pub pipeline_parallel_size: u32,
    /// `--data-parallel-size`: replicas, each with its own KV pool (the
    /// prediction is one replica's); with expert parallelism the experts are
    /// spread over all `tp × dp` ranks.
    pub data_parallel_size: u32,
    /// `--enable-expert-parallel`: routed experts are split over `tp × dp`
    /// ranks whole, instead of each being split by tensor parallelism.
    pub enable_expert_parallel: bool,
    /// Speculative tokens (`num_speculative_tokens` of `--speculative-config`):
    /// extra state blocks per recurrent group, and wider GDN conv states.
    pub num_speculative_tokens: u64,
    /// The speculative method (`method` of `--speculative-config`), when speculating.
    pub speculative_method: Option<SpeculativeMethod>,
    /// `--language-model-only` (or all multimodal limits 0): no vision tower.
    pub language_model_only: bool,
    /// `--disable-hybrid-kv-cache-manager`.
    pub disable_hybrid_kv_cache_manager: bool,
    /// Engine release.
    pub version: VllmVersion,
    /// GPU or CPU backend.
    pub device: VllmDevice,
    /// Calibrated non-KV terms.
    pub overhead: OverheadOverrides,
    /// The drafter's config for EAGLE, DFlash and draft-model speculation
    /// (the `model` of `--speculative-config`): its attention layers join the
    /// KV groups with their own heads, and its weights load on the last stage.
    pub draft_model: Option<Box<ModelConfig>>,
    /// The checkpoint's tensors (safetensors headers): exact weight bytes
    /// per rank instead of counting from the config.
    #[serde(skip)]
    pub checkpoint: Option<CheckpointTensors>,
}

impl Default for VllmFlags {
    fn default() -> Self {
        VllmFlags {
            gpu_memory_utilization: 0.9,
            max_model_len: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            kv_cache_dtype: KvCacheDtype::Auto,
            block_size: None,
            mamba_block_size: None,
            enable_prefix_caching: false,
            mamba_cache_mode: None,
            enforce_eager: false,
            kv_cache_memory_bytes: None,
            num_gpu_blocks_override: None,
            tensor_parallel_size: 1,
            pipeline_parallel_size: 1,
            data_parallel_size: 1,
            enable_expert_parallel: false,
            num_speculative_tokens: 0,
            speculative_method: None,
            language_model_only: false,
            disable_hybrid_kv_cache_manager: false,
            version: VllmVersion::LATEST,
            device: VllmDevice::Gpu,
            overhead: OverheadOverrides::default(),
            draft_model: None,
            checkpoint: None,
        }
    }
}

/// Which formula produced the "GPU KV cache size: N tokens" line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormula {
    /// v1 ≤ 0.8: `num_blocks × block_size`.
    BlocksTimesBlockSize,
    /// 0.9 … 0.20.0: `num_blocks // num_groups × min block size`.
    PerGroupBlocks,
    /// ≥ 0.20.1: `int(max_concurrency × max_model_len)`.
    ConcurrencyTimesMaxLen,
}

/// Whether vLLM would start: one request of `max_model_len` must fit in the usable blocks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StartupCheck {
    /// One max-length request fits.
    pub fits: bool,
    /// Bytes that request needs.
    pub needed: ByteSize,
    /// Bytes available after the null block.
    pub usable: ByteSize,
    /// Longest `max_model_len` that would fit.
    pub estimated_max_model_len: u64,
}

/// What vLLM would report at startup.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VllmPrediction {
    /// Memory budget.
    pub budget: MemoryBudget,
    /// Pool layout.
    pub layout: VllmLayout,
    /// `num_gpu_blocks`.
    pub num_blocks: u64,
    /// `max_model_len` in effect.
    pub max_model_len: u64,
    /// `max_num_seqs` in effect.
    pub max_num_seqs: u32,
    /// Blocks one `max_model_len` request needs.
    pub blocks_per_request_at_max_len: u64,
    /// "Maximum concurrency for L tokens per request: X x".
    pub max_concurrency: f64,
    /// "GPU KV cache size: N tokens".
    pub kv_cache_size_tokens: u64,
    /// Formula used for that figure.
    pub log_formula: LogFormula,
    /// The version the rules were taken for, and each version-dependent
    /// rule of [`VLLM_RULES`] with whether it applied.
    pub version: VllmVersion,
    /// The rules, as `version` has them.
    pub rules: Vec<RuleUse>,
    /// What was assumed about `version` (nightly, a source build, a
    /// pre-release); `None` for a plain release.
    pub version_assumption: Option<String>,
    /// Startup admission check.
    pub startup: StartupCheck,
    /// Blocks each pipeline stage's memory holds (one entry without pipeline
    /// parallelism); `num_blocks` is the smallest.
    pub stage_blocks: Vec<u64>,
    /// The stage whose memory decided `num_blocks`.
    pub deciding_stage: u32,
}

/// Predicts vLLM's KV pool for a model on a device.
pub fn predict_vllm(
    model: &ModelConfig,
    gpu: &Gpu,
    flags: &VllmFlags,
) -> Result<VllmPrediction, CapacityError> {
    check_flags(flags)?;
    let (mnbt, mns) = batch_defaults(gpu, flags);
    let flags = VllmFlags {
        max_num_batched_tokens: Some(mnbt),
        max_num_seqs: Some(mns),
        ..flags.clone()
    };
    let layout = VllmLayout::plan(model, &flags)?;
    let last = layout.stages.len().saturating_sub(1);
    let budgets = layout
        .stages
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let stage = Stage {
                layers: s.first_layer as usize..s.end_layer as usize,
                first: i == 0,
                last: i == last,
            };
            memory_budget(model, gpu, &flags, &layout, &stage)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let max_model_len = flags
        .max_model_len
        .or(model.max_position_embeddings)
        .ok_or(CapacityError::MissingField {
            field: "max_position_embeddings (or pass max_model_len)",
        })?;
    Ok(capacity_from_stage_budgets(
        layout,
        budgets,
        max_model_len,
        mns,
        &flags,
    ))
}

/// Like [`capacity_from_budget`] with one budget per pipeline stage (in
/// stage order): each stage fits `available / its bytes per block` blocks,
/// and the fewest decide (`get_kv_cache_configs` takes the minimum over
/// workers). The prediction's `budget` is the deciding stage's.
pub fn capacity_from_stage_budgets(
    layout: VllmLayout,
    budgets: Vec<MemoryBudget>,
    max_model_len: u64,
    max_num_seqs: u32,
    flags: &VllmFlags,
) -> VllmPrediction {
    let blocks_of = |i: usize, b: &MemoryBudget| {
        let bpb = layout
            .stages
            .get(i)
            .map_or(layout.bytes_per_block, |s| s.bytes_per_block)
            .max(1);
        b.available_kv.get() / bpb
    };
    let deciding = budgets
        .iter()
        .enumerate()
        .min_by_key(|(i, b)| blocks_of(*i, b))
        .map_or(0, |(i, _)| i);
    let stage_blocks: Vec<u64> = budgets
        .iter()
        .enumerate()
        .map(|(i, b)| blocks_of(i, b))
        .collect();
    let mut layout = layout;
    if let Some(s) = layout.stages.get(deciding) {
        layout.bytes_per_block = s.bytes_per_block;
    }
    let budget = budgets.into_iter().nth(deciding);
    let mut p = capacity_from_budget(
        layout,
        budget.unwrap_or_else(|| budget_from_available_gib(0.0)),
        max_model_len,
        max_num_seqs,
        flags,
    );
    p.stage_blocks = stage_blocks;
    p.deciding_stage = deciding as u32;
    p
}

/// Finishes a prediction from a known KV budget (e.g. "Available KV cache memory: X GiB"
/// read from a log): number of blocks, concurrency and the logged token figure.
pub fn capacity_from_budget(
    layout: VllmLayout,
    budget: MemoryBudget,
    max_model_len: u64,
    max_num_seqs: u32,
    flags: &VllmFlags,
) -> VllmPrediction {
    let bpb = layout.bytes_per_block.max(1);
    let num_blocks = flags
        .num_gpu_blocks_override
        .unwrap_or(budget.available_kv.get() / bpb);
    let bpr = layout.blocks_per_request(max_model_len).max(1);
    let max_concurrency = num_blocks as f64 / bpr as f64;
    let (kv_cache_size_tokens, log_formula) = log_tokens(
        &layout,
        num_blocks,
        max_concurrency,
        max_model_len,
        flags.version,
    );
    let usable = (num_blocks.saturating_sub(1)) * bpb;
    let needed = bpr * bpb;
    let startup = StartupCheck {
        fits: needed <= usable,
        needed: ByteSize::new(needed),
        usable: ByteSize::new(usable),
        estimated_max_model_len: longest_fitting(&layout, usable, max_model_len),
    };
    VllmPrediction {
        budget,
        layout,
        num_blocks,
        max_model_len,
        max_num_seqs,
        blocks_per_request_at_max_len: bpr,
        max_concurrency,
        kv_cache_size_tokens,
        log_formula,
        version: flags.version,
        rules: rules_for(flags.version),
        version_assumption: flags.version.assumption(),
        startup,
        stage_blocks: vec![num_blocks],
        deciding_stage: 0,
    }
}

fn log_tokens(
    layout: &VllmLayout,
    num_blocks: u64,
    conc: f64,
    max_len: u64,
    v: VllmVersion,
) -> (u64, LogFormula) {
    if v.has(LOG_CONCURRENCY) {
        (
            (conc * max_len as f64).floor() as u64,
            LogFormula::ConcurrencyTimesMaxLen,
        )
    } else if v.has(LOG_PER_GROUP) {
        let groups = layout.groups.len().max(1) as u64;
        (
            num_blocks / groups * layout.min_block_size(),
            LogFormula::PerGroupBlocks,
        )
    } else {
        (
            num_blocks * layout.min_block_size(),
            LogFormula::BlocksTimesBlockSize,
        )
    }
}

fn longest_fitting(layout: &VllmLayout, usable: u64, max_len: u64) -> u64 {
    let fits = |l: u64| layout.blocks_per_request(l) * layout.bytes_per_block <= usable;
    if !fits(1) {
        return 0;
    }
    let (mut lo, mut hi) = (1, max_len);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) { lo = mid } else { hi = mid - 1 }
    }
    lo
}

fn check_flags(flags: &VllmFlags) -> Result<(), CapacityError> {
    let u = flags.gpu_memory_utilization;
    if !(u > 0.0 && u <= 1.0) {
        return Err(CapacityError::BadFlag {
            flag: "--gpu-memory-utilization",
            value: u.to_string(),
            why: "must be in (0, 1]",
        });
    }
    if flags.block_size == Some(0) {
        return Err(CapacityError::BadFlag {
            flag: "--block-size",
            value: "0".into(),
            why: "must be at least 1",
        });
    }
    if flags.max_model_len == Some(0) {
        return Err(CapacityError::BadFlag {
            flag: "--max-model-len",
            value: "0".into(),
            why: "must be at least 1",
        });
    }
    Ok(())
}

/// Convenience for tests and callers that read "Available KV cache memory: X GiB" from a log.
pub fn budget_from_available_gib(gib: f64) -> MemoryBudget {
    let bytes = gib_bytes(gib);
    let none = |why: &str| Estimate::given(ByteSize::new(0), why);
    MemoryBudget {
        device_total: bytes,
        utilization: 1.0,
        requested: bytes,
        weights: none("not needed: KV budget given"),
        activation_peak: none("not needed: KV budget given"),
        non_torch: none("not needed: KV budget given"),
        cudagraph: none("not needed: KV budget given"),
        available_kv: bytes,
        source: KvBudgetSource::KvCacheMemoryBytes,
    }
}

/// The element dtype vLLM would store KV in, for display.
pub fn kv_element_dtype(model: &ModelConfig, kv: KvCacheDtype) -> Dtype {
    match kv {
        KvCacheDtype::Auto => model.dtype,
        _ => Dtype::Fp8,
    }
}
