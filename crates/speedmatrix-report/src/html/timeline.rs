//! The prefill-under-load timeline: per context, the running streams' total
//! tok/s around the injected prompt, one line per concurrency, as a share
//! of their rate before it so that lines of different widths compare.

use std::fmt::Write as _;

use speedmatrix_units::Tokens;

use crate::format;
use crate::model::{Interference, Report};

use super::esc;

const INK: &str = "#1b1f24";
const MUTED: &str = "#5b6470";
const GRID: &str = "#e3e7ec";
const LINES: [&str; 8] = [
    "#225ea8", "#e4572e", "#17a398", "#8e44ad", "#f2a541", "#3f7d20", "#c2185b", "#5c6bc0",
];

const WIDTH: f64 = 1180.0;
const HEIGHT: f64 = 300.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 20.0;
const BOTTOM: f64 = 48.0;

/// One chart per context with a timeline in at least one cell.
pub(super) fn charts(report: &Report) -> Vec<(Tokens, String)> {
    let mut by_context: Vec<(Tokens, Vec<(u32, &Interference)>)> = Vec::new();
    for cell in &report.decode {
        let Some(i) = cell
            .measurements
            .as_ref()
            .and_then(|m| m.interference.as_ref())
            .filter(|i| !i.timeline.is_empty() && i.tokens_per_s_before > 0.0)
        else {
            continue;
        };
        match by_context.iter_mut().find(|(c, _)| *c == cell.context) {
            Some((_, v)) => v.push((cell.concurrency.get(), i)),
            None => by_context.push((cell.context, vec![(cell.concurrency.get(), i)])),
        }
    }
    by_context
        .into_iter()
        .map(|(ctx, cells)| (ctx, chart(ctx, &cells)))
        .collect()
}

fn chart(context: Tokens, cells: &[(u32, &Interference)]) -> String {
    let points = || cells.iter().flat_map(|(_, i)| i.timeline.iter());
    let t0 = points().map(|p| p.t_ms).fold(f64::INFINITY, f64::min);
    // Each point is the start of its part; the last part's end closes the axis.
    let part = cells
        .iter()
        .filter_map(|(_, i)| Some(i.timeline.get(1)?.t_ms - i.timeline.first()?.t_ms))
        .fold(0.0, f64::max);
    let t1 = points().map(|p| p.t_ms).fold(f64::NEG_INFINITY, f64::max) + part;
    let share = |i: &Interference, v: f64| 100.0 * v / i.tokens_per_s_before;
    let top = cells
        .iter()
        .flat_map(|(_, i)| i.timeline.iter().map(|p| share(i, p.tokens_per_s)))
        .fold(100.0, f64::max)
        .min(400.0);
    let y_max = (top * 1.1 / 25.0).ceil() * 25.0;
    let x = |t: f64| {
        let span = (t1 - t0).max(1.0);
        LEFT + (WIDTH - LEFT - RIGHT) * ((t - t0) / span).clamp(0.0, 1.0)
    };
    let y = |v: f64| HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * (v / y_max).clamp(0.0, 1.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {WIDTH:.0} {HEIGHT:.0}\" \
         width=\"{WIDTH:.0}\" height=\"{HEIGHT:.0}\" role=\"img\" aria-label=\"{}\">\n",
        esc(&format!(
            "Streams' tok/s around the injected prompt, {context} context"
        ))
    );
    let step = if y_max > 200.0 { 50.0 } else { 25.0 };
    let mut v = 0.0;
    while v <= y_max + 1e-9 {
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT:.1}\" y1=\"{yy:.1}\" x2=\"{:.1}\" y2=\"{yy:.1}\" stroke=\"{}\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11.5\" fill=\"{MUTED}\">{v:.0} %</text>",
            WIDTH - RIGHT,
            if (v - 100.0).abs() < 1e-9 {
                MUTED
            } else {
                GRID
            },
            LEFT - 8.0,
            y(v) + 4.0,
            yy = y(v),
        );
        v += step;
    }
    for t in time_ticks(t0, t1) {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"11.5\" fill=\"{INK}\">{}</text>",
            x(t),
            HEIGHT - BOTTOM + 16.0,
            format_ms(t)
        );
    }
    let _ = writeln!(
        s,
        "<line class=\"marker\" x1=\"{x0:.1}\" y1=\"{TOP:.1}\" x2=\"{x0:.1}\" y2=\"{:.1}\" stroke=\"{INK}\" stroke-dasharray=\"5 4\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11.5\" fill=\"{INK}\">sent</text>",
        HEIGHT - BOTTOM,
        x(0.0) + 4.0,
        TOP + 10.0,
        x0 = x(0.0)
    );
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12.5\" fill=\"{MUTED}\">Time from the injected prompt's send (its first token: ◆)</text>",
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 10.0
    );
    let mid = (TOP + HEIGHT - BOTTOM) / 2.0;
    let _ = writeln!(
        s,
        "<text x=\"16\" y=\"{mid:.1}\" text-anchor=\"middle\" font-size=\"12.5\" fill=\"{MUTED}\" transform=\"rotate(-90 16 {mid:.1})\">tok/s, % of before</text>"
    );
    for (k, (n, i)) in cells.iter().enumerate() {
        let colour = LINES[k % LINES.len()];
        // A step line: each part's rate held across the part.
        let mut d = String::new();
        for (j, p) in i.timeline.iter().enumerate() {
            let end = i.timeline.get(j + 1).map_or(p.t_ms + part, |q| q.t_ms);
            let yy = y(share(i, p.tokens_per_s));
            let _ = write!(
                d,
                "{}{:.1},{yy:.1} L{:.1},{yy:.1} ",
                if j == 0 { "M" } else { "L" },
                x(p.t_ms),
                x(end)
            );
        }
        let _ = writeln!(
            s,
            "<path d=\"{d}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"><title>{n} streams: {} tok/s before, {} during, {} after; stall {} ms</title></path>",
            format::grouped(i.tokens_per_s_before, 0),
            format::grouped(i.tokens_per_s_during, 0),
            format::grouped(i.tokens_per_s_after, 0),
            format::grouped(i.stall_ms, 1)
        );
        if let Some(ttft) = i.ttft_under_load_ms {
            let _ = writeln!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"13\" fill=\"{colour}\">◆<title>{n} streams: first token after {} ms</title></text>",
                x(ttft),
                HEIGHT - BOTTOM - 4.0 - 12.0 * k as f64,
                format::grouped(ttft, 1)
            );
        }
        let (lx, ly) = (WIDTH - RIGHT + 24.0, TOP + 8.0 + 22.0 * k as f64);
        let _ = writeln!(
            s,
            "<line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{colour}\" stroke-width=\"3\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12.5\" fill=\"{INK}\">{n} streams</text>",
            lx + 22.0,
            lx + 30.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>");
    s
}

/// Round tick positions in ms from `t0` to `t1`, 0 among them when inside.
fn time_ticks(t0: f64, t1: f64) -> Vec<f64> {
    let span = t1 - t0;
    if !(span.is_finite() && span > 0.0) {
        return Vec::new();
    }
    let step = [
        10.0, 20.0, 50.0, 100.0, 200.0, 250.0, 500.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0,
    ]
    .into_iter()
    .find(|s| span / s <= 9.0)
    .unwrap_or(30_000.0);
    let first = (t0 / step).ceil() as i64;
    let last = (t1 / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

fn format_ms(t: f64) -> String {
    if t.abs() >= 1_000.0 {
        format!("{} s", format::grouped(t / 1_000.0, 1))
    } else {
        format!("{t:.0} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_include_the_send() {
        let t = time_ticks(-1_000.0, 3_000.0);
        assert!(t.contains(&0.0) && t.contains(&-1_000.0), "{t:?}");
        assert!(t.windows(2).all(|w| w[1] > w[0]));
        assert!(time_ticks(5.0, 5.0).is_empty());
    }
}
