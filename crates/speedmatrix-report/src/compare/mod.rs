//! Two runs side by side: per-cell B/A ratios of throughput, TTFT and time
//! between tokens, each with the interval the runs' own uncertainty gives it,
//! and the cells whose change is both beyond the threshold and real.
//!
//! The test (docs/metrics.md, "Comparing runs"): a figure got worse when the
//! 95 % interval of its ratio B/A lies wholly beyond `1 ± threshold` on the
//! worse side (below `1 − t` for tok/s, above `1 + t` for a latency), better
//! likewise on the other side. A ratio beyond the threshold whose interval
//! reaches back inside is "within noise". A document written before
//! intervals existed counts as exact; a figure of a newer one that has no
//! interval (too few samples to bound it) is not judged.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use speedmatrix_units::{Concurrency, Interval, Tokens};

use crate::error::ReportError;
use crate::format;
use crate::model::{CellStatus, LoadKind, Report};
use crate::page;

mod build;
mod html;
mod text;

pub use build::{compare, compare_metrics};

/// How much worse B may be than A before a cell counts as a regression, as a fraction
/// (`0.05` = 5 %). Parses `5%`, `2.5%` or `5` (always percent).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Threshold(f64);

impl Serialize for Threshold {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.0)
    }
}

impl Threshold {
    /// 5 %.
    pub const DEFAULT: Threshold = Threshold(0.05);

    /// A threshold of `fraction` (`0.05` = 5 %); it must lie in `[0, 1)`.
    pub fn from_fraction(fraction: f64) -> Result<Threshold, ReportError> {
        if fraction.is_finite() && (0.0..1.0).contains(&fraction) {
            Ok(Threshold(fraction))
        } else {
            Err(ReportError::InvalidThreshold {
                text: format!("{}%", fraction * 100.0),
            })
        }
    }

    /// The threshold as a fraction.
    pub fn fraction(self) -> f64 {
        self.0
    }
}

impl FromStr for Threshold {
    type Err = ReportError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let number = text.strip_suffix('%').unwrap_or(text).trim();
        let pct: f64 = number
            .parse()
            .map_err(|_| ReportError::InvalidThreshold { text: s.to_owned() })?;
        Threshold::from_fraction(pct / 100.0)
            .map_err(|_| ReportError::InvalidThreshold { text: s.to_owned() })
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = format!("{:.2}", self.0 * 100.0);
        write!(f, "{}%", pct.trim_end_matches('0').trim_end_matches('.'))
    }
}

/// Which part of the matrix a compared row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    /// A cold prefill point (throughput is prompt tok/s).
    Prefill,
    /// A sustained-decode cell (throughput is total output tok/s).
    Decode,
    /// A burst cell (throughput is output tok/s over the burst; TTFT from its start).
    Burst,
    /// An open-loop rate cell (TTFT from each request's intended send time).
    Rate,
    /// A cell of multi-turn conversations (TTFT over every turn).
    Conversation,
}

impl Section {
    /// The phase as rows show it: `Prefill`, `Sustained decode`, `Burst`, ….
    pub fn name(self) -> &'static str {
        match self {
            Section::Prefill => "Prefill",
            Section::Decode => "Sustained decode",
            Section::Burst => "Burst",
            Section::Rate => "Open-loop rate",
            Section::Conversation => "Conversations",
        }
    }
}

/// Which figures a comparison judges (`--metric`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Throughput: prompt tok/s for prefill, total output tok/s otherwise (higher is better).
    TokensPerS,
    /// Median time to first token (lower is better).
    Ttft,
    /// Median time between tokens (lower is better).
    Itl,
}

impl Metric {
    /// Every metric, in the order rows show them.
    pub const ALL: [Metric; 3] = [Metric::TokensPerS, Metric::Ttft, Metric::Itl];

    /// The name users type and rows show: `tok/s`, `TTFT`, `ITL`.
    pub fn name(self) -> &'static str {
        match self {
            Metric::TokensPerS => "tok/s",
            Metric::Ttft => "TTFT",
            Metric::Itl => "ITL",
        }
    }

    fn higher_is_better(self) -> bool {
        matches!(self, Metric::TokensPerS)
    }
}

/// The metrics to judge: one, or all (`--metric tok/s|ttft|itl|all`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MetricChoice {
    /// Every metric.
    #[default]
    All,
    /// Only this one.
    Only(Metric),
}

impl MetricChoice {
    /// Whether `m` is judged.
    pub fn includes(self, m: Metric) -> bool {
        match self {
            MetricChoice::All => true,
            MetricChoice::Only(x) => x == m,
        }
    }
}

impl FromStr for MetricChoice {
    type Err = ReportError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "all" => Ok(MetricChoice::All),
            "tok/s" | "tokens_per_s" | "throughput" => Ok(MetricChoice::Only(Metric::TokensPerS)),
            "ttft" => Ok(MetricChoice::Only(Metric::Ttft)),
            "itl" | "tbt" => Ok(MetricChoice::Only(Metric::Itl)),
            _ => Err(ReportError::InvalidMetric { text: s.to_owned() }),
        }
    }
}

/// How sure one side is of a figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Noise {
    /// The document predates intervals (or is a prediction): taken as exact.
    Unstated,
    /// Its 95 % interval.
    Interval {
        /// Lower bound.
        low: f64,
        /// Upper bound.
        high: f64,
    },
    /// The document states intervals but could not bound this figure (too
    /// few samples): no change in it can be judged.
    Unbounded,
}

impl Noise {
    fn of(states_intervals: bool, interval: Option<Interval>) -> Noise {
        match (states_intervals, interval) {
            (_, Some(i)) => Noise::Interval {
                low: i.low,
                high: i.high,
            },
            (false, None) => Noise::Unstated,
            (true, None) => Noise::Unbounded,
        }
    }

    fn interval(self) -> Option<Interval> {
        match self {
            Noise::Interval { low, high } => Interval::new(low, high),
            _ => None,
        }
    }
}

/// One number in A and in B.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Pair {
    /// The value in run A.
    pub a: f64,
    /// The value in run B.
    pub b: f64,
    /// How sure A is of it.
    pub a_noise: Noise,
    /// How sure B is of it.
    pub b_noise: Noise,
}

impl Pair {
    /// `b / a`, or `None` when `a` is zero.
    pub fn ratio(self) -> Option<f64> {
        (self.a > 0.0).then(|| self.b / self.a)
    }

    /// The 95 % interval of `b / a`; `None` when a side is unbounded or
    /// either value is not positive.
    pub fn ratio_interval(self) -> Option<Interval> {
        if matches!(self.a_noise, Noise::Unbounded) || matches!(self.b_noise, Noise::Unbounded) {
            return None;
        }
        speedmatrix_metrics::ratio_interval(
            self.a,
            self.a_noise.interval(),
            self.b,
            self.b_noise.interval(),
        )
    }
}

/// What the comparison concluded for one figure of one cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Judgement {
    /// The ratio is within the threshold.
    Same,
    /// The ratio is beyond the threshold, but its interval reaches back inside it.
    WithinNoise,
    /// A side could not bound the figure: not judged.
    Unjudged,
    /// Worse beyond the threshold, and the interval says it is real.
    Worse,
    /// Better beyond the threshold, and the interval says it is real.
    Better,
}

/// One figure of one cell in both runs, and the judgement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MetricComparison {
    /// Which figure.
    pub metric: Metric,
    /// Its values and their noise.
    pub pair: Pair,
    /// `b / a`.
    pub ratio: f64,
    /// The 95 % interval of the ratio, when both sides bound the figure.
    pub ratio_interval: Option<Interval>,
    /// The judgement.
    pub judgement: Judgement,
}

impl MetricComparison {
    /// Judges `pair` of `metric` at `threshold`; `None` when A's value is zero.
    pub fn judge(metric: Metric, pair: Pair, threshold: Threshold) -> Option<MetricComparison> {
        let ratio = pair.ratio()?;
        let ratio_interval = pair.ratio_interval();
        let t = threshold.fraction();
        // Ratios as "better": above 1 is better whatever the metric.
        let better_side = |r: f64| {
            if metric.higher_is_better() {
                r
            } else {
                1.0 / r
            }
        };
        let beyond = (ratio - 1.0).abs() > t;
        let judgement = match ratio_interval {
            _ if !beyond => Judgement::Same,
            None => Judgement::Unjudged,
            Some(i) => {
                let (lo, hi) = (better_side(i.low), better_side(i.high));
                let (lo, hi) = (lo.min(hi), lo.max(hi));
                // Worse: the better-ratio interval wholly below 1 − t (for a
                // latency, the ratio wholly above 1 + t, i.e. its inverse below
                // 1 / (1 + t)); better likewise above.
                let worse_edge = if metric.higher_is_better() {
                    1.0 - t
                } else {
                    1.0 / (1.0 + t)
                };
                let better_edge = if metric.higher_is_better() {
                    1.0 + t
                } else {
                    1.0 / (1.0 - t)
                };
                if hi < worse_edge {
                    Judgement::Worse
                } else if lo > better_edge {
                    Judgement::Better
                } else {
                    Judgement::WithinNoise
                }
            }
        };
        Some(MetricComparison {
            metric,
            pair,
            ratio,
            ratio_interval,
            judgement,
        })
    }
}

/// What the comparison concluded for one cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// Both measured; no change both beyond the threshold and beyond the noise.
    Within,
    /// Better beyond the threshold and the noise, or newly measured, and nowhere worse.
    Improved,
    /// Worse beyond the threshold and the noise, or no longer runs.
    Regressed {
        /// What got worse, e.g. `tok/s -7.1%`.
        why: String,
    },
    /// Nothing to compare: neither side measured it, or only one run has the cell.
    Unmeasured {
        /// Why, e.g. `only in A`.
        why: String,
    },
}

/// One row of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellComparison {
    /// Prefill or decode.
    pub section: Section,
    /// Context length.
    #[serde(serialize_with = "tokens_u64")]
    pub context: Tokens,
    /// Simultaneous requests (1 for prefill; a burst's size; 1 for a rate cell).
    #[serde(serialize_with = "concurrency_u32")]
    pub concurrency: Concurrency,
    /// A rate cell's intended requests per second.
    pub rate_per_s: Option<f64>,
    /// Throughput (prompt tok/s for prefill, total tok/s for decode) when both measured it.
    pub tokens_per_s: Option<Pair>,
    /// TTFT in milliseconds (median for decode) when both measured it.
    pub ttft_ms: Option<Pair>,
    /// Median time between tokens in milliseconds when both measured it.
    pub itl_ms: Option<Pair>,
    /// Each judged figure.
    pub metrics: Vec<MetricComparison>,
    /// The conclusion.
    pub verdict: Verdict,
    /// When A is a prediction with a band on this cell's throughput and B measured it:
    /// where the measurement fell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub band: Option<BandCheck>,
}

/// Where a measurement fell against a prediction's band.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BandCheck {
    /// The band's probability (0.8).
    pub level: f64,
    /// Its low end.
    pub low: f64,
    /// Its high end.
    pub high: f64,
    /// The measurement's place.
    pub place: BandPlace,
}

/// A measurement's place against a band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BandPlace {
    /// Below its low end: slower than predicted.
    Below,
    /// Inside it.
    Inside,
    /// Above its high end: faster than predicted.
    Above,
}

impl BandCheck {
    /// Where `measured` falls in the band `[low, high]` of probability `level`.
    pub fn of(level: f64, band: Interval, measured: f64) -> BandCheck {
        let place = if measured < band.low {
            BandPlace::Below
        } else if measured > band.high {
            BandPlace::Above
        } else {
            BandPlace::Inside
        };
        BandCheck {
            level,
            low: band.low,
            high: band.high,
            place,
        }
    }

    fn words(self) -> String {
        let band = format!(
            "{:.0} % band {}–{}",
            self.level * 100.0,
            format::significant3(self.low),
            format::significant3(self.high)
        );
        match self.place {
            BandPlace::Inside => format!("inside the {band}"),
            BandPlace::Below => format!("below the {band}"),
            BandPlace::Above => format!("above the {band}"),
        }
    }
}

fn tokens_u64<S: serde::Serializer>(t: &Tokens, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(t.get())
}

fn concurrency_u32<S: serde::Serializer>(c: &Concurrency, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u32(c.get())
}

/// The result of [`compare`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The threshold used.
    pub threshold: Threshold,
    /// The metrics judged (`all` or one name).
    #[serde(serialize_with = "choice_name")]
    pub metric: MetricChoice,
    /// Every cell of either run: A's order, then cells only B has.
    pub cells: Vec<CellComparison>,
    /// Settings that differ between the runs, in words (`engine version: 0.32.0 → 0.33.0`).
    pub differences: Vec<String>,
    /// The command lines that started run A and run B, when they record them.
    pub commands: [Option<String>; 2],
    /// Run A was predicted (or simulated), not measured: B / A is then the
    /// prediction's error, and a change beyond the threshold is the
    /// prediction being off, not a regression.
    pub a_predicted: bool,
}

impl Comparison {
    /// The cells that regressed.
    pub fn regressions(&self) -> impl Iterator<Item = &CellComparison> {
        self.cells
            .iter()
            .filter(|c| matches!(c.verdict, Verdict::Regressed { .. }))
    }

    /// Whether any cell regressed.
    pub fn has_regressions(&self) -> bool {
        self.regressions().next().is_some()
    }
}

fn choice_name<S: serde::Serializer>(c: &MetricChoice, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match c {
        MetricChoice::All => "all",
        MetricChoice::Only(m) => m.name(),
    })
}

/// How the two runs' load workloads differ (`--dataset`, its sample, `--input-tokens`), in
/// words; `None` when they are the same. Runs that sent different prompts measure different
/// things, so a comparison of them says nothing about the server unless the user means it.
pub fn workload_difference(a: &Report, b: &Report) -> Option<String> {
    let of = |r: &Report| r.load.as_ref().and_then(|l| l.workload.clone());
    let (wa, wb) = (of(a), of(b));
    if wa == wb {
        return None;
    }
    let say = |w: &Option<crate::Workload>| match w {
        Some(w) => w.describe(),
        None => "the run's own prompts at each context".to_owned(),
    };
    Some(format!("A sent {}; B sent {}", say(&wa), say(&wb)))
}
