//! A lenient reader of Hugging Face `config.json`: the shapes that size the KV cache
//! and the weights.

use serde::Serialize;
use serde_json::Value;

use crate::{CapacityError, Dtype};

mod parse;

use self::parse::{Fields, parse};

/// What one decoder layer keeps per sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
#[non_exhaustive]
pub enum LayerKind {
    /// Full attention (or MLA when the model has MLA fields): KV for every token.
    FullAttention,
    /// Sliding-window attention over the last `window` tokens.
    SlidingWindow {
        /// Window in tokens.
        window: u64,
    },
    /// Chunked local attention (Llama 4 style) in chunks of `chunk` tokens.
    ChunkedLocal {
        /// Chunk in tokens.
        chunk: u64,
    },
    /// Gated DeltaNet / linear attention: a fixed recurrent state per sequence.
    LinearAttention,
    /// Mamba-2 style state-space layer: a fixed recurrent state per sequence.
    Mamba,
    /// A layer that keeps nothing per sequence (MLP-only block).
    NoCache,
    /// An attention layer that reads another layer's KV cache and keeps none
    /// of its own (Gemma 3n and Gemma 4 `num_kv_shared_layers`: vLLM gives
    /// it no KV spec, `kv_sharing_target_layer_name`).
    SharedKv,
}

impl LayerKind {
    /// Whether the layer stores attention KV.
    pub const fn is_attention(self) -> bool {
        matches!(
            self,
            LayerKind::FullAttention
                | LayerKind::SlidingWindow { .. }
                | LayerKind::ChunkedLocal { .. }
        )
    }

    /// Whether the layer stores a recurrent state.
    pub const fn is_recurrent(self) -> bool {
        matches!(self, LayerKind::LinearAttention | LayerKind::Mamba)
    }
}

/// KV heads and head size of a kind of attention layer whose geometry differs
/// from the model's (Gemma 4's full-attention layers: `num_global_key_value_heads`,
/// `global_head_dim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HeadShape {
    /// KV heads (before tensor parallelism).
    pub num_kv_heads: u64,
    /// Head size of K and V.
    pub head_dim: u64,
}

/// Multi-head latent attention (DeepSeek-V2/V3 style): one latent vector per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MlaShape {
    /// `kv_lora_rank`.
    pub kv_lora_rank: u64,
    /// `qk_rope_head_dim`.
    pub qk_rope_head_dim: u64,
    /// `qk_nope_head_dim` (weights only).
    pub qk_nope_head_dim: u64,
    /// `v_head_dim` (weights only).
    pub v_head_dim: u64,
    /// `q_lora_rank`, 0 when queries are not low-rank (weights only).
    pub q_lora_rank: u64,
    /// `index_head_dim` of DeepSeek V3.2's sparse-attention indexer, whose
    /// keys vLLM caches beside the latent (`DeepseekV32IndexerCache`).
    pub indexer_head_dim: Option<u64>,
}

impl MlaShape {
    /// Elements stored per token per layer.
    pub const fn latent_dim(self) -> u64 {
        self.kv_lora_rank + self.qk_rope_head_dim
    }
}

/// Gated DeltaNet state shape (Qwen3-Next, Qwen3.5 `linear_attention` layers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GdnShape {
    /// `linear_num_key_heads`.
    pub num_key_heads: u64,
    /// `linear_num_value_heads`.
    pub num_value_heads: u64,
    /// `linear_key_head_dim`.
    pub key_head_dim: u64,
    /// `linear_value_head_dim`.
    pub value_head_dim: u64,
    /// `linear_conv_kernel_dim`.
    pub conv_kernel: u64,
}

/// Mamba-2 state shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mamba2Shape {
    /// Number of SSM heads.
    pub num_heads: u64,
    /// Head dimension.
    pub head_dim: u64,
    /// SSM state size (`d_state`).
    pub state_size: u64,
    /// Number of B/C groups.
    pub n_groups: u64,
    /// Convolution kernel width.
    pub conv_kernel: u64,
    /// Inner width (`num_heads * head_dim` unless given).
    pub d_inner: u64,
}

/// Mixture-of-experts MLP shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MoeShape {
    /// Routed experts.
    pub num_experts: u64,
    /// Intermediate width of one expert.
    pub expert_intermediate: u64,
    /// Total intermediate width of the shared expert(s); 0 if none.
    pub shared_intermediate: u64,
    /// Leading layers that use a dense MLP instead (`first_k_dense_replace`).
    pub first_dense_layers: u64,
    /// Experts each token is routed to (`num_experts_per_tok`).
    pub experts_per_token: u64,
    /// Every how many layers one is MoE (`interleave_moe_layer_step`, Llama 4 Maverick: 2;
    /// the others use a dense MLP of `ModelConfig::intermediate_size`); 1: every layer.
    pub interleave_step: u64,
    /// The last layer that may be MoE (`moe_layer_end_index`, ERNIE 4.5: inclusive; of a
    /// list, its largest, as the modelling code takes it); `None`: to the last layer.
    pub last_layer: Option<u64>,
    /// The experts' width when they work in a latent space (`moe_latent_size`, Nemotron 3
    /// Super): a projection from the hidden size into it and one back, per MoE layer.
    pub latent_size: Option<u64>,
}

/// How the checkpoint's linear weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "method")]
#[non_exhaustive]
pub enum Quantization {
    /// Unquantized: the model dtype.
    None,
    /// FP8 weights (one byte each).
    Fp8,
    /// Integer weights (AWQ, GPTQ, compressed-tensors int) with group scales.
    Int {
        /// Bits per weight.
        bits: u64,
        /// Weights per scale group.
        group_size: u64,
    },
    /// NVFP4: 4-bit values plus one fp8 scale per 16.
    Nvfp4,
    /// MXFP4 on the MoE experts only (gpt-oss): 4-bit values plus one scale per 32.
    Mxfp4Experts,
}

impl std::fmt::Display for Quantization {
    /// How a report names the weights' format: `FP8`, `INT4 (groups of 128)`, `unquantized`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Quantization::None => f.write_str("unquantized"),
            Quantization::Fp8 => f.write_str("FP8"),
            Quantization::Int { bits, group_size } => {
                write!(f, "INT{bits} (groups of {group_size})")
            }
            Quantization::Nvfp4 => f.write_str("NVFP4"),
            Quantization::Mxfp4Experts => f.write_str("MXFP4 (experts)"),
        }
    }
}

impl Quantization {
    /// Bytes per quantized linear weight, scales included.
    pub fn bytes_per_weight(self, model: Dtype) -> f64 {
        match self {
            Quantization::None | Quantization::Mxfp4Experts => model.bytes() as f64,
            Quantization::Fp8 => 1.0,
            // Packed values + one fp16 scale (and a packed zero point) per group.
            Quantization::Int { bits, group_size } => {
                bits as f64 / 8.0 + (2.0 + bits as f64 / 8.0) / group_size.max(1) as f64
            }
            Quantization::Nvfp4 => 0.5 + 1.0 / 16.0,
        }
    }
}

/// A vision tower, counted only when the engine loads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VisionShape {
    /// Blocks.
    pub depth: u64,
    /// Width.
    pub hidden_size: u64,
    /// MLP width.
    pub intermediate_size: u64,
    /// Width of the projection into the language model.
    pub out_hidden_size: u64,
}

/// The parts of a model config that decide KV-cache and weight sizes.
///
/// Built by [`ModelConfig::from_json`]; fields are public so a caller can also
/// describe a model by hand.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelConfig {
    /// `architectures[0]`, or empty.
    pub architecture: String,
    /// `model_type` (of `text_config` when nested), or empty.
    pub model_type: String,
    /// Activation / unquantized weight dtype (`torch_dtype`, default bfloat16).
    pub dtype: Dtype,
    /// `hidden_size`.
    pub hidden_size: u64,
    /// `num_attention_heads`.
    pub num_attention_heads: u64,
    /// `num_key_value_heads` (defaults to the attention heads).
    pub num_kv_heads: u64,
    /// Attention head dim for K (`head_dim`, else hidden / heads).
    pub head_dim: u64,
    /// Attention head dim for V.
    pub head_dim_v: u64,
    /// KV geometry of the full-attention layers when it differs from the
    /// sliding-window layers' (`num_kv_heads`/`head_dim` above).
    pub full_attention_heads: Option<HeadShape>,
    /// One entry per decoder layer.
    pub layers: Vec<LayerKind>,
    /// MLA fields, when the attention is latent.
    pub mla: Option<MlaShape>,
    /// GDN state shape for `LinearAttention` layers.
    pub gdn: Option<GdnShape>,
    /// Mamba-2 state shape for `Mamba` layers.
    pub mamba: Option<Mamba2Shape>,
    /// dtype of the recurrent (SSM) state (`mamba_ssm_dtype`), default: `dtype`.
    pub ssm_dtype: Dtype,
    /// `vocab_size`.
    pub vocab_size: u64,
    /// Dense MLP width (`intermediate_size`).
    pub intermediate_size: u64,
    /// MoE shape when the MLP is routed.
    pub moe: Option<MoeShape>,
    /// `tie_word_embeddings`; absent means tied: Hugging Face saves a config without the
    /// keys that equal `PretrainedConfig`'s defaults (`to_diff_dict`), and that default is
    /// `True` (Gemma's configs omit it and tie; Llama's and Qwen's write `false`).
    pub tie_word_embeddings: bool,
    /// `attn_output_gate` (doubles the q projection).
    pub attn_output_gate: bool,
    /// `max_position_embeddings`, if given.
    pub max_position_embeddings: Option<u64>,
    /// Weight quantization.
    pub quantization: Quantization,
    /// Modules the quantization leaves in the model dtype (`ignore`,
    /// `modules_to_not_convert`, `exclude_modules`, `ignored_layers` of the
    /// quantization config), as written there: names, globs or `re:` patterns.
    pub quant_exclusions: Vec<String>,
    /// The checkpoint declares an fp8 KV-cache scheme (`kv_cache_scheme`, `kv_cache_quant_algo`).
    pub declares_fp8_kv: bool,
    /// MTP (multi-token prediction) layers shipped with the checkpoint.
    pub mtp_layers: u64,
    /// Vision tower, if the config has one.
    pub vision: Option<VisionShape>,
    /// Each layer has one mixer only and MLPs are their own `NoCache` layers
    /// (`hybrid_override_pattern` models); otherwise every layer has an MLP.
    pub separate_mlp_layers: bool,
    /// MLPs and experts are gated (gate, up and down matrices, SwiGLU and kin); Nemotron-H's
    /// squared-ReLU MLPs and experts have up and down only (vLLM `nemotron_h.py`).
    pub gated_mlp: bool,
}

impl ModelConfig {
    /// Parses config.json text. Multimodal configs are read from `text_config`
    /// (or `llm_config` / `language_config`) with the outer object as fallback.
    pub fn from_json(text: &str) -> Result<Self, CapacityError> {
        let root: Value =
            serde_json::from_str(text).map_err(|e| CapacityError::NotJson(e.to_string()))?;
        let outer = root
            .as_object()
            .ok_or_else(|| CapacityError::NotJson("the top level is not an object".into()))?;
        let inner = ["text_config", "llm_config", "language_config"]
            .iter()
            .find_map(|k| outer.get(*k).and_then(Value::as_object));
        let f = Fields { inner, outer };
        parse(&f, outer)
    }

    /// Number of layers of each kind, in a fixed order.
    pub fn layer_counts(&self) -> Vec<(LayerKind, u64)> {
        let mut counts: Vec<(LayerKind, u64)> = Vec::new();
        for kind in &self.layers {
            match counts.iter_mut().find(|(k, _)| k == kind) {
                Some((_, n)) => *n += 1,
                None => counts.push((*kind, 1)),
            }
        }
        counts
    }

    /// Whether any layer keeps a recurrent state.
    pub fn is_hybrid_recurrent(&self) -> bool {
        self.layers.iter().any(|k| k.is_recurrent())
    }
}

#[cfg(test)]
mod tests {
    use crate::{EngineFlags, Gpu, VllmFlags, predict};

    use super::ModelConfig;

    /// Coverage-guided under `cargo xtask fuzz`, random inputs under `cargo
    /// test`: no config text makes the reader or the vLLM predictor panic
    /// (the overflows the first fuzzer found are regression tests in
    /// `tests/suite/fuzz_regressions.rs`).
    #[test]
    fn fuzz_model_config() {
        bolero::check!().for_each(|input: &[u8]| {
            let Some((&pick, rest)) = input.split_first() else {
                return;
            };
            let Ok(model) = ModelConfig::from_json(&String::from_utf8_lossy(rest)) else {
                return;
            };
            let gpu = ["rtx3090", "h100", "24GiB", "1GiB"][usize::from(pick % 4)];
            let Ok(gpu) = Gpu::lookup(gpu) else { return };
            let flags = VllmFlags {
                gpu_memory_utilization: [0.9, 0.5, 1.0, 0.01][usize::from(pick / 4 % 4)],
                max_num_seqs: [None, Some(1), Some(u32::MAX)][usize::from(pick / 16 % 3)],
                ..VllmFlags::default()
            };
            let _ = predict(&model, &gpu, &EngineFlags::Vllm(flags));
        });
    }
}
