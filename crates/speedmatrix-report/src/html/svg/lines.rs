//! Line charts and their series: drawing a series once for every chart, prefill TTFT, per request.

use std::fmt::Write as _;

use crate::format;
use crate::html::esc;
use crate::model::Report;

use super::{Frame, INK, SERIES, max_of, open_svg};

/// One line of a line chart: a name and a value per x position (`None` = a gap).
pub(super) struct Series {
    /// The line's name, in its points' titles and the legend.
    pub(super) name: String,
    /// Its colour, one of [`SERIES`].
    pub(super) colour: &'static str,
    /// Its value at each of the frame's x positions.
    pub(super) values: Vec<Option<f64>>,
}

/// TTFT of cold prefill per context.
pub(crate) fn prefill_ttft(report: &Report) -> String {
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
pub(crate) fn per_request(report: &Report) -> String {
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

/// A chart of one or more [`Series`] over the same labels, with a legend when
/// there is more than one; `label_points` writes each value above its point.
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
        draw_series(&mut s, &frame, line, "", fmt, label_points);
        if legend {
            legend_entry(&mut s, &frame, k, line);
        }
    }
    s.push_str("</svg>");
    s
}

/// Draws `line` on `frame`: a segment between each two consecutive positions
/// that have a value (a missing value breaks the line), then a point per
/// value titled "name, label: `stat` value", with the value written above
/// the point when `label_points`.
pub(super) fn draw_series(
    s: &mut String,
    frame: &Frame<'_>,
    line: &Series,
    stat: &str,
    fmt: fn(f64) -> String,
    label_points: bool,
) {
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
            "<g><title>{}, {}: {stat}{}</title><circle class=\"point\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4.5\" fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"1.5\"/></g>",
            esc(&line.name),
            esc(&frame.labels[i]),
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
}

/// The `k`th entry of the legend right of the plot: a stroke in the line's
/// colour and its name.
pub(super) fn legend_entry(s: &mut String, frame: &Frame<'_>, k: usize, line: &Series) {
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
