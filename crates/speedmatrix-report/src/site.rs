//! A study's static site: an index of its points with their labels and
//! headline numbers, each point's report page, and comparison views — each
//! point's total tok/s as a ratio of a baseline's per cell (regressions
//! flagged), total vs per-request tok/s per point (the Pareto view), and the
//! capacity grids side by side. Self-contained: inline CSS and SVG, no script.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use speedmatrix_units::{Concurrency, Tokens};

use crate::format;
use crate::html::{STYLE, esc, to_html};
use crate::model::{CellStatus, Report};

/// One point of a study, as the site shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SitePoint {
    /// Its name (and page file name).
    pub name: String,
    /// Its parameter values.
    pub values: BTreeMap<String, String>,
    /// How it ended, in words (`measured`, `failed: …`).
    pub status: String,
    /// Its run document, when it was measured.
    pub report: Option<Report>,
}

/// A study for [`site`].
#[derive(Debug, Clone, PartialEq)]
pub struct SiteInput {
    /// The study's name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its points, in order.
    pub points: Vec<SitePoint>,
    /// The point the ratios are taken against (an index into `points`).
    pub baseline: usize,
    /// A cell below `1 − threshold` of the baseline is flagged (0.05 = 5 %).
    pub threshold: f64,
}

const COLOURS: [&str; 8] = [
    "#225ea8", "#e4572e", "#17a398", "#8e44ad", "#f2a541", "#3f7d20", "#c2185b", "#5c6bc0",
];

/// The site's files: `index.html` and `points/NAME.html` per measured point.
pub fn site(input: &SiteInput) -> Vec<(String, String)> {
    let mut files = vec![("index.html".to_owned(), index(input))];
    for p in &input.points {
        if let Some(r) = &p.report {
            let back = format!(
                "<main>\n<p><a href=\"../index.html\">← {}</a></p>\n",
                esc(&input.name)
            );
            files.push((
                format!("points/{}.html", p.name),
                to_html(r).replacen("<main>\n", &back, 1),
            ));
        }
    }
    files
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n\
         <title>{}</title>\n<style>{STYLE}\n.ratio td.regressed {{ color: #b42318; font-weight: 600; }}\n\
         .ratio td.better {{ color: #0b3d1c; font-weight: 600; }}\n.grids {{ display: grid; grid-template-columns: \
         repeat(auto-fit, minmax(300px, 1fr)); gap: 16px; }}\n</style>\n</head>\n<body>\n<main>\n{body}</main>\n</body>\n</html>\n",
        esc(title)
    )
}

/// Each measured point's cells: (context, concurrency) → (total, per request).
fn cells(r: &Report) -> BTreeMap<(Tokens, Concurrency), (f64, f64)> {
    r.decode
        .iter()
        .filter(|c| matches!(c.status, CellStatus::Valid | CellStatus::Partial { .. }))
        .filter_map(|c| {
            let m = c.measurements.as_ref()?;
            Some((
                (c.context, c.concurrency),
                (m.total_tokens_per_s, m.per_request_tokens_per_s),
            ))
        })
        .collect()
}

fn index(input: &SiteInput) -> String {
    let mut b = String::new();
    let _ = write!(
        b,
        "<header>\n<h1>{}</h1>\n<p class=\"subtitle\">A study of {} server configurations, one \
         speed test matrix each{}.</p>\n</header>\n",
        esc(&input.name),
        input.points.len(),
        if input.labels.is_empty() {
            String::new()
        } else {
            format!(
                " · {}",
                input
                    .labels
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join(" · ")
            )
        }
        .replace('&', "&amp;")
        .replace('<', "&lt;")
    );
    points_table(&mut b, input);
    pareto(&mut b, input);
    ratios(&mut b, input);
    capacity(&mut b, input);
    page(&input.name, &b)
}

fn points_table(b: &mut String, input: &SiteInput) {
    let keys: Vec<&String> = {
        let mut k: Vec<&String> = input.points.iter().flat_map(|p| p.values.keys()).collect();
        k.sort();
        k.dedup();
        k
    };
    b.push_str(
        "<section>\n<h2>Points</h2>\n<div class=\"scroll\"><table>\n<thead><tr><th>Point</th>",
    );
    for k in &keys {
        let _ = write!(b, "<th>{}</th>", esc(k));
    }
    b.push_str(
        "<th>Status</th><th>Best total tok/s</th><th>at</th><th>1 stream tok/s</th><th>First prefill tok/s</th></tr></thead>\n<tbody>\n",
    );
    for p in &input.points {
        let link = if p.report.is_some() {
            format!("<a href=\"points/{0}.html\">{0}</a>", esc(&p.name))
        } else {
            esc(&p.name)
        };
        let _ = write!(b, "<tr><td>{link}</td>");
        for k in &keys {
            let _ = write!(
                b,
                "<td>{}</td>",
                esc(p.values.get(*k).map_or("–", String::as_str))
            );
        }
        let (best, at, one, prefill) = match &p.report {
            Some(r) => {
                let c = cells(r);
                let best = c.iter().max_by(|a, b| a.1.0.total_cmp(&b.1.0));
                let one = c
                    .iter()
                    .filter(|(k, _)| k.1 == Concurrency::ONE)
                    .min_by_key(|(k, _)| k.0)
                    .map(|(_, v)| v.1);
                let prefill = r.prefill.iter().find_map(|row| row.prompt_tokens_per_s);
                (
                    best.map(|(_, v)| format::grouped(v.0, 1)),
                    best.map(|(k, _)| format!("{} × {}", k.0, k.1)),
                    one.map(|v| format::grouped(v, 1)),
                    prefill.map(|v| format::grouped(v, 0)),
                )
            }
            None => (None, None, None, None),
        };
        let dash = || "–".to_owned();
        let _ = writeln!(
            b,
            "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.status),
            best.unwrap_or_else(dash),
            at.unwrap_or_else(dash),
            one.unwrap_or_else(dash),
            prefill.unwrap_or_else(dash)
        );
    }
    b.push_str("</tbody></table></div>\n</section>\n");
}

/// A cell on the Pareto chart: per-request tok/s, total tok/s, streams.
type Dot = (f64, f64, Concurrency);

/// Total vs per-request tok/s: one line per point through its cells at its
/// shortest context, from one stream to the most.
fn pareto(b: &mut String, input: &SiteInput) {
    let lines: Vec<(&SitePoint, Vec<Dot>)> = input
        .points
        .iter()
        .filter_map(|p| {
            let c = cells(p.report.as_ref()?);
            let ctx = c.keys().map(|k| k.0).min()?;
            let pts: Vec<Dot> = c
                .iter()
                .filter(|(k, _)| k.0 == ctx)
                .map(|(k, v)| (v.1, v.0, k.1))
                .collect();
            (!pts.is_empty()).then_some((p, pts))
        })
        .collect();
    if lines.is_empty() {
        return;
    }
    let (w, h, l, r, t, bt) = (1100.0, 420.0, 80.0, 200.0, 20.0, 50.0);
    let xmax = round_top(
        lines
            .iter()
            .flat_map(|x| x.1.iter().map(|p| p.0))
            .fold(1.0, f64::max)
            * 1.05,
    );
    let ymax = round_top(
        lines
            .iter()
            .flat_map(|x| x.1.iter().map(|p| p.1))
            .fold(1.0, f64::max)
            * 1.05,
    );
    let x = |v: f64| l + (w - l - r) * v / xmax;
    let y = |v: f64| h - bt - (h - t - bt) * v / ymax;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"Total tok/s by per-request tok/s, per point\">\n"
    );
    for k in 0..=5 {
        let (vx, vy) = (xmax * f64::from(k) / 5.0, ymax * f64::from(k) / 5.0);
        let _ = writeln!(
            s,
            "<line x1=\"{l}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"#e3e7ec\"/><text x=\"{2}\" y=\"{3:.1}\" text-anchor=\"end\" font-size=\"11.5\" fill=\"#5b6470\">{4}</text><text x=\"{5:.1}\" y=\"{6}\" text-anchor=\"middle\" font-size=\"11.5\" fill=\"#5b6470\">{7}</text>",
            y(vy),
            w - r,
            l - 8.0,
            y(vy) + 4.0,
            format::grouped(vy, 0),
            x(vx),
            h - bt + 18.0,
            format::grouped(vx, 0)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12.5\" fill=\"#5b6470\">Per-request tok/s (what one user sees)</text><text x=\"16\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"12.5\" fill=\"#5b6470\" transform=\"rotate(-90 16 {:.1})\">Total tok/s</text>",
        (l + w - r) / 2.0,
        h - 10.0,
        (t + h - bt) / 2.0,
        (t + h - bt) / 2.0
    );
    for (i, (p, pts)) in lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|(px, py, _)| format!("{:.1},{:.1}", x(*px), y(*py)))
            .collect();
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2.5\"/>",
            path.join(" ")
        );
        for (px, py, n) in pts {
            let _ = writeln!(
                s,
                "<g><title>{}: {} streams, {} tok/s each, {} in all</title><circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4.5\" fill=\"{colour}\" stroke=\"#fff\"/></g>",
                esc(&p.name),
                n,
                format::grouped(*px, 1),
                format::grouped(*py, 1),
                x(*px),
                y(*py)
            );
        }
        let (lx, ly) = (w - r + 20.0, t + 10.0 + 22.0 * i as f64);
        let _ = writeln!(
            s,
            "<line x1=\"{lx}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{colour}\" stroke-width=\"3\"/><text x=\"{}\" y=\"{}\" font-size=\"12.5\" fill=\"#1b1f24\">{}</text>",
            lx + 22.0,
            lx + 30.0,
            ly + 4.0,
            esc(&p.name)
        );
    }
    s.push_str("</svg>");
    let _ = write!(
        b,
        "<section>\n<h2>Total vs per-request tok/s</h2>\n<p class=\"caption\">Each point's cells at \
         its shortest context, from one stream to the most: up and to the right is better; a \
         point whose line lies above another's gives more total tok/s at the same per-request \
         speed.</p>\n<figure>{s}</figure>\n</section>\n"
    );
}

/// A round axis top at or above `v`: 1, 2, 2.5 or 5 × 10ⁿ, times five ticks.
fn round_top(v: f64) -> f64 {
    let rough = v / 5.0;
    let magnitude = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * magnitude);
    step * 5.0
}

/// Each point's total tok/s per cell as a ratio of the baseline's.
fn ratios(b: &mut String, input: &SiteInput) {
    let Some(base) = input.points.get(input.baseline) else {
        return;
    };
    let Some(base_cells) = base.report.as_ref().map(cells) else {
        return;
    };
    let _ = write!(
        b,
        "<section>\n<h2>Against {}</h2>\n<p class=\"caption\">Total tok/s per cell as a ratio of \
         the baseline point's, as a heatmap (red below 1, green above, full at ½ and 2); below {} \
         is flagged.</p>\n",
        esc(&base.name),
        format::grouped(1.0 - input.threshold, 2)
    );
    for (i, p) in input.points.iter().enumerate() {
        if i == input.baseline {
            continue;
        }
        let Some(c) = p.report.as_ref().map(cells) else {
            continue;
        };
        let contexts: Vec<Tokens> = {
            let mut v: Vec<Tokens> = base_cells.keys().chain(c.keys()).map(|k| k.0).collect();
            v.sort();
            v.dedup();
            v
        };
        let columns: Vec<Concurrency> = {
            let mut v: Vec<Concurrency> = base_cells.keys().chain(c.keys()).map(|k| k.1).collect();
            v.sort();
            v.dedup();
            v
        };
        let _ = write!(
            b,
            "<h3>{} / {}</h3>\n<div class=\"scroll ratio\"><table>\n<thead><tr><th>Context</th>",
            esc(&p.name),
            esc(&base.name)
        );
        for n in &columns {
            let _ = write!(b, "<th>{n}</th>");
        }
        b.push_str("</tr></thead>\n<tbody>\n");
        for ctx in &contexts {
            let _ = write!(b, "<tr><td>{ctx}</td>");
            for n in &columns {
                let cell = match (c.get(&(*ctx, *n)), base_cells.get(&(*ctx, *n))) {
                    (Some(a), Some(z)) if z.0 > 0.0 => {
                        let ratio = a.0 / z.0;
                        let class = if ratio < 1.0 - input.threshold {
                            "regressed"
                        } else if ratio > 1.0 + input.threshold {
                            "better"
                        } else {
                            ""
                        };
                        let flag = if class == "regressed" { " ▼" } else { "" };
                        format!(
                            "<td class=\"{class}\" style=\"background:{}\">{}{flag}</td>",
                            ratio_colour(ratio),
                            format::grouped(ratio, 3)
                        )
                    }
                    (Some(_), None) => "<td>only here</td>".to_owned(),
                    (None, Some(_)) => "<td class=\"regressed\">not measured ▼</td>".to_owned(),
                    _ => "<td>–</td>".to_owned(),
                };
                b.push_str(&cell);
            }
            b.push_str("</tr>\n");
        }
        b.push_str("</tbody></table></div>\n");
    }
    b.push_str("</section>\n");
}

/// A diverging heat colour for a ratio: red below 1, white at 1, green
/// above, saturating at ½ and 2 (on a log scale, so ½ and 2 weigh the same).
fn ratio_colour(ratio: f64) -> String {
    let t = (ratio.max(1e-9).log2()).clamp(-1.0, 1.0);
    let (r, g, b) = if t < 0.0 {
        (255.0, 255.0 + 120.0 * t, 255.0 + 120.0 * t)
    } else {
        (255.0 - 130.0 * t, 255.0 - 40.0 * t, 255.0 - 130.0 * t)
    };
    format!("rgb({:.0},{:.0},{:.0})", r, g, b)
}

/// The Valid / Over-capacity grid of every point.
fn capacity(b: &mut String, input: &SiteInput) {
    let grids: Vec<String> = input
        .points
        .iter()
        .filter_map(|p| {
            let r = p.report.as_ref()?;
            let mut t = format!(
                "<figure><figcaption>{}{}</figcaption><table>\n<thead><tr><th>Context</th>",
                esc(&p.name),
                r.capacity
                    .as_ref()
                    .and_then(|c| c.measured.as_ref().or(c.predicted.as_ref()))
                    .map_or(String::new(), |k| format!(
                        " · {} KV tokens",
                        k.kv_cache_tokens
                    ))
            );
            for n in &r.run.concurrencies {
                let _ = write!(t, "<th>{n}</th>");
            }
            t.push_str("</tr></thead>\n<tbody>\n");
            for ctx in &r.run.contexts {
                let _ = write!(t, "<tr><td>{ctx}</td>");
                for n in &r.run.concurrencies {
                    let mark = match r.decode_cell(*ctx, *n).map(|c| &c.status) {
                        Some(CellStatus::OverCapacity { .. }) => "·",
                        Some(CellStatus::Valid | CellStatus::Partial { .. }) => "✓",
                        Some(_) => "✗",
                        None => "",
                    };
                    let _ = write!(t, "<td>{mark}</td>");
                }
                t.push_str("</tr>\n");
            }
            t.push_str("</tbody></table></figure>");
            Some(t)
        })
        .collect();
    if grids.is_empty() {
        return;
    }
    let _ = write!(
        b,
        "<section>\n<h2>Capacity</h2>\n<p class=\"caption\">✓ measured, · over capacity (not run), \
         ✗ failed.</p>\n<div class=\"grids\">\n{}\n</div>\n</section>\n",
        grids.join("\n")
    );
}
