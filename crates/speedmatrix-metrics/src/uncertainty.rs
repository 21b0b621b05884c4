//! How sure a figure is: 95 % confidence intervals from within one window
//! (batch means, batch medians, order statistics), across repeats of a cell,
//! and of the ratio of two figures (`docs/metrics.md`, "Uncertainty").
//!
//! Each method states its assumption where it is defined; none of them
//! holds for a window too short to split, so each returns `None` rather
//! than an interval it cannot support.

use speedmatrix_units::Interval;
use statrs::distribution::{Binomial, ContinuousCDF, DiscreteCDF, StudentsT};

use crate::calibrate::CONFIDENCE;

/// How many equal parts a window is split into for its batch means: ten
/// (3 s each in a 30 s window), so that each part is long against the
/// correlation of a decode loop (steps of milliseconds, a request's
/// replacement in under a second) and `t(0.975, 9) = 2.26` keeps the
/// interval from being needlessly wide. A window with fewer series parts
/// (`series_bins`, one per half second) gets as many batches as parts.
pub const WINDOW_BATCHES: usize = 10;

/// The narrowest a latency percentile's interval from one window may be, as
/// a share of the percentile either side: 2 %. A window's own samples see
/// none of what shifts a whole run's latencies together (the client host's
/// scheduling and timer wake-ups, its load from other work): two identical
/// simulator runs on one host differ by up to about 2 % in their median
/// time between tokens while each window's batch medians agree within
/// 0.5 %. Throughput needs no such floor there (the simulator keeps its
/// schedule), but drift between runs on real hardware is only seen by
/// `--repeats` (docs/metrics.md, "Uncertainty").
pub const LATENCY_FLOOR: f64 = 0.02;

/// `interval` widened to at least [`LATENCY_FLOOR`] of `estimate` either side.
pub(crate) fn with_latency_floor(estimate: f64, interval: Interval) -> Option<Interval> {
    let floor = estimate * LATENCY_FLOOR;
    Interval::new(
        interval.low.min(estimate - floor),
        interval.high.max(estimate + floor),
    )
}

/// `t(0.5 + CONFIDENCE/2, dof)`, `None` for no degrees of freedom.
fn t_quantile(dof: usize) -> Option<f64> {
    if dof == 0 {
        return None;
    }
    let t = StudentsT::new(0.0, 1.0, dof as f64)
        .ok()?
        .inverse_cdf(0.5 + CONFIDENCE / 2.0);
    t.is_finite().then_some(t)
}

/// Mean and sample standard deviation of `values` (at least two, all finite).
fn mean_sd(values: &[f64]) -> Option<(f64, f64)> {
    if values.len() < 2 || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some((mean, var.sqrt()))
}

/// The batch-means interval of a figure whose value over the whole window
/// is `estimate` and whose value over each of `k` equal batches is
/// `batches`: `estimate ± t(0.975, k−1) · s / √k`, with `s` the batches'
/// sample standard deviation. The assumption: the batches' values are
/// independent and about normal, which holds when a batch is much longer
/// than the figure's correlation time. `None` for fewer than two batches
/// or a value that is not a finite number.
///
/// ```
/// use speedmatrix_metrics::batch_means;
///
/// let i = batch_means(&[99.0, 101.0, 100.0, 100.0], 100.0).unwrap();
/// assert!(i.contains(100.0) && i.low > 98.0 && i.high < 102.0);
/// assert!(batch_means(&[100.0], 100.0).is_none());
/// ```
pub fn batch_means(batches: &[f64], estimate: f64) -> Option<Interval> {
    let (_, sd) = mean_sd(batches)?;
    let half = t_quantile(batches.len() - 1)? * sd / (batches.len() as f64).sqrt();
    Interval::around(estimate, half)
}

/// The ranks (1-based, into the sorted sample) of the distribution-free
/// interval of the `p` quantile (`0 < p < 1`) of `n` independent values:
/// the widest `l` and narrowest `u` with `P(l ≤ B < u) ≥ 95 %` for
/// `B ~ Binomial(n, p)`, the number of values below the true quantile.
/// `None` when `n` is too small for any such pair (fewer than 6 values for
/// the median). The assumption: the values are independent draws of one
/// distribution.
///
/// ```
/// use speedmatrix_metrics::quantile_ranks;
///
/// // 20 values: the median lies between the 6th and the 15th, 95 % of the time.
/// assert_eq!(quantile_ranks(20, 0.5), Some((6, 15)));
/// assert_eq!(quantile_ranks(5, 0.5), None);
/// ```
pub fn quantile_ranks(n: u64, p: f64) -> Option<(u64, u64)> {
    if n == 0 || !(p > 0.0 && p < 1.0) {
        return None;
    }
    let tail = (1.0 - CONFIDENCE) / 2.0;
    if n > 10_000 {
        // The normal approximation of the binomial, rounded outwards.
        let (np, sd) = (n as f64 * p, (n as f64 * p * (1.0 - p)).sqrt());
        let z = 1.959_963_984_540_054;
        let l = (np - z * sd).floor().max(1.0) as u64;
        let u = ((np + z * sd).ceil() as u64 + 1).min(n);
        return Some((l, u));
    }
    let b = Binomial::new(p, n).ok()?;
    // l − 1 = the largest k with P(B ≤ k) ≤ tail.
    let l = (0..n).take_while(|&k| b.cdf(k) <= tail).last()? + 1;
    // u − 1 = the smallest k with P(B ≤ k) ≥ 1 − tail.
    let u = (0..n).find(|&k| b.cdf(k) >= 1.0 - tail)? + 1;
    (u <= n && l < u).then_some((l, u))
}

/// What repeats of one figure say together: their mean, the 95 % interval
/// of that mean (`mean ± t(0.975, n−1) · s / √n`, assuming independent,
/// about normal repeats) and the coefficient of variation `s / mean`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Repeats.
    pub count: usize,
    /// Their mean.
    pub mean: f64,
    /// The interval of the mean; `None` for a single repeat.
    pub interval: Option<Interval>,
    /// Sample standard deviation over the mean; `None` for a single repeat
    /// or a mean of zero.
    pub cv: Option<f64>,
}

/// The [`Spread`] of `values` (repeats of one figure); `None` for no values
/// or a value that is not a finite number.
///
/// ```
/// use speedmatrix_metrics::spread;
///
/// let s = spread(&[98.0, 100.0, 102.0]).unwrap();
/// assert_eq!(s.mean, 100.0);
/// assert_eq!(s.cv, Some(0.02));
/// assert!(s.interval.unwrap().contains(100.0));
/// ```
pub fn spread(values: &[f64]) -> Option<Spread> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let stats = mean_sd(values);
    let interval = stats.and_then(|(m, sd)| {
        let half = t_quantile(values.len() - 1)? * sd / (values.len() as f64).sqrt();
        Interval::around(m, half)
    });
    let cv = stats.and_then(|(m, sd)| (m != 0.0).then(|| sd / m.abs()));
    Some(Spread {
        count: values.len(),
        mean,
        interval,
        cv,
    })
}

/// The 95 % interval of `b / a` from each side's estimate and interval: on
/// the log scale, `ln(b/a) ± √(ra² + rb²)` with `ra`, `rb` each side's
/// relative half-width (the delta method; each side's interval taken as
/// independent of the other's, as two runs are). A side without an interval
/// counts as exact. `None` when either estimate is not positive.
///
/// ```
/// use speedmatrix_metrics::ratio_interval;
/// use speedmatrix_units::Interval;
///
/// let a = Interval::new(99.0, 101.0);
/// let r = ratio_interval(100.0, a, 90.0, Interval::new(89.0, 91.0)).unwrap();
/// assert!(r.contains(0.9) && r.high < 0.95);
/// ```
pub fn ratio_interval(
    a: f64,
    a_interval: Option<Interval>,
    b: f64,
    b_interval: Option<Interval>,
) -> Option<Interval> {
    if !(a > 0.0 && b > 0.0 && a.is_finite() && b.is_finite()) {
        return None;
    }
    // A side's interval on the log scale: its wider side, −ln(1 − r) for a
    // relative half-width r; r of 1 or more (the figure could be zero) is
    // capped at a factor of 1,000.
    let log_half = |x: f64, i: Option<Interval>| {
        let r = i.and_then(|i| i.relative_half_width(x)).unwrap_or(0.0);
        -(1.0 - r.min(0.999)).ln()
    };
    let log_half = log_half(a, a_interval).hypot(log_half(b, b_interval));
    let r = b / a;
    Interval::new(r * (-log_half).exp(), r * log_half.exp())
}

/// A histogram of durations on a log scale, 0.1 % per bin, from 1 µs to
/// 100 s (values outside land in the end bins): a batch's median to within
/// 0.1 % in 74 KiB, whatever the batch holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct LogHistogram {
    counts: Vec<u64>,
    total: u64,
}

/// Bins per factor of e: 1 / ln(1.001).
const BINS_PER_E: f64 = 1_000.499_833_375;
const LOWEST_NS: f64 = 1_000.0;
const HIGHEST_NS: f64 = 100e9;

/// The resolution of a [`LogHistogram`]: the relative width of one bin.
pub(crate) const HISTOGRAM_RESOLUTION: f64 = 0.001;

impl LogHistogram {
    fn bins() -> usize {
        ((HIGHEST_NS / LOWEST_NS).ln() * BINS_PER_E).ceil() as usize + 1
    }

    /// Adds `ns` nanoseconds, `times` times.
    pub(crate) fn push(&mut self, ns: f64, times: u64) {
        if times == 0 || !ns.is_finite() {
            return;
        }
        if self.counts.is_empty() {
            self.counts = vec![0; Self::bins()];
        }
        let bin = ((ns.max(LOWEST_NS) / LOWEST_NS).ln() * BINS_PER_E) as usize;
        let bin = bin.min(self.counts.len() - 1);
        self.counts[bin] = self.counts[bin].saturating_add(times);
        self.total = self.total.saturating_add(times);
    }

    /// Values added.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// The `p` quantile (`0..=1`), as the geometric middle of its bin, in
    /// nanoseconds; `None` when empty.
    pub(crate) fn quantile(&self, p: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let rank = ((self.total - 1) as f64 * p.clamp(0.0, 1.0)).round() as u64;
        let mut seen = 0u64;
        let bin = self.counts.iter().position(|&c| {
            seen = seen.saturating_add(c);
            seen > rank
        })?;
        Some(LOWEST_NS * ((bin as f64 + 0.5) / BINS_PER_E).exp())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn quantile_ranks_cover_at_least_their_level_and_grow_with_n() {
        for n in [6u64, 10, 20, 50, 200, 1_000] {
            let (l, u) = quantile_ranks(n, 0.5).unwrap();
            let b = Binomial::new(0.5, n).unwrap();
            let coverage = b.cdf(u - 1) - if l >= 2 { b.cdf(l - 2) } else { 0.0 };
            assert!(coverage >= 0.95, "n {n}: ranks {l}..{u} cover {coverage}");
            assert!(l < u && u <= n);
        }
        assert_eq!(quantile_ranks(5, 0.5), None);
        assert_eq!(
            quantile_ranks(10, 0.99),
            None,
            "ten values cannot bound a p99"
        );
        let (l, u) = quantile_ranks(1_000_000, 0.5).unwrap();
        assert!(l < 500_000 && u > 500_000 && u - l < 2_100);
    }

    #[test]
    fn a_ratio_interval_of_exact_sides_is_the_ratio() {
        let r = ratio_interval(100.0, None, 110.0, None).unwrap();
        assert!((r.low - 1.1).abs() < 1e-12 && (r.high - 1.1).abs() < 1e-12);
        assert!(ratio_interval(0.0, None, 1.0, None).is_none());
    }

    #[test]
    fn the_histogram_median_is_within_its_resolution() {
        let mut h = LogHistogram::default();
        for ms in 1..=999u64 {
            h.push(ms as f64 * 1e6, 1);
        }
        let m = h.quantile(0.5).unwrap();
        assert!((m / 500e6 - 1.0).abs() < HISTOGRAM_RESOLUTION, "{m}");
        assert!(LogHistogram::default().quantile(0.5).is_none());
        h.push(f64::NAN, 1);
        h.push(1e15, 1);
        h.push(0.0, 1);
        assert!(h.quantile(1.0).unwrap() <= HIGHEST_NS * 1.001);
    }

    proptest! {
        /// Batch means and spreads never panic, and a stated interval holds
        /// its estimate.
        #[test]
        fn intervals_hold_their_estimate(values in proptest::collection::vec(-1e12f64..1e12, 0..40)) {
            let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
            if let Some(i) = batch_means(&values, mean) {
                prop_assert!(i.low <= mean && mean <= i.high);
            }
            if let Some(s) = spread(&values) {
                prop_assert_eq!(s.count, values.len());
                if let Some(i) = s.interval {
                    prop_assert!(i.low <= s.mean * (1.0 + 1e-12) + 1e-9 && i.high >= s.mean * (1.0 - 1e-12) - 1e-9);
                }
            }
        }

        /// The ratio interval holds the ratio and is no narrower than either side's.
        #[test]
        fn a_ratio_interval_holds_the_ratio(
            a in 1e-3f64..1e9, b in 1e-3f64..1e9, ra in 0.0f64..2.0, rb in 0.0f64..2.0,
        ) {
            let ai = Interval::around(a, a * ra);
            let bi = Interval::around(b, b * rb);
            let r = ratio_interval(a, ai, b, bi).unwrap();
            prop_assert!(r.low <= b / a * (1.0 + 1e-9) && r.high >= b / a * (1.0 - 1e-9));
            prop_assert!(r.high / (b / a) >= 1.0 + rb.min(0.999) * 0.999);
        }
    }
}
