//! Two runs side by side: per-cell B/A ratios of throughput and TTFT, and regressions.

use std::fmt;
use std::fmt::Write as _;
use std::str::FromStr;

use speedmatrix_units::{Concurrency, Tokens};

use crate::error::ReportError;
use crate::format;
use crate::model::{CellStatus, LoadKind, Report};
use crate::page;

/// How much worse B may be than A before a cell counts as a regression, as a fraction
/// (`0.05` = 5 %). Parses `5%`, `2.5%` or `5` (always percent).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Threshold(f64);

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// One number in A and in B.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair {
    /// The value in run A.
    pub a: f64,
    /// The value in run B.
    pub b: f64,
}

impl Pair {
    /// `b / a`, or `None` when `a` is zero.
    pub fn ratio(self) -> Option<f64> {
        (self.a > 0.0).then(|| self.b / self.a)
    }
}

/// What the comparison concluded for one cell.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Both measured; no change beyond the threshold.
    Within,
    /// Better beyond the threshold, or newly measured, and nowhere worse.
    Improved,
    /// Worse beyond the threshold, or no longer runs.
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
#[derive(Debug, Clone, PartialEq)]
pub struct CellComparison {
    /// Prefill or decode.
    pub section: Section,
    /// Context length.
    pub context: Tokens,
    /// Simultaneous requests (1 for prefill; a burst's size; 1 for a rate cell).
    pub concurrency: Concurrency,
    /// A rate cell's intended requests per second.
    pub rate_per_s: Option<f64>,
    /// Throughput (prompt tok/s for prefill, total tok/s for decode) when both measured it.
    pub tokens_per_s: Option<Pair>,
    /// TTFT in milliseconds (median for decode) when both measured it.
    pub ttft_ms: Option<Pair>,
    /// The conclusion.
    pub verdict: Verdict,
}

/// The result of [`compare`].
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The threshold used.
    pub threshold: Threshold,
    /// Every cell of either run: A's order, then cells only B has.
    pub cells: Vec<CellComparison>,
    /// Settings that differ between the runs, in words (`engine version: 0.32.0 → 0.33.0`).
    pub differences: Vec<String>,
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
        if !self.differences.is_empty() {
            out.push_str("Runs differ in:\n\n");
            for d in &self.differences {
                let _ = writeln!(out, "- {}", crate::markdown::inline(d));
            }
            out.push('\n');
        }
        out.push_str(
            "| Phase | Context | Requests at once | A tok/s | B tok/s | tok/s B/A | A TTFT | B TTFT | TTFT B/A | Verdict |\n",
        );
        out.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
        for cell in &self.cells {
            let _ = writeln!(out, "| {} |", row_cells(cell).join(" | "));
        }
        let count =
            |pred: fn(&Verdict) -> bool| self.cells.iter().filter(|c| pred(&c.verdict)).count();
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

fn row_cells(cell: &CellComparison) -> Vec<String> {
    let dash = || format::DASH.to_owned();
    let side = |p: Option<Pair>, f: fn(f64) -> String, a: bool| {
        p.map_or_else(dash, |p| f(if a { p.a } else { p.b }))
    };
    let ratio = |p: Option<Pair>| {
        p.and_then(Pair::ratio).map_or_else(dash, |r| {
            format!("{:.3} ({})", r, format::percent_change(r))
        })
    };
    let verdict = match &cell.verdict {
        Verdict::Within => "ok".to_owned(),
        Verdict::Improved => "better".to_owned(),
        Verdict::Regressed { why } => format!("**REGRESSION**: {}", crate::markdown::inline(why)),
        Verdict::Unmeasured { why } => crate::markdown::inline(why),
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
        ratio(cell.tokens_per_s),
        side(cell.ttft_ms, format::ms_whole, true),
        side(cell.ttft_ms, format::ms_whole, false),
        ratio(cell.ttft_ms),
        verdict,
    ]
}

/// Compares run `b` against run `a` cell by cell.
///
/// A cell regresses when B's throughput is below A's by more than `threshold`
/// (ratio < 1 − t), when B's TTFT is above A's by more than `threshold` (ratio > 1 + t),
/// or when a cell A measured is over capacity or failed in B.
pub fn compare(a: &Report, b: &Report, threshold: Threshold) -> Comparison {
    let mut cells = Vec::new();
    for ctx in union(&a.run.prefill_contexts, &b.run.prefill_contexts) {
        let side = |r: &Report| {
            r.prefill_row(ctx)
                .map(|row| Side::new(&row.status, row.prompt_tokens_per_s, row.ttft_ms))
        };
        cells.push(judge(
            Section::Prefill,
            ctx,
            Concurrency::ONE,
            side(a),
            side(b),
            threshold,
        ));
    }
    let keys = |r: &Report| -> Vec<(Tokens, Concurrency)> {
        r.decode
            .iter()
            .map(|c| (c.context, c.concurrency))
            .collect()
    };
    for (ctx, n) in union(&keys(a), &keys(b)) {
        let side = |r: &Report| {
            r.decode_cell(ctx, n).map(|c| {
                let m = c.measurements.as_ref();
                Side::new(
                    &c.status,
                    m.map(|m| m.total_tokens_per_s),
                    m.map(|m| m.ttft_ms.p50),
                )
            })
        };
        cells.push(judge(Section::Decode, ctx, n, side(a), side(b), threshold));
    }
    compare_load(a, b, threshold, &mut cells);
    Comparison {
        threshold,
        cells,
        differences: differences(a, b),
        a_predicted: a.prediction.is_some(),
    }
}

/// The burst or rate cells of two runs, matched by context and load (a
/// burst's size, a rate), compared on output tok/s and median TTFT.
fn compare_load(a: &Report, b: &Report, threshold: Threshold, cells: &mut Vec<CellComparison>) {
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
    for k in keys {
        let side = |cells: &[crate::model::LoadCell]| {
            cells.iter().find(|c| key(c) == k).map(|c| {
                let m = c.measurements.as_ref();
                Side::new(
                    &c.status,
                    m.map(|m| m.output_tokens_per_s),
                    m.and_then(|m| m.ttft_ms.map(|p| p.p50)),
                )
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
        let mut row = judge(section, context, n, side(&la), side(&lb), threshold);
        row.rate_per_s = milli.map(|m| m as f64 / 1e3);
        cells.push(row);
    }
}

/// What one run says about one cell.
struct Side {
    status: CellStatus,
    tokens_per_s: Option<f64>,
    ttft_ms: Option<f64>,
}

impl Side {
    fn new(status: &CellStatus, tokens_per_s: Option<f64>, ttft_ms: Option<f64>) -> Side {
        Side {
            status: status.clone(),
            tokens_per_s,
            ttft_ms,
        }
    }
}

fn judge(
    section: Section,
    context: Tokens,
    concurrency: Concurrency,
    a: Option<Side>,
    b: Option<Side>,
    threshold: Threshold,
) -> CellComparison {
    let mut row = CellComparison {
        section,
        context,
        concurrency,
        rate_per_s: None,
        tokens_per_s: None,
        ttft_ms: None,
        verdict: Verdict::Within,
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
    let pair = |x: Option<f64>, y: Option<f64>| Some(Pair { a: x?, b: y? });
    row.tokens_per_s = pair(a.tokens_per_s, b.tokens_per_s);
    row.ttft_ms = pair(a.ttft_ms, b.ttft_ms);
    row.verdict = match (a.status.is_measured(), b.status.is_measured()) {
        (true, true) => judge_numbers(row.tokens_per_s, row.ttft_ms, threshold),
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

fn judge_numbers(tokens_per_s: Option<Pair>, ttft_ms: Option<Pair>, t: Threshold) -> Verdict {
    let t = t.fraction();
    let tps = tokens_per_s.and_then(Pair::ratio);
    let ttft = ttft_ms.and_then(Pair::ratio);
    let mut worse = Vec::new();
    if let Some(r) = tps.filter(|r| *r < 1.0 - t) {
        worse.push(format!("tok/s {}", format::percent_change(r)));
    }
    if let Some(r) = ttft.filter(|r| *r > 1.0 + t) {
        worse.push(format!("TTFT {}", format::percent_change(r)));
    }
    if !worse.is_empty() {
        return Verdict::Regressed {
            why: worse.join(", "),
        };
    }
    let better = tps.is_some_and(|r| r > 1.0 + t) || ttft.is_some_and(|r| r < 1.0 - t);
    if better {
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
    out
}
