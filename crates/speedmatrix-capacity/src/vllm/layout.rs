//! How vLLM lays the KV pool out for a model and flags: KV-cache groups,
//! block size (`Platform._align_hybrid_block_size`), bytes per block, per-layer
//! costs (`kv_cache_interface.py`, `kv_cache_planning.py`). No memory involved.

use super::groups::{Planned, group_layers, pipeline_stages};
use super::*;

/// What one KV-cache group holds per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum GroupKind {
    /// Full attention / MLA: a block per `block_size` tokens.
    Full,
    /// Sliding window of `window` tokens.
    SlidingWindow {
        /// Window.
        window: u64,
    },
    /// Chunked local attention.
    ChunkedLocal {
        /// Chunk.
        chunk: u64,
    },
    /// Recurrent state pages.
    Mamba,
}

/// One KV-cache group: layers sharing a block table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KvGroup {
    /// What the group stores.
    pub kind: GroupKind,
    /// Real layers in the group.
    pub layers: u64,
    /// Tokens per block of this group.
    pub block_size: u64,
}

/// Bytes one layer kind costs, per TP rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerCost {
    /// Layer kind.
    pub kind: LayerKind,
    /// Layers of this kind.
    pub layers: u64,
    /// KV bytes per token per layer (attention kinds).
    pub bytes_per_token: Option<u64>,
    /// State bytes per sequence per layer before padding (recurrent kinds).
    pub state_bytes: Option<u64>,
}

/// How vLLM lays the KV pool out for a model and flags (no memory involved).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VllmLayout {
    /// Attention block size in tokens after hybrid alignment.
    pub block_size: u64,
    /// Why the block size is what it is.
    pub block_size_reason: String,
    /// Bytes of one layer's page (uniform across groups for hybrids).
    pub page_bytes: u64,
    /// Bytes one block id costs in the shared pool.
    pub bytes_per_block: u64,
    /// The groups.
    pub groups: Vec<KvGroup>,
    /// Padding layers added to equalise group sizes.
    pub padding_layers: u64,
    /// Per layer-kind costs.
    pub layer_costs: Vec<LayerCost>,
    /// Mamba cache mode in effect.
    pub mamba_cache_mode: MambaCacheMode,
    /// Extra state blocks per recurrent group (speculative tokens).
    pub num_speculative_blocks: u64,
    /// Tokens a sliding-window or chunked group holds beyond its window:
    /// `max_num_batched_tokens`, or two batches of it with async scheduling
    /// from v0.26 (`max_in_flight_tokens`).
    pub max_num_batched_tokens: u64,
    /// The pipeline stages (one without pipeline parallelism): each worker
    /// sizes its pool by its own layers, and the stage with the fewest
    /// blocks decides for all (`get_kv_cache_configs`).
    pub stages: Vec<PipelineStage>,
}

/// One pipeline stage's share of the KV pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PipelineStage {
    /// First decoder layer of the stage.
    pub first_layer: u64,
    /// One past its last decoder layer.
    pub end_layer: u64,
    /// Bytes one block id costs on this stage's workers.
    pub bytes_per_block: u64,
}

/// One layer's spec during planning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Spec {
    pub(super) kind: GroupKind,
    pub(super) page: u64,
    pub(super) block_size: u64,
    /// Decoder layer index (drafter layers follow the model's).
    pub(super) layer: usize,
}

impl VllmLayout {
    /// Plans the layout the way vLLM does at startup.
    pub fn plan(model: &ModelConfig, flags: &VllmFlags) -> Result<Self, CapacityError> {
        let tp = u64::from(flags.tensor_parallel_size.max(1));
        let kv_dtype = match flags.device {
            VllmDevice::Cpu { .. } => KvCacheDtype::Auto,
            VllmDevice::Gpu => flags.kv_cache_dtype,
        };
        let attn_1tok = attention_bytes_per_token(model, kv_dtype, tp);
        let mamba2_spec_rows = if flags.version.has(MAMBA2_SPEC_ROWS) {
            flags.num_speculative_tokens
        } else {
            0
        };
        let state =
            recurrent_state_bytes(model, tp, flags.num_speculative_tokens, mamba2_spec_rows);
        let mode = flags
            .mamba_cache_mode
            .unwrap_or(if flags.enable_prefix_caching {
                MambaCacheMode::Align
            } else {
                MambaCacheMode::None
            });
        let default_block = match flags.device {
            VllmDevice::Cpu { .. } => 128,
            VllmDevice::Gpu => 16,
        };
        let base = flags.block_size.unwrap_or(default_block).max(1);
        let has_attention = model.layers.iter().any(|k| k.is_attention());
        let (block_size, reason) = match (state, has_attention) {
            (Some(state), true) if attn_1tok > 0 => {
                let aligned = hybrid_block_size(model, flags, mode, base, attn_1tok, state);
                if aligned > base {
                    (
                        aligned,
                        format!(
                            "raised from {base} so one attention page ({attn_1tok} B/token) holds a recurrent state of {state} B (mamba cache mode {mode:?})"
                        ),
                    )
                } else {
                    (
                        base,
                        format!("{base} (already holds a recurrent state of {state} B)"),
                    )
                }
            }
            _ if flags.block_size.is_some() => (base, format!("{base} (--block-size)")),
            _ => (base, format!("{base} (engine default)")),
        };
        let mnbt = flags.max_num_batched_tokens.unwrap_or(2048);
        let in_flight = if flags.version.has(IN_FLIGHT_TOKENS) {
            2 * mnbt
        } else {
            mnbt
        };
        let specs = layer_specs(model, flags, block_size, attn_1tok, state.unwrap_or(0));
        if specs.is_empty() {
            return Err(CapacityError::Unplannable(
                "the model has no layer that keeps a KV cache".into(),
            ));
        }
        let planned = group_layers(&specs, flags.version)?;
        let stages = pipeline_stages(model, flags, &specs, &planned)?;
        let Planned {
            groups,
            page_bytes,
            bytes_per_block,
            padding_layers,
            ..
        } = planned;
        Ok(VllmLayout {
            block_size,
            block_size_reason: reason,
            page_bytes,
            bytes_per_block,
            groups,
            padding_layers,
            layer_costs: layer_costs(model, flags, state),
            mamba_cache_mode: mode,
            num_speculative_blocks: flags.num_speculative_tokens,
            max_num_batched_tokens: in_flight,
            stages,
        })
    }

    /// A single full-attention group of `block_size`: what a measured
    /// `num_gpu_blocks` × `block_size` means when the model's layers are unknown.
    pub fn single_full_attention(block_size: u64) -> Self {
        VllmLayout {
            block_size,
            block_size_reason: format!("{block_size} (reported by the server)"),
            page_bytes: 0,
            bytes_per_block: 0,
            groups: vec![KvGroup {
                kind: GroupKind::Full,
                layers: 1,
                block_size,
            }],
            padding_layers: 0,
            layer_costs: Vec::new(),
            mamba_cache_mode: MambaCacheMode::None,
            num_speculative_blocks: 0,
            max_num_batched_tokens: 2048,
            stages: Vec::new(),
        }
    }

    /// Blocks one request of `len` tokens needs from the shared pool: the sum over
    /// groups of `cdiv(max_memory_usage_bytes(len), page)`, the quantity vLLM uses
    /// for its concurrency figure and its startup admission check.
    pub fn blocks_per_request(&self, len: u64) -> u64 {
        self.groups.iter().map(|g| self.group_blocks(g, len)).sum()
    }

    pub(super) fn group_blocks(&self, g: &KvGroup, len: u64) -> u64 {
        let b = g.block_size.max(1);
        match g.kind {
            GroupKind::Full => len.div_ceil(b),
            GroupKind::SlidingWindow { window } => {
                (window.saturating_sub(1) + self.max_num_batched_tokens)
                    .min(len)
                    .div_ceil(b)
                    + 1
            }
            GroupKind::ChunkedLocal { chunk } => {
                (chunk + self.max_num_batched_tokens).min(len).div_ceil(b)
            }
            GroupKind::Mamba => match self.mamba_cache_mode {
                MambaCacheMode::All => len.div_ceil(b),
                MambaCacheMode::Align => 2 + self.num_speculative_blocks,
                MambaCacheMode::None => 1 + self.num_speculative_blocks,
            },
        }
    }

    /// Whether any group is not plain full attention.
    pub fn is_hybrid(&self) -> bool {
        self.groups.iter().any(|g| g.kind != GroupKind::Full)
    }

    /// Smallest block size across groups (the old log formula uses it).
    pub(super) fn min_block_size(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| g.block_size)
            .min()
            .unwrap_or(self.block_size)
    }
}

/// K+V bytes per token per attention layer on one rank (0 when the model has no attention).
pub(super) fn attention_bytes_per_token(model: &ModelConfig, kv: KvCacheDtype, tp: u64) -> u64 {
    let elt = kv.element_bytes(model.dtype);
    if let Some(mla) = model.mla {
        // The latent is not split across TP ranks. DeepSeek V3.2's sparse MLA
        // stores a quantized latent as fp8 with a scale per 128 values and
        // its RoPE part in bf16 (`fp8_ds_mla`, the FlashMLA-sparse backend's
        // layout), and its indexer keys (uint8 + a scale per 128) beside it.
        let sparse = mla.indexer_head_dim.is_some();
        let latent = match kv {
            KvCacheDtype::Fp8DsMla => ds_mla_bytes(mla),
            KvCacheDtype::Fp8 if sparse => ds_mla_bytes(mla),
            _ => mla.latent_dim() * elt,
        };
        let indexer = mla.indexer_head_dim.map_or(0, |d| d + d / 128 * 4);
        return latent + indexer;
    }
    head_bytes_per_token(
        model.num_kv_heads,
        model.head_dim,
        model.head_dim_v,
        model.dtype,
        kv,
        tp,
    )
}

/// `fp8_ds_mla`: fp8 latent, an fp32 scale per 128 of it, the RoPE part in bf16.
fn ds_mla_bytes(mla: crate::config::MlaShape) -> u64 {
    mla.kv_lora_rank + mla.kv_lora_rank / 128 * 4 + mla.qk_rope_head_dim * 2
}

/// K+V bytes per token of one layer of `kind` on one rank: the model's
/// geometry, or the full-attention layers' own (Gemma 4).
pub(super) fn kind_bytes_per_token(
    model: &ModelConfig,
    kind: LayerKind,
    kv: KvCacheDtype,
    tp: u64,
) -> u64 {
    match (kind, model.full_attention_heads, model.mla) {
        (LayerKind::FullAttention, Some(g), None) => {
            head_bytes_per_token(g.num_kv_heads, g.head_dim, g.head_dim, model.dtype, kv, tp)
        }
        _ => attention_bytes_per_token(model, kv, tp),
    }
}

/// `AttentionSpec.real_page_size_bytes` for one token: KV heads per rank
/// (`max(1, heads // tp)`: replicated when TP exceeds them) × (K + V) bytes.
fn head_bytes_per_token(
    kv_heads: u64,
    head_dim: u64,
    head_dim_v: u64,
    model_dtype: Dtype,
    kv: KvCacheDtype,
    tp: u64,
) -> u64 {
    let elt = kv.element_bytes(model_dtype);
    let heads = (kv_heads / tp).max(1);
    match kv {
        KvCacheDtype::Nvfp4 => {
            let packed = |h: u64| h / 2 + h / 16;
            heads * (packed(head_dim) + packed(head_dim_v))
        }
        KvCacheDtype::PerTokenHead => heads * (head_dim + head_dim_v) + 2 * heads * 4,
        _ => heads * (head_dim + head_dim_v) * elt,
    }
}

/// Recurrent state bytes per sequence per layer on one rank; `None` without recurrent layers.
/// Bytes of one request's recurrent state in one layer, per TP rank. A
/// Gated DeltaNet conv state keeps `conv_kernel − 1 + num_speculative_tokens`
/// rows (`MambaStateShapeCalculator.gated_delta_net_state_shape`,
/// vllm/model_executor/layers/mamba/mamba_utils.py), so speculation widens it.
pub(super) fn recurrent_state_bytes(
    model: &ModelConfig,
    tp: u64,
    num_spec: u64,
    mamba2_spec_rows: u64,
) -> Option<u64> {
    let conv_bytes = model.dtype.bytes();
    let ssm_bytes = model.ssm_dtype.bytes();
    if model
        .layers
        .iter()
        .any(|k| matches!(k, LayerKind::LinearAttention))
    {
        let g = model.gdn?;
        let conv_dim = 2 * g.num_key_heads * g.key_head_dim + g.num_value_heads * g.value_head_dim;
        let rows = g.conv_kernel.saturating_sub(1) + num_spec;
        let conv = rows * (conv_dim / tp) * conv_bytes;
        let ssm = (g.num_value_heads / tp).max(1) * g.key_head_dim * g.value_head_dim * ssm_bytes;
        return Some(conv + ssm);
    }
    if model.layers.iter().any(|k| matches!(k, LayerKind::Mamba)) {
        let m = model.mamba?;
        // Groups are replicated when TP does not divide them
        // (`extra_groups_for_head_shards`); conv rows grow by the
        // speculative tokens from v0.17 (`mamba2_state_shape`).
        let groups = if m.n_groups % tp == 0 { m.n_groups } else { tp };
        let rows = m.conv_kernel.saturating_sub(1) + mamba2_spec_rows;
        let conv = rows * ((m.d_inner + 2 * groups * m.state_size) / tp) * conv_bytes;
        let ssm = (m.num_heads / tp).max(1) * m.head_dim * m.state_size * ssm_bytes;
        return Some(conv + ssm);
    }
    None
}

/// `Platform._align_hybrid_block_size`.
pub(super) fn hybrid_block_size(
    model: &ModelConfig,
    flags: &VllmFlags,
    mode: MambaCacheMode,
    base: u64,
    attn_1tok: u64,
    state: u64,
) -> u64 {
    // Smallest kernel block size of the CUDA attention backends is 16.
    let align = base.max(16);
    match mode {
        MambaCacheMode::All => {
            let model_chunk = if model.gdn.is_some() { 64 } else { 256 };
            let chunk = lcm(flags.mamba_block_size.unwrap_or(model_chunk), align);
            chunk * state.div_ceil(attn_1tok).div_ceil(chunk)
        }
        MambaCacheMode::None | MambaCacheMode::Align => align * state.div_ceil(align * attn_1tok),
    }
}

pub(super) fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

pub(super) fn lcm(a: u64, b: u64) -> u64 {
    if a == 0 || b == 0 {
        a.max(b)
    } else {
        a / gcd(a, b) * b
    }
}

pub(super) fn layer_specs(
    model: &ModelConfig,
    flags: &VllmFlags,
    block: u64,
    attn_1tok: u64,
    state: u64,
) -> Vec<Spec> {
    let has_full = model
        .layers
        .iter()
        .any(|k| matches!(k, LayerKind::FullAttention));
    let promote =
        (flags.disable_hybrid_kv_cache_manager || chunked_without_hma(model, flags)) && has_full;
    let has_attention = model.layers.iter().any(|k| k.is_attention());
    let attn_page = block * attn_1tok;
    let tp = u64::from(flags.tensor_parallel_size.max(1));
    let kv_dtype = match flags.device {
        VllmDevice::Cpu { .. } => KvCacheDtype::Auto,
        VllmDevice::Gpu => flags.kv_cache_dtype,
    };
    let window_extra =
        u64::from(model.model_type == "cohere2" && flags.version.has(COHERE2_WINDOW_PLUS_ONE));
    // An MTP drafter's layers are full-attention layers of the target's
    // geometry, registered beside the target's: they join its KV groups.
    let drafter = drafter_layers(model, flags);
    // An EAGLE, DFlash or draft model's attention layers join the target's
    // groups with the draft config's own heads (`llama_eagle3.py`,
    // `draft_model.py`: their specs are bucketed like the target's).
    let draft = flags
        .draft_model
        .as_deref()
        .filter(|_| drafts_with_own_layers(flags));
    let draft_layers = draft.map_or(&[][..], |d| d.layers.as_slice());
    let target_layers = model.layers.len() + drafter;
    model
        .layers
        .iter()
        .chain(std::iter::repeat_n(&LayerKind::FullAttention, drafter))
        .chain(draft_layers)
        .enumerate()
        .filter_map(|(layer, k)| {
            let owner = match draft {
                Some(d) if layer >= target_layers => d,
                _ => model,
            };
            let kind = match *k {
                LayerKind::FullAttention => GroupKind::Full,
                LayerKind::SlidingWindow { .. } | LayerKind::ChunkedLocal { .. } if promote => {
                    GroupKind::Full
                }
                LayerKind::SlidingWindow { window } => GroupKind::SlidingWindow {
                    window: window + window_extra,
                },
                LayerKind::ChunkedLocal { chunk } => GroupKind::ChunkedLocal { chunk },
                LayerKind::LinearAttention | LayerKind::Mamba => GroupKind::Mamba,
                LayerKind::NoCache | LayerKind::SharedKv => return None,
            };
            let page = match kind {
                // Aligned hybrids pad the state to one attention page.
                GroupKind::Mamba if has_attention => attn_page.max(state),
                GroupKind::Mamba => state,
                _ => block * kind_bytes_per_token(owner, *k, kv_dtype, tp),
            };
            Some(Spec {
                kind,
                page,
                block_size: block,
                layer,
            })
        })
        .collect()
}

/// Whether the speculative method drafts with a model of its own layers.
pub(super) fn drafts_with_own_layers(flags: &VllmFlags) -> bool {
    flags.num_speculative_tokens > 0
        && matches!(
            flags.speculative_method,
            Some(
                SpeculativeMethod::Eagle
                    | SpeculativeMethod::DraftModel
                    | SpeculativeMethod::Other(_)
            )
        )
}

/// Llama 4's chunked layers are planned as full attention from v0.10.1 to
/// v0.13 (`VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE` defaulted to
/// "0", which turns the hybrid KV cache manager off).
fn chunked_without_hma(model: &ModelConfig, flags: &VllmFlags) -> bool {
    model
        .layers
        .iter()
        .any(|k| matches!(k, LayerKind::ChunkedLocal { .. }))
        && flags.version.has(CHUNKED_HMA_OFF)
        && !flags.version.has(CHUNKED_HMA_ON)
}

/// Full-attention layers the model's own MTP drafter adds to the KV cache
/// (`mtp_num_hidden_layers`, `num_nextn_predict_layers`) when the method is
/// MTP; n-gram and suffix decoding add none; EAGLE, DFlash and draft models
/// bring their layers in [`VllmFlags::draft_model`].
pub(super) fn drafter_layers(model: &ModelConfig, flags: &VllmFlags) -> usize {
    match flags.speculative_method {
        Some(SpeculativeMethod::Mtp) if flags.num_speculative_tokens > 0 => {
            usize::try_from(model.mtp_layers).unwrap_or(usize::MAX)
        }
        _ => 0,
    }
}

pub(super) fn layer_costs(
    model: &ModelConfig,
    flags: &VllmFlags,
    state: Option<u64>,
) -> Vec<LayerCost> {
    let tp = u64::from(flags.tensor_parallel_size.max(1));
    let kv = match flags.device {
        VllmDevice::Cpu { .. } => KvCacheDtype::Auto,
        VllmDevice::Gpu => flags.kv_cache_dtype,
    };
    model
        .layer_counts()
        .into_iter()
        .filter(|(k, _)| !matches!(k, LayerKind::NoCache))
        .map(|(kind, layers)| LayerCost {
            kind,
            layers,
            bytes_per_token: kind
                .is_attention()
                .then(|| kind_bytes_per_token(model, kind, kv, tp)),
            state_bytes: if kind.is_recurrent() { state } else { None },
        })
        .collect()
}
