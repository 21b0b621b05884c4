//! The Markdown page, laid out like the seed speed test matrix.

use std::fmt::Write as _;

use crate::model::Report;
use crate::{load_page, page, telemetry_page};

/// Renders the report as a Markdown page: title, Hardware, Engine, Run, Capacity,
/// Launch command, Prefill, Sustained decode matrix (or Bursts / Open-loop request
/// rates), All measurements, GPU, host and server per cell, and footnotes.
///
/// Every string that came from a server or a user is escaped, so a model name cannot
/// open a table cell, a link or raw HTML.
pub fn to_markdown(report: &Report) -> String {
    let mut out = String::new();
    out.push_str("# Speed test matrix\n\n");
    let _ = writeln!(out, "**{}**\n", inline(&page::headline(report)));
    let _ = writeln!(out, "{}\n", inline(&page::subtitle(report)));
    if let Some((headline, lines)) = page::prediction_banner(report) {
        let _ = writeln!(out, "> **{}**", inline(&headline));
        for line in lines {
            let _ = writeln!(out, "> - {}", inline(&line));
        }
        out.push('\n');
    }
    facts_section(&mut out, "Hardware", &page::hardware_facts(report));
    facts_section(&mut out, "Engine", &page::engine_facts(report));
    facts_section(&mut out, "Run", &page::run_facts(report));
    facts_section(&mut out, "Capacity", &page::capacity_facts(report));
    launch_command(&mut out, report);
    prefill(&mut out, report);
    decode_matrix(&mut out, report);
    load(&mut out, report);
    interference(&mut out, report);
    all_measurements(&mut out, report);
    telemetry(&mut out, report);
    notes(&mut out, report);
    out
}

fn load(out: &mut String, report: &Report) {
    let Some(run) = load_page::of(report) else {
        return;
    };
    let _ = writeln!(out, "## {}\n", load_page::title(run));
    for (label, value) in load_page::facts(run) {
        let _ = writeln!(out, "- **{label}:** {}", inline(&value));
    }
    out.push('\n');
    let header: Vec<String> = load_page::columns(run)
        .into_iter()
        .map(str::to_owned)
        .collect();
    table(out, &header, &load_page::rows(run));
    let _ = writeln!(out, "{}\n", inline(&load_page::note(run)));
    if let Some((header, rows)) = load_page::turn_table(run) {
        out.push_str("### TTFT by turn\n\n");
        table(out, &header, &rows);
    }
    let searches = load_page::searches(run);
    if !searches.is_empty() {
        out.push_str("### Knee search\n\n");
        out.push_str(
            "Per context, the highest load meeting the objective, or with a floor of output \
             tok/s the load whose requests are fastest (1 / TPOT p50) while reaching it: \
             doubling (or halving) to bracket it, then bisection; each try is a cell above.\n\n",
        );
        for line in searches {
            let _ = writeln!(out, "- {}", inline(&line));
        }
        out.push('\n');
    }
}

fn interference(out: &mut String, report: &Report) {
    let rows = load_page::interference_rows(report);
    if rows.is_empty() {
        return;
    }
    out.push_str("## Prefill under load\n\n");
    table(
        out,
        &load_page::INTERFERENCE_COLUMNS.map(str::to_owned),
        &rows,
    );
    let _ = writeln!(out, "{}\n", inline(load_page::INTERFERENCE_NOTE));
}

fn telemetry(out: &mut String, report: &Report) {
    let facts = telemetry_page::telemetry_facts(report);
    if facts.is_empty() {
        return;
    }
    facts_section(out, "GPU, host and server per cell", &facts);
    let rows: Vec<Vec<String>> = telemetry_page::telemetry_rows(report)
        .into_iter()
        .map(|r| r.to_vec())
        .collect();
    if !rows.is_empty() {
        table(
            out,
            &telemetry_page::TELEMETRY_COLUMNS.map(str::to_owned),
            &rows,
        );
        let _ = writeln!(out, "{}\n", inline(&telemetry_page::telemetry_note(report)));
    }
}

fn facts_section(out: &mut String, title: &str, facts: &[(&str, String)]) {
    if facts.is_empty() {
        return;
    }
    let _ = writeln!(out, "## {title}\n");
    for (label, value) in facts {
        let _ = writeln!(out, "- **{label}:** {}", inline(value));
    }
    out.push('\n');
}

fn launch_command(out: &mut String, report: &Report) {
    if let Some(command) = &report.engine.launch_command {
        shell_block(out, "Launch command", command);
    }
    if let Some(lines) = page::invocations(report) {
        shell_block(out, "Benchmark command", &lines);
    }
}

fn shell_block(out: &mut String, title: &str, command: &str) {
    // The fence must be longer than any run of backticks inside the command.
    let longest = command.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let _ = writeln!(
        out,
        "## {title}\n\n{fence}sh\n{}\n{fence}\n",
        command.trim_end()
    );
}

fn prefill(out: &mut String, report: &Report) {
    if report.prefill.is_empty() {
        return;
    }
    out.push_str("## Prefill\n\n");
    out.push_str(
        "Prompt tok/s by context length, one cold request at a time (nothing cached).\n\n",
    );
    let header = [
        "Context",
        "Prompt tok/s",
        "TTFT",
        "Prompt tokens (sent / server)",
        "Requests",
    ];
    let rows: Vec<Vec<String>> = report
        .prefill
        .iter()
        .map(|r| page::prefill_cells(r).to_vec())
        .collect();
    table(out, &header.map(str::to_owned), &rows);
}

fn decode_matrix(out: &mut String, report: &Report) {
    let run = &report.run;
    if !page::has_decode(report) {
        return;
    }
    out.push_str("## Sustained decode\n\n");
    out.push_str(
        "Total tok/s and median TTFT · rows are context length, columns are simultaneous \
         requests.\n\n",
    );
    let mut header = vec!["Context".to_owned()];
    header.extend(run.concurrencies.iter().map(ToString::to_string));
    let rows: Vec<Vec<String>> = run
        .contexts
        .iter()
        .map(|&context| {
            let mut row = vec![context.to_string()];
            row.extend(
                run.concurrencies
                    .iter()
                    .map(|&n| page::matrix_cell(report.decode_cell(context, n), LINE_BREAK)),
            );
            row
        })
        .collect();
    table(out, &header, &rows);
}

/// Stands for `<br>` in a cell until the cell is escaped piece by piece.
const LINE_BREAK: &str = "\u{0}";

fn all_measurements(out: &mut String, report: &Report) {
    out.push_str("## All measurements\n\n");
    out.push_str(
        "Latencies are medians. Total tok/s is output across all simultaneous requests.\n\n",
    );
    let rows: Vec<Vec<String>> = page::measurement_rows(report)
        .into_iter()
        .map(|r| r.to_vec())
        .collect();
    table(out, &page::MEASUREMENT_COLUMNS.map(str::to_owned), &rows);
}

fn notes(out: &mut String, report: &Report) {
    out.push_str("## Notes\n\n");
    for note in page::footnotes(report).iter().chain(&report.notes) {
        let _ = writeln!(out, "- {}", inline(note));
    }
}

/// Writes a pipe table of plain-text cells, escaping each.
fn table(out: &mut String, header: &[String], rows: &[Vec<String>]) {
    let line = |out: &mut String, cells: &[String]| {
        let escaped: Vec<String> = cells
            .iter()
            .map(|c| {
                c.split(LINE_BREAK)
                    .map(inline)
                    .collect::<Vec<_>>()
                    .join("<br>")
            })
            .collect();
        let _ = writeln!(out, "| {} |", escaped.join(" | "));
    };
    line(out, header);
    let _ = writeln!(out, "|{}", "---|".repeat(header.len()));
    for row in rows {
        line(out, row);
    }
    out.push('\n');
}

/// Escapes text for inline Markdown: no markup, table pipes, raw HTML or line breaks
/// survive from user or server strings.
pub(crate) fn inline(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '#' | '!' => {
                out.push('\\');
                out.push(c);
            }
            '&' => out.push_str("&amp;"),
            c if c.is_control() => {
                if matches!(c, '\n' | '\r' | '\t') {
                    out.push(' ');
                }
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::inline;

    #[test]
    fn inline_escapes_markup() {
        assert_eq!(inline("a|b"), "a\\|b");
        assert_eq!(inline("<script>"), "\\<script\\>");
        assert_eq!(inline("x\ny"), "x y");
        assert_eq!(inline("Agents-A1-4B-FP8"), "Agents-A1-4B-FP8");
        assert_eq!(inline("R&D"), "R&amp;D");
    }
}
