//! llama.cpp `llama-server`: capacity is exactly what the flags say.

use serde::Serialize;
use speedmatrix_units::ByteSize;

use crate::CapacityError;
use crate::config::{LayerKind, ModelConfig};
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
    /// `-c/--ctx-size` (0: the model's training context, per stream with `--fit`).
    pub n_ctx: u64,
    /// `-np/--parallel`; `None` is llama-server's auto: 4 slots sharing one
    /// unified cache (`server.cpp`, since PR #16736).
    pub n_parallel: Option<u32>,
    /// `--kv-unified` (implied by the automatic slot count).
    pub unified: bool,
    /// `-ctk`.
    pub cache_type_k: GgmlKvType,
    /// `-ctv`.
    pub cache_type_v: GgmlKvType,
    /// `--swa-full`: sliding-window layers keep every cell.
    pub swa_full: bool,
    /// `-ub/--ubatch-size` (default 512): sliding-window caches hold one ubatch more.
    pub n_ubatch: u64,
    /// `--fit` (on by default): with `-c 0`, each stream starts from the
    /// training context; memory may then lower it (not modelled).
    pub fit: bool,
}

impl Default for LlamaCppFlags {
    fn default() -> Self {
        LlamaCppFlags {
            n_ctx: 0,
            n_parallel: Some(1),
            unified: false,
            cache_type_k: GgmlKvType::F16,
            cache_type_v: GgmlKvType::F16,
            swa_full: false,
            n_ubatch: 512,
            fit: true,
        }
    }
}

impl LlamaCppFlags {
    /// Sequences one cache serves and whether they share it: llama-server's automatic slot
    /// count is 4 sharing one unified cache; `-np N` gives N, unified under `--kv-unified`.
    fn sequences(&self) -> (u64, bool) {
        match self.n_parallel {
            None => (4, true),
            Some(n) => (u64::from(n.max(1)), self.unified),
        }
    }

    /// Cells a stream's cache keeps for a sliding-window (or chunked) layer of `window`
    /// tokens, before the stream's context caps it: `llama_kv_cache_iswa` sizes it
    /// `pad256(window × (unified ? n_parallel : 1) + n_ubatch)`, one ubatch beyond the
    /// windows it serves, and uses its cells as a ring (`None` under `--swa-full`: every
    /// cell of the context).
    pub fn swa_cells(&self, window: u64) -> Option<u64> {
        if self.swa_full {
            return None;
        }
        let (n_seq, unified) = self.sequences();
        let want = window * if unified { n_seq } else { 1 } + self.n_ubatch;
        Some(want.div_ceil(PAD) * PAD)
    }
}

/// What llama-server would allocate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LlamaCppPrediction {
    /// KV cells in all (`n_ctx` after padding: `n_ctx_seq` × streams).
    pub n_ctx: u64,
    /// Cells per stream (`n_ctx_seq`; a slot's context, capped at the
    /// training context in `/props`).
    pub n_ctx_seq: u64,
    /// Slots.
    pub n_parallel: u32,
    /// Shared cells.
    pub unified: bool,
    /// Cells per stream of the sliding-window layers, when the model has them.
    pub swa_cells: Option<u64>,
    /// Bytes of the attention KV cache (the "llama_kv_cache: size = …" lines together).
    pub kv_bytes: ByteSize,
    /// Bytes of the recurrent states (f32, one cell per sequence:
    /// "llama_memory_recurrent: size = …"), 0 without recurrent layers.
    pub recurrent_bytes: ByteSize,
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

/// Cells are allocated in multiples of 256 (`GGML_PAD(n_ctx, 256)`, PR #17046).
const PAD: u64 = 256;

/// Predicts llama-server's KV allocation (`llama_context`, `llama_kv_cache`,
/// `llama_kv_cache_iswa`, `llama_memory_recurrent` at llama.cpp 0c1e57098):
/// `n_ctx` padded to 256; without a unified cache each of the `n_parallel`
/// streams gets `pad256(n_ctx / n_parallel)` cells; sliding-window layers
/// keep `pad256(min(n_ctx_seq, window × (unified ? n_parallel : 1) + n_ubatch))`
/// cells per stream unless `--swa-full`; layers sharing another's KV keep
/// none; an MLA cache stores K only (the latent); recurrent layers keep one
/// f32 state per sequence.
pub fn predict_llamacpp(
    model: &ModelConfig,
    flags: &LlamaCppFlags,
) -> Result<LlamaCppPrediction, CapacityError> {
    let (n_seq, unified) = match flags.n_parallel {
        None => (4u64, true),
        Some(0) => {
            return Err(CapacityError::BadFlag {
                flag: "--parallel",
                value: "0".into(),
                why: "must be at least 1",
            });
        }
        Some(n) => (u64::from(n), flags.unified),
    };
    let streams = if unified { 1 } else { n_seq };
    let train = model.max_position_embeddings;
    let requested = match (flags.n_ctx, train) {
        (0, Some(t)) if flags.fit => t * streams,
        (0, Some(t)) => t,
        (0, None) => {
            return Err(CapacityError::MissingField {
                field: "max_position_embeddings (or pass n_ctx)",
            });
        }
        (n, _) => n,
    };
    let padded = requested.div_ceil(PAD) * PAD;
    let n_ctx_seq = if unified {
        padded
    } else {
        (padded / n_seq).div_ceil(PAD) * PAD
    };
    let n_ctx = n_ctx_seq * streams;
    let swa_cells = model.layers.iter().find_map(|k| match k {
        LayerKind::SlidingWindow { window } => flags.swa_cells(*window).map(|c| c.min(n_ctx_seq)),
        _ => None,
    });
    let row = |kind: LayerKind| -> u64 {
        let (heads, k_dim, v_dim) = match (kind, model.mla, model.full_attention_heads) {
            // The V-less MLA cache (PR #19067): one latent row per token.
            (_, Some(m), _) => (1, m.latent_dim(), 0),
            (LayerKind::FullAttention, None, Some(g)) => (g.num_kv_heads, g.head_dim, g.head_dim),
            _ => (model.num_kv_heads, model.head_dim, model.head_dim_v),
        };
        flags.cache_type_k.bytes(heads * k_dim) + flags.cache_type_v.bytes(heads * v_dim)
    };
    let kv_bytes: u64 = model
        .layers
        .iter()
        .map(|k| match k {
            LayerKind::SlidingWindow { .. } => row(*k) * swa_cells.unwrap_or(n_ctx_seq) * streams,
            k if k.is_attention() => row(*k) * n_ctx_seq * streams,
            _ => 0,
        })
        .sum();
    let recurrent_layers = model.layers.iter().filter(|k| k.is_recurrent()).count() as u64;
    let recurrent_bytes = recurrent_layers * n_seq.max(1) * 4 * recurrent_elements(model);
    Ok(LlamaCppPrediction {
        n_ctx,
        n_ctx_seq,
        n_parallel: u32::try_from(n_seq).unwrap_or(u32::MAX),
        unified,
        swa_cells,
        kv_bytes: ByteSize::new(kv_bytes),
        recurrent_bytes: ByteSize::new(recurrent_bytes),
    })
}

/// f32 values of one sequence's recurrent state in one layer (`n_embd_r` +
/// `n_embd_s`): Mamba2 `(d_conv − 1)(d_inner + 2·groups·d_state) + d_state·d_inner`;
/// Gated DeltaNet its conv rows and its `heads × d_k × d_v` state.
fn recurrent_elements(model: &ModelConfig) -> u64 {
    if let Some(g) = model.gdn {
        let conv_dim = 2 * g.num_key_heads * g.key_head_dim + g.num_value_heads * g.value_head_dim;
        return g.conv_kernel.saturating_sub(1) * conv_dim
            + g.num_value_heads * g.key_head_dim * g.value_head_dim;
    }
    if let Some(m) = model.mamba {
        return m.conv_kernel.saturating_sub(1) * (m.d_inner + 2 * m.n_groups * m.state_size)
            + m.state_size * m.d_inner;
    }
    0
}
