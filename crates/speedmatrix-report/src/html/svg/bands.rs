//! A load run's latency charts: median lines, p90–p99 bands and each search's answer.

use std::fmt::Write as _;

use crate::format;
use crate::html::esc;
use crate::model::{LoadKind, LoadMeasurements, LoadRun, Percentiles};

use super::lines::{Series, draw_series, legend_entry};
use super::{Frame, INK, MUTED, SERIES, max_of, open_svg};

/// Per position, the 90th and 99th percentile around a series' median.
type Band = Vec<Option<(f64, f64)>>;

/// A load run's latency by load, one line per context at the median with a
/// band from the 90th to the 99th percentile, and each search's answer
/// marked on the x axis.
pub(crate) fn load_band(
    run: &LoadRun,
    title: &str,
    pick: fn(&LoadMeasurements) -> Option<Percentiles>,
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
            let at: Vec<Option<Percentiles>> = points
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
    let x_title = if run.mode == LoadKind::Rate {
        "Intended requests per second"
    } else {
        "Requests in the burst"
    };
    band_chart(&labels, &lines, &markers, title, x_title)
}

/// A chart of [`Series`] with their [`Band`]s, a legend entry per series and
/// one for the band, and a dashed mark at each of `markers`.
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
        draw_series(&mut s, &frame, line, "p50 ", fmt, false);
        legend_entry(&mut s, &frame, k, line);
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
