//! Speculative decoding as the cost model prices it: how many tokens are drafted, how many
//! the target accepts, and what a drafting pass runs.

use serde::Serialize;

/// Speculative decoding as a decode step prices it: the drafter proposes `tokens` tokens a
/// sequence, one pass each, and the target verifies them and its own next token in one
/// forward pass of `tokens + 1` query tokens a sequence; a step then emits the accepted
/// prefix plus the target's token.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Speculation {
    /// Tokens drafted a step (`num_speculative_tokens`).
    pub tokens: u64,
    /// Drafted tokens the target accepts, as a share of those drafted: vLLM's "Avg Draft
    /// acceptance rate" (accepted / drafted tokens, `vllm/v1/spec_decode/metrics.py`).
    pub acceptance_rate: f64,
    /// What one drafting pass runs.
    pub drafter: Drafter,
}

/// What one drafting pass of speculative decoding runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Drafter {
    /// Nothing on the GPU (n-gram or suffix lookup).
    None,
    /// Decoder layers shaped like the target's and its LM head: MTP layers, or an EAGLE
    /// head whose config is not known (priced as one layer).
    TargetLayers {
        /// Layers a pass runs.
        layers: u64,
    },
    /// A model of its own (an EAGLE, DFlash or draft checkpoint whose config is known).
    Model {
        /// Bytes a pass reads on one rank.
        bytes: f64,
        /// Multiply-accumulates per token of a pass on one rank.
        macs_per_token: f64,
        /// Its decoder layers.
        layers: u64,
    },
}

impl Speculation {
    /// Tokens a step emits per sequence: vLLM's "Mean acceptance length",
    /// `1 + acceptance_rate × tokens`.
    pub fn tokens_per_step(&self) -> f64 {
        1.0 + self.acceptance_rate * self.tokens as f64
    }

    /// The acceptance rate that gives a mean acceptance length of `length` with `tokens`
    /// drafted a step; `None` outside `1 ..= tokens + 1`.
    pub fn rate_from_length(length: f64, tokens: u64) -> Option<f64> {
        let k = tokens as f64;
        (tokens > 0 && length.is_finite() && (1.0..=k + 1.0).contains(&length))
            .then(|| (length - 1.0) / k)
    }
}
