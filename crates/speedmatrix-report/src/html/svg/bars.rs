//! The prefill bar chart: prompt tok/s per context, or why a bar is missing.

use std::fmt::Write as _;

use crate::format;
use crate::html::esc;
use crate::model::Report;
use crate::page;

use super::{Frame, INK, SERIES, max_of, open_svg, tick_tokens_per_s};

/// Bars of prompt tok/s per prefill context.
pub(crate) fn prefill_throughput(report: &Report) -> String {
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
