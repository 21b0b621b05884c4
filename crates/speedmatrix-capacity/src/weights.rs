//! Weight bytes from the config's shapes (or from a safetensors index).

use serde::Serialize;
use serde_json::Value;
use speedmatrix_units::ByteSize;

use crate::CapacityError;
use crate::config::{LayerKind, ModelConfig, Quantization};

mod parts;

use self::parts::{Exclusion, Part};

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

/// What one decode step reads and computes per tensor-parallel rank, split
/// the way a speed model needs it: weights every step reads, and the routed
/// experts, of which a step reads only those its tokens pick.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ParameterSplit {
    /// Bytes of the decoder's non-expert weights (attention, recurrent
    /// mixers, dense MLPs, shared experts, routers) and the LM head on one rank.
    pub dense_bytes: f64,
    /// Bytes of one routed expert across every MoE layer, on one rank.
    pub expert_bytes: f64,
    /// Routed experts per MoE layer (0 for a dense model).
    pub num_experts: u64,
    /// Experts each token is routed to.
    pub experts_per_token: u64,
    /// Multiply-accumulates per token in the decoder's linear layers on one
    /// rank (non-expert weights plus the token's routed experts), LM head excluded.
    pub decoder_macs_per_token: f64,
    /// Multiply-accumulates of the LM head per token on one rank.
    pub lm_head_macs_per_token: f64,
    /// Bytes of the LM head on one rank (part of `dense_bytes`).
    pub lm_head_bytes: f64,
    /// Parameters behind `dense_bytes` less the LM head, on one rank.
    pub dense_params: f64,
    /// Parameters of one routed expert across every MoE layer, on one rank.
    pub expert_params: f64,
}

impl ModelConfig {
    /// Decoder layers whose MLP is a mixture of experts (0 for a dense model).
    pub fn moe_layers(&self) -> u64 {
        self.layers
            .iter()
            .enumerate()
            .filter(|&(i, kind)| {
                self.layer_parts(i as u64, *kind)
                    .iter()
                    .any(|(part, _)| *part == Part::Experts)
            })
            .count() as u64
    }

    /// Splits the decoder's weights into what every step reads and what only
    /// routed tokens read, on one of `tp` ranks (vision tower and the input
    /// embedding excluded: a step gathers a few embedding rows only).
    pub fn parameter_split(&self, tp: u32) -> ParameterSplit {
        let tp = f64::from(tp.max(1));
        let dtype = self.dtype.bytes() as f64;
        let per_linear = self.quantization.bytes_per_weight(self.dtype);
        let (mut dense, mut experts, mut macs) = (0.0f64, 0.0f64, 0.0f64);
        let (mut dense_params, mut expert_params) = (0.0f64, 0.0f64);
        let moe = self.moe;
        for (i, kind) in self.layers.iter().enumerate() {
            for (part, n) in self.layer_parts(i as u64, *kind) {
                let per = match (part, self.quantization) {
                    (Part::Experts, Quantization::Mxfp4Experts) => 0.5 + 1.0 / 32.0,
                    (_, Quantization::Mxfp4Experts) | (Part::Router, _) => dtype,
                    _ => per_linear,
                };
                let n = n as f64;
                if part == Part::Experts {
                    experts += n * per;
                    expert_params += n;
                    let m = moe.map_or(1.0, |m| {
                        m.experts_per_token as f64 / m.num_experts.max(1) as f64
                    });
                    macs += n * m;
                } else {
                    dense += n * per;
                    dense_params += n;
                    macs += n;
                }
            }
        }
        let vocab = self.vocab_size.div_ceil(64) * 64;
        let lm_head = (vocab * self.hidden_size) as f64;
        let num_experts = moe.map_or(0, |m| m.num_experts);
        ParameterSplit {
            dense_bytes: (dense + lm_head * dtype) / tp,
            expert_bytes: if num_experts > 0 {
                experts / num_experts as f64 / tp
            } else {
                0.0
            },
            num_experts,
            experts_per_token: moe.map_or(0, |m| m.experts_per_token),
            decoder_macs_per_token: macs / tp,
            lm_head_macs_per_token: lm_head / tp,
            lm_head_bytes: lm_head * dtype / tp,
            dense_params: dense_params / tp,
            expert_params: if num_experts > 0 {
                expert_params / num_experts as f64 / tp
            } else {
                0.0
            },
        }
    }

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
    /// dtype (`Fp8Config.get_quant_method` quantizes linear layers only), and
    /// the modules their config excludes ([`ModelConfig::quant_exclusions`]).
    pub fn estimate_weights_on(&self, placement: &WeightPlacement) -> WeightEstimate {
        let tp = placement.tensor_parallel.max(1);
        let dtype = self.dtype.bytes() as f64;
        let per_linear = self.quantization.bytes_per_weight(self.dtype);
        let expert_ranks = if placement.expert_parallel > 1 {
            placement.expert_parallel
        } else {
            tp
        };
        let exclusions: Vec<Exclusion> = self
            .quant_exclusions
            .iter()
            .map(|p| Exclusion::parse(p))
            .collect();
        let (mut params, mut experts_all, mut unquantized) = (0u64, 0u64, 0u64);
        let (mut bytes_total, mut bytes_rank) = (0.0f64, 0.0f64);
        for (i, kind) in self.layers.iter().enumerate() {
            if !placement.layers.contains(&i) {
                continue;
            }
            for (part, n) in self.layer_parts(i as u64, *kind) {
                let kept = exclusions.iter().any(|e| e.covers(i as u64, part));
                let per = match (kept, part, self.quantization) {
                    (true, _, _) => dtype,
                    (false, Part::Experts, Quantization::Mxfp4Experts) => 0.5 + 1.0 / 32.0,
                    (false, _, Quantization::Mxfp4Experts) => dtype,
                    (false, Part::Router, _) => dtype,
                    _ => per_linear,
                };
                let ranks = if part == Part::Experts {
                    expert_ranks
                } else {
                    tp
                };
                params += n;
                if part == Part::Experts {
                    experts_all += n;
                }
                if kept && !matches!(self.quantization, Quantization::None) {
                    unquantized += n;
                }
                bytes_total += n as f64 * per;
                bytes_rank += n as f64 * per / ranks as f64;
            }
        }
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
        bytes_total += (embed + vision) as f64 * dtype;
        bytes_rank += (embed + vision) as f64 * dtype / tp as f64;
        WeightEstimate {
            linear_params: params,
            embedding_params: embed,
            vision_params: vision,
            total: ByteSize::new(bytes_total.round() as u64),
            per_rank: ByteSize::new(bytes_rank.round() as u64),
            basis: format!(
                "counted from config shapes: {:.3} B linear params at {:.3} B each ({:?}){}{}, \
                 {:.3} B embedding params at {} B{}{}",
                params as f64 / 1e9,
                per_linear,
                self.quantization,
                if unquantized > 0 {
                    format!(
                        ", {:.3} B of them left unquantized by the config",
                        unquantized as f64 / 1e9
                    )
                } else {
                    String::new()
                },
                if experts_all > 0 {
                    format!(
                        ", {:.3} B in routed experts over {expert_ranks} ranks",
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

    /// Parameters of layer `index` by part.
    fn layer_parts(&self, index: u64, kind: LayerKind) -> Vec<(Part, u64)> {
        let mut parts = Vec::with_capacity(4);
        match kind {
            k if k.is_attention() => parts.push((Part::Attention, self.attention_params())),
            LayerKind::SharedKv => parts.push((Part::Attention, self.attention_params())),
            LayerKind::LinearAttention => parts.push((Part::Mixer, self.gdn_params())),
            LayerKind::Mamba => parts.push((Part::Mixer, self.mamba_params())),
            _ => {}
        }
        let has_mlp = !self.separate_mlp_layers || matches!(kind, LayerKind::NoCache);
        if has_mlp {
            let h = self.hidden_size;
            let matrices = if self.gated_mlp { 3 } else { 2 };
            match self.moe {
                Some(moe)
                    if index >= moe.first_dense_layers
                        && moe.last_layer.is_none_or(|last| index <= last)
                        && (index + 1).is_multiple_of(moe.interleave_step.max(1)) =>
                {
                    // Latent experts work in `latent` wide, behind a projection each way.
                    let width = moe.latent_size.unwrap_or(h);
                    parts.push((
                        Part::Experts,
                        moe.num_experts * matrices * width * moe.expert_intermediate,
                    ));
                    let projections = moe.latent_size.map_or(0, |l| 2 * h * l);
                    parts.push((
                        Part::SharedExperts,
                        matrices * h * moe.shared_intermediate + projections,
                    ));
                    parts.push((Part::Router, h * moe.num_experts));
                }
                _ => parts.push((Part::Mlp, matrices * h * self.intermediate_size)),
            }
        }
        parts
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

/// What a checkpoint tensor is, for placing it on ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TensorClass {
    Embedding,
    LmHead,
    Vision,
    Mtp,
    Experts,
    Layer,
    Other,
}

/// The tensors of a checkpoint as the JSON headers of its `.safetensors`
/// files list them: exact bytes, placed on ranks by name (embedding, LM
/// head, vision tower, MTP layers, routed experts, decoder layer index).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CheckpointTensors {
    tensors: Vec<(TensorClass, Option<u64>, u64)>,
}

impl CheckpointTensors {
    /// Reads the header of each shard: the JSON object a `.safetensors` file
    /// starts with (after its 8-byte length), `{"name": {"dtype", "shape",
    /// "data_offsets": [start, end]}, "__metadata__": {…}}`.
    ///
    /// # Errors
    /// [`CapacityError::NotJson`] for a header that is not such an object.
    pub fn from_headers<'a>(
        headers: impl IntoIterator<Item = &'a str>,
    ) -> Result<Self, CapacityError> {
        let mut tensors = Vec::new();
        for text in headers {
            let v: Value = serde_json::from_str(text)
                .map_err(|e| CapacityError::NotJson(format!("safetensors header: {e}")))?;
            let map = v.as_object().ok_or_else(|| {
                CapacityError::NotJson("a safetensors header is not a JSON object".into())
            })?;
            for (name, t) in map.iter().filter(|(n, _)| *n != "__metadata__") {
                let offsets = t
                    .get("data_offsets")
                    .and_then(Value::as_array)
                    .and_then(|o| Some((o.first()?.as_u64()?, o.get(1)?.as_u64()?)))
                    .ok_or_else(|| {
                        CapacityError::NotJson(format!(
                            "safetensors header: tensor `{name}` has no data_offsets"
                        ))
                    })?;
                let bytes = offsets.1.saturating_sub(offsets.0);
                let (class, layer) = classify(name);
                tensors.push((class, layer, bytes));
            }
        }
        Ok(CheckpointTensors { tensors })
    }

    /// Bytes of every tensor.
    pub fn total(&self) -> ByteSize {
        ByteSize::new(self.tensors.iter().map(|t| t.2).sum())
    }

    /// Bytes one rank loads under `placement`: its stage's layers over the
    /// tensor-parallel ranks (routed experts over the expert ranks), the
    /// embedding on the first stage, the LM head (or, tied, a copy of the
    /// embedding when stages differ) on the last, the vision tower unless
    /// text-only, MTP layers only when MTP drafts.
    pub fn bytes_on(
        &self,
        model: &ModelConfig,
        placement: &WeightPlacement,
        with_mtp: bool,
    ) -> WeightEstimate {
        let tp = placement.tensor_parallel.max(1) as f64;
        let expert_ranks = if placement.expert_parallel > 1 {
            placement.expert_parallel as f64
        } else {
            tp
        };
        let n = model.layers.len() as u64;
        let last_stage = placement.layers.end as u64 >= n;
        let has_lm_head = self.tensors.iter().any(|t| t.0 == TensorClass::LmHead);
        let mut rank = 0.0f64;
        let mut counted = 0u64;
        for &(class, layer, bytes) in &self.tensors {
            // A layer index past the decoder is an MTP layer (DeepSeek's layer 61).
            let class = match layer {
                Some(l) if l >= n && class != TensorClass::Vision => TensorClass::Mtp,
                _ => class,
            };
            let in_stage = layer.is_some_and(|l| placement.layers.contains(&(l as usize)));
            let share = match class {
                // Tied weights: the last stage holds its own copy as the LM head.
                TensorClass::Embedding
                    if placement.embedding || (!has_lm_head && placement.lm_head) =>
                {
                    1.0 / tp
                }
                TensorClass::LmHead if placement.lm_head => 1.0 / tp,
                TensorClass::Vision if placement.embedding && !placement.language_model_only => {
                    1.0 / tp
                }
                TensorClass::Mtp if with_mtp && last_stage => 1.0 / tp,
                TensorClass::Experts if in_stage => 1.0 / expert_ranks,
                TensorClass::Layer if in_stage => 1.0 / tp,
                TensorClass::Other if last_stage => 1.0,
                _ => 0.0,
            };
            if share > 0.0 {
                counted += bytes;
            }
            rank += bytes as f64 * share;
        }
        WeightEstimate {
            linear_params: 0,
            embedding_params: 0,
            vision_params: 0,
            total: self.total(),
            per_rank: ByteSize::new(rank.round() as u64),
            basis: format!(
                "measured: the checkpoint's safetensors headers ({} tensors, {} in all, {} of them \
                 on this rank's stage{}{})",
                self.tensors.len(),
                self.total(),
                ByteSize::new(counted),
                if placement.language_model_only {
                    ", vision tower not loaded"
                } else {
                    ""
                },
                if with_mtp { ", MTP layers loaded" } else { "" }
            ),
        }
    }
}

/// The class and decoder layer of a tensor by its name.
fn classify(name: &str) -> (TensorClass, Option<u64>) {
    let n = name.to_ascii_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| n.contains(w));
    let layer = ["layers.", "h.", "blocks.", "layer."]
        .iter()
        .find_map(|key| {
            let at = n.find(key)?;
            if at > 0 && n.as_bytes()[at - 1].is_ascii_alphanumeric() {
                return None;
            }
            let digits: String = n[at + key.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        });
    let class = if has(&[
        "visual",
        "vision",
        "multi_modal_projector",
        "mm_projector",
        "audio_tower",
        "image_newline",
    ]) {
        TensorClass::Vision
    } else if n.starts_with("mtp.") || has(&[".mtp.", "mtp_block", "nextn"]) {
        TensorClass::Mtp
    } else if has(&["embed_tokens", "word_embeddings", "tok_embeddings", "wte."]) {
        TensorClass::Embedding
    } else if n.starts_with("lm_head") || has(&[".lm_head", "output.weight"]) && layer.is_none() {
        TensorClass::LmHead
    } else if has(&[".experts."]) && !has(&["shared_expert"]) {
        TensorClass::Experts
    } else if layer.is_some() {
        TensorClass::Layer
    } else {
        TensorClass::Other
    };
    (class, layer)
}
