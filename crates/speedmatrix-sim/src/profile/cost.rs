//! The step-time model of a profile: how long one engine step takes for what it computes.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long one engine step takes, as a function of what it computes.
///
/// A step runs prefill chunks and decode tokens together (continuous batching):
///
/// ```text
/// step = step_base
///      + Σ over prefill chunks of n new tokens after c cached ones:
///            n · prefill_per_token + n · (c + n/2) · prefill_per_token_context
///      + d · decode_per_seq + C · decode_per_context_token · d^(−decode_batch_exponent)
/// ```
///
/// where `d` is the number of requests decoding one token in the step and `C` the total context
/// (tokens already in the KV cache) of those requests. The prefill terms are the linear work
/// (weights) and attention over the already-cached context (quadratic over a whole prompt). The
/// decode terms are a fixed per-sequence cost and attention reads of the KV cache, which a larger
/// batch reads more efficiently (an empirical exponent; 0 means no batching gain).
///
/// A profile's `cost` in JSON. The simulator's fitted step time, not
/// `speedmatrix_predict::CostModel` (a roofline estimate from a model and a GPU).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepCost {
    /// Fixed cost of any step, microseconds.
    pub step_base_us: f64,
    /// Prefill cost per new prompt token, microseconds.
    pub prefill_per_token_us: f64,
    /// Prefill attention cost per (new token × context token), nanoseconds.
    pub prefill_per_token_context_ns: f64,
    /// Decode cost per sequence in the batch, microseconds.
    pub decode_per_seq_us: f64,
    /// Decode attention cost per context token in the batch, nanoseconds (at batch size 1).
    pub decode_per_context_token_ns: f64,
    /// How much a larger batch reduces the per-context-token decode cost (`d^-exponent`).
    pub decode_batch_exponent: f64,
    /// Time the server's front end spends on each request before the engine sees it
    /// (HTTP, tokenizing, scheduling: vLLM's API server), microseconds. Requests pass the
    /// front end one at a time, so N arriving together reach the engine staggered: this is
    /// what makes a warm request's TTFT grow with the number of requests sent with it.
    #[serde(default)]
    pub frontend_per_request_us: f64,
    /// Front-end time per prompt token (tokenizing, hashing for the prefix cache), nanoseconds.
    #[serde(default)]
    pub frontend_per_prompt_token_ns: f64,
}

impl StepCost {
    /// Time of a prefill chunk of `tokens` new tokens after `cached` tokens already in the cache,
    /// without the step's base cost.
    pub fn prefill_chunk(&self, tokens: u64, cached: u64) -> Duration {
        let n = tokens as f64;
        let attention_pairs = n * (cached as f64 + n / 2.0);
        secs(
            n * self.prefill_per_token_us * 1e-6
                + attention_pairs * self.prefill_per_token_context_ns * 1e-9,
        )
    }

    /// Time of the decode part of a step: `batch` sequences with `context_tokens` tokens of KV
    /// cache between them, without the step's base cost.
    pub fn decode(&self, batch: u64, context_tokens: u64) -> Duration {
        if batch == 0 {
            return Duration::ZERO;
        }
        let d = batch as f64;
        let attention = context_tokens as f64
            * self.decode_per_context_token_ns
            * 1e-9
            * d.powf(-self.decode_batch_exponent);
        secs(d * self.decode_per_seq_us * 1e-6 + attention)
    }

    /// The front end's time on one request of `prompt` tokens.
    pub fn frontend(&self, prompt: u64) -> Duration {
        secs(
            self.frontend_per_request_us * 1e-6
                + prompt as f64 * self.frontend_per_prompt_token_ns * 1e-9,
        )
    }

    /// The fixed cost of a step.
    pub fn step_base(&self) -> Duration {
        secs(self.step_base_us * 1e-6)
    }

    /// Time of one decode step (base included) for `batch` sequences of `context` tokens each.
    pub fn decode_step(&self, batch: u64, context: u64) -> Duration {
        self.step_base() + self.decode(batch, batch * context)
    }

    /// Time to prefill a `prompt`-token prompt alone, in chunks of `chunk` tokens, base included:
    /// the simulated TTFT of one request on an idle server with a cold cache.
    pub fn prefill(&self, prompt: u64, chunk: u64) -> Duration {
        let chunk = chunk.max(1);
        let mut done = 0;
        let mut total = Duration::ZERO;
        while done < prompt {
            let n = chunk.min(prompt - done);
            total += self.step_base() + self.prefill_chunk(n, done);
            done += n;
        }
        total
    }

    pub(super) fn check(&self) -> Result<(), String> {
        let fields = [
            ("step_base_us", self.step_base_us),
            ("prefill_per_token_us", self.prefill_per_token_us),
            (
                "prefill_per_token_context_ns",
                self.prefill_per_token_context_ns,
            ),
            ("decode_per_seq_us", self.decode_per_seq_us),
            (
                "decode_per_context_token_ns",
                self.decode_per_context_token_ns,
            ),
            ("decode_batch_exponent", self.decode_batch_exponent),
            ("frontend_per_request_us", self.frontend_per_request_us),
            (
                "frontend_per_prompt_token_ns",
                self.frontend_per_prompt_token_ns,
            ),
        ];
        for (name, value) in fields {
            if !value.is_finite() || value < 0.0 {
                return Err(format!(
                    "cost.{name} must be a finite number ≥ 0, got {value}"
                ));
            }
        }
        Ok(())
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{Profile, RTX3090_QWEN35_4B_FP8};

    #[test]
    fn step_cost_terms() {
        let c = Profile::builtin(RTX3090_QWEN35_4B_FP8).unwrap().cost;
        assert_eq!(c.decode(0, 1_000), Duration::ZERO);
        assert!(
            c.decode(2, 2_000) < c.decode(1, 1_000) * 2,
            "batching amortizes attention reads"
        );
        let one_chunk = c.prefill(2_048, 2_048);
        assert_eq!(one_chunk, c.step_base() + c.prefill_chunk(2_048, 0));
        assert!(
            c.prefill(4_096, 2_048) > one_chunk * 2,
            "later chunks attend to more context"
        );
    }
}
