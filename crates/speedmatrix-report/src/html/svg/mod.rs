//! Inline SVG charts drawn from the report; no script, no external assets.
//!
//! This module holds what the charts share (colours, the SVG element, the
//! plot frame with its axes and ticks); each kind of chart has its own module.

use std::fmt::Write as _;

use crate::format;

use super::esc;

mod bands;
mod bars;
mod heatmap;
mod lines;

pub(super) use self::bands::load_band;
pub(super) use self::bars::prefill_throughput;
pub(super) use self::heatmap::{ENERGY, THROUGHPUT, heatmap};
pub(super) use self::lines::{per_request, prefill_ttft};

const INK: &str = "#1b1f24";
const MUTED: &str = "#5b6470";
const GRID: &str = "#e3e7ec";

/// Colours for one line per context; cycled when there are more contexts.
const SERIES: [&str; 8] = [
    "#225ea8", "#e4572e", "#17a398", "#8e44ad", "#f2a541", "#3f7d20", "#c2185b", "#5c6bc0",
];

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

/// The largest value present, 0 when none.
fn max_of(values: &[Option<f64>]) -> f64 {
    values.iter().flatten().copied().fold(0.0, f64::max)
}

/// The opening `<svg>` tag of a `width` × `height` chart named `label`.
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
