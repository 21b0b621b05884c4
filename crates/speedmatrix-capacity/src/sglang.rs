//! SGLang: `ModelRunner.profile_max_num_token` and the hybrid (GDN/Mamba) split.

use serde::Serialize;
use speedmatrix_units::ByteSize;

use crate::CapacityError;
use crate::config::{LayerKind, ModelConfig};
use crate::gpu::Gpu;
use crate::pool::{KvPool, TokenPool};

/// SGLang flags that change KV capacity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SglangFlags {
    /// `--mem-fraction-static` (SGLang derives a default from GPU size; 0.88 here).
    pub mem_fraction_static: f64,
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
    /// Memory already in use before weights load (CUDA context etc.); default 0.5 GiB.
    pub preexisting: Option<ByteSize>,
}

impl Default for SglangFlags {
    fn default() -> Self {
        SglangFlags {
            mem_fraction_static: 0.88,
            tensor_parallel_size: 1,
            fp8_kv: false,
            page_size: 1,
            max_total_tokens: None,
            max_running_requests: None,
            mamba_full_memory_ratio: 0.9,
            max_mamba_cache_size: None,
            context_length: None,
            weights: None,
            preexisting: None,
        }
    }
}

/// What SGLang would log: "KV Cache is allocated. #tokens: N".
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SglangPrediction {
    /// Free memory before weights (estimate: device total − pre-existing use).
    pub free_before_weights: ByteSize,
    /// Weights per rank.
    pub weights: ByteSize,
    /// `rest_memory = free_after_weights − free_before × (1 − mem_fraction_static)`.
    pub rest: ByteSize,
    /// Bytes per token over all attention layers (`cell_size`).
    pub cell_bytes: u64,
    /// `max_total_num_tokens`.
    pub max_total_num_tokens: u64,
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
            max_running_requests: self.flags.max_running_requests,
            state_slots: self.mamba_slots,
            max_model_len: self.context_length,
        })
    }
}

/// Predicts SGLang's token pool.
pub fn predict_sglang(
    model: &ModelConfig,
    gpu: &Gpu,
    flags: &SglangFlags,
) -> Result<SglangPrediction, CapacityError> {
    let f = flags.mem_fraction_static;
    if !(f > 0.0 && f < 1.0) {
        return Err(CapacityError::BadFlag {
            flag: "--mem-fraction-static",
            value: f.to_string(),
            why: "must be in (0, 1)",
        });
    }
    let tp = u64::from(flags.tensor_parallel_size.max(1));
    let pre = flags.preexisting.unwrap_or(ByteSize::new(512 << 20)).get();
    let free_before = gpu.memory.get().saturating_sub(pre);
    let weights = flags.weights.unwrap_or_else(|| {
        model
            .estimate_weights(true, flags.tensor_parallel_size)
            .per_rank
    });
    let reserved = (free_before as f64 * (1.0 - f)) as u64;
    let rest = free_before
        .saturating_sub(weights.get())
        .saturating_sub(reserved);
    if rest == 0 {
        return Err(CapacityError::NoKvMemory {
            requested_gib: ByteSize::new(free_before - reserved.min(free_before)).as_gib_f64(),
            non_kv_gib: weights.as_gib_f64(),
        });
    }
    let elt = if flags.fp8_kv { 1 } else { model.dtype.bytes() };
    let attn_layers = model.layers.iter().filter(|k| k.is_attention()).count() as u64;
    let cell = match model.mla {
        Some(m) => m.latent_dim() * attn_layers * elt,
        None => (model.num_kv_heads / tp).max(1) * model.head_dim * attn_layers * 2 * elt,
    };
    let recurrent = model
        .layers
        .iter()
        .filter(|k| matches!(k, LayerKind::LinearAttention | LayerKind::Mamba))
        .count() as u64;
    // `handle_max_mamba_cache`: the state pool takes `r/(1+r)` of the rest (or the
    // explicit `--max-mamba-cache-size`), and what the states occupy is removed
    // before the token pool is sized.
    let (kv_budget, mamba_slots) = if recurrent > 0 {
        let r = flags.mamba_full_memory_ratio;
        let per_request = (state_bytes(model, tp) * recurrent).max(1);
        let slots = match flags.max_mamba_cache_size {
            Some(m) => m,
            None => (rest as f64 * r / (1.0 + r) / per_request as f64) as u64,
        };
        (
            rest.saturating_sub(slots.saturating_mul(per_request)),
            Some(slots),
        )
    } else {
        (rest, None)
    };
    let mut tokens = kv_budget / cell.max(1);
    if let Some(m) = flags.max_total_tokens {
        tokens = tokens.min(m);
    }
    let page = flags.page_size.max(1);
    tokens = tokens / page * page;
    Ok(SglangPrediction {
        free_before_weights: ByteSize::new(free_before),
        weights,
        rest: ByteSize::new(rest),
        cell_bytes: cell,
        max_total_num_tokens: tokens,
        mamba_slots,
        context_length: flags.context_length.or(model.max_position_embeddings),
        flags: flags.clone(),
    })
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
