//! What one step of a model reads and computes on one tensor-parallel rank,
//! from its config and the engine's KV layout.

use serde::Serialize;
use speedmatrix_capacity::{LayerKind, ModelConfig, ParameterSplit, VllmFlags, VllmLayout};

use crate::PredictError;

/// Attention layers that see the same span of context.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AttentionGroup {
    /// Layers in the group.
    pub layers: u64,
    /// Tokens of context a layer attends to at most (`None`: all of them).
    pub window: Option<u64>,
    /// KV bytes per context token per layer on one rank.
    pub kv_bytes_per_token: f64,
    /// FLOPs per (query token × context token) per layer on one rank:
    /// scores and the weighted sum, `4 × heads × head_dim`.
    pub flops_per_token_pair: f64,
    /// Query heads per layer on one rank: scores per (query token × context token).
    pub heads: f64,
}

/// The byte and FLOP counts of a model per rank (see `docs/predict.md`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelShape {
    /// Weights by what a step reads.
    pub params: ParameterSplit,
    /// Attention layers grouped by window.
    pub attention: Vec<AttentionGroup>,
    /// Recurrent (Gated DeltaNet, Mamba) state bytes per sequence on one
    /// rank, all layers: read and written once per decode step.
    pub state_bytes_per_sequence: f64,
    /// Decoder layers (for tensor-parallel all-reduces).
    pub layers: u64,
    /// Of those, the layers whose MLP is a mixture of experts.
    pub moe_layers: u64,
    /// Of those, the layers whose attention is multi-head latent attention (MLA).
    pub mla_layers: u64,
    /// Hidden size (all-reduce payload per token).
    pub hidden_size: u64,
}

impl ModelShape {
    /// The shape of `model` split over `flags.tensor_parallel_size` ranks,
    /// KV bytes as vLLM lays them out under `flags` (its KV dtype).
    pub fn new(model: &ModelConfig, flags: &VllmFlags) -> Result<ModelShape, PredictError> {
        let tp = flags.tensor_parallel_size.max(1);
        let layout = VllmLayout::plan(model, flags)?;
        let heads = (model.num_attention_heads as f64 / f64::from(tp)).max(1.0);
        let pair_flops = |kind: LayerKind| {
            if let Some(m) = model.mla {
                // Absorbed MLA scores against the latent and its rope part
                // and sums over the latent.
                return 2.0 * heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim) as f64;
            }
            let head_dim = match (kind, model.full_attention_heads) {
                (LayerKind::FullAttention, Some(h)) => h.head_dim,
                _ => model.head_dim,
            };
            4.0 * heads * head_dim as f64
        };
        let full_bytes = layout
            .layer_costs
            .iter()
            .find(|c| c.kind == LayerKind::FullAttention)
            .and_then(|c| c.bytes_per_token);
        let mut attention: Vec<AttentionGroup> = Vec::new();
        let mut state = 0.0;
        for cost in &layout.layer_costs {
            if let Some(s) = cost.state_bytes {
                state += s as f64 * cost.layers as f64;
            }
            let window = match cost.kind {
                LayerKind::SlidingWindow { window } => Some(window),
                LayerKind::ChunkedLocal { chunk } => Some(chunk),
                LayerKind::FullAttention | LayerKind::SharedKv => None,
                _ => continue,
            };
            // A layer sharing another's KV still reads it.
            let Some(bytes) = cost.bytes_per_token.or(full_bytes) else {
                continue;
            };
            attention.push(AttentionGroup {
                layers: cost.layers,
                window,
                kv_bytes_per_token: bytes as f64,
                flops_per_token_pair: pair_flops(cost.kind),
                heads,
            });
        }
        Ok(ModelShape {
            params: model.parameter_split(tp),
            attention,
            state_bytes_per_sequence: state,
            layers: model.layers.len() as u64,
            moe_layers: model.moe_layers(),
            // An MLA model's full-attention layers are its latent ones (hybrids such as
            // Kimi Linear keep their linear layers apart).
            mla_layers: if model.mla.is_some() {
                model
                    .layers
                    .iter()
                    .filter(|k| matches!(k, LayerKind::FullAttention))
                    .count() as u64
            } else {
                0
            },
            hidden_size: model.hidden_size,
        })
    }

    /// KV bytes one sequence reads per step at `context` tokens.
    pub fn kv_bytes(&self, context: u64) -> f64 {
        self.attention
            .iter()
            .map(|g| g.layers as f64 * g.kv_bytes_per_token * seen(context, g.window) as f64)
            .sum()
    }

    /// Attention FLOPs of one query token at `context` tokens.
    pub fn attention_flops(&self, context: u64) -> f64 {
        self.attention
            .iter()
            .map(|g| g.layers as f64 * g.flops_per_token_pair * seen(context, g.window) as f64)
            .sum()
    }

    /// Attention scores (query token × context token × head, all layers) of `queries` query
    /// tokens that each see `context` tokens: what an attention path that writes its score
    /// matrix to memory moves (see [`crate::AttentionKernel::Materialized`]).
    pub fn scores(&self, queries: u64, context: u64) -> f64 {
        self.attention
            .iter()
            .map(|g| g.layers as f64 * g.heads * queries as f64 * seen(context, g.window) as f64)
            .sum()
    }

    /// Routed experts per MoE layer that `tokens` tokens touch, expected
    /// under uniform routing: `E · (1 − (1 − k/E)^tokens)`.
    pub fn experts_touched(&self, tokens: u64) -> f64 {
        self.experts_touched_by(tokens as f64)
    }

    /// [`ModelShape::experts_touched`] for a real-valued count of independently routed
    /// tokens (see [`crate::Factors::routing_independence`]).
    pub fn experts_touched_by(&self, tokens: f64) -> f64 {
        let p = &self.params;
        if p.num_experts == 0 {
            return 0.0;
        }
        let e = p.num_experts as f64;
        let k = (p.experts_per_token as f64).min(e);
        e * (1.0 - (1.0 - k / e).powf(tokens.max(1.0)))
    }
}

/// Context tokens a layer with `window` sees at `context`.
fn seen(context: u64, window: Option<u64>) -> u64 {
    window.map_or(context, |w| context.min(w))
}
