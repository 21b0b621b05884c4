//! A whole speed matrix from the cost model: prefill rows and sustained
//! decode cells, as the runner would measure them.

use std::time::Duration;

use serde::Serialize;
use speedmatrix_units::{Concurrency, Tokens};

use crate::cost::{Bound, CostModel};

/// The cells to predict.
#[derive(Debug, Clone, PartialEq)]
pub struct MatrixSpec {
    /// Prefill prompt lengths.
    pub prefill_contexts: Vec<Tokens>,
    /// Decode contexts (rows).
    pub contexts: Vec<Tokens>,
    /// Decode concurrencies (columns).
    pub concurrencies: Vec<Concurrency>,
    /// Output tokens a request may generate before it is replaced.
    pub max_output: Tokens,
    /// The measurement window of a decode cell.
    pub window: Duration,
    /// Block size of the engine's prefix cache: a warm prompt still
    /// prefills its last partial block.
    pub block_size: u64,
}

/// A predicted prefill row.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PrefillEstimate {
    /// Prompt length.
    pub context: Tokens,
    /// Cold time to first token.
    pub ttft: Duration,
    /// Prompt tokens over that time.
    pub prompt_tokens_per_s: f64,
}

/// A predicted sustained-decode cell.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DecodeEstimate {
    /// Prompt length.
    pub context: Tokens,
    /// Streams kept busy.
    pub concurrency: Concurrency,
    /// Output tok/s of all streams over the window.
    pub total_tokens_per_s: f64,
    /// Per stream.
    pub per_request_tokens_per_s: f64,
    /// Mean time between a stream's tokens over the window (a step's time without
    /// speculation; with it, the step's time over the tokens it emits).
    pub time_between_tokens: Duration,
    /// A warm request's time to first token joining the others.
    pub ttft: Duration,
    /// What bounds the cell's first step.
    pub bound: Bound,
}

impl CostModel {
    /// A decode cell: `n` streams from `context`, each context growing a
    /// token a step and starting over at `max_output`, stepped through the
    /// window as the engine would.
    pub fn decode_cell(
        &self,
        context: Tokens,
        n: Concurrency,
        max_output: Tokens,
        window: Duration,
        block_size: u64,
    ) -> DecodeEstimate {
        let (batch, start) = (u64::from(n.get()), context.get());
        let cap = max_output.get().max(1);
        let (mut t, mut steps, mut generated) = (0.0f64, 0u64, 0u64);
        let limit = window.as_secs_f64();
        // Long windows of fast steps: sample every k-th step (the context
        // changes by one token a step, the step time barely at all).
        let stride = 8u64;
        // With speculation a step emits several tokens a stream: time is kept per token.
        let per_step = self.tokens_per_step();
        while t < limit && steps < 50_000_000 {
            let step = (self
                .decode_step(batch, start + generated)
                .total
                .as_secs_f64()
                / per_step)
                .max(1e-9);
            let k = stride.min(cap - generated).max(1);
            let take = ((limit - t) / step).ceil().max(1.0) as u64;
            let k = k.min(take);
            t += step * k as f64;
            steps += k;
            generated += k;
            if generated >= cap {
                generated = 0;
            }
        }
        let per_request = steps as f64 / t.max(1e-9);
        let tail = start % block_size.max(1);
        DecodeEstimate {
            context,
            concurrency: n,
            total_tokens_per_s: per_request * batch as f64,
            per_request_tokens_per_s: per_request,
            time_between_tokens: Duration::from_secs_f64(1.0 / per_request.max(1e-9)),
            ttft: self.warm_ttft(start, tail.max(1), batch),
            bound: self.decode_step(batch, start).bound,
        }
    }

    /// A cold prefill row.
    pub fn prefill_row(&self, context: Tokens) -> PrefillEstimate {
        let ttft = self.cold_ttft(context.get());
        PrefillEstimate {
            context,
            ttft,
            prompt_tokens_per_s: context.get() as f64 / ttft.as_secs_f64().max(1e-9),
        }
    }

    /// Every prefill row and every decode cell of `spec` (capacity is the
    /// caller's to decide: this predicts speed, not fit).
    pub fn matrix(&self, spec: &MatrixSpec) -> (Vec<PrefillEstimate>, Vec<DecodeEstimate>) {
        let prefill = spec
            .prefill_contexts
            .iter()
            .map(|&c| self.prefill_row(c))
            .collect();
        let decode = spec
            .contexts
            .iter()
            .flat_map(|&c| {
                spec.concurrencies.iter().map(move |&n| {
                    self.decode_cell(c, n, spec.max_output, spec.window, spec.block_size)
                })
            })
            .collect();
        (prefill, decode)
    }
}
