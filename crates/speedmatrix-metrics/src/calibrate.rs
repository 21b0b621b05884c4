//! Calibrating token estimates on the cell's own finished requests.
//!
//! When a server gives no count for a stream that was cancelled at the end of
//! a window, its tokens are estimated (the run's tokenizer over the whole
//! text, or one per chunk). Finished requests of the same cell whose exact
//! total the server did report say how far off each estimate runs: their
//! ratios of server tokens to estimated tokens give a factor that scales the
//! estimates, and the spread of those ratios how uncertain the scaled
//! estimate is.

use speedmatrix_units::Tokens;
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::RequestTimeline;
use crate::tokens::{Arrivals, EstimateMethod};

/// Coverage of the uncertainty a [`Calibration`] states.
pub const CONFIDENCE: f64 = 0.95;

/// How estimated token counts were scaled, and how sure the result is.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Calibration {
    /// What the estimate counts: tokenized text or chunks.
    pub method: EstimateMethod,
    /// Server tokens per estimated token, pooled over the calibration
    /// requests (`Σ server tokens / Σ estimated tokens`); 1 without any.
    pub factor: f64,
    /// Finished requests with an exact server count that the factor came from.
    pub requests: u64,
    /// Half-width of the 95 % prediction interval of the scaled estimate,
    /// relative to it (0.01 = ±1 %); `None` with fewer than two calibration
    /// requests, when the spread cannot be known.
    pub relative_uncertainty: Option<f64>,
}

/// One finished request's exact total beside its estimates.
#[derive(Debug, Clone, Copy)]
struct Sample {
    exact: f64,
    tokenizer: Option<f64>,
    chunks: f64,
}

/// What the calibration is computed from: the finished requests of a cell
/// with an exact count, and how many estimated requests it will be applied to.
#[derive(Debug, Default)]
pub(crate) struct Calibrator {
    samples: Vec<Sample>,
}

impl Calibrator {
    /// Whether `t`, counted as `arrivals`, can calibrate: it finished with an exact count.
    pub(crate) fn can_calibrate(t: &RequestTimeline, arrivals: &Arrivals) -> bool {
        t.is_finished() && arrivals.source.is_exact()
    }

    /// Takes `t`, whose exact output is `exact` tokens, as a calibration
    /// sample (see [`Self::can_calibrate`]).
    pub(crate) fn offer(&mut self, t: &RequestTimeline, exact: Tokens) {
        let exact = exact.get() as f64;
        let chunks = Arrivals::estimate(t, EstimateMethod::ChunkCount)
            .map_or(0.0, |a| a.total().get() as f64);
        if exact <= 0.0 || chunks <= 0.0 {
            return;
        }
        let tokenizer = Arrivals::estimate(t, EstimateMethod::Tokenizer)
            .map(|a| a.total().get() as f64)
            .filter(|n| *n > 0.0);
        self.samples.push(Sample {
            exact,
            tokenizer,
            chunks,
        });
    }

    /// The better calibrated of the two methods for `estimated` requests,
    /// `tokenized` of which have tokenized text: the one with the smaller
    /// uncertainty; with no uncertainty known for either, the tokenizer when
    /// every estimated request was tokenized (it follows the text, not the
    /// server's chunking), else chunks.
    pub(crate) fn best(&self, estimated: u64, tokenized: u64) -> Calibration {
        let by_tokenizer = (tokenized == estimated && tokenized > 0)
            .then(|| self.calibrate(EstimateMethod::Tokenizer, estimated));
        let by_chunks = self.calibrate(EstimateMethod::ChunkCount, estimated);
        match by_tokenizer {
            Some(t) => match (t.relative_uncertainty, by_chunks.relative_uncertainty) {
                (Some(a), Some(b)) if b < a => by_chunks,
                (None, Some(_)) => by_chunks,
                _ => t,
            },
            None => by_chunks,
        }
    }

    fn calibrate(&self, method: EstimateMethod, estimated: u64) -> Calibration {
        let pairs: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter_map(|s| {
                let est = match method {
                    EstimateMethod::Tokenizer => s.tokenizer?,
                    EstimateMethod::ChunkCount => s.chunks,
                };
                Some((s.exact, est))
            })
            .collect();
        let m = pairs.len();
        let (exact, est) = pairs
            .iter()
            .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let factor = if est > 0.0 { exact / est } else { 1.0 };
        Calibration {
            method,
            factor,
            requests: m as u64,
            relative_uncertainty: prediction_half_width(&pairs, factor, estimated.max(1)),
        }
    }
}

/// `t(0.975, m−1) · s · √(1/m + 1/R) / f`: the half-width of a 95 %
/// prediction interval for the mean ratio of `r` new requests, relative to
/// the pooled factor `f`, from the sample standard deviation `s` of the `m`
/// calibration ratios.
fn prediction_half_width(pairs: &[(f64, f64)], factor: f64, r: u64) -> Option<f64> {
    let m = pairs.len();
    if m < 2 || factor <= 0.0 {
        return None;
    }
    let ratios: Vec<f64> = pairs.iter().map(|(x, y)| x / y).collect();
    let mean = ratios.iter().sum::<f64>() / m as f64;
    let var = ratios.iter().map(|q| (q - mean).powi(2)).sum::<f64>() / (m - 1) as f64;
    let t = StudentsT::new(0.0, 1.0, (m - 1) as f64)
        .ok()?
        .inverse_cdf(0.5 + CONFIDENCE / 2.0);
    let half = t * var.sqrt() * (1.0 / m as f64 + 1.0 / r as f64).sqrt() / factor;
    half.is_finite().then_some(half)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_ratios_have_no_spread() {
        let pairs = [(300.0, 100.0), (600.0, 200.0), (30.0, 10.0)];
        assert_eq!(prediction_half_width(&pairs, 3.0, 4), Some(0.0));
        assert_eq!(prediction_half_width(&pairs[..1], 3.0, 4), None);
    }

    #[test]
    fn the_half_width_follows_students_t() {
        // Ratios 0.99 and 1.01: s = 0.01414, t(0.975, 1) = 12.706.
        let pairs = [(99.0, 100.0), (101.0, 100.0)];
        let u = prediction_half_width(&pairs, 1.0, 2).unwrap();
        let expected = 12.706_2 * 0.014_142_1 * (0.5f64 + 0.5).sqrt();
        assert!((u - expected).abs() < 1e-3, "{u} vs {expected}");
    }
}
