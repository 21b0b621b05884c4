//! SGLang: `ModelRunner.profile_max_num_token` and the hybrid (GDN/Mamba) split.

use serde::Serialize;
use speedmatrix_units::ByteSize;

use crate::CapacityError;
use crate::config::{LayerKind, ModelConfig};
use crate::gpu::Gpu;
use crate::pool::{KvPool, TokenPool};
use crate::weights::{CheckpointTensors, WeightPlacement};

/// SGLang flags that change KV capacity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SglangFlags {
    /// `--mem-fraction-static`; `None` derives it as SGLang does from the
    /// GPU's memory, tensor parallelism, chunked prefill and CUDA-graph sizes
    /// ([`default_mem_fraction_static`]).
    pub mem_fraction_static: Option<f64>,
    /// `--chunked-prefill-size`; `None`: SGLang's default for the GPU's memory tier.
    pub chunked_prefill_size: Option<u64>,
    /// `--tp-size`.
    pub tensor_parallel_size: u32,
    /// `--kv-cache-dtype` is fp8.
    pub fp8_kv: bool,
    /// `--page-size` (default 1).
    pub page_size: u64,
    /// `--max-total-tokens`.
    pub max_total_tokens: Option<u64>,
    /// `--max-running-requests`.
    pub max_running_requests: Option<u32>,
    /// `--mamba-full-memory-ratio` (default 0.9).
    pub mamba_full_memory_ratio: f64,
    /// `--max-mamba-cache-size`.
    pub max_mamba_cache_size: Option<u64>,
    /// `--context-length`.
    pub context_length: Option<u64>,
    /// Exact weight bytes per rank, if known.
    pub weights: Option<ByteSize>,
    /// The checkpoint's tensors (safetensors headers), for exact bytes per rank.
    #[serde(skip)]
    pub checkpoint: Option<CheckpointTensors>,
    /// Memory already in use before weights load (CUDA context, NCCL);
    /// default 0.25 GiB, and 0.13 GiB more under tensor parallelism (the
    /// "Init torch distributed … mem usage" SGLang logs).
    pub preexisting: Option<ByteSize>,
}

impl Default for SglangFlags {
    fn default() -> Self {
        SglangFlags {
            mem_fraction_static: None,
            chunked_prefill_size: None,
            tensor_parallel_size: 1,
            fp8_kv: false,
            page_size: 1,
            max_total_tokens: None,
            max_running_requests: None,
            mamba_full_memory_ratio: 0.9,
            max_mamba_cache_size: None,
            context_length: None,
            weights: None,
            checkpoint: None,
            preexisting: None,
        }
    }
}

/// What SGLang would log: "KV Cache is allocated. #tokens: N".
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SglangPrediction {
    /// `mem_fraction_static` in effect, given or derived.
    pub mem_fraction_static: f64,
    /// How it was obtained.
    pub mem_fraction_basis: String,
    /// Free memory before weights (estimate: device total − pre-existing use).
    pub free_before_weights: ByteSize,
    /// Weights per rank.
    pub weights: ByteSize,
    /// `rest_memory = free_after_weights − free_before × (1 − mem_fraction_static)`.
    pub rest: ByteSize,
    /// Bytes per token over all attention layers (`cell_size`).
    pub cell_bytes: u64,
    /// `max_total_num_tokens` (the full-attention pool for sliding-window models).
    pub max_total_num_tokens: u64,
    /// The sliding-window pool's tokens, for models with both kinds of layer.
    pub swa_tokens: Option<u64>,
    /// `max_running_requests` as SGLang derives it (or as given, capped).
    pub max_running_requests: u64,
    /// Recurrent-state slots for hybrid models (`max_mamba_cache_size`).
    pub mamba_slots: Option<u64>,
    /// Context limit.
    pub context_length: Option<u64>,
    /// Flags used.
    pub flags: SglangFlags,
}

impl SglangPrediction {
    /// The pool that decides cells.
    pub fn pool(&self) -> KvPool {
        KvPool::Tokens(TokenPool {
            tokens: self.max_total_num_tokens,
            page_size: self.flags.page_size,
            max_running_requests: Some(
                u32::try_from(self.max_running_requests).unwrap_or(u32::MAX),
            ),
            state_slots: self.mamba_slots,
            max_model_len: self.context_length,
        })
    }
}

/// SGLang's chunked-prefill size and decode CUDA-graph batch for a GPU of
/// `gpu_mib` MiB (`handle_gpu_memory_settings`, arg_groups/memory_hook.py,
/// v0.5.23).
fn memory_tier(gpu_mib: f64, tp: u64) -> (u64, u64) {
    let gib = |g: f64| g * 1024.0;
    let (chunk, small_bs, big_bs) = if gpu_mib < gib(20.0) {
        (2048, 8, 8)
    } else if gpu_mib < gib(35.0) {
        (4096, 48, 160)
    } else if gpu_mib < gib(60.0) {
        (4096, 32, 160)
    } else if gpu_mib < gib(160.0) {
        (8192, 256, 512)
    } else {
        (16384, 512, 512)
    };
    (chunk, if tp < 4 { small_bs } else { big_bs })
}

/// Prefill CUDA-graph token sizes SGLang captures up to `max` (4..32 by 4,
/// 48..256 by 16, 288..512 by 32, 576..1024 by 64, 1280..4096 by 256, then by 512).
fn prefill_graph_sizes(max: u64) -> u64 {
    let steps: [(u64, u64, u64); 6] = [
        (4, 32, 4),
        (48, 256, 16),
        (288, 512, 32),
        (576, 1024, 64),
        (1280, 4096, 256),
        (4608, u64::MAX, 512),
    ];
    steps
        .iter()
        .map(|&(from, to, step)| {
            let hi = to.min(max);
            if hi < from { 0 } else { (hi - from) / step + 1 }
        })
        .sum()
}

/// SGLang's default `--mem-fraction-static` (v0.5.23,
/// `arg_groups/memory_hook.py`): the GPU's memory (nvidia-smi's total, MiB)
/// less a reserve for activations (1.5 × the chunked-prefill size), NCCL
/// (1 GiB per 8 ranks), decode CUDA graphs (2 MB per batch size) and prefill
/// CUDA graphs (8 MB per captured size; 1.5 GiB for MLA), at least 10 GiB on
/// GPUs over 60 GiB. Returns the fraction and how it was reached.
pub fn default_mem_fraction_static(
    model: &ModelConfig,
    gpu: &Gpu,
    flags: &SglangFlags,
) -> (f64, String) {
    // nvidia-smi's total is about 0.5 GiB above what CUDA reports.
    let gpu_mib = gpu.memory.get() as f64 / (1u64 << 20) as f64 + 512.0;
    let tp = u64::from(flags.tensor_parallel_size.max(1));
    let (tier_chunk, max_bs) = memory_tier(gpu_mib, tp);
    let chunk = flags.chunked_prefill_size.unwrap_or(tier_chunk);
    let prefill_graphs = if model.mla.is_some() {
        1536.0
    } else {
        8.0 * prefill_graph_sizes(chunk) as f64
    };
    let mut reserved = 512.0
        + chunk.max(2048) as f64 * 1.5
        + tp as f64 / 8.0 * 1024.0
        + max_bs as f64 * 2.0
        + prefill_graphs;
    if gpu_mib > 60.0 * 1024.0 {
        reserved = reserved.max(10.0 * 1024.0);
    }
    let fraction = ((gpu_mib - reserved) / gpu_mib * 1000.0).round() / 1000.0;
    (
        fraction,
        format!(
            "derived as SGLang v0.5.23 does: ({gpu_mib:.0} MiB − {reserved:.0} MiB reserved for \
             chunked prefill {chunk}, NCCL, decode graphs up to batch {max_bs} and prefill graphs) / \
             {gpu_mib:.0} MiB"
        ),
    )
}

/// Predicts SGLang's token pool.
pub fn predict_sglang(
    model: &ModelConfig,
    gpu: &Gpu,
    flags: &SglangFlags,
) -> Result<SglangPrediction, CapacityError> {
    let (f, basis) = match flags.mem_fraction_static {
        Some(f) => (f, "given (--mem-fraction-static)".to_owned()),
        None => default_mem_fraction_static(model, gpu, flags),
    };
    if !(f > 0.0 && f < 1.0) {
        return Err(CapacityError::BadFlag {
            flag: "--mem-fraction-static",
            value: f.to_string(),
            why: "must be in (0, 1)",
        });
    }
    let tp = u64::from(flags.tensor_parallel_size.max(1));
    let default_pre = (256 << 20) + if tp > 1 { 133 << 20 } else { 0 };
    let pre = flags.preexisting.map_or(default_pre, ByteSize::get);
    let free_before = gpu.memory.get().saturating_sub(pre);
    let weights = flags.weights.unwrap_or_else(|| {
        let placement = WeightPlacement::tensor_parallel(model, flags.tensor_parallel_size, true);
        match &flags.checkpoint {
            Some(c) => c.bytes_on(model, &placement, false).per_rank,
            None => model.estimate_weights_on(&placement).per_rank,
        }
    });
    // "Load weight end … mem usage" also holds the attention backend's
    // workspace (FlashInfer: 256 MiB), allocated while the model is built.
    let free_after = free_before.saturating_sub(weights.get() + LOAD_WORKSPACE);
    let reserved = (free_before as f64 * (1.0 - f)) as u64;
    let rest = free_after.saturating_sub(reserved);
    if rest == 0 {
        return Err(CapacityError::NoKvMemory {
            requested_gib: ByteSize::new(free_before - reserved.min(free_before)).as_gib_f64(),
            non_kv_gib: weights.as_gib_f64(),
        });
    }
    let pool = token_pool(model, flags, tp, rest);
    let context = flags.context_length.or(model.max_position_embeddings);
    let running = max_running_requests(flags, pool.tokens, context, pool.mamba_slots);
    Ok(SglangPrediction {
        mem_fraction_static: f,
        mem_fraction_basis: basis,
        free_before_weights: ByteSize::new(free_before),
        weights,
        rest: ByteSize::new(rest),
        cell_bytes: pool.cell,
        max_total_num_tokens: pool.tokens,
        swa_tokens: pool.swa_tokens,
        mamba_slots: pool.mamba_slots,
        max_running_requests: running,
        context_length: context,
        flags: SglangFlags {
            mem_fraction_static: Some(f),
            ..flags.clone()
        },
    })
}

/// Memory SGLang's model load takes beyond the weights: the FlashInfer
/// attention workspace (256 MiB), seen as the gap between "Load weight end …
/// mem usage" and the checkpoint's bytes per rank.
const LOAD_WORKSPACE: u64 = 256 << 20;

/// `max_total_num_tokens` from the free memory SGLang measured before and
/// after loading the weights (GiB, as its log prints them: "Load weight
/// begin. avail mem=…", "Load weight end. … avail mem=…"): `rest = after −
/// before × (1 − mem_fraction_static)`, over the bytes one token costs.
///
/// # Errors
/// [`CapacityError::BadFlag`] without a `mem_fraction_static` in (0, 1);
/// [`CapacityError::NoKvMemory`] when nothing is left.
pub fn sglang_tokens_from_memory(
    model: &ModelConfig,
    flags: &SglangFlags,
    free_before_gib: f64,
    free_after_gib: f64,
) -> Result<u64, CapacityError> {
    let f = flags.mem_fraction_static.unwrap_or(0.0);
    if !(f > 0.0 && f < 1.0) {
        return Err(CapacityError::BadFlag {
            flag: "--mem-fraction-static",
            value: f.to_string(),
            why: "must be given, in (0, 1), to size the pool from logged memory",
        });
    }
    let rest_gib = free_after_gib - free_before_gib * (1.0 - f);
    if rest_gib <= 0.0 {
        return Err(CapacityError::NoKvMemory {
            requested_gib: free_before_gib * f,
            non_kv_gib: free_before_gib - free_after_gib,
        });
    }
    let rest = (rest_gib * (1u64 << 30) as f64) as u64;
    let tp = u64::from(flags.tensor_parallel_size.max(1));
    Ok(token_pool(model, flags, tp, rest).tokens)
}

struct Pool {
    cell: u64,
    tokens: u64,
    swa_tokens: Option<u64>,
    mamba_slots: Option<u64>,
}

/// The token pool `rest` bytes hold (`KVCacheConfigurator` and the pool
/// configurators, v0.5.23): recurrent-state slots first for hybrid models
/// (`ratio/(1+ratio)` of the rest, one slot the pool's padding), then K and V
/// per token over the full-attention layers plus, for sliding-window models,
/// `swa_full_tokens_ratio` (0.8) of a token over the sliding layers
/// (`HybridSWAPoolConfigurator`), rounded down to the page size.
fn token_pool(model: &ModelConfig, flags: &SglangFlags, tp: u64, rest: u64) -> Pool {
    let elt = if flags.fp8_kv { 1 } else { model.dtype.bytes() };
    let per_layer = match model.mla {
        // DeepSeek V3.2 / GLM-5 sparse attention: with fp8, the scaled latent
        // (fp8 values, a scale per 128, bf16 RoPE) and the indexer's keys.
        Some(m) if m.indexer_head_dim.is_some() => {
            let latent = if flags.fp8_kv {
                m.kv_lora_rank + m.kv_lora_rank / 128 * 4 + m.qk_rope_head_dim * 2
            } else {
                m.latent_dim() * elt
            };
            latent + m.indexer_head_dim.map_or(0, |d| d + d / 128 * 4)
        }
        Some(m) => m.latent_dim() * elt,
        None => (model.num_kv_heads / tp).max(1) * (model.head_dim + model.head_dim_v) * elt,
    };
    let count = |f: fn(&LayerKind) -> bool| model.layers.iter().filter(|k| f(k)).count() as u64;
    let swa_layers = count(|k| matches!(k, LayerKind::SlidingWindow { .. }));
    let full_layers = count(|k| k.is_attention()) - swa_layers;
    let r = SWA_FULL_TOKENS_RATIO;
    // All-sliding models have no ratio: every layer is in the one pool.
    let (cell_full, cell_swa) = match (full_layers, swa_layers) {
        (0, n) => (per_layer * n, 0.0),
        (f, n) => (per_layer * f, r * (per_layer * n) as f64),
    };
    let recurrent = count(|k| k.is_recurrent());
    let (kv_budget, mamba_slots) = if recurrent > 0 {
        let ratio = flags.mamba_full_memory_ratio;
        let per_request = (state_bytes(model, tp) * recurrent).max(1);
        let slots = match flags.max_mamba_cache_size {
            Some(m) => m,
            None => {
                let budget = rest as f64 * ratio / (1.0 + ratio);
                ((budget - per_request as f64) / per_request as f64).max(0.0) as u64
            }
        };
        (
            rest.saturating_sub((slots + 1).saturating_mul(per_request)),
            Some(slots),
        )
    } else {
        (rest, None)
    };
    let cell = cell_full as f64 + cell_swa;
    let mut tokens = (kv_budget as f64 / cell.max(1.0)) as u64;
    if let Some(m) = flags.max_total_tokens {
        tokens = tokens.min(m);
    }
    let page = flags.page_size.max(1);
    tokens = tokens / page * page;
    let swa_tokens =
        (full_layers > 0 && swa_layers > 0).then(|| ((tokens as f64 * r) as u64) / page * page);
    Pool {
        cell: cell.round() as u64,
        tokens,
        swa_tokens,
        mamba_slots,
    }
}

/// `--swa-full-tokens-ratio`'s default: the sliding-window pool holds 0.8 of
/// the full pool's tokens.
const SWA_FULL_TOKENS_RATIO: f64 = 0.8;

/// `resolve_max_num_reqs` (v0.5.23): `--max-running-requests` or
/// `clamp(tokens / context × 512, 2048, 4096)`, at most half the tokens,
/// and for hybrid models at most the state slots over the mamba ratio
/// (5 with the default radix cache strategy).
fn max_running_requests(
    flags: &SglangFlags,
    tokens: u64,
    context: Option<u64>,
    slots: Option<u64>,
) -> u64 {
    let estimated = match context.filter(|c| *c > 0) {
        Some(c) => ((tokens as f64 / c as f64 * 512.0) as u64).clamp(2048, 4096),
        None => 2048,
    };
    let reqs = flags
        .max_running_requests
        .map_or(estimated, |r| u64::from(r).max(1))
        .min(tokens / 2);
    match slots {
        Some(s) => reqs.min(s / 5),
        None => reqs,
    }
}

fn state_bytes(model: &ModelConfig, tp: u64) -> u64 {
    if let Some(g) = model.gdn {
        let conv_dim = 2 * g.num_key_heads * g.key_head_dim + g.num_value_heads * g.value_head_dim;
        return g.conv_kernel.saturating_sub(1) * conv_dim / tp * model.dtype.bytes()
            + (g.num_value_heads / tp).max(1)
                * g.key_head_dim
                * g.value_head_dim
                * model.ssm_dtype.bytes();
    }
    if let Some(m) = model.mamba {
        return m.conv_kernel.saturating_sub(1) * (m.d_inner + 2 * m.n_groups * m.state_size) / tp
            * model.dtype.bytes()
            + (m.num_heads / tp).max(1) * m.head_dim * m.state_size * model.ssm_dtype.bytes();
    }
    0
}
