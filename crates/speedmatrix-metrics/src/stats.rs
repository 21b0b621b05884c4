//! Percentiles and summaries, by one method: linear interpolation between
//! closest ranks (Hyndman & Fan type 7, the default of numpy and R).

use std::time::Duration;

use crate::MetricsError;

/// Count, extremes, mean and the percentiles the report shows, of one sample.
///
/// Percentiles are Hyndman & Fan type 7: for `n` sorted values `x[0..n]`
/// and percentile `p`, let `h = (n - 1) * p / 100`; the result is
/// `x[⌊h⌋] + (h - ⌊h⌋) * (x[⌊h⌋ + 1] - x[⌊h⌋])`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary<T> {
    /// Number of values summarized.
    pub count: u64,
    /// Smallest value.
    pub min: T,
    /// Arithmetic mean.
    pub mean: T,
    /// Median (50th percentile).
    pub p50: T,
    /// 90th percentile.
    pub p90: T,
    /// 99th percentile.
    pub p99: T,
    /// Largest value.
    pub max: T,
}

impl Summary<f64> {
    /// Summarizes `values`.
    ///
    /// # Errors
    /// [`MetricsError::EmptySample`] for no values, [`MetricsError::NotFinite`]
    /// for NaN or an infinity.
    pub fn of(values: &[f64]) -> Result<Self, MetricsError> {
        Ok(Sample::of_values(values)?.summary())
    }
}

impl Summary<Duration> {
    /// Summarizes `values`, computing at nanosecond resolution.
    ///
    /// # Errors
    /// [`MetricsError::EmptySample`] for no values.
    pub fn of_durations(values: &[Duration]) -> Result<Self, MetricsError> {
        let pairs = values.iter().map(|d| (nanos(*d), 1)).collect();
        Ok(Sample::weighted(pairs)?.duration_summary())
    }
}

impl<T> Summary<T> {
    fn map<U>(self, f: impl Fn(T) -> U) -> Summary<U> {
        Summary {
            count: self.count,
            min: f(self.min),
            mean: f(self.mean),
            p50: f(self.p50),
            p90: f(self.p90),
            p99: f(self.p99),
            max: f(self.max),
        }
    }
}

/// The `p`th percentile (`0..=100`) of `values`, type 7 as in [`Summary`].
///
/// ```
/// # use speedmatrix_metrics::percentile;
/// assert_eq!(percentile(&[4.0, 1.0, 3.0, 2.0], 50.0)?, 2.5);
/// assert_eq!(percentile(&[4.0, 1.0, 3.0, 2.0], 90.0)?, 3.7);
/// assert!(percentile(&[], 50.0).is_err());
/// # Ok::<(), speedmatrix_metrics::MetricsError>(())
/// ```
///
/// # Errors
/// [`MetricsError::PercentileOutOfRange`], [`MetricsError::EmptySample`],
/// [`MetricsError::NotFinite`].
pub fn percentile(values: &[f64], p: f64) -> Result<f64, MetricsError> {
    if !(0.0..=100.0).contains(&p) {
        return Err(MetricsError::PercentileOutOfRange { p });
    }
    Ok(Sample::of_values(values)?.percentile(p))
}

/// A sorted sample stored as runs of equal values with their multiplicities,
/// so that a chunk of `k` tokens adds two runs instead of `k` values.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    /// `(value, weight)`, sorted by value, weights positive.
    runs: Vec<(f64, u64)>,
    /// Running total of the weights through each run.
    cumulative: Vec<u128>,
}

impl Sample {
    fn of_values(values: &[f64]) -> Result<Self, MetricsError> {
        Sample::weighted(values.iter().map(|v| (*v, 1)).collect())
    }

    /// A sample where each value counts `weight` times; zero weights are dropped.
    pub(crate) fn weighted(mut runs: Vec<(f64, u64)>) -> Result<Self, MetricsError> {
        if let Some((index, (value, _))) =
            runs.iter().enumerate().find(|(_, (v, _))| !v.is_finite())
        {
            return Err(MetricsError::NotFinite {
                index,
                value: *value,
            });
        }
        runs.retain(|(_, w)| *w > 0);
        if runs.is_empty() {
            return Err(MetricsError::EmptySample);
        }
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let cumulative = runs
            .iter()
            .scan(0u128, |total, (_, w)| {
                *total += u128::from(*w);
                Some(*total)
            })
            .collect();
        Ok(Sample { runs, cumulative })
    }

    fn len(&self) -> u128 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    /// The value at 0-based `rank` of the expanded, sorted sample.
    fn at_rank(&self, rank: u128) -> f64 {
        let i = self.cumulative.partition_point(|c| *c <= rank);
        self.runs[i.min(self.runs.len() - 1)].0
    }

    /// Type-7 percentile; `p` must lie in `0..=100`.
    pub(crate) fn percentile(&self, p: f64) -> f64 {
        let last = self.len() - 1;
        let h = last as f64 * (p / 100.0);
        // `as` saturates, and the clamp keeps rounding in `h` from reaching past the end.
        let lo = (h.floor() as u128).min(last);
        let frac = h - lo as f64;
        let a = self.at_rank(lo);
        if frac <= 0.0 || lo == last {
            return a;
        }
        let b = self.at_rank(lo + 1);
        let span = b - a;
        let v = if span.is_finite() {
            a + frac * span
        } else {
            a * (1.0 - frac) + b * frac
        };
        v.clamp(a, b)
    }

    /// Weighted mean: a compensated sum divided by the count, or, if that
    /// sum overflows, a convex combination (which cannot).
    fn mean(&self, min: f64, max: f64) -> f64 {
        let n = self.len() as f64;
        let sum = neumaier_sum(self.runs.iter().map(|(v, w)| v * *w as f64));
        let m = if sum.is_finite() {
            sum / n
        } else {
            neumaier_sum(self.runs.iter().map(|(v, w)| v * (*w as f64 / n)))
        };
        m.clamp(min, max)
    }

    pub(crate) fn summary(&self) -> Summary<f64> {
        let min = self.runs[0].0;
        let max = self.runs[self.runs.len() - 1].0;
        Summary {
            count: u64::try_from(self.len()).unwrap_or(u64::MAX),
            min,
            mean: self.mean(min, max),
            p50: self.percentile(50.0),
            p90: self.percentile(90.0),
            p99: self.percentile(99.0),
            max,
        }
    }

    /// The summary of a sample of nanosecond counts, as durations.
    pub(crate) fn duration_summary(&self) -> Summary<Duration> {
        self.summary().map(from_nanos)
    }
}

/// Neumaier's compensated summation: exact for sums like 1 + ... + 10.
fn neumaier_sum(values: impl Iterator<Item = f64>) -> f64 {
    let (mut sum, mut compensation) = (0.0f64, 0.0f64);
    for v in values {
        let t = sum + v;
        compensation += if sum.abs() >= v.abs() {
            (sum - t) + v
        } else {
            (v - t) + sum
        };
        sum = t;
    }
    sum + compensation
}

pub(crate) fn nanos(d: Duration) -> f64 {
    d.as_nanos() as f64
}

fn from_nanos(n: f64) -> Duration {
    // Values come from durations, so they are finite and non-negative; `as` saturates.
    Duration::from_nanos(n.round() as u64)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use statrs::statistics::{Data, Max, Min, OrderStatistics, Statistics};

    use super::*;

    #[test]
    fn empty_and_nan_are_errors() {
        assert_eq!(Summary::of(&[]), Err(MetricsError::EmptySample));
        assert!(matches!(
            Summary::of(&[1.0, f64::NAN]),
            Err(MetricsError::NotFinite { index: 1, .. })
        ));
        assert!(matches!(
            percentile(&[1.0, f64::INFINITY], 50.0),
            Err(MetricsError::NotFinite { index: 1, .. })
        ));
        assert!(matches!(
            percentile(&[1.0], f64::NAN),
            Err(MetricsError::PercentileOutOfRange { .. })
        ));
        assert!(matches!(
            percentile(&[1.0], 100.5),
            Err(MetricsError::PercentileOutOfRange { .. })
        ));
        assert_eq!(Summary::of_durations(&[]), Err(MetricsError::EmptySample));
    }

    #[test]
    fn hand_computed_type_7() {
        // 1..=10: h = 9p/100. p90 -> h = 8.1 -> 9 + 0.1 * (10 - 9).
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let s = Summary::of(&v).unwrap();
        assert_eq!(s.count, 10);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 10.0);
        assert_eq!(s.mean, 5.5);
        assert_eq!(s.p50, 5.5);
        assert!((s.p90 - 9.1).abs() < 1e-12);
        assert!((s.p99 - 9.91).abs() < 1e-12);
    }

    #[test]
    fn single_value_is_every_percentile() {
        let s = Summary::of_durations(&[Duration::from_millis(7)]).unwrap();
        let ms7 = Duration::from_millis(7);
        assert_eq!(
            (s.min, s.p50, s.p99, s.max, s.mean),
            (ms7, ms7, ms7, ms7, ms7)
        );
    }

    #[test]
    fn weights_equal_repetition() {
        let w = Sample::weighted(vec![(3.0, 2), (1.0, 3), (2.0, 0)]).unwrap();
        let r = Summary::of(&[3.0, 3.0, 1.0, 1.0, 1.0]).unwrap();
        assert_eq!(w.summary(), r);
    }

    fn sample() -> impl Strategy<Value = Vec<f64>> {
        prop::collection::vec(-1e9f64..1e9, 1..60)
    }

    proptest! {
        #[test]
        fn percentiles_are_monotone_in_p(v in sample(), p in 0.0f64..=100.0, q in 0.0f64..=100.0) {
            let (lo, hi) = if p <= q { (p, q) } else { (q, p) };
            prop_assert!(percentile(&v, lo).unwrap() <= percentile(&v, hi).unwrap());
        }

        #[test]
        fn percentiles_lie_within_min_and_max(v in sample(), p in 0.0f64..=100.0) {
            let s = Summary::of(&v).unwrap();
            let x = percentile(&v, p).unwrap();
            prop_assert!(s.min <= x && x <= s.max);
            prop_assert!(s.min <= s.mean && s.mean <= s.max);
            prop_assert_eq!(percentile(&v, 0.0).unwrap(), s.min);
            prop_assert_eq!(percentile(&v, 100.0).unwrap(), s.max);
        }

        #[test]
        fn percentiles_ignore_order(v in sample(), p in 0.0f64..=100.0, seed in any::<u64>()) {
            let mut shuffled = v.clone();
            // A deterministic shuffle driven by the seed.
            let mut state = seed | 1;
            for i in (1..shuffled.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                shuffled.swap(i, (state % (i as u64 + 1)) as usize);
            }
            prop_assert_eq!(percentile(&v, p).unwrap(), percentile(&shuffled, p).unwrap());
            prop_assert_eq!(Summary::of(&v).unwrap().p99, Summary::of(&shuffled).unwrap().p99);
        }

        // statrs implements type 8, not 7, so cross-check where the two must agree:
        // the median, the extremes, the mean, and type 7 at exact ranks, which is
        // the order statistic itself.
        #[test]
        fn agrees_with_statrs_where_methods_coincide(v in sample(), k in 0usize..60) {
            let s = Summary::of(&v).unwrap();
            let mut data = Data::new(v.clone());
            let median = data.median();
            prop_assert!((s.p50 - median).abs() <= 1e-9 * (1.0 + median.abs()));
            prop_assert_eq!(s.min, data.min());
            prop_assert_eq!(s.max, data.max());
            let rel = (s.mean - (&v).mean()).abs() / (1.0 + s.mean.abs());
            prop_assert!(rel < 1e-9);
            let n = v.len();
            let rank = k % n;
            if n > 1 {
                let p = 100.0 * rank as f64 / (n - 1) as f64;
                let ours = percentile(&v, p).unwrap();
                let theirs = data.order_statistic(rank + 1);
                prop_assert!((ours - theirs).abs() <= 1e-9 * (1.0 + theirs.abs()));
            }
        }

        #[test]
        fn duration_summary_matches_float_summary(ms in prop::collection::vec(0u64..100_000, 1..40)) {
            let d: Vec<Duration> = ms.iter().map(|m| Duration::from_millis(*m)).collect();
            let f: Vec<f64> = ms.iter().map(|m| *m as f64 * 1e6).collect();
            let sd = Summary::of_durations(&d).unwrap();
            let sf = Summary::of(&f).unwrap();
            prop_assert_eq!(sd.p90, Duration::from_nanos(sf.p90.round() as u64));
            prop_assert_eq!(sd.min, Duration::from_millis(*ms.iter().min().unwrap()));
        }
    }
}
