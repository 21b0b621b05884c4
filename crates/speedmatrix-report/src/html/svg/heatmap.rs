//! The context × concurrency heatmaps of decode cells, by throughput or by energy.

use std::fmt::Write as _;

use crate::format;
use crate::html::{esc, status_class};
use crate::model::{CellStatus, DecodeMeasurements, Report};
use crate::page;

use super::{INK, MUTED, open_svg};

/// Stops of the heatmap's sequential scale, low to high (yellow-green-blue).
const HEAT: [(u8, u8, u8); 5] = [
    (255, 255, 217),
    (199, 233, 180),
    (65, 182, 196),
    (34, 94, 168),
    (8, 29, 88),
];

/// What a context × concurrency grid shows of each measured cell.
pub(crate) struct HeatSpec {
    /// The chart's accessible name.
    label: &'static str,
    /// The figure the colour shows; cells without it are drawn as measured but grey.
    pub(crate) value: fn(&DecodeMeasurements) -> Option<f64>,
    /// Whether a lower figure is better (the dark end of the scale goes to it).
    lower_is_better: bool,
    /// The cell's two lines: the figure, then a smaller one.
    lines: fn(&DecodeMeasurements) -> [String; 2],
    /// The cell's tooltip after "context × requests: ".
    tip: fn(&DecodeMeasurements) -> String,
}

/// Total tok/s with median TTFT.
pub(crate) const THROUGHPUT: HeatSpec = HeatSpec {
    label: "Sustained decode heatmap: total tok/s by context and simultaneous requests",
    value: |m| Some(m.total_tokens_per_s).filter(|v| *v > 0.0),
    lower_is_better: false,
    lines: |m| {
        let approx = if m.is_estimated() { "≈" } else { "" };
        [
            format!("{approx}{}", format::tokens_per_s(m.total_tokens_per_s)),
            format!("{} TTFT", format::ms_whole(m.ttft_ms.p50)),
        ]
    },
    tip: |m| {
        let mark = m.estimate_mark();
        format!(
            "{} tok/s total, {} per request, TTFT {}, {} between tokens{}",
            format::tokens_per_s(m.total_tokens_per_s),
            format::grouped(m.per_request_tokens_per_s, 1),
            format::ms_whole(m.ttft_ms.p50),
            format::ms_tenths(m.time_between_tokens_ms.p50),
            if mark.is_empty() {
                String::new()
            } else {
                format!(" ({mark})")
            },
        )
    },
};

/// GPU energy per output token with the mean power.
pub(crate) const ENERGY: HeatSpec = HeatSpec {
    label: "Energy heatmap: GPU joules per output token by context and simultaneous requests",
    value: |m| {
        m.telemetry
            .as_ref()?
            .joules_per_output_token
            .filter(|j| *j > 0.0)
    },
    lower_is_better: true,
    lines: |m| {
        let t = m.telemetry.as_ref();
        let joules = t.and_then(|t| t.joules_per_output_token);
        let watts: Option<f64> = t.and_then(|t| {
            let p: Option<Vec<f64>> = t.gpus.iter().map(|g| g.power_mean_w).collect();
            p.filter(|p| !p.is_empty()).map(|p| p.iter().sum())
        });
        [
            joules.map_or_else(|| format::DASH.to_owned(), |j| format!("{j:.3} J")),
            watts.map_or_else(String::new, |w| format!("{w:.0} W")),
        ]
    },
    tip: |m| {
        let t = m.telemetry.as_ref();
        match (
            t.and_then(|t| t.energy_j),
            t.and_then(|t| t.joules_per_output_token),
        ) {
            (Some(e), Some(j)) => format!(
                "{j:.3} J per output token: {e:.0} J over {:.1} s for {} tokens",
                m.measured_s, m.output_tokens
            ),
            _ => "no GPU energy reading for this cell".to_owned(),
        }
    },
};

/// Context × concurrency grid, one `<rect class="cell">` per cell of the run,
/// coloured by `spec`'s figure on a log scale.
pub(crate) fn heatmap(report: &Report, spec: &HeatSpec) -> String {
    let run = &report.run;
    let (cell_w, cell_h, left, top) = (124.0, 58.0, 72.0, 44.0);
    let width = left + cell_w * run.concurrencies.len() as f64 + 8.0;
    let height = top + cell_h * run.contexts.len() as f64 + 8.0;
    let values: Vec<f64> = report
        .decode
        .iter()
        .filter(|c| c.status.is_measured())
        .filter_map(|c| c.measurements.as_ref().and_then(spec.value))
        .collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(0.0, f64::max);
    let mut s = open_svg(width, height, spec.label);
    s.push_str(
        "<defs><pattern id=\"hatch\" width=\"8\" height=\"8\" patternUnits=\"userSpaceOnUse\" \
         patternTransform=\"rotate(45)\"><rect width=\"8\" height=\"8\" fill=\"#f1f3f6\"/>\
         <line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"8\" stroke=\"#dde2e8\" stroke-width=\"3\"/>\
         </pattern></defs>\n",
    );
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"16\" text-anchor=\"middle\" font-size=\"13\" fill=\"{MUTED}\">Simultaneous requests</text>",
        left + cell_w * run.concurrencies.len() as f64 / 2.0
    );
    let _ = writeln!(
        s,
        "<text x=\"12\" y=\"{:.1}\" font-size=\"13\" fill=\"{MUTED}\" transform=\"rotate(-90 12 {:.1})\" text-anchor=\"middle\">Context</text>",
        top + cell_h * run.contexts.len() as f64 / 2.0,
        top + cell_h * run.contexts.len() as f64 / 2.0
    );
    for (j, n) in run.concurrencies.iter().enumerate() {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"600\" fill=\"{INK}\">{n}</text>",
            left + cell_w * (j as f64 + 0.5),
            top - 8.0
        );
    }
    for (i, &ctx) in run.contexts.iter().enumerate() {
        let y = top + cell_h * i as f64;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"13\" font-weight=\"600\" fill=\"{INK}\">{ctx}</text>",
            left - 10.0,
            y + cell_h / 2.0 + 4.0
        );
        for (j, &n) in run.concurrencies.iter().enumerate() {
            let x = left + cell_w * j as f64;
            let cell = report.decode_cell(ctx, n);
            heat_cell(&mut s, spec, cell, (x, y, cell_w, cell_h), (lo, hi));
        }
    }
    s.push_str("</svg>");
    s
}

fn heat_cell(
    s: &mut String,
    spec: &HeatSpec,
    cell: Option<&crate::model::DecodeCell>,
    (x, y, w, h): (f64, f64, f64, f64),
    (lo, hi): (f64, f64),
) {
    let (fill, class, lines, tip) = match cell {
        Some(c) => match (&c.status, &c.measurements) {
            (status, Some(m)) if status.is_measured() => {
                let tip = format!(
                    "{} context × {} requests: {}{}",
                    c.context,
                    c.concurrency,
                    (spec.tip)(m),
                    if status.is_valid() {
                        String::new()
                    } else {
                        format!("; {}", status.detail())
                    },
                );
                let (fill, dark) = match (spec.value)(m) {
                    Some(v) => {
                        let t = scale_log(v, lo, hi);
                        let t = if spec.lower_is_better { 1.0 - t } else { t };
                        (heat_colour(t), t > 0.55)
                    }
                    None => ("#f1f3f6".to_owned(), false),
                };
                let text = if dark { "#ffffff" } else { INK };
                let [first, second] = (spec.lines)(m);
                let mut lines = vec![(first, 15.0, "700", text)];
                if !second.is_empty() {
                    lines.push((second, 11.5, "400", text));
                }
                (fill, "valid", lines, tip)
            }
            (status, _) => {
                let tip = format!(
                    "{} context × {} requests: {}",
                    c.context,
                    c.concurrency,
                    status_tip(status)
                );
                let fill = match status {
                    CellStatus::Error { .. } => "#fde2e1".to_owned(),
                    _ => "url(#hatch)".to_owned(),
                };
                let colour = if matches!(status, CellStatus::Error { .. }) {
                    "#b42318"
                } else {
                    MUTED
                };
                let lines = vec![(page::status_text(status), 11.5, "500", colour)];
                (fill, status_class(status), lines, tip)
            }
        },
        None => (
            "#ffffff".to_owned(),
            "missing",
            vec![(format::DASH.to_owned(), 12.0, "400", MUTED)],
            "not in this run".to_owned(),
        ),
    };
    let _ = writeln!(
        s,
        "<g><title>{}</title><rect class=\"cell {class}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"4\" fill=\"{fill}\" stroke=\"#ffffff\" stroke-width=\"2\"/>",
        esc(&tip),
        x + 1.0,
        y + 1.0,
        w - 2.0,
        h - 2.0
    );
    let n = lines.len() as f64;
    for (k, (text, size, weight, colour)) in lines.iter().enumerate() {
        let dy = (k as f64 - (n - 1.0) / 2.0) * 17.0;
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"{size}\" font-weight=\"{weight}\" fill=\"{colour}\">{}</text>",
            x + w / 2.0,
            y + h / 2.0 + dy + size * 0.35,
            esc(text)
        );
    }
    s.push_str("</g>\n");
}

fn status_tip(status: &CellStatus) -> String {
    let detail = status.detail();
    if detail.is_empty() {
        status.label().to_owned()
    } else {
        format!("{}: {detail}", status.label())
    }
}

/// Position of `v` between `lo` and `hi` on a log scale, in `[0, 1]`.
fn scale_log(v: f64, lo: f64, hi: f64) -> f64 {
    if !(lo > 0.0 && hi > lo && v > 0.0) {
        return 0.5;
    }
    ((v.ln() - lo.ln()) / (hi.ln() - lo.ln())).clamp(0.0, 1.0)
}

/// The heatmap colour at `t` in `[0, 1]`, interpolated between [`HEAT`] stops.
fn heat_colour(t: f64) -> String {
    let scaled = t.clamp(0.0, 1.0) * (HEAT.len() - 1) as f64;
    let i = (scaled.floor() as usize).min(HEAT.len() - 2);
    let f = scaled - i as f64;
    let mix = |a: u8, b: u8| (f64::from(a) + (f64::from(b) - f64::from(a)) * f).round() as u8;
    let (a, b) = (HEAT[i], HEAT[i + 1]);
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heat_scale_ends() {
        assert_eq!(heat_colour(0.0), "#ffffd9");
        assert_eq!(heat_colour(1.0), "#081d58");
        assert_eq!(scale_log(10.0, 10.0, 1000.0), 0.0);
        assert!((scale_log(100.0, 10.0, 1000.0) - 0.5).abs() < 1e-12);
        assert_eq!(scale_log(5.0, 5.0, 5.0), 0.5);
    }
}
