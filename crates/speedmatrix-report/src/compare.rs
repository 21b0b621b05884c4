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
use std::fmt::Write as _;
use std::str::FromStr;

use serde::Serialize;
use speedmatrix_units::{Concurrency, Interval, Tokens};

use crate::error::ReportError;
use crate::format;
use crate::model::{CellStatus, LoadKind, Report};
use crate::page;

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

    /// The comparison as a Markdown page: settings that differ, a table of ratios, a summary.
    pub fn to_markdown(&self) -> String {
        let mut out = if self.a_predicted {
            String::from(
                "# Prediction error (B measured / A predicted)\n\nA is a predicted or simulated \
                 document: each ratio is how far the measurement landed from the prediction; \
                 \"REGRESSION\" below means the prediction was high by more than the threshold, \
                 \"better\" that it was low.\n\n",
            )
        } else {
            String::from("# Speed test comparison (B / A)\n\n")
        };
        for (name, line) in ["A", "B"].iter().zip(&self.commands) {
            if let Some(line) = line {
                let _ = writeln!(out, "{name}: `{}`  ", line.replace('`', "'"));
            }
        }
        if self.commands.iter().any(Option::is_some) {
            out.push('\n');
        }
        if !self.differences.is_empty() {
            out.push_str("Runs differ in:\n\n");
            for d in &self.differences {
                let _ = writeln!(out, "- {}", crate::markdown::inline(d));
            }
            out.push('\n');
        }
        out.push_str(
            "| Phase | Context | Requests at once | A tok/s | B tok/s | tok/s B/A | A TTFT | B TTFT | TTFT B/A | ITL B/A | Verdict |\n",
        );
        out.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
        for cell in &self.cells {
            let _ = writeln!(out, "| {} |", row_cells(cell).join(" | "));
        }
        let count =
            |pred: fn(&Verdict) -> bool| self.cells.iter().filter(|c| pred(&c.verdict)).count();
        let noisy = self
            .cells
            .iter()
            .filter(|c| {
                c.metrics
                    .iter()
                    .any(|m| matches!(m.judgement, Judgement::WithinNoise | Judgement::Unjudged))
            })
            .count();
        let checked: Vec<BandCheck> = self.cells.iter().filter_map(|c| c.band).collect();
        if !checked.is_empty() {
            let inside = checked
                .iter()
                .filter(|b| b.place == BandPlace::Inside)
                .count();
            let _ = writeln!(
                out,
                "\nMeasured inside the prediction's 80 % band: {inside} of {} cells (the band is \
                 where 80 % of held-out public measurements fell; docs/predict.md).",
                checked.len()
            );
        }
        let _ = writeln!(
            out,
            "\nB/A ratios show their 95 % interval in brackets when the runs state their \
             uncertainty; a change counts only when that interval lies wholly beyond 1 ± {} \
             (docs/metrics.md, \"Comparing runs\"). Judged: {}. {noisy} cell(s) had a change \
             beyond the threshold that the noise does not support, or a figure too uncertain \
             to judge.",
            self.threshold,
            match self.metric {
                MetricChoice::All => "tok/s, TTFT and ITL".to_owned(),
                MetricChoice::Only(m) => m.name().to_owned(),
            }
        );
        let _ = writeln!(
            out,
            "\n{} compared, {} regressed beyond {}, {} improved, {} not comparable.",
            count(|v| matches!(
                v,
                Verdict::Within | Verdict::Improved | Verdict::Regressed { .. }
            )),
            count(|v| matches!(v, Verdict::Regressed { .. })),
            self.threshold,
            count(|v| matches!(v, Verdict::Improved)),
            count(|v| matches!(v, Verdict::Unmeasured { .. })),
        );
        out
    }
}

fn choice_name<S: serde::Serializer>(c: &MetricChoice, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match c {
        MetricChoice::All => "all",
        MetricChoice::Only(m) => m.name(),
    })
}

fn row_cells(cell: &CellComparison) -> Vec<String> {
    let dash = || format::DASH.to_owned();
    let side = |p: Option<Pair>, f: fn(f64) -> String, a: bool| {
        p.map_or_else(dash, |p| f(if a { p.a } else { p.b }))
    };
    let ratio = |m: Metric| {
        cell.metrics
            .iter()
            .find(|c| c.metric == m)
            .map_or_else(dash, ratio_text)
    };
    let verdict = match &cell.verdict {
        Verdict::Within => {
            let noise: Vec<&str> = cell
                .metrics
                .iter()
                .filter_map(|m| match m.judgement {
                    Judgement::WithinNoise => Some(m.metric.name()),
                    _ => None,
                })
                .collect();
            if noise.is_empty() {
                "ok".to_owned()
            } else {
                format!("ok ({} within noise)", noise.join(", "))
            }
        }
        Verdict::Improved => "better".to_owned(),
        Verdict::Regressed { why } => format!("**REGRESSION**: {}", crate::markdown::inline(why)),
        Verdict::Unmeasured { why } => crate::markdown::inline(why),
    };
    let verdict = match cell.band {
        Some(b) => format!("{verdict}; measured {}", b.words()),
        None => verdict,
    };
    vec![
        match cell.section {
            Section::Prefill => "Prefill".to_owned(),
            Section::Decode => "Sustained decode".to_owned(),
            Section::Burst => "Burst".to_owned(),
            Section::Rate => "Open-loop rate".to_owned(),
            Section::Conversation => "Conversations".to_owned(),
        },
        cell.context.to_string(),
        match cell.rate_per_s {
            Some(r) => format!("{r}/s"),
            None => cell.concurrency.to_string(),
        },
        side(cell.tokens_per_s, format::tokens_per_s, true),
        side(cell.tokens_per_s, format::tokens_per_s, false),
        ratio(Metric::TokensPerS),
        side(cell.ttft_ms, format::ms_whole, true),
        side(cell.ttft_ms, format::ms_whole, false),
        ratio(Metric::Ttft),
        ratio(Metric::Itl),
        verdict,
    ]
}

/// `0.900 (-10.0%) [0.897–0.903]`, `1.087 (+8.7%) [no interval]`.
fn ratio_text(m: &MetricComparison) -> String {
    let head = format!("{:.3} ({})", m.ratio, format::percent_change(m.ratio));
    match (m.ratio_interval, m.judgement) {
        (Some(i), _) if i.low < m.ratio || i.high > m.ratio => {
            format!("{head} [{:.3}–{:.3}]", i.low, i.high)
        }
        (None, Judgement::Unjudged) => format!("{head} [no interval]"),
        _ => head,
    }
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

/// Compares run `b` against run `a` cell by cell on every metric
/// ([`compare_metrics`] with [`MetricChoice::All`]).
pub fn compare(a: &Report, b: &Report, threshold: Threshold) -> Comparison {
    compare_metrics(a, b, threshold, MetricChoice::All)
}

/// Compares run `b` against run `a` cell by cell, judging the `metric`s.
///
/// A cell regresses when a judged figure got worse beyond `threshold` and
/// beyond its noise (see the module's docs), or when a cell A measured is
/// over capacity or failed in B.
pub fn compare_metrics(
    a: &Report,
    b: &Report,
    threshold: Threshold,
    metric: MetricChoice,
) -> Comparison {
    let judge_with = |section, ctx, n, x, y| judge(section, ctx, n, x, y, threshold, metric);
    let mut cells = Vec::new();
    for ctx in union(&a.run.prefill_contexts, &b.run.prefill_contexts) {
        let side = |r: &Report| {
            let stated = states_intervals(r);
            r.prefill_row(ctx).map(|row| Side {
                status: row.status.clone(),
                tokens_per_s: row
                    .prompt_tokens_per_s
                    .map(|v| (v, Noise::of(stated, None))),
                ttft_ms: row.ttft_ms.map(|v| (v, Noise::of(stated, None))),
                itl_ms: None,
            })
        };
        let mut cell = judge_with(Section::Prefill, ctx, Concurrency::ONE, side(a), side(b));
        cell.band = match (a.prefill_row(ctx), b.prefill_row(ctx)) {
            (Some(x), Some(y)) => x
                .prompt_tokens_per_s_band
                .zip(y.prompt_tokens_per_s.filter(|_| y.status.is_measured()))
                .map(|(band, v)| BandCheck::of(PREDICTION_BAND_LEVEL, band, v)),
            _ => None,
        };
        cells.push(cell);
    }
    let keys = |r: &Report| -> Vec<(Tokens, Concurrency)> {
        r.decode
            .iter()
            .map(|c| (c.context, c.concurrency))
            .collect()
    };
    for (ctx, n) in union(&keys(a), &keys(b)) {
        let side = |r: &Report| {
            let stated = states_intervals(r);
            r.decode_cell(ctx, n).map(|c| {
                let m = c.measurements.as_ref();
                let fig = |v: fn(&crate::model::DecodeMeasurements) -> f64,
                           i: fn(&crate::model::DecodeMeasurements) -> Option<Interval>| {
                    m.map(|m| (v(m), Noise::of(stated, i(m))))
                };
                Side {
                    status: c.status.clone(),
                    tokens_per_s: fig(
                        |m| m.total_tokens_per_s,
                        |m| m.total_tokens_per_s_interval(),
                    ),
                    ttft_ms: fig(|m| m.ttft_ms.p50, |m| m.ttft_p50_interval()),
                    itl_ms: fig(
                        |m| m.time_between_tokens_ms.p50,
                        |m| m.time_between_tokens_p50_interval(),
                    ),
                }
            })
        };
        let mut cell = judge_with(Section::Decode, ctx, n, side(a), side(b));
        cell.band = decode_band_check(a, b, ctx, n);
        cells.push(cell);
    }
    compare_load(a, b, threshold, metric, &mut cells);
    Comparison {
        threshold,
        metric,
        cells,
        differences: differences(a, b),
        commands: [command(a), command(b)],
        a_predicted: a.prediction.is_some(),
    }
}

/// The level of a prediction's prompt-rate band (a prefill row stores the interval only).
const PREDICTION_BAND_LEVEL: f64 = 0.8;

/// Where B's measured throughput of a decode cell fell in A's predicted band.
fn decode_band_check(a: &Report, b: &Report, ctx: Tokens, n: Concurrency) -> Option<BandCheck> {
    let band = a.decode_cell(ctx, n)?.measurements.as_ref()?.band?;
    let measured = b.decode_cell(ctx, n)?;
    let m = measured
        .measurements
        .as_ref()
        .filter(|_| measured.status.is_measured())?;
    Some(BandCheck::of(
        band.level,
        band.total_tokens_per_s,
        m.total_tokens_per_s,
    ))
}

/// Whether a document states its figures' uncertainty: written by a
/// version that computes intervals, and measured (a prediction's band is
/// not an interval of this kind).
fn states_intervals(r: &Report) -> bool {
    r.prediction.is_none()
        && r.decode.iter().any(|c| {
            c.measurements
                .as_ref()
                .is_some_and(|m| m.intervals.is_some())
        })
}

/// The burst or rate cells of two runs, matched by context and load (a
/// burst's size, a rate), compared on output tok/s and median TTFT.
fn compare_load(
    a: &Report,
    b: &Report,
    threshold: Threshold,
    metric: MetricChoice,
    cells: &mut Vec<CellComparison>,
) {
    let load = |r: &Report| r.load.as_ref().map(|l| l.cells.clone()).unwrap_or_default();
    let (la, lb) = (load(a), load(b));
    // Rates as thousandths, so that they can key a match exactly.
    let key = |c: &crate::model::LoadCell| {
        (
            c.context,
            c.requests,
            c.rate_per_s.map(|r| (r * 1e3).round() as u64),
        )
    };
    let mut keys: Vec<_> = la.iter().map(key).collect();
    for k in lb.iter().map(key) {
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    // A load cell states an interval only when it was repeated (`--repeats`): one without,
    // in a document that states intervals, is unbounded, and so not judged on its numbers.
    let stated = states_intervals(a) || states_intervals(b);
    for k in keys {
        let side = |cells: &[crate::model::LoadCell]| {
            cells.iter().find(|c| key(c) == k).map(|c| {
                let m = c.measurements.as_ref();
                let repeats = m.and_then(|m| m.repeats.as_ref());
                let stated = stated || repeats.is_some();
                let noise = |f: Option<&crate::model::RepeatFigure>| {
                    Noise::of(stated, f.and_then(|f| f.interval))
                };
                let tps = noise(repeats.map(|r| &r.total_tokens_per_s));
                let ttft = noise(repeats.and_then(|r| r.ttft_p50_ms.as_ref()));
                let itl = noise(repeats.and_then(|r| r.time_between_tokens_p50_ms.as_ref()));
                Side {
                    status: c.status.clone(),
                    tokens_per_s: m.map(|m| (m.output_tokens_per_s, tps)),
                    ttft_ms: m.and_then(|m| m.ttft_ms.map(|p| (p.p50, ttft))),
                    itl_ms: m.and_then(|m| m.itl_ms.map(|p| (p.p50, itl))),
                }
            })
        };
        let (context, requests, milli) = k;
        let conversation = [a, b].iter().any(|r| {
            r.load
                .as_ref()
                .is_some_and(|l| l.mode == LoadKind::Conversation)
        });
        let section = match (milli, conversation) {
            (Some(_), _) => Section::Rate,
            (None, true) => Section::Conversation,
            (None, false) => Section::Burst,
        };
        let n = requests
            .and_then(|n| Concurrency::new(u32::try_from(n).unwrap_or(u32::MAX)))
            .unwrap_or(Concurrency::ONE);
        let mut row = judge(section, context, n, side(&la), side(&lb), threshold, metric);
        row.rate_per_s = milli.map(|m| m as f64 / 1e3);
        cells.push(row);
    }
}

/// What one run says about one cell: each figure and its noise.
struct Side {
    status: CellStatus,
    tokens_per_s: Option<(f64, Noise)>,
    ttft_ms: Option<(f64, Noise)>,
    itl_ms: Option<(f64, Noise)>,
}

fn judge(
    section: Section,
    context: Tokens,
    concurrency: Concurrency,
    a: Option<Side>,
    b: Option<Side>,
    threshold: Threshold,
    metric: MetricChoice,
) -> CellComparison {
    let mut row = CellComparison {
        section,
        context,
        concurrency,
        rate_per_s: None,
        tokens_per_s: None,
        ttft_ms: None,
        itl_ms: None,
        metrics: Vec::new(),
        verdict: Verdict::Within,
        band: None,
    };
    let (a, b) = match (a, b) {
        (Some(a), Some(b)) => (a, b),
        (a, _) => {
            let only = if a.is_some() {
                "only in A"
            } else {
                "only in B"
            };
            row.verdict = Verdict::Unmeasured {
                why: only.to_owned(),
            };
            return row;
        }
    };
    let pair = |x: Option<(f64, Noise)>, y: Option<(f64, Noise)>| {
        let ((a, a_noise), (b, b_noise)) = (x?, y?);
        Some(Pair {
            a,
            b,
            a_noise,
            b_noise,
        })
    };
    row.tokens_per_s = pair(a.tokens_per_s, b.tokens_per_s);
    row.ttft_ms = pair(a.ttft_ms, b.ttft_ms);
    row.itl_ms = pair(a.itl_ms, b.itl_ms);
    row.metrics = [
        (Metric::TokensPerS, row.tokens_per_s),
        (Metric::Ttft, row.ttft_ms),
        (Metric::Itl, row.itl_ms),
    ]
    .into_iter()
    .filter(|(m, _)| metric.includes(*m))
    .filter_map(|(m, p)| MetricComparison::judge(m, p?, threshold))
    .collect();
    row.verdict = match (a.status.is_measured(), b.status.is_measured()) {
        (true, true) => verdict_of(&row.metrics),
        (true, false) if !matches!(b.status, CellStatus::Skipped { .. }) => Verdict::Regressed {
            why: format!("measured in A, {} in B", page::status_text(&b.status)),
        },
        (false, true) => Verdict::Improved,
        _ => Verdict::Unmeasured {
            why: format!(
                "A: {}, B: {}",
                page::status_text(&a.status),
                page::status_text(&b.status)
            ),
        },
    };
    row
}

/// Regressed when any judged figure got worse for real, improved when
/// some got better and none worse, within otherwise.
fn verdict_of(metrics: &[MetricComparison]) -> Verdict {
    let worse: Vec<String> = metrics
        .iter()
        .filter(|m| m.judgement == Judgement::Worse)
        .map(|m| format!("{} {}", m.metric.name(), format::percent_change(m.ratio)))
        .collect();
    if !worse.is_empty() {
        return Verdict::Regressed {
            why: worse.join(", "),
        };
    }
    if metrics.iter().any(|m| m.judgement == Judgement::Better) {
        Verdict::Improved
    } else {
        Verdict::Within
    }
}

/// Items of `a` in order, then those only `b` has.
fn union<T: PartialEq + Copy>(a: &[T], b: &[T]) -> Vec<T> {
    let mut all = a.to_vec();
    all.extend(b.iter().filter(|x| !a.contains(x)));
    all
}

fn differences(a: &Report, b: &Report) -> Vec<String> {
    let mut out = Vec::new();
    let mut diff = |what: &str, x: String, y: String| {
        if x != y {
            out.push(format!("{what}: {x} → {y}"));
        }
    };
    let opt = |s: &Option<String>| s.clone().unwrap_or_else(|| format::DASH.to_owned());
    diff("model", a.run.model.clone(), b.run.model.clone());
    diff("engine", a.engine.name.clone(), b.engine.name.clone());
    diff(
        "engine version",
        opt(&a.engine.version),
        opt(&b.engine.version),
    );
    diff(
        "quantization",
        opt(&a.engine.quantization),
        opt(&b.engine.quantization),
    );
    diff("hardware", page::machine(a), page::machine(b));
    diff("API", a.run.api.to_string(), b.run.api.to_string());
    diff(
        "prompt mode",
        a.run.prompt_mode.clone(),
        b.run.prompt_mode.clone(),
    );
    diff(
        "time per measurement",
        format::seconds(a.run.window_s),
        format::seconds(b.run.window_s),
    );
    diff(
        "max output tokens",
        format::count(a.run.max_output_tokens.get()),
        format::count(b.run.max_output_tokens.get()),
    );
    diff(
        "decode prompts pre-warmed",
        a.run.decode_cache_warmed.to_string(),
        b.run.decode_cache_warmed.to_string(),
    );
    diff(
        "benchmark tool",
        page::tool(&a.run.tool),
        page::tool(&b.run.tool),
    );
    if let (Some(pa), Some(pb)) = (&a.provenance, &b.provenance) {
        let names: std::collections::BTreeSet<&String> =
            pa.options.keys().chain(pb.options.keys()).collect();
        for name in names {
            let text = |o: &BTreeMap<String, serde_json::Value>| match o.get(name) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => format::DASH.to_owned(),
            };
            diff(&format!("--{name}"), text(&pa.options), text(&pb.options));
        }
    }
    out
}

/// The command line that started a run, when it records one.
fn command(r: &Report) -> Option<String> {
    r.provenance.as_ref()?.invocations.first().cloned()
}
