//! llama.cpp `llama-server`: capacity is exactly what the flags say.

use serde::Serialize;
use speedmatrix_units::ByteSize;

use crate::CapacityError;
use crate::config::ModelConfig;
use crate::pool::{KvPool, SlotPool};

/// KV cell element types (`-ctk` / `-ctv`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GgmlKvType {
    /// f16 (default): 2 bytes.
    #[default]
    F16,
    /// f32: 4 bytes.
    F32,
    /// q8_0: 34 bytes per 32.
    Q8_0,
    /// q4_0: 18 bytes per 32.
    Q4_0,
}

impl GgmlKvType {
    /// Parses `f16`, `f32`, `q8_0`, `q4_0` (and `bf16` as 2 bytes).
    pub fn parse(text: &str) -> Result<Self, CapacityError> {
        Ok(match text.trim().to_ascii_lowercase().as_str() {
            "f16" | "bf16" => GgmlKvType::F16,
            "f32" => GgmlKvType::F32,
            "q8_0" => GgmlKvType::Q8_0,
            "q4_0" => GgmlKvType::Q4_0,
            _ => return Err(CapacityError::UnknownDtype(text.to_owned())),
        })
    }

    /// Bytes for `elements` values.
    pub const fn bytes(self, elements: u64) -> u64 {
        match self {
            GgmlKvType::F16 => 2 * elements,
            GgmlKvType::F32 => 4 * elements,
            GgmlKvType::Q8_0 => elements / 32 * 34,
            GgmlKvType::Q4_0 => elements / 32 * 18,
        }
    }
}

/// llama-server flags.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlamaCppFlags {
    /// `-c/--ctx-size` (0: the model's training context).
    pub n_ctx: u64,
    /// `-np/--parallel`.
    pub n_parallel: u32,
    /// `--kv-unified`.
    pub unified: bool,
    /// `-ctk`.
    pub cache_type_k: GgmlKvType,
    /// `-ctv`.
    pub cache_type_v: GgmlKvType,
}

impl Default for LlamaCppFlags {
    fn default() -> Self {
        LlamaCppFlags {
            n_ctx: 0,
            n_parallel: 1,
            unified: false,
            cache_type_k: GgmlKvType::F16,
            cache_type_v: GgmlKvType::F16,
        }
    }
}

/// What llama-server would allocate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlamaCppPrediction {
    /// KV cells (n_ctx padded to 256).
    pub n_ctx: u64,
    /// Cells per slot (`n_ctx_seq`).
    pub n_ctx_seq: u64,
    /// Slots.
    pub n_parallel: u32,
    /// Shared cells.
    pub unified: bool,
    /// Bytes of the attention KV cache ("llama_kv_cache: size = …").
    pub kv_bytes: ByteSize,
}

impl LlamaCppPrediction {
    /// The pool that decides cells.
    pub fn pool(&self) -> KvPool {
        KvPool::Slots(SlotPool {
            n_ctx: self.n_ctx,
            n_parallel: self.n_parallel,
            unified: self.unified,
        })
    }
}

/// Predicts llama-server's KV allocation.
pub fn predict_llamacpp(
    model: &ModelConfig,
    flags: &LlamaCppFlags,
) -> Result<LlamaCppPrediction, CapacityError> {
    let requested = if flags.n_ctx == 0 {
        model
            .max_position_embeddings
            .ok_or(CapacityError::MissingField {
                field: "max_position_embeddings (or pass n_ctx)",
            })?
    } else {
        flags.n_ctx
    };
    if flags.n_parallel == 0 {
        return Err(CapacityError::BadFlag {
            flag: "--parallel",
            value: "0".into(),
            why: "must be at least 1",
        });
    }
    let n_ctx = requested.div_ceil(256) * 256;
    let attn_layers = model.layers.iter().filter(|k| k.is_attention()).count() as u64;
    let heads = model.num_kv_heads;
    let per_cell = attn_layers
        * (flags.cache_type_k.bytes(heads * model.head_dim)
            + flags.cache_type_v.bytes(heads * model.head_dim_v));
    Ok(LlamaCppPrediction {
        n_ctx,
        n_ctx_seq: if flags.unified {
            n_ctx
        } else {
            n_ctx / u64::from(flags.n_parallel)
        },
        n_parallel: flags.n_parallel,
        unified: flags.unified,
        kv_bytes: ByteSize::new(per_cell * n_ctx),
    })
}
