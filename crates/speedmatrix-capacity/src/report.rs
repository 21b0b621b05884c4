//! Predicted and measured capacity side by side, and the grid the runner uses.

use serde::Serialize;

use crate::CapacityError;
use crate::config::ModelConfig;
use crate::gpu::Gpu;
use crate::llamacpp::{LlamaCppFlags, LlamaCppPrediction, predict_llamacpp};
use crate::pool::{BlockPool, CellVerdict, GridSpec, KvPool, SlotPool, TokenPool};
use crate::sglang::{SglangFlags, SglangPrediction, predict_sglang};
use crate::vllm::{VllmFlags, VllmLayout, VllmPrediction, predict_vllm};

/// Engine and its flags.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "engine")]
#[non_exhaustive]
pub enum EngineFlags {
    /// vLLM.
    Vllm(VllmFlags),
    /// SGLang.
    Sglang(SglangFlags),
    /// llama.cpp.
    LlamaCpp(LlamaCppFlags),
}

/// A prediction for one engine.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "engine")]
#[non_exhaustive]
pub enum Prediction {
    /// vLLM.
    Vllm(Box<VllmPrediction>),
    /// SGLang.
    Sglang(Box<SglangPrediction>),
    /// llama.cpp.
    LlamaCpp(LlamaCppPrediction),
}

/// Predicts an engine's KV pool for a model on a GPU.
pub fn predict(
    model: &ModelConfig,
    gpu: &Gpu,
    flags: &EngineFlags,
) -> Result<Prediction, CapacityError> {
    Ok(match flags {
        EngineFlags::Vllm(f) => Prediction::Vllm(Box::new(predict_vllm(model, gpu, f)?)),
        EngineFlags::Sglang(f) => Prediction::Sglang(Box::new(predict_sglang(model, gpu, f)?)),
        EngineFlags::LlamaCpp(f) => Prediction::LlamaCpp(predict_llamacpp(model, f)?),
    })
}

impl Prediction {
    /// The pool that decides cells.
    pub fn pool(&self) -> KvPool {
        match self {
            Prediction::Vllm(p) => KvPool::Blocks(BlockPool {
                layout: p.layout.clone(),
                num_blocks: p.num_blocks,
                max_num_seqs: Some(p.max_num_seqs),
                max_model_len: Some(p.max_model_len),
            }),
            Prediction::Sglang(p) => p.pool(),
            Prediction::LlamaCpp(p) => p.pool(),
        }
    }
}

/// A capacity a server reported about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "engine")]
#[non_exhaustive]
pub enum MeasuredCapacity {
    /// vLLM `vllm:cache_config_info` labels `num_gpu_blocks` and `block_size`.
    Vllm {
        /// `num_gpu_blocks`.
        num_gpu_blocks: u64,
        /// `block_size` (after hybrid alignment).
        block_size: u64,
    },
    /// SGLang `/get_server_info`.
    Sglang {
        /// `max_total_num_tokens`.
        max_total_num_tokens: u64,
        /// `max_running_requests`, when reported.
        max_running_requests: Option<u32>,
    },
    /// llama.cpp `/props` (`n_ctx`, slots) or startup log.
    LlamaCpp {
        /// `n_ctx`.
        n_ctx: u64,
        /// Slots.
        n_parallel: u32,
        /// `kv_unified`.
        unified: bool,
    },
}

/// Limits the server reported besides its KV size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ServerLimits {
    /// `max_num_seqs` / `max_running_requests`.
    pub max_num_seqs: Option<u32>,
    /// `max_model_len` (OpenAI `/v1/models`).
    pub max_model_len: Option<u64>,
}

impl MeasuredCapacity {
    /// The KV cache in tokens as the engine counts it: blocks × block size (vLLM), the token
    /// pool (SGLang), `n_ctx` (llama.cpp); `None` when the product overflows.
    pub fn tokens(&self) -> Option<u64> {
        match *self {
            MeasuredCapacity::Vllm {
                num_gpu_blocks,
                block_size,
            } => num_gpu_blocks.checked_mul(block_size),
            MeasuredCapacity::Sglang {
                max_total_num_tokens,
                ..
            } => Some(max_total_num_tokens),
            MeasuredCapacity::LlamaCpp { n_ctx, .. } => Some(n_ctx),
        }
    }

    /// The pool a measurement describes. For vLLM, the predicted layout (if given)
    /// says how requests consume blocks — hybrid models need it; without it every
    /// block is taken to hold `block_size` tokens of one full-attention group.
    pub fn pool(
        &self,
        predicted: Option<&Prediction>,
        limits: ServerLimits,
    ) -> Result<KvPool, CapacityError> {
        match *self {
            MeasuredCapacity::Vllm {
                num_gpu_blocks,
                block_size,
            } => {
                if num_gpu_blocks == 0 || block_size == 0 {
                    return Err(CapacityError::BadMeasurement(format!(
                        "num_gpu_blocks={num_gpu_blocks}, block_size={block_size}"
                    )));
                }
                let (layout, pred_mns, pred_len) = match predicted {
                    Some(Prediction::Vllm(p)) => (
                        rescale(&p.layout, block_size),
                        Some(p.max_num_seqs),
                        Some(p.max_model_len),
                    ),
                    _ => (VllmLayout::single_full_attention(block_size), None, None),
                };
                Ok(KvPool::Blocks(BlockPool {
                    layout,
                    num_blocks: num_gpu_blocks,
                    max_num_seqs: limits.max_num_seqs.or(pred_mns),
                    max_model_len: limits.max_model_len.or(pred_len),
                }))
            }
            MeasuredCapacity::Sglang {
                max_total_num_tokens,
                max_running_requests,
            } => {
                if max_total_num_tokens == 0 {
                    return Err(CapacityError::BadMeasurement(
                        "max_total_num_tokens=0".into(),
                    ));
                }
                let (page_size, state_slots) = match predicted {
                    Some(Prediction::Sglang(p)) => (p.flags.page_size, p.mamba_slots),
                    _ => (1, None),
                };
                Ok(KvPool::Tokens(TokenPool {
                    tokens: max_total_num_tokens,
                    page_size,
                    max_running_requests: max_running_requests.or(limits.max_num_seqs),
                    state_slots,
                    max_model_len: limits.max_model_len,
                }))
            }
            MeasuredCapacity::LlamaCpp {
                n_ctx,
                n_parallel,
                unified,
            } => {
                if n_ctx == 0 || n_parallel == 0 {
                    return Err(CapacityError::BadMeasurement(format!(
                        "n_ctx={n_ctx}, n_parallel={n_parallel}"
                    )));
                }
                Ok(KvPool::Slots(SlotPool {
                    n_ctx,
                    n_parallel,
                    unified,
                }))
            }
        }
    }
}

/// The predicted layout with the server's block size (vLLM may align differently
/// than predicted, e.g. a user `--block-size`): every group's block size scales by
/// the same ratio, as `_align_hybrid_block_size` + page unification do.
fn rescale(layout: &VllmLayout, block_size: u64) -> VllmLayout {
    let mut l = layout.clone();
    if l.block_size != block_size && l.block_size > 0 {
        for g in &mut l.groups {
            g.block_size = g.block_size * block_size / l.block_size;
        }
        l.block_size = block_size;
    }
    l
}

/// Where the grid's capacity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacitySource {
    /// The server's own figure.
    Measured,
    /// This crate's prediction.
    Predicted,
}

/// Measured vs predicted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityComparison {
    /// Measured pool tokens (`num_gpu_blocks × block_size`, `max_total_num_tokens`, `n_ctx`).
    pub measured_tokens: u64,
    /// Predicted pool tokens, same definition.
    pub predicted_tokens: u64,
    /// `measured − predicted`.
    pub difference_tokens: i64,
    /// `(measured − predicted) / predicted × 100`.
    pub difference_pct: f64,
    /// Measured blocks (vLLM).
    pub measured_blocks: Option<u64>,
    /// Predicted blocks (vLLM).
    pub predicted_blocks: Option<u64>,
    /// Measured block size (vLLM).
    pub measured_block_size: Option<u64>,
    /// Predicted block size (vLLM).
    pub predicted_block_size: Option<u64>,
}

/// The decided grid the runner uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityGrid {
    /// Which capacity decided the cells.
    pub source: CapacitySource,
    /// Pool that decided them.
    pub pool: KvPool,
    /// Pool size in tokens.
    pub pool_tokens: u64,
    /// Measured vs predicted, when both are known.
    pub comparison: Option<CapacityComparison>,
    /// Cells, row-major (contexts × concurrencies).
    pub cells: Vec<CellVerdict>,
}

/// Decides the grid from the measured capacity when there is one, else from the
/// prediction, and records their difference when both exist.
pub fn capacity_grid(
    predicted: Option<&Prediction>,
    measured: Option<&MeasuredCapacity>,
    limits: ServerLimits,
    spec: &GridSpec,
) -> Result<CapacityGrid, CapacityError> {
    let predicted_pool = predicted.map(Prediction::pool);
    let (source, pool) = match measured {
        Some(m) => (CapacitySource::Measured, m.pool(predicted, limits)?),
        None => match &predicted_pool {
            Some(p) => (CapacitySource::Predicted, apply_limits(p.clone(), limits)),
            None => {
                return Err(CapacityError::BadMeasurement(
                    "neither a measured nor a predicted capacity was given".into(),
                ));
            }
        },
    };
    let comparison = match (&predicted_pool, measured) {
        (Some(p), Some(_)) => Some(compare(p, &pool)),
        _ => None,
    };
    Ok(CapacityGrid {
        source,
        pool_tokens: pool.pool_tokens(),
        cells: pool.grid(spec),
        pool,
        comparison,
    })
}

fn apply_limits(pool: KvPool, limits: ServerLimits) -> KvPool {
    match pool {
        KvPool::Blocks(mut b) => {
            b.max_num_seqs = limits.max_num_seqs.or(b.max_num_seqs);
            b.max_model_len = limits.max_model_len.or(b.max_model_len);
            KvPool::Blocks(b)
        }
        KvPool::Tokens(mut t) => {
            t.max_running_requests = limits.max_num_seqs.or(t.max_running_requests);
            t.max_model_len = limits.max_model_len.or(t.max_model_len);
            KvPool::Tokens(t)
        }
        other => other,
    }
}

fn compare(predicted: &KvPool, measured: &KvPool) -> CapacityComparison {
    let p = predicted.pool_tokens();
    let m = measured.pool_tokens();
    let blocks = |pool: &KvPool| match pool {
        KvPool::Blocks(b) => (Some(b.num_blocks), Some(b.layout.block_size)),
        _ => (None, None),
    };
    let (pb, pbs) = blocks(predicted);
    let (mb, mbs) = blocks(measured);
    let diff = m as i128 - p as i128;
    CapacityComparison {
        measured_tokens: m,
        predicted_tokens: p,
        difference_tokens: diff.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
        difference_pct: if p == 0 {
            0.0
        } else {
            diff as f64 / p as f64 * 100.0
        },
        measured_blocks: mb,
        predicted_blocks: pb,
        measured_block_size: mbs,
        predicted_block_size: pbs,
    }
}
