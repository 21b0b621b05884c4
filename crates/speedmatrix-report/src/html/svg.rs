//! Inline SVG charts drawn from the report; no script, no external assets.

use std::fmt::Write as _;

use crate::format;
use crate::model::{CellStatus, DecodeMeasurements, Report};
use crate::page;

use super::{esc, status_class};

const INK: &str = "#1b1f24";
const MUTED: &str = "#5b6470";
const GRID: &str = "#e3e7ec";

/// Colours for one line per context; cycled when there are more contexts.
const SERIES: [&str; 8] = [
    "#225ea8", "#e4572e", "#17a398", "#8e44ad", "#f2a541", "#3f7d20", "#c2185b", "#5c6bc0",
];

/// Stops of the heatmap's sequential scale, low to high (yellow-green-blue).
const HEAT: [(u8, u8, u8); 5] = [
    (255, 255, 217),
    (199, 233, 180),
    (65, 182, 196),
    (34, 94, 168),
    (8, 29, 88),
];

/// What a context × concurrency grid shows of each measured cell.
pub(super) struct HeatSpec {
    /// The chart's accessible name.
    pub(super) label: &'static str,
    /// The figure the colour shows; cells without it are drawn as measured but grey.
    pub(super) value: fn(&DecodeMeasurements) -> Option<f64>,
    /// Whether a lower figure is better (the dark end of the scale goes to it).
    pub(super) lower_is_better: bool,
    /// The cell's two lines: the figure, then a smaller one.
    pub(super) lines: fn(&DecodeMeasurements) -> [String; 2],
    /// The cell's tooltip after "context × requests: ".
    pub(super) tip: fn(&DecodeMeasurements) -> String,
}

/// Total tok/s with median TTFT.
pub(super) const THROUGHPUT: HeatSpec = HeatSpec {
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
pub(super) const ENERGY: HeatSpec = HeatSpec {
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
pub(super) fn heatmap(report: &Report, spec: &HeatSpec) -> String {
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

/// One line of a line chart: a name and a value per x position (`None` = a gap).
struct Series {
    name: String,
    colour: &'static str,
    values: Vec<Option<f64>>,
}

/// Bars of prompt tok/s per prefill context.
pub(super) fn prefill_throughput(report: &Report) -> String {
    let labels: Vec<String> = report
        .prefill
        .iter()
        .map(|r| r.context.to_string())
        .collect();
    let values: Vec<Option<f64>> = report
        .prefill
        .iter()
        .map(|r| r.prompt_tokens_per_s.filter(|_| r.status.is_valid()))
        .collect();
    let frame = Frame::new(
        560.0,
        320.0,
        &labels,
        max_of(&values),
        "Prompt tok/s",
        "Context",
    );
    let mut s = open_svg(frame.width, frame.height, "Prefill prompt tok/s by context");
    frame.draw_axes(&mut s, tick_tokens_per_s);
    let band = frame.band();
    for (i, v) in values.iter().enumerate() {
        let Some(v) = v else {
            // Say why a bar is missing rather than leave a silent gap.
            let status = page::status_text(&report.prefill[i].status);
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11.5\" fill=\"#b42318\">{}</text>",
                frame.x(i),
                frame.y(0.0) - 8.0,
                esc(&status)
            );
            continue;
        };
        let (x, y) = (frame.x(i) - band * 0.3, frame.y(*v));
        let _ = writeln!(
            s,
            "<g><title>{} context: {} prompt tok/s</title><rect class=\"bar\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"3\" fill=\"{}\"/></g>",
            esc(&labels[i]),
            format::tokens_per_s(*v),
            band * 0.6,
            (frame.y(0.0) - y).max(0.0),
            SERIES[0]
        );
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11.5\" fill=\"{INK}\">{}</text>",
            frame.x(i),
            y - 6.0,
            format::tokens_per_s(*v)
        );
    }
    s.push_str("</svg>");
    s
}

/// TTFT of cold prefill per context.
pub(super) fn prefill_ttft(report: &Report) -> String {
    let labels: Vec<String> = report
        .prefill
        .iter()
        .map(|r| r.context.to_string())
        .collect();
    let series = [Series {
        name: "TTFT".to_owned(),
        colour: SERIES[1],
        values: report
            .prefill
            .iter()
            .map(|r| r.ttft_ms.filter(|_| r.status.is_valid()))
            .collect(),
    }];
    line_chart(
        &labels,
        &series,
        "TTFT (ms)",
        "Context",
        format::ms_whole,
        true,
    )
}

/// Per-request tok/s against simultaneous requests, one line per context.
pub(super) fn per_request(report: &Report) -> String {
    let run = &report.run;
    let labels: Vec<String> = run.concurrencies.iter().map(ToString::to_string).collect();
    let series: Vec<Series> = run
        .contexts
        .iter()
        .enumerate()
        .map(|(i, &ctx)| Series {
            name: format!("{ctx} context"),
            colour: SERIES[i % SERIES.len()],
            values: run
                .concurrencies
                .iter()
                .map(|&n| {
                    let cell = report.decode_cell(ctx, n)?;
                    let m = cell
                        .measurements
                        .as_ref()
                        .filter(|_| cell.status.is_measured())?;
                    Some(m.per_request_tokens_per_s)
                })
                .collect(),
        })
        .collect();
    line_chart(
        &labels,
        &series,
        "Per request tok/s",
        "Simultaneous requests",
        |v| format::grouped(v, 0),
        false,
    )
}

/// Per position, the 90th and 99th percentile around a series' median.
type Band = Vec<Option<(f64, f64)>>;

/// A load run's latency by load, one line per context at the median with a
/// band from the 90th to the 99th percentile, and each search's answer
/// marked on the x axis.
pub(super) fn load_band(
    run: &crate::model::LoadRun,
    title: &str,
    pick: fn(&crate::model::LoadMeasurements) -> Option<crate::model::Percentiles>,
) -> String {
    let mut points: Vec<(u64, Option<u64>, Option<f64>)> = run
        .cells
        .iter()
        .map(|c| {
            (
                c.requests.unwrap_or(0),
                c.rate_per_s.map(|r| (r * 1e3) as u64),
                c.rate_per_s,
            )
        })
        .collect();
    points.sort_by_key(|p| (p.0, p.1));
    points.dedup_by_key(|p| (p.0, p.1));
    let labels: Vec<String> = points
        .iter()
        .map(|(n, _, r)| r.map_or_else(|| n.to_string(), |r| format!("{r}/s")))
        .collect();
    let mut contexts: Vec<speedmatrix_units::Tokens> =
        run.cells.iter().map(|c| c.context).collect();
    contexts.dedup();
    let lines: Vec<(Series, Band)> = contexts
        .iter()
        .enumerate()
        .map(|(i, &ctx)| {
            let at: Vec<Option<crate::model::Percentiles>> = points
                .iter()
                .map(|&(n, milli, _)| {
                    let cell = run.cells.iter().find(|c| {
                        c.context == ctx
                            && c.requests.unwrap_or(0) == n
                            && c.rate_per_s.map(|r| (r * 1e3) as u64) == milli
                    })?;
                    pick(cell.measurements.as_ref()?)
                })
                .collect();
            (
                Series {
                    name: format!("{ctx} context"),
                    colour: SERIES[i % SERIES.len()],
                    values: at.iter().map(|p| p.map(|p| p.p50)).collect(),
                },
                at.iter().map(|p| p.map(|p| (p.p90, p.p99))).collect(),
            )
        })
        .collect();
    // Each search's answer, where it falls on the axis.
    // Contexts whose answers fall on the same load share one mark.
    let mut markers: Vec<(usize, String)> = Vec::new();
    for k in &run.searches {
        let Some(v) = k.knee else { continue };
        let Some(i) = points.iter().position(|&(n, _, r)| match r {
            Some(r) => (r - v).abs() < 1e-9,
            None => n as f64 == v,
        }) else {
            continue;
        };
        match markers.iter_mut().find(|m| m.0 == i) {
            Some(m) => {
                let _ = write!(m.1, ", {}", k.context);
            }
            None => {
                let word = if k.floor_tokens_per_s.is_some() {
                    "best at floor"
                } else {
                    "knee"
                };
                markers.push((i, format!("{word}: {}", k.context)));
            }
        }
    }
    let x_title = if run.mode == "rate" {
        "Intended requests per second"
    } else {
        "Requests in the burst"
    };
    band_chart(&labels, &lines, &markers, title, x_title)
}

fn band_chart(
    labels: &[String],
    lines: &[(Series, Band)],
    markers: &[(usize, String)],
    y_title: &str,
    x_title: &str,
) -> String {
    let fmt = |v: f64| format::grouped(v, 0);
    let tops: Vec<Option<f64>> = lines
        .iter()
        .flat_map(|(l, band)| {
            l.values
                .iter()
                .zip(band)
                .map(|(v, b)| b.map(|b| b.1).or(*v))
        })
        .collect();
    let mut frame = Frame::new(1180.0, 380.0, labels, max_of(&tops), y_title, x_title);
    frame.right = 170.0;
    let mut s = open_svg(
        frame.width,
        frame.height,
        &format!("{y_title} by {x_title}"),
    );
    frame.draw_axes(&mut s, fmt);
    for (i, text) in markers {
        let x = frame.x(*i);
        let _ = writeln!(
            s,
            "<line class=\"marker\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{INK}\" stroke-width=\"1.5\" stroke-dasharray=\"5 4\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11.5\" fill=\"{INK}\">{}</text>",
            frame.top,
            frame.y(0.0),
            x + 5.0,
            frame.top + 12.0,
            esc(text)
        );
    }
    for (k, (line, band)) in lines.iter().enumerate() {
        // The band: p90 along the bottom, p99 back along the top, per run of
        // consecutive positions that have one.
        let mut run: Vec<(usize, f64, f64)> = Vec::new();
        let flush = |run: &mut Vec<(usize, f64, f64)>, s: &mut String| {
            if run.len() >= 2 {
                let mut d = String::new();
                for (j, &(i, lo, _)) in run.iter().enumerate() {
                    let _ = write!(
                        d,
                        "{}{:.1},{:.1} ",
                        if j == 0 { "M" } else { "L" },
                        frame.x(i),
                        frame.y(lo)
                    );
                }
                for &(i, _, hi) in run.iter().rev() {
                    let _ = write!(d, "L{:.1},{:.1} ", frame.x(i), frame.y(hi));
                }
                let _ = writeln!(
                    s,
                    "<path class=\"band\" d=\"{}Z\" fill=\"{}\" fill-opacity=\"0.16\" stroke=\"none\"/>",
                    d, line.colour
                );
            }
            run.clear();
        };
        for (i, b) in band.iter().enumerate() {
            match b {
                Some((lo, hi)) if run.last().is_none_or(|r| r.0 + 1 == i) => {
                    run.push((i, *lo, *hi));
                }
                Some((lo, hi)) => {
                    flush(&mut run, &mut s);
                    run.push((i, *lo, *hi));
                }
                None => flush(&mut run, &mut s),
            }
        }
        flush(&mut run, &mut s);
        for (i, b) in band.iter().enumerate() {
            if let Some((lo, hi)) = b {
                let _ = writeln!(
                    s,
                    "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-opacity=\"0.55\" stroke-width=\"1.5\"><title>{}, {}: p90 {}, p99 {}</title></line>",
                    frame.y(*lo),
                    frame.y(*hi),
                    line.colour,
                    esc(&line.name),
                    esc(&labels[i]),
                    fmt(*lo),
                    fmt(*hi),
                    x = frame.x(i),
                );
            }
        }
        let points: Vec<(usize, f64)> = line
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (i, v)))
            .collect();
        for pair in points.windows(2).filter(|p| p[1].0 == p[0].0 + 1) {
            let _ = writeln!(
                s,
                "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"2.5\" stroke-linecap=\"round\"/>",
                frame.x(pair[0].0),
                frame.y(pair[0].1),
                frame.x(pair[1].0),
                frame.y(pair[1].1),
                line.colour
            );
        }
        for &(i, v) in &points {
            let _ = writeln!(
                s,
                "<g><title>{}, {}: p50 {}</title><circle class=\"point\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4.5\" fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"1.5\"/></g>",
                esc(&line.name),
                esc(&labels[i]),
                fmt(v),
                frame.x(i),
                frame.y(v),
                line.colour
            );
        }
        let (lx, ly) = (
            frame.width - frame.right + 24.0,
            frame.top + 8.0 + 22.0 * k as f64,
        );
        let _ = writeln!(
            s,
            "<line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{}\" stroke-width=\"3\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12.5\" fill=\"{INK}\">{}</text>",
            lx + 22.0,
            line.colour,
            lx + 30.0,
            ly + 4.0,
            esc(&line.name)
        );
    }
    let ly = frame.top + 8.0 + 22.0 * lines.len() as f64 + 8.0;
    let lx = frame.width - frame.right + 24.0;
    let _ = writeln!(
        s,
        "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"22\" height=\"10\" fill=\"{MUTED}\" fill-opacity=\"0.25\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12.5\" fill=\"{INK}\">p90–p99 band</text>",
        ly - 5.0,
        lx + 30.0,
        ly + 4.0
    );
    s.push_str("</svg>");
    s
}

fn line_chart(
    labels: &[String],
    series: &[Series],
    y_title: &str,
    x_title: &str,
    fmt: fn(f64) -> String,
    label_points: bool,
) -> String {
    let all: Vec<Option<f64>> = series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .collect();
    let legend = series.len() > 1;
    let width = if legend { 1180.0 } else { 560.0 };
    let mut frame = Frame::new(
        width,
        if legend { 380.0 } else { 320.0 },
        labels,
        max_of(&all),
        y_title,
        x_title,
    );
    if legend {
        frame.right = 170.0;
    }
    let mut s = open_svg(
        frame.width,
        frame.height,
        &format!("{y_title} by {x_title}"),
    );
    frame.draw_axes(&mut s, fmt);
    for (k, line) in series.iter().enumerate() {
        let points: Vec<(usize, f64)> = line
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (i, v)))
            .collect();
        // Consecutive positions join; a missing value breaks the line.
        for pair in points.windows(2).filter(|p| p[1].0 == p[0].0 + 1) {
            let _ = writeln!(
                s,
                "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" stroke-width=\"2.5\" stroke-linecap=\"round\"/>",
                frame.x(pair[0].0),
                frame.y(pair[0].1),
                frame.x(pair[1].0),
                frame.y(pair[1].1),
                line.colour
            );
        }
        for &(i, v) in &points {
            let _ = writeln!(
                s,
                "<g><title>{}, {}: {}</title><circle class=\"point\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4.5\" fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"1.5\"/></g>",
                esc(&line.name),
                esc(&labels[i]),
                fmt(v),
                frame.x(i),
                frame.y(v),
                line.colour
            );
            if label_points {
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11.5\" fill=\"{INK}\">{}</text>",
                    frame.x(i),
                    frame.y(v) - 10.0,
                    fmt(v)
                );
            }
        }
        if legend {
            let (lx, ly) = (
                frame.width - frame.right + 24.0,
                frame.top + 8.0 + 22.0 * k as f64,
            );
            let _ = writeln!(
                s,
                "<line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{}\" stroke-width=\"3\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12.5\" fill=\"{INK}\">{}</text>",
                lx + 22.0,
                line.colour,
                lx + 30.0,
                ly + 4.0,
                esc(&line.name)
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// Plot area and axes of a chart with categorical x (evenly spaced) and linear y from 0.
struct Frame<'a> {
    width: f64,
    height: f64,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    labels: &'a [String],
    y_max: f64,
    ticks: Vec<f64>,
    y_title: &'a str,
    x_title: &'a str,
}

impl<'a> Frame<'a> {
    fn new(
        width: f64,
        height: f64,
        labels: &'a [String],
        max: f64,
        y_title: &'a str,
        x_title: &'a str,
    ) -> Frame<'a> {
        // Headroom above the tallest value for its label.
        let (y_max, ticks) = nice_ticks(max * 1.12);
        Frame {
            width,
            height,
            left: 76.0,
            right: 20.0,
            top: 24.0,
            bottom: 52.0,
            labels,
            y_max,
            ticks,
            y_title,
            x_title,
        }
    }

    fn band(&self) -> f64 {
        (self.width - self.left - self.right) / self.labels.len().max(1) as f64
    }

    fn x(&self, i: usize) -> f64 {
        self.left + self.band() * (i as f64 + 0.5)
    }

    fn y(&self, v: f64) -> f64 {
        let plot = self.height - self.top - self.bottom;
        self.height - self.bottom - plot * (v / self.y_max).clamp(0.0, 1.0)
    }

    fn draw_axes(&self, s: &mut String, fmt: fn(f64) -> String) {
        let x_end = self.width - self.right;
        for &t in &self.ticks {
            let y = self.y(t);
            let _ = writeln!(
                s,
                "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{x_end:.1}\" y2=\"{y:.1}\" stroke=\"{GRID}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11.5\" fill=\"{MUTED}\">{}</text>",
                self.left,
                self.left - 8.0,
                y + 4.0,
                fmt(t)
            );
        }
        let base = self.y(0.0);
        let _ = writeln!(
            s,
            "<line x1=\"{:.1}\" y1=\"{base:.1}\" x2=\"{x_end:.1}\" y2=\"{base:.1}\" stroke=\"{MUTED}\"/>",
            self.left
        );
        for (i, label) in self.labels.iter().enumerate() {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12\" fill=\"{INK}\">{}</text>",
                self.x(i),
                base + 18.0,
                esc(label)
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12.5\" fill=\"{MUTED}\">{}</text>",
            (self.left + x_end) / 2.0,
            self.height - 10.0,
            esc(self.x_title)
        );
        let mid = (self.top + base) / 2.0;
        let _ = writeln!(
            s,
            "<text x=\"16\" y=\"{mid:.1}\" text-anchor=\"middle\" font-size=\"12.5\" fill=\"{MUTED}\" transform=\"rotate(-90 16 {mid:.1})\">{}</text>",
            esc(self.y_title)
        );
    }
}

/// Axis labels for throughput: whole numbers, `K` from 10,000 (`12.5K`).
fn tick_tokens_per_s(v: f64) -> String {
    if v >= 10_000.0 {
        format::tokens_per_s(v)
    } else {
        format::grouped(v, 0)
    }
}

/// A round top at or above `max` and ticks from 0 to it in steps of 1, 2 or 5 × 10ⁿ.
fn nice_ticks(max: f64) -> (f64, Vec<f64>) {
    if !(max.is_finite() && max > 0.0) {
        return (1.0, vec![0.0, 1.0]);
    }
    let rough = max / 5.0;
    let magnitude = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * magnitude);
    let count = (max / step).ceil() as usize;
    let ticks: Vec<f64> = (0..=count).map(|k| k as f64 * step).collect();
    (count as f64 * step, ticks)
}

fn max_of(values: &[Option<f64>]) -> f64 {
    values.iter().flatten().copied().fold(0.0, f64::max)
}

fn open_svg(width: f64, height: f64, label: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width:.0} {height:.0}\" \
         width=\"{width:.0}\" height=\"{height:.0}\" role=\"img\" aria-label=\"{}\">\n",
        esc(label)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn heat_scale_ends() {
        assert_eq!(heat_colour(0.0), "#ffffd9");
        assert_eq!(heat_colour(1.0), "#081d58");
        assert_eq!(scale_log(10.0, 10.0, 1000.0), 0.0);
        assert!((scale_log(100.0, 10.0, 1000.0) - 0.5).abs() < 1e-12);
        assert_eq!(scale_log(5.0, 5.0, 5.0), 0.5);
    }

    proptest! {
        #[test]
        fn ticks_cover_the_maximum(max in 1e-3f64..1e9) {
            let (top, ticks) = nice_ticks(max);
            prop_assert!(top >= max);
            prop_assert!(ticks.len() >= 2 && ticks.len() <= 12);
            prop_assert_eq!(ticks[0], 0.0);
            prop_assert!((ticks[ticks.len() - 1] - top).abs() <= top * 1e-9);
        }
    }
}
