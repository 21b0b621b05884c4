//! `Comparison` as Markdown: the settings that differ, a table of ratios with their
//! intervals, and a summary.

use std::fmt::Write as _;

use super::*;

/// The widest ratio interval printed as a range: high / low.
const UNBOUNDED_SPAN: f64 = 100.0;

impl Comparison {
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
        cell.section.name().to_owned(),
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

/// `0.900 (-10.0%) [0.897–0.903]`, `1.087 (+8.7%) [no interval]`; an interval that spans
/// more than a factor of [`UNBOUNDED_SPAN`] (a side's own reaches near zero: a median TTFT
/// of a few requests) says so rather than print `[0.000–17027.440]`.
pub(super) fn ratio_text(m: &MetricComparison) -> String {
    let head = format!("{:.3} ({})", m.ratio, format::percent_change(m.ratio));
    match (m.ratio_interval, m.judgement) {
        (Some(i), _) if i.high > UNBOUNDED_SPAN * i.low => {
            format!("{head} [too uncertain to bound]")
        }
        (Some(i), _) if i.low < m.ratio || i.high > m.ratio => {
            format!("{head} [{:.3}–{:.3}]", i.low, i.high)
        }
        (None, Judgement::Unjudged) => format!("{head} [no interval]"),
        _ => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(ratio: f64, low: f64, high: f64) -> MetricComparison {
        MetricComparison {
            metric: Metric::Ttft,
            pair: Pair {
                a: 100.0,
                b: 100.0 * ratio,
                a_noise: Noise::Unstated,
                b_noise: Noise::Unstated,
            },
            ratio,
            ratio_interval: Interval::new(low, high),
            judgement: Judgement::WithinNoise,
        }
    }

    #[test]
    fn a_ratio_interval_too_wide_to_read_says_so() {
        assert_eq!(
            ratio_text(&judged(0.9, 0.897, 0.903)),
            "0.900 (-10.0%) [0.897–0.903]"
        );
        let wide = ratio_text(&judged(0.974, 0.0001, 17_027.44));
        assert!(wide.ends_with("[too uncertain to bound]"), "{wide}");
        assert!(!ratio_text(&judged(0.954, 0.165, 5.522)).contains("too uncertain"));
    }
}
