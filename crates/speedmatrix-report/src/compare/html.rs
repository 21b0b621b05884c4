//! `Comparison` on run B's HTML page: a section beside B's own tables that puts, for each
//! cell, A's figure next to B's. When A is a prediction the section is the prediction's
//! scorecard (predicted value, its 80 % band, the error and where the measurement fell);
//! otherwise it gives B/A with its interval and the verdict.

use std::fmt::Write as _;

use super::*;
use crate::html::{Cell, esc, table_body};

impl Comparison {
    /// Run `b`'s HTML page (as [`crate::to_html`] renders it) with this comparison as a
    /// section after the run's facts: every decode cell and prefill row of either run with
    /// A's figure beside B's. `b` should be the document this comparison's B side came from.
    pub fn to_html(&self, b: &Report) -> String {
        crate::html::to_html_with(b, &|out: &mut String| self.html_section(out))
    }

    fn html_section(&self, out: &mut String) {
        let (title, caption) = if self.a_predicted {
            (
                "Against the prediction",
                "Each measured cell with what the prediction (run A) said of it: the predicted \
                 figure, its 80 % band (where 80 % of held-out public measurements fell; \
                 docs/predict.md), the error (predicted / measured − 1: positive means the \
                 prediction was high) and where the measurement fell. Decode is total output \
                 tok/s; prefill is prompt tok/s and TTFT.",
            )
        } else {
            (
                "Against run A",
                "Each cell of this run (B) beside run A's: B's figure, A's, the ratio B/A with \
                 its 95 % interval where both runs state their uncertainty, and the verdict \
                 (docs/metrics.md, \"Comparing runs\"). Decode is total output tok/s.",
            )
        };
        let _ = writeln!(
            out,
            "<section>\n<h2>{title}</h2>\n<p class=\"caption\">{}</p>",
            esc(caption)
        );
        if let Some(summary) = self.html_summary() {
            let _ = writeln!(out, "<p><strong>{}</strong></p>", esc(&summary));
        }
        self.decode_grid(out);
        self.prefill_table(out);
        self.load_table(out);
        out.push_str("</section>\n");
    }

    /// How many measured figures fell inside the bands, and the errors' median and worst:
    /// `None` when no cell was both predicted and measured.
    fn html_summary(&self) -> Option<String> {
        if !self.a_predicted {
            let judged = self
                .cells
                .iter()
                .filter(|c| !matches!(c.verdict, Verdict::Unmeasured { .. }))
                .count();
            return (judged > 0).then(|| {
                format!(
                    "{judged} cells compared at a threshold of {}: {} regressed, {} improved.",
                    self.threshold,
                    self.regressions().count(),
                    self.cells
                        .iter()
                        .filter(|c| matches!(c.verdict, Verdict::Improved))
                        .count()
                )
            });
        }
        let errors: Vec<f64> = self
            .cells
            .iter()
            .filter_map(|c| prediction_error(c.tokens_per_s?))
            .map(f64::abs)
            .collect();
        if errors.is_empty() {
            return None;
        }
        let median = speedmatrix_metrics::percentile(&errors, 50.0).ok()?;
        let worst = errors.iter().copied().fold(0.0, f64::max);
        let checked: Vec<BandCheck> = self.cells.iter().filter_map(|c| c.band).collect();
        let inside = checked
            .iter()
            .filter(|b| b.place == BandPlace::Inside)
            .count();
        let band = if checked.is_empty() {
            "the prediction states no bands".to_owned()
        } else {
            format!(
                "measured inside the 80 % band on {inside} of {} cells",
                checked.len()
            )
        };
        Some(format!(
            "{} cells predicted and measured: median |error| {:.1} %, worst {:.1} % (tok/s); {band}.",
            errors.len(),
            median * 100.0,
            worst * 100.0
        ))
    }

    /// The rows of one section.
    fn of(&self, section: Section) -> Vec<&CellComparison> {
        self.cells.iter().filter(|c| c.section == section).collect()
    }

    fn decode_grid(&self, out: &mut String) {
        let decode = self.of(Section::Decode);
        if decode.is_empty() {
            return;
        }
        let mut contexts: Vec<Tokens> = decode.iter().map(|c| c.context).collect();
        let mut streams: Vec<Concurrency> = decode.iter().map(|c| c.concurrency).collect();
        contexts.sort();
        contexts.dedup();
        streams.sort();
        streams.dedup();
        let rows: Vec<Vec<Cell>> = contexts
            .iter()
            .map(|&ctx| {
                let mut row = vec![Cell::text(ctx.to_string())];
                row.extend(streams.iter().map(|&n| {
                    decode
                        .iter()
                        .find(|c| c.context == ctx && c.concurrency == n)
                        .map_or_else(|| Cell::text(format::DASH.to_owned()), |c| self.cell(c))
                }));
                row
            })
            .collect();
        let mut header = vec!["Context".to_owned()];
        header.extend(streams.iter().map(ToString::to_string));
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        out.push_str("<h3>Sustained decode, total tok/s</h3>\n");
        table_body(out, &header, &rows);
    }

    /// One decode cell: B's figure, then A's beside it.
    fn cell(&self, c: &CellComparison) -> Cell {
        let Some(pair) = c.tokens_per_s else {
            return Cell {
                text: verdict_words(&c.verdict),
                class: "skipped",
            };
        };
        if self.a_predicted {
            let error = prediction_error(pair).map_or_else(String::new, signed_percent);
            let (band, class) = match c.band {
                Some(b) => (
                    format!(
                        " ({}–{})",
                        format::significant3(b.low),
                        format::significant3(b.high)
                    ),
                    band_class(b.place),
                ),
                None => (String::new(), ""),
            };
            let place = c
                .band
                .map_or_else(String::new, |b| format!(" · {}", place(b.place)));
            Cell {
                text: format!(
                    "{}\npredicted ≈{}{band}\nerror {error}{place}",
                    format::tokens_per_s(pair.b),
                    format::significant3(pair.a),
                ),
                class,
            }
        } else {
            let ratio = c
                .metrics
                .iter()
                .find(|m| m.metric == Metric::TokensPerS)
                .map_or_else(|| format::DASH.to_owned(), text::ratio_text);
            Cell {
                text: format!(
                    "{}\nA {}\nB/A {ratio}\n{}",
                    format::tokens_per_s(pair.b),
                    format::tokens_per_s(pair.a),
                    verdict_words(&c.verdict)
                ),
                class: verdict_class(&c.verdict),
            }
        }
    }

    fn prefill_table(&self, out: &mut String) {
        let rows = self.of(Section::Prefill);
        if rows.is_empty() {
            return;
        }
        let header: &[&str] = if self.a_predicted {
            &[
                "Context",
                "Measured prompt tok/s",
                "Predicted (80 % band)",
                "Error",
                "Band",
                "Measured TTFT",
                "Predicted TTFT",
                "TTFT error",
            ]
        } else {
            &[
                "Context",
                "B prompt tok/s",
                "A prompt tok/s",
                "tok/s B/A",
                "B TTFT",
                "A TTFT",
                "TTFT B/A",
                "Verdict",
            ]
        };
        let dash = || format::DASH.to_owned();
        let cells: Vec<Vec<Cell>> = rows
            .iter()
            .map(|c| {
                let tps = c.tokens_per_s;
                let ttft = c.ttft_ms;
                let side = |p: Option<Pair>, a: bool, f: fn(f64) -> String| {
                    p.map_or_else(dash, |p| f(if a { p.a } else { p.b }))
                };
                let texts = if self.a_predicted {
                    vec![
                        c.context.to_string(),
                        side(tps, false, format::tokens_per_s),
                        tps.map_or_else(dash, |p| {
                            let band = c
                                .band
                                .and_then(|b| speedmatrix_units::Interval::new(b.low, b.high));
                            format::predicted(p.a, band)
                        }),
                        tps.and_then(prediction_error)
                            .map_or_else(dash, signed_percent),
                        c.band.map_or_else(dash, |b| place(b.place).to_owned()),
                        side(ttft, false, format::ms_whole),
                        side(ttft, true, |v| format!("≈{} ms", format::significant3(v))),
                        // TTFT: lower is better, so the error is measured / predicted − 1
                        // inverted the same way: predicted / measured − 1.
                        ttft.and_then(|p| (p.b > 0.0).then(|| p.a / p.b - 1.0))
                            .map_or_else(dash, signed_percent),
                    ]
                } else {
                    let ratio = |m: Metric| {
                        c.metrics
                            .iter()
                            .find(|x| x.metric == m)
                            .map_or_else(dash, text::ratio_text)
                    };
                    vec![
                        c.context.to_string(),
                        side(tps, false, format::tokens_per_s),
                        side(tps, true, format::tokens_per_s),
                        ratio(Metric::TokensPerS),
                        side(ttft, false, format::ms_whole),
                        side(ttft, true, format::ms_whole),
                        ratio(Metric::Ttft),
                        verdict_words(&c.verdict),
                    ]
                };
                let class = match (self.a_predicted, c.band) {
                    (true, Some(b)) => band_class(b.place),
                    (true, None) => "",
                    (false, _) => verdict_class(&c.verdict),
                };
                texts
                    .into_iter()
                    .enumerate()
                    .map(|(i, text)| Cell {
                        text,
                        // The verdict or band column carries the colour.
                        class: if i == 4 || i == 7 { class } else { "" },
                    })
                    .collect()
            })
            .collect();
        out.push_str("<h3>Prefill</h3>\n");
        table_body(out, header, &cells);
    }

    /// Burst, rate and conversation cells, one row each.
    fn load_table(&self, out: &mut String) {
        let rows: Vec<Vec<Cell>> = self
            .cells
            .iter()
            .filter(|c| !matches!(c.section, Section::Prefill | Section::Decode))
            .map(|c| {
                let dash = || format::DASH.to_owned();
                let side = |a: bool| {
                    c.tokens_per_s
                        .map_or_else(dash, |p| format::tokens_per_s(if a { p.a } else { p.b }))
                };
                let ratio = c
                    .metrics
                    .iter()
                    .find(|m| m.metric == Metric::TokensPerS)
                    .map_or_else(dash, text::ratio_text);
                let texts = [
                    c.section.name().to_owned(),
                    c.context.to_string(),
                    c.rate_per_s
                        .map_or_else(|| c.concurrency.to_string(), |r| format!("{r}/s")),
                    side(false),
                    side(true),
                    ratio,
                    verdict_words(&c.verdict),
                ];
                let class = verdict_class(&c.verdict);
                texts
                    .into_iter()
                    .enumerate()
                    .map(|(i, text)| Cell {
                        text,
                        class: if i == 6 { class } else { "" },
                    })
                    .collect()
            })
            .collect();
        if rows.is_empty() {
            return;
        }
        out.push_str("<h3>Load cells, output tok/s</h3>\n");
        table_body(
            out,
            &[
                "Phase",
                "Context",
                "Load",
                "B tok/s",
                "A tok/s",
                "tok/s B/A",
                "Verdict",
            ],
            &rows,
        );
    }
}

/// `predicted / measured − 1` of a throughput pair (A predicted, B measured).
fn prediction_error(p: Pair) -> Option<f64> {
    (p.b > 0.0 && p.a.is_finite()).then(|| p.a / p.b - 1.0)
}

/// `+12.3 %`, `-4.0 %`.
fn signed_percent(fraction: f64) -> String {
    format!(
        "{} %",
        format::percent_change(1.0 + fraction).trim_end_matches('%')
    )
}

fn place(p: BandPlace) -> &'static str {
    match p {
        BandPlace::Inside => "inside the band",
        BandPlace::Below => "below the band",
        BandPlace::Above => "above the band",
    }
}

fn band_class(p: BandPlace) -> &'static str {
    match p {
        BandPlace::Inside => "inside",
        BandPlace::Below | BandPlace::Above => "outside",
    }
}

fn verdict_words(v: &Verdict) -> String {
    match v {
        Verdict::Within => "same".to_owned(),
        Verdict::Improved => "better".to_owned(),
        Verdict::Regressed { why } => format!("regression: {why}"),
        Verdict::Unmeasured { why } => why.clone(),
    }
}

fn verdict_class(v: &Verdict) -> &'static str {
    match v {
        Verdict::Within => "",
        Verdict::Improved => "inside",
        Verdict::Regressed { .. } => "outside",
        Verdict::Unmeasured { .. } => "skipped",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_signed_percentages() {
        assert_eq!(signed_percent(0.123), "+12.3 %");
        assert_eq!(signed_percent(-0.04), "-4.0 %");
        let pair = Pair {
            a: 110.0,
            b: 100.0,
            a_noise: Noise::Unstated,
            b_noise: Noise::Unstated,
        };
        assert!((prediction_error(pair).unwrap() - 0.1).abs() < 1e-12);
        assert!(prediction_error(Pair { b: 0.0, ..pair }).is_none());
    }
}
