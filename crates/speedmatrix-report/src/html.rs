//! The self-contained HTML page: inline CSS, inline SVG charts, tables below.
//!
//! The page is also well-formed XML (every element closed, only XML's own entities), so
//! tests can parse it strictly and any XML tool can post-process it.

use std::fmt::Write as _;

use crate::model::{CellStatus, Report};
use crate::{load_page, page, telemetry_page};

mod series;
mod svg;
mod timeline;

/// Renders the report as one HTML page with no external assets: a decode heatmap
/// (context × concurrency, total tok/s), prefill tok/s and TTFT against context,
/// per-request tok/s against concurrency for each context, then the tables and notes.
///
/// Every string from a server or a user is HTML-escaped.
pub fn to_html(report: &Report) -> String {
    to_html_with(report, &|_: &mut String| {})
}

/// [`to_html`] with `extra` writing a section of its own after the run's facts (a
/// comparison's, say).
pub(crate) fn to_html_with(report: &Report, extra: &dyn Fn(&mut String)) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let headline = page::headline(report);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n\
         <title>Speed test matrix · {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<main>\n",
        esc(&headline)
    );
    let _ = write!(
        out,
        "<header>\n<h1>Speed test matrix</h1>\n<p class=\"headline\">{}</p>\n\
         <p class=\"subtitle\">{}</p>\n</header>\n",
        esc(&headline),
        esc(&page::subtitle(report))
    );
    if let Some((headline, lines)) = page::prediction_banner(report) {
        let _ = write!(
            out,
            "<section class=\"banner\">\n<p><strong>{}</strong></p>\n<ul>\n",
            esc(&headline)
        );
        for line in lines {
            let _ = writeln!(out, "<li>{}</li>", esc(&line));
        }
        out.push_str("</ul>\n</section>\n");
    }
    facts(&mut out, report);
    extra(&mut out);
    charts(&mut out, report);
    launch_command(&mut out, report);
    tables(&mut out, report);
    notes(&mut out, report);
    out.push_str("</main>\n</body>\n</html>\n");
    out
}

fn facts(out: &mut String, report: &Report) {
    out.push_str("<section class=\"cards\">\n");
    for (title, facts) in [
        ("Hardware", page::hardware_facts(report)),
        ("Engine", page::engine_facts(report)),
        ("Run", page::run_facts(report)),
        ("Capacity", page::capacity_facts(report)),
    ] {
        if facts.is_empty() {
            continue;
        }
        let _ = write!(out, "<div class=\"card\">\n<h2>{title}</h2>\n<dl>\n");
        for (label, value) in facts {
            let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", esc(label), esc(&value));
        }
        out.push_str("</dl>\n</div>\n");
    }
    out.push_str("</section>\n");
}

fn charts(out: &mut String, report: &Report) {
    if page::has_decode(report) {
        let _ = write!(
            out,
            "<section>\n<h2>Sustained decode</h2>\n<p class=\"caption\">Total tok/s and median \
             TTFT · rows are context length, columns are simultaneous requests. Colour is total \
             tok/s on a log scale; hatched cells were not run.</p>\n<figure class=\"wide\">{}</figure>\n\
             </section>\n",
            svg::heatmap(report, &svg::THROUGHPUT)
        );
    }
    if !report.prefill.is_empty() {
        let _ = write!(
            out,
            "<section>\n<h2>Prefill</h2>\n<p class=\"caption\">One cold request per context, \
             nothing cached.</p>\n<div class=\"pair\">\n<figure>{}</figure>\n<figure>{}</figure>\n\
             </div>\n</section>\n",
            svg::prefill_throughput(report),
            svg::prefill_ttft(report)
        );
    }
    if let Some(run) = load_page::of(report) {
        let _ = write!(
            out,
            "<section>\n<h2>{}</h2>\n<p class=\"caption\">Latency from each request's intended \
             send time, by load: the median as a line per context length, the 90th to 99th \
             percentile as a band around it, and each search's answer as a dashed mark.</p>\n\
             <figure>{}</figure>\n<figure>{}</figure>\n</section>\n",
            esc(load_page::title(run)),
            svg::load_band(run, "TTFT (ms)", |m| m.ttft_ms),
            svg::load_band(run, "End to end (ms)", |m| m.e2e_ms)
        );
    }
    if page::has_decode(report) {
        let _ = write!(
            out,
            "<section>\n<h2>Per request tok/s</h2>\n<p class=\"caption\">What one user sees as \
             more requests share the server: one line per context length.</p>\n\
             <figure class=\"wide\">{}</figure>\n</section>\n",
            svg::per_request(report)
        );
    }
}

fn launch_command(out: &mut String, report: &Report) {
    let blocks = [
        ("Launch command", report.engine.launch_command.clone()),
        ("Benchmark command", page::invocations(report)),
    ];
    for (title, command) in blocks {
        if let Some(command) = command {
            let _ = write!(
                out,
                "<section>\n<h2>{title}</h2>\n<pre><code>{}</code></pre>\n</section>\n",
                esc(command.trim_end())
            );
        }
    }
}

fn tables(out: &mut String, report: &Report) {
    if !report.prefill.is_empty() {
        let header = [
            "Context",
            "Prompt tok/s",
            "TTFT",
            "Prompt tokens (sent / server)",
            "Requests",
        ];
        let rows: Vec<Vec<Cell>> = report
            .prefill
            .iter()
            .map(|r| page::prefill_cells(r).into_iter().map(Cell::text).collect())
            .collect();
        table(out, "Prefill measurements", &header, &rows);
    }
    if let Some(run) = load_page::of(report) {
        let _ = writeln!(
            out,
            "<section>\n<h2>{} measurements</h2>\n<dl class=\"inline\">",
            esc(load_page::title(run))
        );
        for (label, value) in load_page::facts(run) {
            let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", esc(label), esc(&value));
        }
        out.push_str("</dl>\n<div class=\"dense\">\n");
        let rows: Vec<Vec<Cell>> = load_page::rows(run)
            .into_iter()
            .map(|r| r.into_iter().map(Cell::text).collect())
            .collect();
        table_body(out, &load_page::columns(run), &rows);
        let _ = writeln!(
            out,
            "</div>\n<p class=\"caption\">{}</p>",
            esc(&load_page::note(run))
        );
        if let Some((header, rows)) = load_page::turn_table(run) {
            out.push_str("<h3>TTFT by turn</h3>\n");
            let header: Vec<&str> = header.iter().map(String::as_str).collect();
            let rows: Vec<Vec<Cell>> = rows
                .into_iter()
                .map(|r| r.into_iter().map(Cell::text).collect())
                .collect();
            table_body(out, &header, &rows);
        }
        let searches = load_page::searches(run);
        if !searches.is_empty() {
            out.push_str("<h3>Knee search</h3>\n<ul class=\"notes\">\n");
            for line in searches {
                let _ = writeln!(out, "<li>{}</li>", esc(&line));
            }
            out.push_str("</ul>\n");
        }
        out.push_str("</section>\n");
    }
    if page::has_decode(report) {
        let mut header = vec!["Context".to_owned()];
        header.extend(report.run.concurrencies.iter().map(ToString::to_string));
        let rows: Vec<Vec<Cell>> = report
            .run
            .contexts
            .iter()
            .map(|&ctx| {
                let mut row = vec![Cell::text(ctx.to_string())];
                row.extend(report.run.concurrencies.iter().map(|&n| {
                    let cell = report.decode_cell(ctx, n);
                    let text = page::matrix_cell(cell, "\n");
                    let class = cell.map_or("", |c| status_class(&c.status));
                    Cell { text, class }
                }));
                row
            })
            .collect();
        let header: Vec<&str> = header.iter().map(String::as_str).collect();
        table(out, "Sustained decode matrix", &header, &rows);
    }
    let rows = load_page::interference_rows(report);
    if !rows.is_empty() {
        let rows: Vec<Vec<Cell>> = rows
            .into_iter()
            .map(|r| r.into_iter().map(Cell::text).collect())
            .collect();
        out.push_str("<section>\n<h2>Prefill under load</h2>\n");
        for (context, svg) in timeline::charts(report) {
            let _ = writeln!(
                out,
                "<figure><figcaption>{context} context: the streams' total tok/s around the \
                 injected prompt, as a share of their rate before it</figcaption>{svg}</figure>"
            );
        }
        table_body(out, &load_page::INTERFERENCE_COLUMNS, &rows);
        let _ = writeln!(
            out,
            "<p class=\"caption\">{}</p>\n</section>",
            esc(load_page::INTERFERENCE_NOTE)
        );
    }
    let rows: Vec<Vec<Cell>> = page::measurement_rows(report)
        .into_iter()
        .map(|r| r.into_iter().map(Cell::text).collect())
        .collect();
    let _ = write!(
        out,
        "<section>\n<h2>All measurements</h2>\n<p class=\"caption\">Latencies are medians. Total \
         tok/s is output across all simultaneous requests.</p>\n"
    );
    table_body(out, &page::MEASUREMENT_COLUMNS, &rows);
    out.push_str("</section>\n");
    telemetry(out, report);
}

/// The run's telemetry sources and, per measured cell, what the GPUs, the
/// host and the server did, with the verdicts.
fn telemetry(out: &mut String, report: &Report) {
    let facts = telemetry_page::telemetry_facts(report);
    if facts.is_empty() {
        return;
    }
    out.push_str("<section>\n<h2>GPU, host and server per cell</h2>\n<dl class=\"inline\">\n");
    for (label, value) in facts {
        let _ = writeln!(out, "<dt>{}</dt><dd>{}</dd>", esc(label), esc(&value));
    }
    out.push_str("</dl>\n");
    let has_energy = report.decode.iter().any(|c| {
        c.measurements
            .as_ref()
            .is_some_and(|m| (svg::ENERGY.value)(m).is_some())
    });
    if has_energy {
        let _ = write!(
            out,
            "<h3>Energy per output token</h3>\n<p class=\"caption\">GPU joules per output token \
             and mean power of all GPUs · darker is fewer joules (log scale).</p>\n\
             <figure class=\"wide\">{}</figure>\n",
            svg::heatmap(report, &svg::ENERGY)
        );
    }
    let rows: Vec<Vec<Cell>> = telemetry_page::telemetry_rows(report)
        .into_iter()
        .map(|r| r.into_iter().map(Cell::text).collect())
        .collect();
    if !rows.is_empty() {
        // Sixteen columns: set tighter so that they fit the page's width.
        out.push_str("<div class=\"dense\">\n");
        table_body(out, &telemetry_page::TELEMETRY_COLUMNS, &rows);
        out.push_str("</div>\n");
        let _ = writeln!(
            out,
            "<p class=\"caption\">{}</p>",
            esc(&telemetry_page::telemetry_note(report))
        );
    }
    cell_series(out, report);
    out.push_str("</section>\n");
}

/// Each measured cell's window as strips, folded away until opened.
fn cell_series(out: &mut String, report: &Report) {
    let cells: Vec<_> = report
        .decode
        .iter()
        .filter_map(|c| {
            let m = c.measurements.as_ref()?;
            Some((c, m, m.telemetry.as_ref()?.series.as_ref()?))
        })
        .collect();
    if cells.is_empty() {
        return;
    }
    out.push_str(
        "<h3>Each cell over its window</h3>\n<p class=\"caption\">Our output tok/s, the \
         server's running and waiting requests and KV usage (its /metrics), GPU utilization and \
         power, in equal parts of the window (the mean of each part; a part without a reading \
         holds the last one).</p>\n",
    );
    for (c, m, series) in cells {
        let label = format!("{} context × {} requests", c.context, c.concurrency);
        let verdicts: Vec<String> = m
            .telemetry
            .iter()
            .flat_map(|t| t.verdicts.iter().map(|v| v.kind.replace('_', " ")))
            .collect();
        let _ = writeln!(
            out,
            "<details class=\"cell-series\"><summary>{} · {} tok/s{}</summary>\n<figure>{}</figure>\n</details>",
            esc(&label),
            crate::format::tokens_per_s(m.total_tokens_per_s),
            if verdicts.is_empty() {
                String::new()
            } else {
                esc(&format!(" · {}", verdicts.join(", ")))
            },
            series::cell_strips(series, &label)
        );
    }
}

/// One table cell: text (a `\n` becomes a line break) and a CSS class.
pub(crate) struct Cell {
    pub(crate) text: String,
    pub(crate) class: &'static str,
}

impl Cell {
    pub(crate) fn text(text: String) -> Cell {
        Cell { text, class: "" }
    }
}

fn table(out: &mut String, title: &str, header: &[&str], rows: &[Vec<Cell>]) {
    let _ = writeln!(out, "<section>\n<h2>{}</h2>", esc(title));
    table_body(out, header, rows);
    out.push_str("</section>\n");
}

pub(crate) fn table_body(out: &mut String, header: &[&str], rows: &[Vec<Cell>]) {
    out.push_str("<div class=\"scroll\">\n<table>\n<thead><tr>");
    for h in header {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let text = cell
                .text
                .split('\n')
                .map(esc)
                .collect::<Vec<_>>()
                .join("<br/>");
            if cell.class.is_empty() {
                let _ = write!(out, "<td>{text}</td>");
            } else {
                let _ = write!(out, "<td class=\"{}\">{text}</td>", cell.class);
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n</div>\n");
}

fn notes(out: &mut String, report: &Report) {
    out.push_str("<section>\n<h2>Notes</h2>\n<ul class=\"notes\">\n");
    for note in page::footnotes(report).iter().chain(&report.notes) {
        let _ = writeln!(out, "<li>{}</li>", esc(note));
    }
    out.push_str("</ul>\n</section>\n");
}

/// CSS class of a cell by status, shared by the table and the heatmap.
pub(crate) fn status_class(status: &CellStatus) -> &'static str {
    match status {
        CellStatus::Valid => "valid",
        CellStatus::Partial { .. } => "partial",
        CellStatus::OverCapacity { .. } => "over-capacity",
        CellStatus::Error { .. } => "error",
        CellStatus::Skipped { .. } => "skipped",
    }
}

/// Escapes text for HTML and XML element content and quoted attribute values.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // XML 1.0 forbids most control characters even as references.
            c if c.is_control() && !matches!(c, '\n' | '\t') => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The page's style sheet. No `<` or `&` in it: it sits in XML-parsable text.
pub(crate) const STYLE: &str = r#"
:root { --ink: #1b1f24; --muted: #5b6470; --line: #d9dee4; --bg: #f6f7f9; --card: #ffffff; --accent: #225ea8; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
  font: 15px/1.5 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 32px 28px 48px; }
header h1 { margin: 0; font-size: 30px; letter-spacing: -0.01em; }
.headline { margin: 4px 0 0; font-size: 20px; font-weight: 600; }
.subtitle { margin: 4px 0 24px; color: var(--muted); }
h2 { font-size: 19px; margin: 0 0 8px; }
section { margin: 0 0 28px; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr)); gap: 16px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px; }
.card h2 { font-size: 13px; text-transform: uppercase; letter-spacing: 0.06em; color: var(--muted); }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 3px 14px; margin: 0; }
dt { color: var(--muted); }
dd { margin: 0; overflow-wrap: break-word; min-width: 0; }
dl.inline { margin-bottom: 14px; }
h3 { font-size: 16px; margin: 18px 0 6px; }
details.cell-series { margin: 0 0 6px; }
details.cell-series summary { cursor: pointer; padding: 4px 0; }
details.cell-series figure { margin-top: 6px; }
.caption { color: var(--muted); margin: 0 0 10px; }
figure { margin: 0; background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 12px; }
.banner { background: #fff4e5; border: 2px solid #e4572e; border-radius: 8px; padding: 12px 18px; margin: 16px 0; }
.banner ul { margin: 6px 0 0; padding-left: 20px; font-size: 14px; }
figure svg { display: block; max-width: 100%; height: auto; margin: 0 auto; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
pre { background: #0f1720; color: #e6edf3; padding: 14px 16px; border-radius: 10px; overflow-x: auto;
  white-space: pre-wrap; word-break: break-word; font-size: 13px; }
.scroll { overflow-x: auto; background: var(--card); border: 1px solid var(--line); border-radius: 10px; }
table { border-collapse: collapse; width: 100%; font-size: 13.5px; font-variant-numeric: tabular-nums; }
th, td { padding: 6px 10px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th { background: #eef1f5; font-weight: 600; white-space: normal; vertical-align: bottom; }
th:first-child, td:first-child { text-align: left; }
tbody tr:nth-child(even) { background: #fafbfc; }
td.over-capacity, td.skipped { color: var(--muted); }
td.error { color: #b42318; }
td.inside { color: #1a7f37; }
td.outside { color: #b42318; font-weight: 600; }
.dense { margin-top: 12px; }
.dense + .caption { margin-top: 8px; }
.dense table { font-size: 12px; }
.dense th, .dense td { padding: 5px 6px; }
.notes { color: var(--muted); padding-left: 20px; margin: 0; }
.notes li { margin: 4px 0; }
svg text { font-family: -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
@media (max-width: 800px) { .pair { grid-template-columns: 1fr; } }
"#;

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn esc_covers_markup_and_quotes() {
        assert_eq!(
            esc("<script>alert('x')</script>"),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"
        );
        assert_eq!(esc("a & \"b\""), "a &amp; &quot;b&quot;");
        assert_eq!(esc("bell\u{7}"), "bell\u{fffd}");
    }
}
