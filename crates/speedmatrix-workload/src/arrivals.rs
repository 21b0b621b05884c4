//! When requests arrive in an open-loop run: a seeded schedule of send
//! times drawn up front, so that a run is repeatable and a client that falls
//! behind cannot move the times it is measured against.
//!
//! Gaps between arrivals are independent draws from the process's
//! distribution, by inversion of its CDF (statrs) on the seeded stream the
//! prompts use ([`crate::TextGenerator`]'s SplitMix64), so a schedule is
//! fixed by `(process, rate, seed)` across dependency upgrades:
//!
//! - [`ArrivalProcess::Poisson`]: exponential gaps of mean `1 / rate`;
//! - [`ArrivalProcess::Constant`]: every gap exactly `1 / rate`;
//! - [`ArrivalProcess::Gamma`]: gamma gaps of shape `burstiness` and mean
//!   `1 / rate` (as `vllm bench serve --burstiness`): below 1 burstier than
//!   Poisson, above 1 more even, 1 is Poisson.

use std::fmt;
use std::time::Duration;

use statrs::distribution::{ContinuousCDF, Exp, Gamma};

use crate::WorkloadError;
use crate::text::SplitMix64;

/// The distribution of the gaps between arrivals.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "process", rename_all = "snake_case")]
pub enum ArrivalProcess {
    /// Exponential gaps: arrivals at random, independent of each other.
    Poisson,
    /// Equal gaps.
    Constant,
    /// Gamma gaps of shape `burstiness` (1 is Poisson).
    Gamma {
        /// The gamma shape; the gaps' coefficient of variation is `1 / sqrt(burstiness)`.
        burstiness: f64,
    },
}

impl fmt::Display for ArrivalProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArrivalProcess::Poisson => f.write_str("poisson"),
            ArrivalProcess::Constant => f.write_str("constant"),
            ArrivalProcess::Gamma { burstiness } => write!(f, "gamma (burstiness {burstiness})"),
        }
    }
}

/// A seeded arrival schedule's parameters.
///
/// ```
/// use std::time::Duration;
/// use speedmatrix_workload::{ArrivalProcess, Arrivals};
///
/// let a = Arrivals::new(ArrivalProcess::Poisson, 4.0, 7)?;
/// let times = a.first(1_000);
/// assert_eq!(times, a.first(1_000), "fixed by the seed");
/// let mean_gap = times[999].as_secs_f64() / 1_000.0;
/// assert!((mean_gap - 0.25).abs() < 0.03, "{mean_gap}");
/// let even = Arrivals::new(ArrivalProcess::Constant, 4.0, 7)?;
/// assert_eq!(even.first(2), [Duration::from_millis(250), Duration::from_millis(500)]);
/// assert!(Arrivals::new(ArrivalProcess::Poisson, 0.0, 7).is_err());
/// # Ok::<(), speedmatrix_workload::WorkloadError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrivals {
    process: ArrivalProcess,
    rate: f64,
    seed: u64,
}

/// Gaps drawn by inversion; a closure keeps the three processes one loop.
enum Gap {
    Exp(Exp),
    Constant(f64),
    Gamma(Gamma),
}

impl Arrivals {
    /// `rate` requests per second arriving as `process`, drawn from `seed`.
    ///
    /// # Errors
    /// A rate or burstiness that is not positive and finite.
    pub fn new(process: ArrivalProcess, rate: f64, seed: u64) -> Result<Arrivals, WorkloadError> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(WorkloadError::BadRate(rate));
        }
        if let ArrivalProcess::Gamma { burstiness } = process
            && !(burstiness.is_finite() && burstiness > 0.0)
        {
            return Err(WorkloadError::BadBurstiness(burstiness));
        }
        Ok(Arrivals {
            process,
            rate,
            seed,
        })
    }

    /// The process.
    pub fn process(&self) -> ArrivalProcess {
        self.process
    }

    /// Requests per second on average.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    fn gap(&self) -> Gap {
        // The constructors' errors are ruled out by `new`'s checks; the
        // fallbacks keep this total anyway.
        match self.process {
            ArrivalProcess::Poisson => Exp::new(self.rate)
                .map(Gap::Exp)
                .unwrap_or(Gap::Constant(1.0 / self.rate)),
            ArrivalProcess::Constant => Gap::Constant(1.0 / self.rate),
            ArrivalProcess::Gamma { burstiness } => Gamma::new(burstiness, burstiness * self.rate)
                .map(Gap::Gamma)
                .unwrap_or(Gap::Constant(1.0 / self.rate)),
        }
    }

    /// Send times, as offsets from the run's start, while `keep(index, time)`
    /// holds; the first request arrives one gap after the start. The draw
    /// also ends where a time can no longer be represented (a gap of years).
    fn draw(&self, mut keep: impl FnMut(usize, Duration) -> bool) -> Vec<Duration> {
        let gap = self.gap();
        let mut rng = SplitMix64::new(self.seed ^ 0x6172_7269_7661_6c73);
        let mut at = 0.0f64;
        let mut out = Vec::new();
        loop {
            // A probability strictly inside (0, 1): the inverse CDFs are finite there.
            let u = ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            at += match &gap {
                Gap::Exp(d) => d.inverse_cdf(u),
                Gap::Gamma(d) => d.inverse_cdf(u),
                Gap::Constant(c) => *c,
            };
            let Ok(t) = Duration::try_from_secs_f64(at) else {
                return out;
            };
            if !keep(out.len(), t) {
                return out;
            }
            out.push(t);
        }
    }

    /// The first `n` send times.
    pub fn first(&self, n: usize) -> Vec<Duration> {
        self.draw(|i, _| i < n)
    }

    /// The send times up to `length` (those at or before it).
    pub fn within(&self, length: Duration) -> Vec<Duration> {
        self.draw(|_, t| t <= length)
    }

    /// The send times up to `length`, but no more than `n` of them: a caller
    /// that holds each request in memory bounds what a schedule can ask.
    ///
    /// ```
    /// use std::time::Duration;
    /// use speedmatrix_workload::{ArrivalProcess, Arrivals};
    ///
    /// let a = Arrivals::new(ArrivalProcess::Constant, 1_000.0, 0)?;
    /// assert_eq!(a.within_at_most(Duration::from_secs(3_600), 5).len(), 5);
    /// assert!(a.within_at_most(Duration::from_micros(10), 5).is_empty());
    /// # Ok::<(), speedmatrix_workload::WorkloadError>(())
    /// ```
    pub fn within_at_most(&self, length: Duration, n: usize) -> Vec<Duration> {
        self.draw(|i, t| i < n && t <= length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use statrs::distribution::Continuous as _;

    fn gaps(times: &[Duration]) -> Vec<f64> {
        let mut last = 0.0;
        times
            .iter()
            .map(|t| {
                let s = t.as_secs_f64();
                let g = s - last;
                last = s;
                g
            })
            .collect()
    }

    /// The Kolmogorov–Smirnov statistic of `sample` against `cdf`, and its
    /// asymptotic p-value (Kolmogorov's distribution with Stephens'
    /// small-sample correction).
    fn ks(mut sample: Vec<f64>, cdf: impl Fn(f64) -> f64) -> (f64, f64) {
        sample.sort_by(f64::total_cmp);
        let n = sample.len() as f64;
        let d = sample
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let f = cdf(x);
                (f - i as f64 / n).max((i + 1) as f64 / n - f)
            })
            .fold(0.0, f64::max);
        let x = d * (n.sqrt() + 0.12 + 0.11 / n.sqrt());
        let p: f64 = (1..=100)
            .map(|k| {
                let k = f64::from(k);
                let sign = if k as u64 % 2 == 1 { 1.0 } else { -1.0 };
                2.0 * sign * (-2.0 * k * k * x * x).exp()
            })
            .sum();
        (d, p.clamp(0.0, 1.0))
    }

    #[test]
    fn poisson_gaps_are_exponential_by_kolmogorov_smirnov() {
        for seed in [1, 2, 3] {
            let a = Arrivals::new(ArrivalProcess::Poisson, 8.0, seed).unwrap();
            let exp = Exp::new(8.0).unwrap();
            let (d, p) = ks(gaps(&a.first(5_000)), |x| exp.cdf(x));
            assert!(p > 0.01, "seed {seed}: D = {d}, p = {p}");
        }
        // The test can tell: constant gaps are not exponential.
        let even = Arrivals::new(ArrivalProcess::Constant, 8.0, 1).unwrap();
        let exp = Exp::new(8.0).unwrap();
        let (_, p) = ks(gaps(&even.first(5_000)), |x| exp.cdf(x));
        assert!(p < 1e-6, "{p}");
    }

    #[test]
    fn gamma_gaps_have_the_asked_shape() {
        let a = Arrivals::new(ArrivalProcess::Gamma { burstiness: 0.5 }, 10.0, 4).unwrap();
        let g = Gamma::new(0.5, 5.0).unwrap();
        let sample = gaps(&a.first(5_000));
        let (d, p) = ks(sample.clone(), |x| g.cdf(x));
        assert!(p > 0.01, "D = {d}, p = {p}");
        let mean = sample.iter().sum::<f64>() / sample.len() as f64;
        assert!((mean - 0.1).abs() < 0.01, "{mean}");
        assert!(g.pdf(0.1) > 0.0);
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(matches!(
            Arrivals::new(ArrivalProcess::Poisson, f64::NAN, 1),
            Err(WorkloadError::BadRate(_))
        ));
        assert!(matches!(
            Arrivals::new(ArrivalProcess::Poisson, -1.0, 1).err(),
            Some(WorkloadError::BadRate(r)) if r == -1.0
        ));
        assert!(Arrivals::new(ArrivalProcess::Gamma { burstiness: 0.0 }, 1.0, 1).is_err());
    }

    proptest! {
        // Gamma inversion is iterative: few cases, short schedules.
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn schedules_are_increasing_repeatable_and_bounded(
            rate in 0.1f64..100.0,
            burst in 0.1f64..10.0,
            seed in any::<u64>(),
            secs in 0.1f64..5.0,
        ) {
            for process in [ArrivalProcess::Poisson, ArrivalProcess::Constant, ArrivalProcess::Gamma { burstiness: burst }] {
                let a = Arrivals::new(process, rate, seed).unwrap();
                let length = Duration::from_secs_f64(secs);
                let times = a.within(length);
                prop_assert_eq!(&times, &a.within(length));
                prop_assert!(times.windows(2).all(|w| w[0] <= w[1]));
                prop_assert!(times.last().is_none_or(|t| *t <= length));
                prop_assert_eq!(a.first(times.len()), times);
            }
        }
    }
}
