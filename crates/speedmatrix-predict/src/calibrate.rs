//! A rig's own factors from a few measured cells: the family's fitted factors are the prior,
//! the measured cells of a partial run pull them to this GPU, engine build and model, and the
//! rest of the matrix is predicted with them (`predict --calibrate-from`).
//!
//! The fit is a maximum a posteriori estimate in log space: squared log errors of the
//! measured figures (each with a 3 % scale) plus squared log deviations of each factor from
//! the family's (a factor of 2 scale), so a factor the cells cannot see — the compute
//! efficiency when no prefill was measured — stays where the family's data put it rather
//! than wander. Its band comes from leaving each measured figure out in turn.

use std::time::Duration;

use argmin::core::CostFunction;
use speedmatrix_units::{Concurrency, Tokens};

use crate::cost::CostModel;
use crate::factors::Factors;
use crate::minimize::{Restarts, minimize};
use crate::{Band, Bands, PredictError};

/// A measured figure of the rig being calibrated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Observation {
    /// A sustained-decode cell's total output tok/s.
    Decode {
        /// Prompt length of the cell.
        context: Tokens,
        /// Streams kept busy.
        concurrency: Concurrency,
        /// Measured total output tok/s.
        total_tokens_per_s: f64,
    },
    /// A cold prefill's time to first token.
    Prefill {
        /// Prompt length.
        prompt: Tokens,
        /// Measured time to first token.
        ttft: Duration,
    },
}

impl Observation {
    /// The measured figure, as a rate (tok/s for decode, prompt tok/s for prefill).
    pub fn measured(&self) -> f64 {
        match *self {
            Observation::Decode {
                total_tokens_per_s, ..
            } => total_tokens_per_s,
            Observation::Prefill { prompt, ttft } => {
                prompt.get() as f64 / ttft.as_secs_f64().max(1e-9)
            }
        }
    }

    fn is_decode(&self) -> bool {
        matches!(self, Observation::Decode { .. })
    }

    fn usable(&self) -> bool {
        let v = self.measured();
        v.is_finite() && v > 0.0
    }
}

/// How the measured run ran its decode cells (the prediction steps through the same window).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeProtocol {
    /// Output tokens a request may generate before it is replaced.
    pub max_output: Tokens,
    /// The measurement window of a decode cell.
    pub window: Duration,
    /// The prefix cache's block size.
    pub block_size: u64,
}

/// One measured figure beside the calibrated model's prediction of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Residual {
    /// The figure.
    pub observation: Observation,
    /// What the model predicts for it, same unit as [`Observation::measured`].
    pub predicted: f64,
}

impl Residual {
    /// `predicted / measured − 1`.
    pub fn error(&self) -> f64 {
        self.predicted / self.observation.measured() - 1.0
    }
}

/// The calibrated factors, how well they reproduce the measured figures and how well they
/// predict one they did not see.
#[derive(Debug, Clone, PartialEq)]
pub struct RigCalibration {
    /// The rig's factors.
    pub factors: Factors,
    /// Every measured figure under the calibrated factors (in sample).
    pub fitted: Vec<Residual>,
    /// Each measured figure predicted by factors calibrated without it (leave-one-out).
    pub held_out: Vec<Residual>,
    /// The 80 % bands per phase from the held-out errors; `None` for a phase with fewer
    /// than two measured figures (the family's band still applies there).
    pub bands: Bands,
}

/// Scale of a measured figure's log error: run-to-run noise plus what the model cannot shape.
const FIGURE_SCALE: f64 = 0.03;
/// Scale of a factor's log deviation from the family's: rigs differ by about 2×.
const PRIOR_SCALE: f64 = std::f64::consts::LN_2;
/// The narrowest band a calibrated figure gets (±3 %): a handful of held-out figures can
/// agree by luck.
const BAND_FLOOR: f64 = 0.03;

/// The free factors, in the order of the fit's vector, with the offset that keeps a near-zero
/// overhead's logarithm finite and the scale of its prior. The two cache factors are not
/// fitted on the families' data (their prior is "no effect"), so they are held less tightly.
const FREE: [(Factor, f64, f64); 8] = [
    (Factor::Bandwidth, 0.0, PRIOR_SCALE),
    (Factor::KvRatio, 0.0, 2.0 * PRIOR_SCALE),
    (Factor::KvSaturation, 1.0, 2.0 * PRIOR_SCALE),
    (Factor::StepMs, 0.1, PRIOR_SCALE),
    (Factor::SequenceUs, 2.0, PRIOR_SCALE),
    (Factor::Compute, 0.0, PRIOR_SCALE),
    (Factor::RequestMs, 1.0, PRIOR_SCALE),
    (Factor::Attention, 0.0, PRIOR_SCALE),
];

#[derive(Debug, Clone, Copy)]
enum Factor {
    Bandwidth,
    KvRatio,
    KvSaturation,
    StepMs,
    SequenceUs,
    Compute,
    RequestMs,
    Attention,
}

impl Factor {
    fn get(self, f: &Factors) -> f64 {
        match self {
            Factor::Bandwidth => f.bandwidth_efficiency,
            Factor::KvRatio => f.kv_bandwidth_ratio,
            Factor::KvSaturation => f.kv_saturation_streams,
            Factor::StepMs => f.step_overhead_ms,
            Factor::SequenceUs => f.sequence_overhead_us,
            Factor::Compute => f.compute_efficiency,
            Factor::RequestMs => f.request_overhead_ms,
            Factor::Attention => f.attention_compute_ratio,
        }
    }

    /// Sets the factor, kept inside what [`Factors::check`] accepts.
    fn set(self, f: &mut Factors, v: f64) {
        match self {
            Factor::Bandwidth => f.bandwidth_efficiency = v.clamp(1e-3, 1.0),
            Factor::KvRatio => f.kv_bandwidth_ratio = v.clamp(0.25, 4.0),
            Factor::KvSaturation => f.kv_saturation_streams = v.clamp(0.0, 64.0),
            Factor::StepMs => f.step_overhead_ms = v.max(0.0),
            Factor::SequenceUs => f.sequence_overhead_us = v.max(0.0),
            Factor::Compute => f.compute_efficiency = v.clamp(1e-3, 1.5),
            Factor::RequestMs => f.request_overhead_ms = v.max(0.0),
            Factor::Attention => f.attention_compute_ratio = v.clamp(0.01, 4.0),
        }
    }
}

fn to_params(f: &Factors) -> Vec<f64> {
    FREE.iter()
        .map(|(k, offset, _)| (k.get(f) + offset).max(1e-6).ln())
        .collect()
}

fn from_params(prior: &Factors, p: &[f64]) -> Factors {
    let mut f = *prior;
    for ((k, offset, _), x) in FREE.iter().zip(p) {
        k.set(&mut f, x.exp() - offset);
    }
    f
}

/// What `cost` predicts for `o`, in the unit of [`Observation::measured`].
pub fn predict(cost: &CostModel, o: &Observation, protocol: &DecodeProtocol) -> f64 {
    match *o {
        Observation::Decode {
            context,
            concurrency,
            ..
        } => {
            cost.decode_cell(
                context,
                concurrency,
                protocol.max_output,
                protocol.window,
                protocol.block_size,
            )
            .total_tokens_per_s
        }
        Observation::Prefill { prompt, .. } => {
            prompt.get() as f64 / cost.cold_ttft(prompt.get()).as_secs_f64().max(1e-9)
        }
    }
}

struct Posterior<'a> {
    cost: std::cell::RefCell<CostModel>,
    prior: Factors,
    prior_params: Vec<f64>,
    observed: &'a [Observation],
    protocol: DecodeProtocol,
}

impl CostFunction for &Posterior<'_> {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, p: &Self::Param) -> Result<f64, argmin::core::Error> {
        let mut cost = self.cost.borrow_mut();
        cost.factors = from_params(&self.prior, p);
        let data: f64 = self
            .observed
            .iter()
            .map(|o| {
                let e = (predict(&cost, o, &self.protocol) / o.measured()).ln();
                (e / FIGURE_SCALE).powi(2)
            })
            .sum();
        let prior: f64 = p
            .iter()
            .zip(&self.prior_params)
            .zip(FREE)
            .map(|((x, x0), (_, _, scale))| ((x - x0) / scale).powi(2))
            .sum();
        Ok(data + prior)
    }
}

/// The factors that best explain `observed` given `cost`'s as the prior.
fn fit(
    cost: &CostModel,
    observed: &[Observation],
    protocol: &DecodeProtocol,
) -> Result<Factors, PredictError> {
    let prior = cost.factors;
    let x0 = to_params(&prior);
    let problem = Posterior {
        cost: std::cell::RefCell::new(cost.clone()),
        prior,
        prior_params: x0.clone(),
        observed,
        protocol: *protocol,
    };
    let how = Restarts {
        step: 0.3,
        sd_tolerance: 1e-6,
        max_iters: 1_500,
        rounds: 4,
        min_gain: 1e-6,
    };
    let (best, _) = minimize(&problem, x0, how, |_, _, _| {})
        .map_err(|e| PredictError::Calibration(e.to_string()))?;
    Ok(from_params(&prior, &best))
}

/// Calibrates `cost`'s factors (the family's, as the prior) on the measured `observed`
/// figures of one rig run under `protocol`.
pub fn calibrate(
    cost: &CostModel,
    observed: &[Observation],
    protocol: &DecodeProtocol,
) -> Result<RigCalibration, PredictError> {
    let observed: Vec<Observation> = observed.iter().copied().filter(|o| o.usable()).collect();
    if observed.is_empty() {
        return Err(PredictError::Calibration(
            "the run has no measured decode cell or prefill row to calibrate on".into(),
        ));
    }
    let factors = fit(cost, &observed, protocol)?;
    let residuals = |factors: Factors, figures: &[Observation]| {
        let mut c = cost.clone();
        c.factors = factors;
        figures
            .iter()
            .map(|o| Residual {
                observation: *o,
                predicted: predict(&c, o, protocol),
            })
            .collect::<Vec<_>>()
    };
    let fitted = residuals(factors, &observed);
    let mut held_out = Vec::with_capacity(observed.len());
    for i in 0..observed.len() {
        let rest: Vec<Observation> = observed
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, o)| *o)
            .collect();
        let without = if rest.is_empty() {
            cost.factors
        } else {
            fit(cost, &rest, protocol)?
        };
        held_out.extend(residuals(without, &observed[i..=i]));
    }
    let bands = Bands {
        decode: band(&held_out, true),
        prefill: band(&held_out, false),
    };
    Ok(RigCalibration {
        factors,
        fitted,
        held_out,
        bands,
    })
}

/// The band of one phase from its held-out figures: their range (there are too few for
/// percentiles), never narrower than ±3 %.
fn band(held_out: &[Residual], decode: bool) -> Option<Band> {
    let logs: Vec<f64> = held_out
        .iter()
        .filter(|r| r.observation.is_decode() == decode)
        .map(|r| (r.predicted / r.observation.measured()).ln())
        .collect();
    if logs.len() < 2 {
        return None;
    }
    let range = |v: &mut dyn Iterator<Item = f64>| {
        let (low, high) = v.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
            (l.min(x), h.max(x))
        });
        (low.min(-BAND_FLOOR), high.max(BAND_FLOOR))
    };
    let (low, high) = range(&mut logs.iter().copied());
    // The band checked out of sample: each figure against the range of the others.
    let inside = (0..logs.len())
        .filter(|&i| {
            let (l, h) = range(
                &mut logs
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, x)| *x),
            );
            (l..=h).contains(&logs[i])
        })
        .count();
    Some(Band {
        low_log_error: low,
        high_log_error: high,
        rigs: 1,
        figures: logs.len(),
        coverage: inside as f64 / logs.len() as f64,
    })
}
