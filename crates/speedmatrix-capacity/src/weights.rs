//! Weight bytes from the config's shapes (or from a safetensors index).

use serde::Serialize;
use serde_json::Value;
use speedmatrix_units::ByteSize;

use crate::CapacityError;
use crate::config::{LayerKind, ModelConfig, Quantization};

/// Weight size of a model, counted from its shapes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeightEstimate {
    /// Parameters in decoder linear layers (the ones quantization applies to).
    pub linear_params: u64,
    /// Embedding and LM-head parameters (kept in the model dtype).
    pub embedding_params: u64,
    /// Vision-tower parameters counted (0 when text-only).
    pub vision_params: u64,
    /// Bytes of the whole checkpoint as loaded.
    pub total: ByteSize,
    /// Bytes one tensor-parallel rank holds.
    pub per_rank: ByteSize,
    /// How the number was obtained.
    pub basis: String,
}

/// Where one rank's weights sit: its share of tensor, expert and pipeline parallelism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightPlacement {
    /// Tensor-parallel ranks: linear layers, embeddings and experts are split across them.
    pub tensor_parallel: u64,
    /// Ranks the routed experts are spread over with expert parallelism
    /// (`tensor_parallel × data_parallel` under vLLM `--enable-expert-parallel`);
    /// 0 or 1 means experts are split like any linear layer.
    pub expert_parallel: u64,
    /// The decoder layers this rank holds (a pipeline stage), as a range of layer indices.
    pub layers: std::ops::Range<usize>,
    /// The rank holds the input embedding (first pipeline stage).
    pub embedding: bool,
    /// The rank holds the LM head (last pipeline stage).
    pub lm_head: bool,
    /// Skip the vision tower (vLLM `--language-model-only`).
    pub language_model_only: bool,
}

impl WeightPlacement {
    /// The whole model on `tp` tensor-parallel ranks.
    pub fn tensor_parallel(model: &ModelConfig, tp: u32, language_model_only: bool) -> Self {
        WeightPlacement {
            tensor_parallel: u64::from(tp.max(1)),
            expert_parallel: 1,
            layers: 0..model.layers.len(),
            embedding: true,
            lm_head: true,
            language_model_only,
        }
    }
}

impl ModelConfig {
    /// Counts the weights from the config's shapes. `language_model_only` skips the
    /// vision tower (vLLM `--language-model-only`); `tp` divides everything but the
    /// small replicated tensors.
    pub fn estimate_weights(&self, language_model_only: bool, tp: u32) -> WeightEstimate {
        self.estimate_weights_on(&WeightPlacement::tensor_parallel(
            self,
            tp,
            language_model_only,
        ))
    }

    /// Counts the weights one rank holds under `placement`: its pipeline
    /// stage's layers, its tensor-parallel share, its experts under expert
    /// parallelism, and the embedding and LM head where its stage has them.
    /// Quantized checkpoints keep embeddings and the LM head in the model
    /// dtype (`Fp8Config.get_quant_method` quantizes linear layers only).
    pub fn estimate_weights_on(&self, placement: &WeightPlacement) -> WeightEstimate {
        let tp = placement.tensor_parallel.max(1);
        let in_stage = |i: &usize| placement.layers.contains(i);
        let experts_all: u64 = self
            .layers
            .iter()
            .enumerate()
            .filter(|(i, _)| in_stage(i))
            .map(|(i, k)| self.layer_expert_params(i as u64, *k))
            .sum();
        let linear_all: u64 = self
            .layers
            .iter()
            .enumerate()
            .filter(|(i, _)| in_stage(i))
            .map(|(i, k)| self.layer_params(i as u64, *k))
            .sum();
        let dense = linear_all - experts_all;
        // vLLM pads the vocabulary to a multiple of 64 (`pad_vocab_size`).
        let vocab = self.vocab_size.div_ceil(64) * 64;
        let embed_tables = u64::from(placement.embedding)
            + u64::from(placement.lm_head && !(self.tie_word_embeddings && placement.embedding));
        let embed = embed_tables * vocab * self.hidden_size;
        let vision = match (
            &self.vision,
            placement.language_model_only,
            placement.embedding,
        ) {
            (Some(v), false, true) => {
                let h = v.hidden_size;
                v.depth * (4 * h * h + 2 * h * v.intermediate_size)
                    + 16 * h * h
                    + 4 * h * v.out_hidden_size
            }
            _ => 0,
        };
        let dtype = self.dtype.bytes() as f64;
        let per_linear = self.quantization.bytes_per_weight(self.dtype);
        let per_expert = match self.quantization {
            Quantization::Mxfp4Experts => 0.5 + 1.0 / 32.0,
            _ => per_linear,
        };
        let per_dense = match self.quantization {
            Quantization::Mxfp4Experts => dtype,
            _ => per_linear,
        };
        let expert_ranks = if placement.expert_parallel > 1 {
            placement.expert_parallel
        } else {
            tp
        };
        let total = dense as f64 * per_dense
            + experts_all as f64 * per_expert
            + (embed + vision) as f64 * dtype;
        let per_rank = dense as f64 * per_dense / tp as f64
            + experts_all as f64 * per_expert / expert_ranks as f64
            + (embed + vision) as f64 * dtype / tp as f64;
        WeightEstimate {
            linear_params: linear_all,
            embedding_params: embed,
            vision_params: vision,
            total: ByteSize::new(total.round() as u64),
            per_rank: ByteSize::new(per_rank.round() as u64),
            basis: format!(
                "counted from config shapes: {:.3} B linear params at {:.3} B each ({:?}){}, \
                 {:.3} B embedding params at {} B{}{}",
                linear_all as f64 / 1e9,
                per_linear,
                self.quantization,
                if experts_all > 0 {
                    format!(
                        ", of them {:.3} B in routed experts over {expert_ranks} ranks",
                        experts_all as f64 / 1e9
                    )
                } else {
                    String::new()
                },
                embed as f64 / 1e9,
                self.dtype.bytes(),
                if vision > 0 {
                    format!(", {:.3} B vision params", vision as f64 / 1e9)
                } else {
                    String::new()
                },
                if placement.layers.len() < self.layers.len() {
                    format!(
                        "; layers {}..{} of {} (pipeline stage)",
                        placement.layers.start,
                        placement.layers.end,
                        self.layers.len()
                    )
                } else {
                    String::new()
                }
            ),
        }
    }

    fn layer_params(&self, index: u64, kind: LayerKind) -> u64 {
        let mixer = match kind {
            k if k.is_attention() => self.attention_params(),
            LayerKind::SharedKv => self.attention_params(),
            LayerKind::LinearAttention => self.gdn_params(),
            LayerKind::Mamba => self.mamba_params(),
            _ => 0,
        };
        let has_mlp = !self.separate_mlp_layers || matches!(kind, LayerKind::NoCache);
        mixer + if has_mlp { self.mlp_params(index) } else { 0 }
    }

    fn attention_params(&self) -> u64 {
        let h = self.hidden_size;
        let heads = self.num_attention_heads;
        if let Some(m) = self.mla {
            let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
            let q = if m.q_lora_rank > 0 {
                h * m.q_lora_rank + m.q_lora_rank * heads * qk
            } else {
                h * heads * qk
            };
            let kv =
                h * m.latent_dim() + m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim);
            return q + kv + heads * m.v_head_dim * h;
        }
        let gate = if self.attn_output_gate { 2 } else { 1 };
        h * heads * self.head_dim * gate
            + h * self.num_kv_heads * (self.head_dim + self.head_dim_v)
            + heads * self.head_dim_v * h
    }

    fn gdn_params(&self) -> u64 {
        let Some(g) = self.gdn else { return 0 };
        let h = self.hidden_size;
        let key = g.num_key_heads * g.key_head_dim;
        let value = g.num_value_heads * g.value_head_dim;
        h * (2 * key + 2 * value)
            + h * 2 * g.num_value_heads
            + value * h
            + (2 * key + value) * g.conv_kernel
    }

    fn mamba_params(&self) -> u64 {
        let Some(m) = self.mamba else { return 0 };
        let h = self.hidden_size;
        let bc = 2 * m.n_groups * m.state_size;
        h * (2 * m.d_inner + bc + m.num_heads) + m.d_inner * h + (m.d_inner + bc) * m.conv_kernel
    }

    fn mlp_params(&self, index: u64) -> u64 {
        let h = self.hidden_size;
        match self.moe {
            Some(moe) if index >= moe.first_dense_layers => {
                moe.num_experts * 3 * h * moe.expert_intermediate
                    + 3 * h * moe.shared_intermediate
                    + h * moe.num_experts
            }
            _ => 3 * h * self.intermediate_size,
        }
    }

    /// Routed-expert parameters of layer `index` (part of [`Self::layer_params`]).
    fn layer_expert_params(&self, index: u64, kind: LayerKind) -> u64 {
        let Some(moe) = self.moe else { return 0 };
        let has_mlp = !self.separate_mlp_layers || matches!(kind, LayerKind::NoCache);
        if !has_mlp || index < moe.first_dense_layers {
            return 0;
        }
        moe.num_experts * 3 * self.hidden_size * moe.expert_intermediate
    }
}

/// Reads `metadata.total_size` from a `model.safetensors.index.json` text: the exact
/// bytes of the checkpoint's tensors.
pub fn weights_from_safetensors_index(text: &str) -> Result<ByteSize, CapacityError> {
    let v: Value = serde_json::from_str(text).map_err(|e| CapacityError::NotJson(e.to_string()))?;
    v.get("metadata")
        .and_then(|m| m.get("total_size"))
        .and_then(|t| {
            t.as_u64()
                .or_else(|| t.as_f64().map(|f| f as u64))
                .or_else(|| t.as_str().and_then(|s| s.parse().ok()))
        })
        .map(ByteSize::new)
        .ok_or(CapacityError::MissingField {
            field: "metadata.total_size",
        })
}
