//! Prompt lengths drawn from a distribution (`--input-tokens`): each request
//! gets its own length, and its prompt is still built to exactly that many
//! tokens. Draws use the prompts' seeded SplitMix64 stream and statrs'
//! inverse CDFs, so a seed gives the same lengths on every machine.

use std::fmt;
use std::str::FromStr;

use speedmatrix_units::Tokens;
use statrs::distribution::{ContinuousCDF, LogNormal, Normal};

use crate::WorkloadError;
use crate::prompt::MAX_PROMPT_TOKENS;
use crate::text::SplitMix64;

/// How prompt lengths are spread, in tokens.
///
/// ```
/// use speedmatrix_workload::LengthDistribution;
///
/// let d: LengthDistribution = "uniform:512..2048".parse()?;
/// let lengths = d.draw(1_000, 7);
/// assert!(lengths.iter().all(|t| (512..=2048).contains(&t.get())));
/// assert_eq!(lengths, d.draw(1_000, 7));
/// assert_eq!(d.to_string(), "uniform:512..2048");
/// # Ok::<(), speedmatrix_workload::WorkloadError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LengthDistribution {
    /// Every prompt this long (`1k`, `fixed:1k`).
    Fixed(Tokens),
    /// Whole numbers from `low` to `high`, both included, equally likely
    /// (`uniform:512..2048`).
    Uniform {
        /// The shortest.
        low: Tokens,
        /// The longest.
        high: Tokens,
    },
    /// Normal around `mean` with standard deviation `sd`, rounded, cut to
    /// 1..=16M (`normal:1024,256`).
    Normal {
        /// The mean, tokens.
        mean: f64,
        /// The standard deviation, tokens.
        sd: f64,
    },
    /// Log-normal with this median and `sigma` (the standard deviation of the
    /// log), rounded, cut to 1..=16M (`lognormal:1024,0.5`): the long right tail
    /// of real prompts.
    LogNormal {
        /// The median, tokens.
        median: f64,
        /// The standard deviation of ln(length).
        sigma: f64,
    },
}

impl LengthDistribution {
    /// `n` lengths drawn with `seed`.
    pub fn draw(&self, n: usize, seed: u64) -> Vec<Tokens> {
        let mut rng = SplitMix64::new(seed ^ 0x6c65_6e67_7468_7321);
        let clamp = |x: f64| Tokens::new((x.round().max(1.0) as u64).min(MAX_PROMPT_TOKENS));
        (0..n)
            .map(|_| match *self {
                Self::Fixed(t) => t,
                Self::Uniform { low, high } => {
                    let span = high.get() - low.get() + 1;
                    Tokens::new(low.get() + rng.next_u64() % span)
                }
                Self::Normal { mean, sd } => match Normal::new(mean, sd) {
                    Ok(d) if sd > 0.0 => clamp(d.inverse_cdf(unit(&mut rng))),
                    _ => clamp(mean),
                },
                Self::LogNormal { median, sigma } => match LogNormal::new(median.ln(), sigma) {
                    Ok(d) if sigma > 0.0 => clamp(d.inverse_cdf(unit(&mut rng))),
                    _ => clamp(median),
                },
            })
            .collect()
    }

    /// The one length every draw gives, for a fixed distribution.
    pub fn fixed(&self) -> Option<Tokens> {
        match *self {
            Self::Fixed(t) => Some(t),
            Self::Uniform { low, high } if low == high => Some(low),
            _ => None,
        }
    }

    fn check(self, given: &str) -> Result<Self, WorkloadError> {
        let bad = |message: &str| WorkloadError::BadLengths {
            given: given.to_owned(),
            message: message.to_owned(),
        };
        let max = MAX_PROMPT_TOKENS as f64;
        match self {
            Self::Fixed(t) if t.get() == 0 || t.get() > MAX_PROMPT_TOKENS => {
                Err(bad("a length is 1 to 16M tokens"))
            }
            Self::Uniform { low, high } if low.get() == 0 || high.get() > MAX_PROMPT_TOKENS => {
                Err(bad("the range lies within 1 to 16M tokens"))
            }
            Self::Uniform { low, high } if low > high => {
                Err(bad("the range's low end is above its high end"))
            }
            Self::Normal { mean, sd }
                if !((1.0..=max).contains(&mean) && sd >= 0.0 && sd.is_finite()) =>
            {
                Err(bad(
                    "the mean is 1 to 16M tokens and the standard deviation a finite number ≥ 0",
                ))
            }
            Self::LogNormal { median, sigma }
                if !((1.0..=max).contains(&median) && (0.0..=10.0).contains(&sigma)) =>
            {
                Err(bad("the median is 1 to 16M tokens and sigma 0 to 10"))
            }
            ok => Ok(ok),
        }
    }
}

/// A uniform draw strictly inside (0, 1).
fn unit(rng: &mut SplitMix64) -> f64 {
    ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

impl FromStr for LengthDistribution {
    type Err = WorkloadError;

    /// `1k`, `fixed:1k`, `uniform:512..2048`, `normal:1024,256`, `lognormal:1024,0.5`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |message: &str| WorkloadError::BadLengths {
            given: s.to_owned(),
            message: message.to_owned(),
        };
        let tokens = |t: &str| t.trim().parse::<Tokens>().map_err(|e| bad(&e.to_string()));
        let number = |t: &str, what: &str| {
            t.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| bad(&format!("`{}` is not a number for the {what}", t.trim())))
        };
        fn pair(rest: &str) -> Option<(&str, &str)> {
            rest.split_once(',')
        }
        let comma = || bad("two numbers separated by a comma");
        let d = match s.trim().split_once(':') {
            None => Self::Fixed(tokens(s)?),
            Some((kind, rest)) => match kind.trim() {
                "fixed" => Self::Fixed(tokens(rest)?),
                "uniform" => {
                    let (low, high) = rest
                        .split_once("..")
                        .ok_or_else(|| bad("a range is LOW..HIGH"))?;
                    Self::Uniform {
                        low: tokens(low)?,
                        high: tokens(high)?,
                    }
                }
                "normal" => {
                    let (mean, sd) = pair(rest).ok_or_else(comma)?;
                    Self::Normal {
                        mean: tokens(mean)?.get() as f64,
                        sd: number(sd, "standard deviation")?,
                    }
                }
                "lognormal" => {
                    let (median, sigma) = pair(rest).ok_or_else(comma)?;
                    Self::LogNormal {
                        median: tokens(median)?.get() as f64,
                        sigma: number(sigma, "sigma")?,
                    }
                }
                other => return Err(bad(&format!("`{other}` is not a distribution"))),
            },
        };
        d.check(s)
    }
}

impl fmt::Display for LengthDistribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fixed(t) => write!(f, "{}", t.get()),
            Self::Uniform { low, high } => write!(f, "uniform:{}..{}", low.get(), high.get()),
            Self::Normal { mean, sd } => write!(f, "normal:{mean},{sd}"),
            Self::LogNormal { median, sigma } => write!(f, "lognormal:{median},{sigma}"),
        }
    }
}

impl serde::Serialize for LengthDistribution {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for LengthDistribution {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mean(v: &[Tokens]) -> f64 {
        v.iter().map(|t| t.get() as f64).sum::<f64>() / v.len() as f64
    }

    #[test]
    fn each_form_parses_and_prints_back() {
        for s in [
            "1024",
            "uniform:512..2048",
            "normal:1024,256",
            "lognormal:1024,0.5",
        ] {
            let d: LengthDistribution = s.parse().unwrap();
            assert_eq!(d.to_string(), s);
        }
        assert_eq!(
            "fixed:2k".parse::<LengthDistribution>().unwrap(),
            LengthDistribution::Fixed(Tokens::new(2048))
        );
    }

    #[test]
    fn bad_forms_are_refused_with_the_forms_named() {
        for s in [
            "0",
            "uniform:10..5",
            "uniform:0..5",
            "uniform:5",
            "normal:100",
            "normal:100,-1",
            "normal:100,x",
            "lognormal:0,1",
            "lognormal:100,20",
            "zipf:1,2",
            "",
        ] {
            let e = s.parse::<LengthDistribution>().unwrap_err().to_string();
            assert!(e.contains("uniform:512..2048"), "{s}: {e}");
        }
    }

    #[test]
    fn draws_have_the_distributions_centre() {
        let n = 20_000;
        let u = "uniform:100..300"
            .parse::<LengthDistribution>()
            .unwrap()
            .draw(n, 1);
        assert!((mean(&u) - 200.0).abs() < 2.0, "{}", mean(&u));
        let g = "normal:1000,100"
            .parse::<LengthDistribution>()
            .unwrap()
            .draw(n, 2);
        assert!((mean(&g) - 1000.0).abs() < 3.0, "{}", mean(&g));
        let mut l = "lognormal:1000,0.5"
            .parse::<LengthDistribution>()
            .unwrap()
            .draw(n, 3);
        l.sort();
        let median = l[n / 2].get() as f64;
        assert!((median / 1000.0 - 1.0).abs() < 0.03, "{median}");
        // The right tail: the mean is above the median by exp(σ²/2) = 1.133.
        assert!((mean(&l) / 1000.0 - 1.133).abs() < 0.03, "{}", mean(&l));
    }

    proptest! {
        #[test]
        fn uniform_draws_stay_in_range_and_repeat_by_seed(
            low in 1u64..5_000, width in 0u64..5_000, seed: u64, n in 0usize..200,
        ) {
            let d = LengthDistribution::Uniform { low: Tokens::new(low), high: Tokens::new(low + width) };
            let a = d.draw(n, seed);
            prop_assert_eq!(a.len(), n);
            prop_assert!(a.iter().all(|t| (low..=low + width).contains(&t.get())));
            prop_assert_eq!(a, d.draw(n, seed));
        }

        #[test]
        fn any_text_parses_or_is_refused_never_panics(s in ".{0,40}") {
            if let Ok(d) = s.parse::<LengthDistribution>() {
                let drawn = d.draw(50, 9);
                prop_assert!(drawn.iter().all(|t| (1..=MAX_PROMPT_TOKENS).contains(&t.get())));
                // What it prints parses to itself.
                prop_assert_eq!(d.to_string().parse::<LengthDistribution>().ok(), Some(d));
            }
        }

        #[test]
        fn heavy_tails_are_cut_to_what_a_prompt_may_hold(median in 1u64..1_000_000, sigma in 0.0f64..10.0, seed: u64) {
            let d = LengthDistribution::LogNormal { median: median as f64, sigma };
            prop_assert!(d.draw(100, seed).iter().all(|t| (1..=MAX_PROMPT_TOKENS).contains(&t.get())));
        }
    }
}
