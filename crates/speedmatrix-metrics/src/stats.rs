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
        let mut sample = DurationSample::default();
        for d in values {
            sample.push(*d, 1);
        }
        sample.summary().ok_or(MetricsError::EmptySample)
    }
}

impl<T> Summary<T> {
    #[cfg(test)]
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
        type_7(self.len(), |r| self.at_rank(r), p)
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

    /// The summary of a sample of nanosecond counts, as durations: the
    /// reference [`DurationSample`] is checked against.
    #[cfg(test)]
    fn duration_summary(&self) -> Summary<Duration> {
        self.summary().map(from_nanos)
    }
}

/// Hyndman & Fan type 7 over `n > 0` sorted values read by rank.
fn type_7(n: u128, mut at_rank: impl FnMut(u128) -> f64, p: f64) -> f64 {
    let last = n - 1;
    let h = last as f64 * (p / 100.0);
    // `as` saturates, and the clamp keeps rounding in `h` from reaching past the end.
    let lo = (h.floor() as u128).min(last);
    let frac = h - lo as f64;
    let a = at_rank(lo);
    if frac <= 0.0 || lo == last {
        return a;
    }
    let b = at_rank(lo + 1);
    let span = b - a;
    let v = if span.is_finite() {
        a + frac * span
    } else {
        a * (1.0 - frac) + b * frac
    };
    v.clamp(a, b)
}

/// An exact sample of durations at nanosecond resolution in 4 bytes per
/// value: a window's every time between tokens is kept and sorted, not
/// binned, so its percentiles are the [`Summary`] method's exactly. Values
/// of 2³² ns (4.29 s) or more, and values repeated many times at once (a
/// chunk of many tokens), are kept as `(value, times)` runs instead, so an
/// absurd count from a server costs one run, not memory for each repeat.
#[derive(Debug, Clone, Default)]
pub(crate) struct DurationSample {
    short: Vec<u32>,
    runs: Vec<(u64, u64)>,
}

/// The bounds of a median's interval, when the sample can state one.
pub(crate) type MedianBounds = Option<(Duration, Duration)>;

/// Repeats up to this many go into the 4-byte values; more make a run.
const MOST_REPEATS: u64 = 8;

impl DurationSample {
    /// Room for `n` more short values: a window's sample grows to millions,
    /// and growing by doubling would hold up to twice its size.
    pub(crate) fn reserve(&mut self, n: usize) {
        self.short.reserve_exact(n);
    }

    /// Adds `d`, `times` times.
    pub(crate) fn push(&mut self, d: Duration, times: u64) {
        if times == 0 {
            return;
        }
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        match u32::try_from(ns) {
            Ok(short) if times <= MOST_REPEATS => {
                // `times` is at most 8, so the cast is lossless.
                self.short
                    .extend(std::iter::repeat_n(short, times as usize));
            }
            _ => self.runs.push((ns, times)),
        }
    }

    /// The summary, `None` for no values.
    pub(crate) fn summary(self) -> Option<Summary<Duration>> {
        self.summary_with(&[]).map(|(s, _)| s)
    }

    /// The summary and the distribution-free 95 % interval of the median
    /// ([`crate::quantile_ranks`]; `None` for too few values), `None` for
    /// no values.
    pub(crate) fn summary_and_median_interval(self) -> Option<(Summary<Duration>, MedianBounds)> {
        let count = self.count();
        let ranks = u64::try_from(count)
            .ok()
            .and_then(|n| crate::quantile_ranks(n, 0.5))
            .map(|(l, u)| [u128::from(l) - 1, u128::from(u) - 1]);
        let (summary, at) = self.summary_with(ranks.as_ref().map_or(&[], |r| &r[..]))?;
        let interval = (at.len() == 2).then(|| (at[0], at[1]));
        Some((summary, interval))
    }

    fn count(&self) -> u128 {
        self.short.len() as u128 + self.runs.iter().map(|(_, n)| u128::from(*n)).sum::<u128>()
    }

    /// The summary, and the values at `extra` 0-based ranks of the sorted sample.
    fn summary_with(mut self, extra: &[u128]) -> Option<(Summary<Duration>, Vec<Duration>)> {
        let count =
            self.short.len() as u128 + self.runs.iter().map(|(_, n)| u128::from(*n)).sum::<u128>();
        if count == 0 {
            return None;
        }
        self.short.sort_unstable();
        self.runs.sort_unstable();
        let total = self
            .short
            .iter()
            .map(|v| u128::from(*v))
            .chain(
                self.runs
                    .iter()
                    .map(|(v, n)| u128::from(*v) * u128::from(*n)),
            )
            .fold(0u128, u128::saturating_add);
        // Round half up: the mean of whole nanoseconds, to the nanosecond.
        let mean = total / count + u128::from((total % count).saturating_mul(2) >= count);
        let mut ranks = self.ranks_needed(count);
        ranks.extend(extra.iter().filter(|r| **r < count));
        ranks.sort_unstable();
        ranks.dedup();
        let values = self.values_at(&ranks);
        let at = |r: u128| -> u64 { ranks.binary_search(&r).map_or(u64::MAX, |i| values[i]) };
        let percentile = |p: f64| from_nanos(type_7(count, |r| at(r) as f64, p));
        let extra = extra
            .iter()
            .filter(|r| **r < count)
            .map(|&r| Duration::from_nanos(at(r)))
            .collect();
        let summary = Summary {
            count: u64::try_from(count).unwrap_or(u64::MAX),
            min: Duration::from_nanos(at(0)),
            mean: Duration::from_nanos(u64::try_from(mean).unwrap_or(u64::MAX)),
            p50: percentile(50.0),
            p90: percentile(90.0),
            p99: percentile(99.0),
            max: Duration::from_nanos(at(count - 1)),
        };
        Some((summary, extra))
    }

    /// The ranks a summary reads, sorted: the extremes and the two ranks
    /// each percentile interpolates between.
    fn ranks_needed(&self, count: u128) -> Vec<u128> {
        let mut ranks = Vec::with_capacity(8);
        ranks.push(0);
        ranks.push(count - 1);
        for p in [50.0, 90.0, 99.0] {
            let mut read = |r: u128| {
                ranks.push(r);
                0.0
            };
            type_7(count, &mut read, p);
        }
        ranks.sort_unstable();
        ranks.dedup();
        ranks
    }

    /// The values at sorted `ranks` of the sorted sample: one merging walk
    /// of the sorted 4-byte values and the sorted runs.
    fn values_at(&self, ranks: &[u128]) -> Vec<u64> {
        let mut out = Vec::with_capacity(ranks.len());
        let (mut i, mut j) = (0, 0);
        let mut seen = 0u128;
        for &rank in ranks {
            loop {
                let short = self.short.get(i).map(|v| u64::from(*v));
                let run = self.runs.get(j).copied();
                let (value, times, from_short) = match (short, run) {
                    (Some(s), Some((r, _))) if s <= r => (s, 1, true),
                    (Some(s), None) => (s, 1, true),
                    (_, Some((r, n))) => (r, n, false),
                    (None, None) => {
                        out.push(u64::MAX);
                        break;
                    }
                };
                if rank < seen + u128::from(times) {
                    out.push(value);
                    break;
                }
                seen += u128::from(times);
                if from_short {
                    i += 1;
                } else {
                    j += 1;
                }
            }
        }
        out
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

        // Short values, values past 2³² ns, and repeats past the 4-byte limit,
        // against the weighted float sample: the same percentiles exactly.
        #[test]
        fn duration_sample_matches_the_weighted_sample(
            pairs in prop::collection::vec((prop_oneof![0u64..1_000, 0u64..20_000_000_000], prop_oneof![1u64..4, 0u64..40]), 1..60),
        ) {
            let mut sample = DurationSample::default();
            for (ns, n) in &pairs {
                sample.push(Duration::from_nanos(*ns), *n);
            }
            let float = Sample::weighted(pairs.iter().map(|(ns, n)| (*ns as f64, *n)).collect());
            match (sample.summary(), float) {
                (None, Err(_)) => {}
                (Some(ours), Ok(reference)) => {
                    let reference = reference.duration_summary();
                    prop_assert_eq!((ours.count, ours.min, ours.max), (reference.count, reference.min, reference.max));
                    prop_assert_eq!((ours.p50, ours.p90, ours.p99), (reference.p50, reference.p90, reference.p99));
                    let total: u128 = pairs.iter().map(|(ns, n)| u128::from(*ns) * u128::from(*n)).sum();
                    let exact = total as f64 / ours.count as f64;
                    prop_assert!((ours.mean.as_nanos() as f64 - exact).abs() <= 0.5 + 1e-9 * exact, "{:?} vs {}", ours.mean, exact);
                }
                (ours, reference) => prop_assert!(false, "{:?} vs {:?}", ours, reference.ok()),
            }
        }

        #[test]
        fn an_absurd_repeat_costs_one_run(
            n in 9u64..u64::MAX,
        ) {
            let mut sample = DurationSample::default();
            sample.push(Duration::from_millis(10), n);
            sample.push(Duration::from_millis(20), 1);
            prop_assert_eq!(sample.runs.len() + sample.short.len(), 2);
            let s = sample.summary().unwrap();
            prop_assert_eq!(s.p99, Duration::from_millis(10));
            prop_assert_eq!(s.max, Duration::from_millis(20));
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

/// One bin of a [`length_histogram`]: counts `from..=to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthBin {
    /// The smallest length in the bin.
    pub from: u64,
    /// The largest length in the bin.
    pub to: u64,
    /// How many lengths fell in it.
    pub count: u64,
}

/// Token lengths in power-of-two bins (`0`, `1`, `2..=3`, `4..=7`, …), the
/// empty bins between the shortest and the longest kept so that the shape
/// reads at a glance: lengths of real prompts and answers span orders of
/// magnitude, so equal-width bins would put nearly all in one.
pub fn length_histogram(lengths: &[u64]) -> Vec<LengthBin> {
    let bin = |n: u64| if n == 0 { 0 } else { 64 - n.leading_zeros() };
    let (Some(lo), Some(hi)) = (
        lengths.iter().map(|&n| bin(n)).min(),
        lengths.iter().map(|&n| bin(n)).max(),
    ) else {
        return Vec::new();
    };
    let mut counts = vec![0u64; (hi - lo + 1) as usize];
    for &n in lengths {
        counts[(bin(n) - lo) as usize] += 1;
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(i, count)| {
            let b = lo + i as u32;
            let (from, to) = match b {
                0 => (0, 0),
                64 => (1 << 63, u64::MAX),
                b => (1u64 << (b - 1), (1u64 << b) - 1),
            };
            LengthBin { from, to, count }
        })
        .collect()
}

#[cfg(test)]
mod histogram_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bins_are_powers_of_two_with_the_gaps_kept() {
        let h = length_histogram(&[1, 2, 3, 9]);
        let bins: Vec<_> = h.iter().map(|b| (b.from, b.to, b.count)).collect();
        assert_eq!(bins, [(1, 1, 1), (2, 3, 2), (4, 7, 0), (8, 15, 1)]);
        assert!(length_histogram(&[]).is_empty());
        assert_eq!(length_histogram(&[0, u64::MAX]).len(), 65);
    }

    proptest! {
        #[test]
        fn every_length_lands_in_exactly_its_bin(lengths in proptest::collection::vec(any::<u64>(), 1..200)) {
            let h = length_histogram(&lengths);
            prop_assert_eq!(h.iter().map(|b| b.count).sum::<u64>(), lengths.len() as u64);
            for w in h.windows(2) {
                prop_assert_eq!(w[0].to + 1, w[1].from);
            }
            for &n in &lengths {
                let b = h.iter().find(|b| (b.from..=b.to).contains(&n));
                prop_assert!(b.is_some_and(|b| b.count > 0));
            }
        }
    }
}
