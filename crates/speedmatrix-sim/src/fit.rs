//! Fits the simulator's [`StepCost`] to step times and TTFTs, from a
//! measured run (`speedmatrix calibrate`) or a prediction (`speedmatrix
//! predict --simulate`).
//!
//! Decode: `step(b, C) = base + b·per_seq + b·C·per_ctx·b^(−e)` is linear in
//! `(base, per_seq, per_ctx)` for a given exponent `e`; each `e` on a grid
//! gets a weighted least-squares solve (weights `1/step`, so residuals are
//! relative), coefficients kept ≥ 0, and the best `e` wins. Prefill: with the
//! base fixed, a cold TTFT (less its front-end time) is linear in
//! `(per_token, per_token_context)` over its chunks. Front end: `N` warm
//! requests sent together pass it one at a time, so their median TTFT less a
//! step is `(N + 1)/2 · (per_request + C · per_prompt_token)`, linear too.

use std::time::Duration;

use nalgebra::{DMatrix, DVector};

use crate::SimError;
use crate::profile::StepCost;

/// The mean time between a stream's tokens with `batch` streams at `context`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeObservation {
    /// Streams decoding together.
    pub batch: u64,
    /// Their mean context over the measurement.
    pub context: u64,
    /// Time of one step.
    pub step: Duration,
    /// The cell's prompt length and median TTFT of its (warm) requests,
    /// when known: they fit the front end.
    pub warm_ttft: Option<(u64, Duration)>,
}

/// A cold prefill of `prompt` tokens alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefillObservation {
    /// Prompt tokens.
    pub prompt: u64,
    /// Time to first token.
    pub ttft: Duration,
}

/// A fitted cost model and each observation's relative error under it.
#[derive(Debug, Clone, PartialEq)]
pub struct FittedCost {
    /// The model.
    pub cost: StepCost,
    /// `model / observed − 1` per decode observation, in order.
    pub decode_errors: Vec<f64>,
    /// The same per prefill observation.
    pub prefill_errors: Vec<f64>,
    /// The same for the warm TTFT of each decode observation that had one.
    pub ttft_errors: Vec<f64>,
}

/// Fits a cost model; `chunk` is the engine's prefill token budget.
pub fn fit_cost(
    decode: &[DecodeObservation],
    prefill: &[PrefillObservation],
    chunk: u64,
) -> Result<FittedCost, SimError> {
    if decode.is_empty() {
        return Err(SimError::Fit(
            "no decode figure to fit: the run has no measured decode cell".into(),
        ));
    }
    let mut best: Option<(f64, StepCost)> = None;
    for k in 0..=60 {
        let e = f64::from(k) * 0.01;
        let Some(cost) = fit_decode(decode, e) else {
            continue;
        };
        let err = rms(&decode_errors(&cost, decode));
        if best.as_ref().is_none_or(|b| err < b.0) {
            best = Some((err, cost));
        }
    }
    let Some((_, mut cost)) = best else {
        return Err(SimError::Fit("the decode figures admit no solution".into()));
    };
    fit_frontend(&mut cost, decode);
    if !prefill.is_empty() {
        fit_prefill(&mut cost, prefill, chunk.max(1))?;
    }
    Ok(FittedCost {
        decode_errors: decode_errors(&cost, decode),
        prefill_errors: prefill
            .iter()
            .map(|p| ratio(cold_ttft(&cost, p.prompt, chunk.max(1)), p.ttft))
            .collect(),
        ttft_errors: decode
            .iter()
            .filter_map(|d| {
                let (prompt, ttft) = d.warm_ttft?;
                Some(ratio(warm_ttft(&cost, d.batch, prompt, d.step), ttft))
            })
            .collect(),
        cost,
    })
}

/// A cold request alone: the front end, then its chunks.
pub fn cold_ttft(cost: &StepCost, prompt: u64, chunk: u64) -> Duration {
    cost.frontend(prompt) + cost.prefill(prompt, chunk)
}

/// The median of `batch` warm requests sent together: the median one waits
/// for `(batch + 1)/2` front-end passes, then a step.
pub fn warm_ttft(cost: &StepCost, batch: u64, prompt: u64, step: Duration) -> Duration {
    cost.frontend(prompt)
        .mul_f64((batch.max(1) as f64 + 1.0) / 2.0)
        + step
}

/// The front end from the decode cells' warm TTFTs (left at zero without them).
fn fit_frontend(cost: &mut StepCost, decode: &[DecodeObservation]) {
    let rows: Vec<(Vec<f64>, f64)> = decode
        .iter()
        .filter_map(|d| {
            let (prompt, ttft) = d.warm_ttft?;
            let t = ttft.as_secs_f64().max(1e-9);
            let share = (d.batch.max(1) as f64 + 1.0) / 2.0;
            let w = 1.0 / t;
            Some((
                vec![share * w, share * prompt as f64 * w],
                (t - d.step.as_secs_f64()).max(0.0) * w,
            ))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    if let Some(x) = solve(&rows, vec![0, 1]) {
        cost.frontend_per_request_us = x[0] * 1e6;
        cost.frontend_per_prompt_token_ns = x[1] * 1e9;
    }
}

fn ratio(model: Duration, observed: Duration) -> f64 {
    model.as_secs_f64() / observed.as_secs_f64().max(1e-12) - 1.0
}

fn rms(v: &[f64]) -> f64 {
    (v.iter().map(|x| x * x).sum::<f64>() / v.len().max(1) as f64).sqrt()
}

fn decode_errors(cost: &StepCost, decode: &[DecodeObservation]) -> Vec<f64> {
    decode
        .iter()
        .map(|d| ratio(cost.decode_step(d.batch, d.context), d.step))
        .collect()
}

/// Non-negative weighted least squares over the columns `keep`: a column
/// whose coefficient comes out negative is dropped and the rest solved again.
fn solve(rows: &[(Vec<f64>, f64)], mut keep: Vec<usize>) -> Option<Vec<f64>> {
    let width = rows.first()?.0.len();
    loop {
        let a = DMatrix::from_fn(rows.len(), keep.len(), |i, j| rows[i].0[keep[j]]);
        let b = DVector::from_iterator(rows.len(), rows.iter().map(|r| r.1));
        let x = a.svd(true, true).solve(&b, 1e-15).ok()?;
        let Some(neg) = (0..keep.len()).find(|&j| x[j] < 0.0) else {
            let mut out = vec![0.0; width];
            for (j, &col) in keep.iter().enumerate() {
                out[col] = x[j];
            }
            return Some(out);
        };
        keep.remove(neg);
        if keep.is_empty() {
            return Some(vec![0.0; width]);
        }
    }
}

fn fit_decode(decode: &[DecodeObservation], exponent: f64) -> Option<StepCost> {
    let rows: Vec<(Vec<f64>, f64)> = decode
        .iter()
        .map(|d| {
            let (b, c) = (d.batch.max(1) as f64, d.context as f64);
            let w = 1.0 / d.step.as_secs_f64().max(1e-9);
            (vec![w, b * w, b * c * b.powf(-exponent) * w], 1.0)
        })
        .collect();
    let x = solve(&rows, vec![0, 1, 2])?;
    Some(StepCost {
        step_base_us: x[0] * 1e6,
        decode_per_seq_us: x[1] * 1e6,
        decode_per_context_token_ns: x[2] * 1e9,
        decode_batch_exponent: exponent,
        prefill_per_token_us: 0.0,
        prefill_per_token_context_ns: 0.0,
        frontend_per_request_us: 0.0,
        frontend_per_prompt_token_ns: 0.0,
    })
}

fn fit_prefill(
    cost: &mut StepCost,
    prefill: &[PrefillObservation],
    chunk: u64,
) -> Result<(), SimError> {
    let base = cost.step_base().as_secs_f64();
    let rows: Vec<(Vec<f64>, f64)> = prefill
        .iter()
        .map(|p| {
            let (mut tokens, mut pairs, mut chunks, mut done) = (0.0, 0.0, 0.0, 0u64);
            while done < p.prompt {
                let n = chunk.min(p.prompt - done);
                tokens += n as f64;
                pairs += n as f64 * (done as f64 + n as f64 / 2.0);
                chunks += 1.0;
                done += n;
            }
            let t = p.ttft.as_secs_f64().max(1e-9);
            let w = 1.0 / t;
            let front = cost.frontend(p.prompt).as_secs_f64();
            (vec![tokens * w, pairs * w], (t - front - chunks * base) * w)
        })
        .collect();
    let x = solve(&rows, vec![0, 1])
        .ok_or_else(|| SimError::Fit("the prefill figures admit no solution".into()))?;
    cost.prefill_per_token_us = x[0] * 1e6;
    cost.prefill_per_token_context_ns = x[1] * 1e9;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figures made by a known model are fitted back to it.
    #[test]
    fn recovers_a_known_model() {
        let truth = StepCost {
            step_base_us: 8_000.0,
            prefill_per_token_us: 80.0,
            prefill_per_token_context_ns: 1.5,
            decode_per_seq_us: 200.0,
            decode_per_context_token_ns: 40.0,
            decode_batch_exponent: 0.25,
            frontend_per_request_us: 20_000.0,
            frontend_per_prompt_token_ns: 2_000.0,
        };
        let decode: Vec<DecodeObservation> = [1u64, 2, 4, 8, 16, 32]
            .iter()
            .flat_map(|&b| {
                [0u64, 16_384, 65_536].map(|c| {
                    let step = truth.decode_step(b, c);
                    DecodeObservation {
                        batch: b,
                        context: c,
                        step,
                        warm_ttft: Some((c, warm_ttft(&truth, b, c, step))),
                    }
                })
            })
            .collect();
        let prefill: Vec<PrefillObservation> = [8_192u64, 32_768, 131_072]
            .iter()
            .map(|&p| PrefillObservation {
                prompt: p,
                ttft: cold_ttft(&truth, p, 2_048),
            })
            .collect();
        let fit = fit_cost(&decode, &prefill, 2_048).unwrap();
        for e in fit
            .decode_errors
            .iter()
            .chain(&fit.prefill_errors)
            .chain(&fit.ttft_errors)
        {
            assert!(e.abs() < 1e-3, "{e} in {fit:?}");
        }
        assert!((fit.cost.decode_batch_exponent - 0.25).abs() < 0.011);
    }

    #[test]
    fn no_decode_figure_is_an_error() {
        assert!(matches!(fit_cost(&[], &[], 2_048), Err(SimError::Fit(_))));
    }
}
