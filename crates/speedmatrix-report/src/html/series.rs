//! One cell's window as small multiples: a strip per series (our tok/s,
//! the server's running and waiting requests, its KV usage, the GPUs'
//! utilization and power) over the same time axis.

use std::fmt::Write as _;

use crate::format;
use crate::model::CellSeries;

use super::esc;

const INK: &str = "#1b1f24";
const MUTED: &str = "#5b6470";
const GRID: &str = "#e3e7ec";
const BLUE: &str = "#225ea8";
const ORANGE: &str = "#e4572e";

/// One strip: its title, unit, and lines (name, colour, values per part).
struct Strip {
    title: &'static str,
    unit: &'static str,
    /// A fixed top (percentages), else the data's.
    top: Option<f64>,
    lines: Vec<(&'static str, &'static str, Vec<Option<f64>>)>,
}

fn strip(
    title: &'static str,
    unit: &'static str,
    top: Option<f64>,
    lines: Vec<(&'static str, &'static str, Vec<Option<f64>>)>,
) -> Option<Strip> {
    lines
        .iter()
        .any(|(_, _, v)| v.iter().any(Option::is_some))
        .then_some(Strip {
            title,
            unit,
            top,
            lines,
        })
}

/// The strips `series` has data for, in a fixed order.
fn strips(series: &CellSeries) -> Vec<Strip> {
    let some = |v: &[f64]| v.iter().map(|x| Some(*x)).collect::<Vec<_>>();
    [
        strip(
            "Output",
            "tok/s",
            None,
            vec![("ours", BLUE, some(&series.output_tokens_per_s))],
        ),
        strip(
            "Requests",
            "",
            None,
            vec![
                ("running", BLUE, series.running.clone()),
                ("waiting", ORANGE, series.waiting.clone()),
            ],
        ),
        strip(
            "KV cache",
            "%",
            Some(100.0),
            vec![("used", BLUE, series.kv_usage_pct.clone())],
        ),
        strip(
            "GPU util",
            "%",
            Some(100.0),
            vec![("mean", BLUE, series.gpu_utilization_pct.clone())],
        ),
        strip(
            "GPU power",
            "W",
            None,
            vec![("all GPUs", ORANGE, series.gpu_power_w.clone())],
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The cell's strips as one SVG, `label` naming the cell.
pub(super) fn cell_strips(series: &CellSeries, label: &str) -> String {
    let strips = strips(series);
    let (width, left, right, strip_h, gap, top, bottom) =
        (720.0, 150.0, 16.0, 54.0, 14.0, 8.0, 30.0);
    let height = top + strips.len() as f64 * (strip_h + gap) - gap + bottom;
    let parts = series.output_tokens_per_s.len().max(1);
    let length_s = series.part_s * parts as f64;
    let plot_w = width - left - right;
    let x = |k: usize| left + plot_w * (k as f64 + 0.5) / parts as f64;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width:.0} {height:.0}\" \
         width=\"{width:.0}\" height=\"{height:.0}\" role=\"img\" aria-label=\"{}\">\n",
        esc(&format!("{label} over its window"))
    );
    for (i, st) in strips.iter().enumerate() {
        let y0 = top + i as f64 * (strip_h + gap);
        let max = st
            .lines
            .iter()
            .flat_map(|(_, _, v)| v.iter().flatten())
            .copied()
            .fold(0.0, f64::max);
        let y_top = st.top.unwrap_or(if max > 0.0 { max * 1.1 } else { 1.0 });
        let y = |v: f64| y0 + strip_h - strip_h * (v / y_top).clamp(0.0, 1.0);
        let _ = writeln!(
            s,
            "<rect x=\"{left:.1}\" y=\"{y0:.1}\" width=\"{plot_w:.1}\" height=\"{strip_h:.1}\" fill=\"none\" stroke=\"{GRID}\"/>"
        );
        let names: Vec<&str> = st.lines.iter().map(|(n, _, _)| *n).collect();
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"12.5\" font-weight=\"600\" fill=\"{INK}\">{}</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\" fill=\"{MUTED}\">{}</text>",
            left - 10.0,
            y0 + 20.0,
            esc(st.title),
            left - 10.0,
            y0 + 36.0,
            esc(&format!(
                "max {}{}{}",
                format::grouped(max, if max < 10.0 { 1 } else { 0 }),
                if st.unit.is_empty() { "" } else { " " },
                st.unit
            )),
        );
        if names.len() > 1 {
            for (k, (name, colour, _)) in st.lines.iter().enumerate() {
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\" fill=\"{colour}\">{}</text>",
                    left - 10.0 - 56.0 * (st.lines.len() - 1 - k) as f64,
                    y0 + 50.0,
                    esc(name)
                );
            }
        }
        for (name, colour, values) in &st.lines {
            // A part with no value breaks the line.
            let mut run: Vec<String> = Vec::new();
            let flush = |run: &mut Vec<String>, s: &mut String| {
                if run.len() > 1 {
                    let _ = writeln!(
                        s,
                        "<polyline class=\"series\" points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" stroke-linejoin=\"round\"><title>{}</title></polyline>",
                        run.join(" "),
                        esc(name)
                    );
                } else if let Some(p) = run.first() {
                    let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
                    let _ = writeln!(
                        s,
                        "<circle cx=\"{cx}\" cy=\"{cy}\" r=\"2.5\" fill=\"{colour}\"/>"
                    );
                }
                run.clear();
            };
            for (k, v) in values.iter().enumerate() {
                match v {
                    Some(v) => run.push(format!("{:.1},{:.1}", x(k), y(*v))),
                    None => flush(&mut run, &mut s),
                }
            }
            flush(&mut run, &mut s);
        }
    }
    let base = top + strips.len() as f64 * (strip_h + gap) - gap;
    for t in time_ticks(length_s) {
        let tx = left + plot_w * t / length_s;
        let _ = writeln!(
            s,
            "<text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11\" fill=\"{MUTED}\">{}</text>",
            base + 16.0,
            format_seconds(t)
        );
    }
    s.push_str("</svg>");
    s
}

/// Tick positions in seconds: 0, the end, and round steps between.
fn time_ticks(length_s: f64) -> Vec<f64> {
    if !(length_s.is_finite() && length_s > 0.0) {
        return vec![0.0];
    }
    let step = [0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0]
        .into_iter()
        .find(|s| length_s / s <= 7.0)
        .unwrap_or(600.0);
    let mut ticks: Vec<f64> = (0..)
        .map(|k| k as f64 * step)
        .take_while(|t| *t < length_s - step * 0.3)
        .collect();
    ticks.push(length_s);
    ticks
}

fn format_seconds(t: f64) -> String {
    if (t - t.round()).abs() < 1e-9 {
        format!("{t:.0} s")
    } else {
        format!("{t:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series() -> CellSeries {
        CellSeries {
            part_s: 0.5,
            output_tokens_per_s: vec![100.0, 120.0, 110.0, 90.0],
            running: vec![None, Some(2.0), Some(2.0), Some(1.0)],
            waiting: vec![None, Some(0.0), Some(0.0), Some(0.0)],
            kv_usage_pct: Vec::new(),
            gpu_utilization_pct: vec![Some(97.0); 4],
            gpu_power_w: vec![Some(400.0), None, Some(410.0), Some(405.0)],
        }
    }

    #[test]
    fn one_strip_per_series_with_data_and_gaps_break_lines() {
        let svg = cell_strips(&series(), "16K × 8");
        assert!(svg.contains("aria-label=\"16K × 8 over its window\""));
        for title in ["Output", "Requests", "GPU util", "GPU power"] {
            assert!(svg.contains(&format!(">{title}</text>")), "{title}");
        }
        assert!(!svg.contains(">KV cache</text>"), "no KV data, no strip");
        // Power has a gap after the first part: a lone point, then a line.
        assert_eq!(svg.matches("<circle").count(), 1);
        assert!(svg.contains("max 410 W"));
        assert!(svg.contains(">2 s</text>"), "the window's end is a tick");
    }

    #[test]
    fn ticks_start_at_zero_and_end_at_the_window() {
        assert_eq!(time_ticks(2.0), vec![0.0, 0.5, 1.0, 1.5, 2.0]);
        let t = time_ticks(30.0);
        assert_eq!((t[0], t[t.len() - 1]), (0.0, 30.0));
        assert!(t.len() <= 8);
        assert_eq!(time_ticks(0.0), vec![0.0]);
    }
}
