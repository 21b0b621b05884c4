//! Calibrating token estimates on the cell's own finished requests.
//!
//! When a server gives no count for a stream that was cancelled at the end of
//! a window, its tokens are estimated (the run's tokenizer over the whole
//! text, or one per chunk). Finished requests of the same cell whose exact
//! total the server did report say how far off each estimate runs: their
//! ratios of server tokens to estimated tokens give a factor that scales the
//! estimates, and the spread of those ratios how uncertain the scaled
//! estimate is.
//!
//! The calibration sample is the finished requests with an exact count whose
//! text was tokenized: a client keeps and tokenizes the text of a bounded,
//! unbiased sample of them (tens are enough, see `docs/metrics.md`), and both
//! methods are judged on those same requests. With fewer than two tokenized,
//! every finished request with an exact count is the sample (chunk counts
//! need no text).

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
    /// Finished requests with an exact server count that the factor came
    /// from: the calibration sample.
    pub requests: u64,
    /// Finished requests with an exact server count in all, of which
    /// `requests` were the sample (0 in results from before samples: read it
    /// as `requests`).
    #[serde(default)]
    pub finished: u64,
    /// Half-width of the 95 % prediction interval of the scaled estimate,
    /// relative to it (0.01 = ±1 %); `None` with fewer than two calibration
    /// requests, when the spread cannot be known.
    pub relative_uncertainty: Option<f64>,
    /// How many times wider `relative_uncertainty` is for being computed on a
    /// sample rather than on every finished request, at the same spread of
    /// ratios: `t(m−1)·√(1/m + 1/R)` over `t(M−1)·√(1/M + 1/R)`. 1 when the
    /// sample is every finished request; `None` with fewer than two.
    #[serde(default)]
    pub sample_widening: Option<f64>,
}

impl Calibration {
    /// Whether the factor came from a sample of the finished requests rather
    /// than from all of them.
    pub fn is_sampled(&self) -> bool {
        self.finished > self.requests
    }
}

/// One finished request's exact total beside its estimates.
#[derive(Debug, Clone, Copy)]
struct Sample {
    exact: f64,
    tokenizer: Option<f64>,
    chunks: f64,
}

/// What the calibration is computed from: the finished requests of a cell
/// with an exact count.
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
        // Both estimates' totals in one pass over the chunks: the tokenizer's
        // when every chunk with text has its tokenized count.
        let (mut chunks, mut tokens, mut tokenized) = (0u64, 0u64, true);
        for c in t.chunks.iter().filter(|c| c.has_text()) {
            chunks += 1;
            match c.text_tokens {
                Some(n) => tokens = tokens.saturating_add(u64::from(n)),
                None => tokenized = false,
            }
        }
        if exact <= 0.0 || chunks == 0 {
            return;
        }
        let tokenizer = (tokenized && tokens > 0).then_some(tokens as f64);
        self.samples.push(Sample {
            exact,
            tokenizer,
            chunks: chunks as f64,
        });
    }

    /// The calibration sample: the finished requests whose text was
    /// tokenized when at least two were, else all of them.
    fn sample(&self) -> impl Iterator<Item = &Sample> {
        let tokenized = self
            .samples
            .iter()
            .filter(|s| s.tokenizer.is_some())
            .count();
        self.samples
            .iter()
            .filter(move |s| tokenized < 2 || s.tokenizer.is_some())
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
            .sample()
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
        let finished = self.samples.len().max(m);
        let r = estimated.max(1);
        Calibration {
            method,
            factor,
            requests: m as u64,
            finished: finished as u64,
            relative_uncertainty: prediction_half_width(&pairs, factor, r),
            sample_widening: interval_scale(m, r)
                .zip(interval_scale(finished, r))
                .map(|(sample, all)| sample / all),
        }
    }
}

/// `t(0.975, m−1) · √(1/m + 1/R)`: what the half-width of the prediction
/// interval is, in sample standard deviations of the ratios, with `m`
/// calibration requests and `R` estimated ones; `None` for `m < 2`.
fn interval_scale(m: usize, r: u64) -> Option<f64> {
    if m < 2 {
        return None;
    }
    let t = StudentsT::new(0.0, 1.0, (m - 1) as f64)
        .ok()?
        .inverse_cdf(0.5 + CONFIDENCE / 2.0);
    let scale = t * (1.0 / m as f64 + 1.0 / r as f64).sqrt();
    scale.is_finite().then_some(scale)
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
    let half = interval_scale(m, r)? * var.sqrt() / factor;
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

    /// A finished request of `chunks` one-token chunks whose server total is
    /// `exact`, its text tokenized (one token a chunk) or not.
    fn finished(chunks: u64, exact: u64, tokenized: bool) -> (RequestTimeline, Tokens) {
        use crate::{Chunk, Outcome, Timestamp};
        let at = Timestamp::from_millis;
        let mut t = RequestTimeline::new(
            at(0),
            at(chunks + 1),
            Outcome::Finished {
                finish_reason: None,
            },
        );
        t.chunks = (0..chunks)
            .map(|i| {
                let c = Chunk::content(at(i + 1));
                if tokenized { c.with_text_tokens(1) } else { c }
            })
            .collect();
        (t, Tokens::new(exact))
    }

    #[test]
    fn the_tokenized_requests_are_the_sample_of_both_methods() {
        let mut c = Calibrator::default();
        // Three tokenized requests (the sample), ratios 0.99, 1, 1.01...
        for exact in [99, 100, 101] {
            let (t, e) = finished(100, exact, true);
            c.offer(&t, e);
        }
        // ...and a thousand more whose text was not kept, all ratio 2: they
        // must move neither method's factor.
        for _ in 0..1_000 {
            let (t, e) = finished(100, 200, false);
            c.offer(&t, e);
        }
        for method in [EstimateMethod::Tokenizer, EstimateMethod::ChunkCount] {
            let cal = c.calibrate(method, 8);
            assert_eq!((cal.requests, cal.finished), (3, 1_003), "{method:?}");
            assert!(
                (cal.factor - 1.0).abs() < 1e-12,
                "{method:?}: {}",
                cal.factor
            );
            assert!(cal.is_sampled());
            // t(0.975, 2)·√(1/3 + 1/8) over t(0.975, 1002)·√(1/1003 + 1/8).
            let widening = cal.sample_widening.unwrap();
            let expected = 4.302_65 * (1.0f64 / 3.0 + 1.0 / 8.0).sqrt()
                / (1.962_35 * (1.0f64 / 1_003.0 + 1.0 / 8.0).sqrt());
            assert!(
                (widening - expected).abs() < 1e-3,
                "{widening} vs {expected}"
            );
        }
    }

    #[test]
    fn without_a_tokenized_sample_every_finished_request_calibrates_chunks() {
        let mut c = Calibrator::default();
        for exact in [99, 100, 101, 100] {
            let (t, e) = finished(100, exact, false);
            c.offer(&t, e);
        }
        let (t, e) = finished(100, 300, true);
        c.offer(&t, e);
        let cal = c.calibrate(EstimateMethod::ChunkCount, 2);
        assert_eq!((cal.requests, cal.finished), (5, 5));
        assert_eq!(cal.sample_widening, Some(1.0));
        assert!(!cal.is_sampled());
        let by_text = c.calibrate(EstimateMethod::Tokenizer, 2);
        assert_eq!(by_text.requests, 1);
        assert_eq!(by_text.relative_uncertainty, None);
    }
}
