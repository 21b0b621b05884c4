//! The content both page renderers show, as plain text: headings' facts, table rows,
//! footnotes. Markdown and HTML only differ in how they wrap and escape it.

use std::fmt::Write as _;

use speedmatrix_units::{ByteSize, Tokens};

use crate::format::{self, DASH};
use crate::model::{Api, CellStatus, DecodeCell, PrefillMode, PrefillRow, Report};

mod notes;
pub(crate) use notes::footnotes;

/// Columns of the "All measurements" table, as on the seed page.
pub(crate) const MEASUREMENT_COLUMNS: [&str; 12] = [
    "Phase",
    "Context",
    "Requests at once",
    "Status",
    "Total tok/s",
    "Per request tok/s",
    "TTFT",
    "Time between tokens",
    "Average active requests",
    "Completed requests",
    "Output tokens",
    "Measured for",
];

/// The line under the title: `Agents-A1-4B-FP8 on RTX 3090 24 GiB`.
/// Whether the run measured sustained-decode cells (a load run has none).
/// The banner of a predicted document: a headline and its assumptions.
pub(crate) fn prediction_banner(report: &Report) -> Option<(String, Vec<String>)> {
    let p = report.prediction.as_ref()?;
    let factors: Vec<String> = p
        .factors
        .iter()
        .map(|(k, v)| format!("{k} {}", format::grouped(*v, 3)))
        .collect();
    let mut lines = p.assumptions.clone();
    if !factors.is_empty() {
        lines.push(format!(
            "Factors ({}): {}.",
            p.fitted_on,
            factors.join(", ")
        ));
    }
    Some((
        format!(
            "Predicted, not measured: every number on this page comes from {}.",
            p.method
        ),
        lines,
    ))
}

pub(crate) fn has_decode(report: &Report) -> bool {
    !report.run.contexts.is_empty() && !report.run.concurrencies.is_empty()
}

pub(crate) fn headline(report: &Report) -> String {
    // `org/name` reads as `name`; anything else is shown whole.
    let model = match report.run.model.split_once('/') {
        Some((_, name)) if !name.is_empty() && !name.contains('/') => name,
        _ => &report.run.model,
    };
    format!("{model} on {}", machine(report))
}

/// The accelerators in a few words: `2× RTX 4090 24 GiB`, or the CPU when there are none.
pub(crate) fn machine(report: &Report) -> String {
    let hw = &report.hardware;
    let gpus: Vec<String> = hw
        .gpus
        .iter()
        .map(|g| {
            let count = if g.count > 1 {
                format!("{}× ", g.count)
            } else {
                String::new()
            };
            let memory = g
                .memory_bytes
                .map(|m| format!(" {}", memory(m)))
                .unwrap_or_default();
            format!("{count}{}{memory}", g.name)
        })
        .collect();
    if !gpus.is_empty() {
        gpus.join(" + ")
    } else {
        hw.cpu
            .clone()
            .unwrap_or_else(|| "unknown hardware".to_owned())
    }
}

/// The line that sums up engine and matrix shape.
pub(crate) fn subtitle(report: &Report) -> String {
    let engine = &report.engine;
    let mut parts: Vec<String> = vec![engine.name.clone()];
    parts.extend(engine.version.clone());
    parts.extend(engine.quantization.clone());
    let run = &report.run;
    if let (Some(first), Some(last)) = (run.contexts.first(), run.contexts.last()) {
        let (c_first, c_last) = (run.concurrencies.first(), run.concurrencies.last());
        let levels = match (c_first, c_last) {
            (Some(a), Some(b)) => format!(
                "{} ({a}–{b})",
                plural(
                    run.concurrencies.len(),
                    "concurrency level",
                    "concurrency levels"
                )
            ),
            _ => "no concurrency levels".to_owned(),
        };
        parts.push(format!(
            "{} ({first}–{last}) × {levels}",
            plural(run.contexts.len(), "context", "contexts")
        ));
    }
    if !run.prefill_contexts.is_empty() {
        parts.push(format!("prefill at {}", join_tokens(&run.prefill_contexts)));
    }
    parts.join(" · ")
}

/// Label/value pairs of the Hardware section; absent values are left out.
pub(crate) fn hardware_facts(report: &Report) -> Vec<(&'static str, String)> {
    let hw = &report.hardware;
    let mut facts = Vec::new();
    facts.extend(hw.kind.clone().map(|v| ("Type", v)));
    for gpu in &hw.gpus {
        let name = if gpu.count > 1 {
            format!("{}× {}", gpu.count, gpu.name)
        } else {
            gpu.name.clone()
        };
        facts.push(("GPU", name));
        facts.extend(gpu.memory_bytes.map(|m| ("VRAM", memory(m))));
    }
    if let Some(cpu) = &hw.cpu {
        let cores = hw.cpu_cores.map(|c| format!(" ({c}C)")).unwrap_or_default();
        facts.push(("CPU", format!("{cpu}{cores}")));
    }
    facts.extend(hw.ram_bytes.map(|m| ("RAM", memory(m))));
    facts.extend(hw.os.clone().map(|v| ("OS", v)));
    facts
}

/// Label/value pairs of the Engine section.
pub(crate) fn engine_facts(report: &Report) -> Vec<(&'static str, String)> {
    let e = &report.engine;
    let mut facts = vec![("Engine", e.name.clone())];
    facts.extend(e.version.clone().map(|v| ("Version", v)));
    facts.extend(e.quantization.clone().map(|v| ("Quantization", v)));
    facts.extend(e.backend.clone().map(|v| ("Backend", v)));
    facts.extend(e.repository.clone().map(|v| ("Repository", v)));
    facts.extend(e.build.clone().map(|v| ("Build", v)));
    facts
}

/// Label/value pairs of the Run section.
pub(crate) fn run_facts(report: &Report) -> Vec<(&'static str, String)> {
    let run = &report.run;
    let mut facts = vec![
        ("Model", run.model.clone()),
        ("Served model", run.served_model.clone()),
    ];
    facts.extend(run.revision.clone().map(|v| ("Revision", v)));
    facts.push(("Benchmark tool", tool(&run.tool)));
    facts.push((
        "API",
        match run.api {
            Api::Chat => "/v1/chat/completions".to_owned(),
            Api::Completions => "/v1/completions".to_owned(),
        },
    ));
    facts.push(("Prompts", run.prompt_mode.clone()));
    facts.extend(run.tokenizer.clone().map(|v| ("Tokenizer", v)));
    facts.push(("Decode test", "Fixed duration".to_owned()));
    facts.push(("Time per measurement", format::seconds(run.window_s)));
    facts.push((
        "Max output",
        format!("{} tokens", format::count(run.max_output_tokens.get())),
    ));
    if !run.prefill_contexts.is_empty() {
        facts.push((
            "Prefill mode",
            match run.prefill_mode {
                PrefillMode::Warmup => PrefillMode::Warmup.describe().to_owned(),
                PrefillMode::Cold => format!(
                    "Cold requests, nothing cached; median of {}",
                    plural(run.prefill_repeats as usize, "request", "requests")
                ),
            },
        ));
    }
    facts.extend(client_fact(report).map(|v| ("Client", v)));
    facts.extend(client_host(report).map(|v| ("Client host", v)));
    facts.push(("Started", run.started_at.clone()));
    facts.push(("Finished", run.finished_at.clone()));
    facts
}

/// The tool, its commit and build: `speedmatrix v0.1.0 (3ee437e8572a, release build)`.
pub(crate) fn tool(tool: &crate::Tool) -> String {
    let mut text = format!("{} v{}", tool.name, tool.version.trim_start_matches('v'));
    let build: Vec<String> = tool
        .commit
        .iter()
        .cloned()
        .chain(tool.build_profile.iter().map(|p| format!("{p} build")))
        .collect();
    if !build.is_empty() {
        text.push_str(&format!(" ({})", build.join(", ")));
    }
    text
}

/// The host the client ran on, in a line: `bench-01 · linux 6.8.0 · x86_64 · 16 CPUs`.
fn client_host(report: &Report) -> Option<String> {
    let host = report.provenance.as_ref()?.host.as_ref()?;
    let parts: Vec<String> = [
        host.hostname.clone(),
        host.os.clone(),
        host.arch.clone(),
        host.cpus.map(|n| plural(n as usize, "CPU", "CPUs")),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!parts.is_empty()).then(|| parts.join(" · "))
}

/// The command lines that made the run, one per line (the first started it, the others
/// resumed it), secrets already removed.
pub(crate) fn invocations(report: &Report) -> Option<String> {
    let p = report.provenance.as_ref()?;
    (!p.invocations.is_empty()).then(|| p.invocations.join("\n"))
}

/// The client's threads, cores and busiest cell, in a line.
fn client_fact(report: &Report) -> Option<String> {
    let c = report.client.as_ref()?;
    let mut line = plural(
        c.runtime_threads as usize,
        "runtime thread",
        "runtime threads",
    );
    if let Some(cores) = &c.cores {
        let how = if c.pinned { "pinned to" } else { "on" };
        let _ = write!(line, " {how} cores {cores}");
    }
    let busiest = report
        .decode
        .iter()
        .filter_map(|d| d.measurements.as_ref()?.client)
        .max_by(|a, b| a.cpu_cores.total_cmp(&b.cpu_cores));
    if let Some(b) = busiest {
        let _ = write!(
            line,
            "; busiest cell {:.2} cores ({:.0} % of its threads)",
            b.cpu_cores,
            100.0 * b.cpu_cores / f64::from(b.runtime_threads.max(1))
        );
    }
    Some(line)
}

/// Label/value pairs of the Capacity section; empty when the document has none.
pub(crate) fn capacity_facts(report: &Report) -> Vec<(&'static str, String)> {
    let Some(cap) = &report.capacity else {
        return Vec::new();
    };
    let mut facts = Vec::new();
    if let Some(m) = &cap.measured {
        facts.push((
            "KV cache, measured",
            format!(
                "{} tokens ({})",
                format::count(m.kv_cache_tokens.get()),
                m.source
            ),
        ));
    }
    if let Some(p) = &cap.predicted {
        facts.push((
            "KV cache, predicted",
            format!(
                "{} tokens ({})",
                format::count(p.kv_cache_tokens.get()),
                p.source
            ),
        ));
    }
    if let Some(diff) = cap.difference() {
        facts.push((
            "Prediction vs measurement",
            format::percent_change(1.0 + diff),
        ));
    }
    facts.push(("Over-capacity rule", cap.rule.clone()));
    facts
}

/// Prompt tok/s as measured, or as predicted with its band.
fn prefill_rate(row: &PrefillRow, v: f64) -> String {
    match row.prompt_tokens_per_s_band {
        Some(band) => format::predicted(v, Some(band)),
        None => format::tokens_per_s(v),
    }
}

/// One prefill row for the Prefill table: context, prompt tok/s, TTFT, prompt tokens, requests.
pub(crate) fn prefill_cells(row: &PrefillRow) -> [String; 5] {
    let reported = row
        .prompt_tokens_reported
        .map_or_else(|| DASH.to_owned(), |t| format::count(t.get()));
    [
        row.context.to_string(),
        row.prompt_tokens_per_s
            .map_or_else(|| status_text(&row.status), |v| prefill_rate(row, v)),
        opt(row.ttft_ms, format::ms_whole),
        format!(
            "{} / {reported}",
            format::count(row.prompt_tokens_requested.get())
        ),
        row.repeats.to_string(),
    ]
}

/// The text of one sustained-decode matrix cell: tok/s and TTFT, or why there is none.
/// `break_line` separates the two numbers (`<br>` in Markdown).
pub(crate) fn matrix_cell(cell: Option<&DecodeCell>, break_line: &str) -> String {
    let Some(cell) = cell else {
        return DASH.to_owned();
    };
    match (&cell.status, &cell.measurements) {
        (status, Some(m)) if status.is_measured() => {
            let mut mark = String::new();
            if flagged(cell) {
                mark.push_str(" †");
            }
            if matches!(status, CellStatus::Partial { .. }) {
                mark.push_str(" ‡");
            }
            let rate = match &m.band {
                Some(b) => format::predicted(m.total_tokens_per_s, Some(b.total_tokens_per_s)),
                None if m.is_estimated() => {
                    format!("≈{}", format::tokens_per_s(m.total_tokens_per_s))
                }
                None => format::tokens_per_s(m.total_tokens_per_s),
            };
            format!(
                "{rate}{break_line}{} TTFT{mark}",
                format::ms_whole(m.ttft_ms.p50)
            )
        }
        (status, _) => status_text(status),
    }
}

/// Whether a measured cell carries a warning worth a footnote mark.
pub(crate) fn flagged(cell: &DecodeCell) -> bool {
    cell.measurements
        .as_ref()
        .is_some_and(|m| m.queueing_detected || m.prompt_token_mismatches > 0)
}

/// `Over capacity`, `Error: timeout`, `Skipped`.
pub(crate) fn status_text(status: &CellStatus) -> String {
    match status {
        CellStatus::Error { error_kind, .. } => format!("Error: {error_kind}"),
        other => other.label().to_owned(),
    }
}

/// Every row of the "All measurements" table, prefill first, then decode row by row.
pub(crate) fn measurement_rows(report: &Report) -> Vec<[String; 12]> {
    let prefill = report.prefill.iter().map(prefill_measurement_row);
    let decode = report.decode.iter().map(decode_measurement_row);
    prefill.chain(decode).collect()
}

fn prefill_measurement_row(row: &PrefillRow) -> [String; 12] {
    let dash = || DASH.to_owned();
    let completed = if row.status.is_valid() {
        format::count(u64::from(row.repeats))
    } else {
        dash()
    };
    [
        "Prefill".to_owned(),
        row.context.to_string(),
        "1".to_owned(),
        status_text(&row.status),
        row.prompt_tokens_per_s
            .map_or_else(dash, |v| prefill_rate(row, v)),
        dash(),
        opt(row.ttft_ms, format::ms_whole),
        dash(),
        dash(),
        completed,
        dash(),
        dash(),
    ]
}

/// ` (3 repeats, CV 1.2 %)`: how often a cell was measured and how much its tok/s varied.
pub(crate) fn repeats_note(r: &crate::model::Repeats) -> String {
    let cv = r
        .total_tokens_per_s
        .cv
        .map(|cv| format!(", CV {} %", format::grouped(cv * 100.0, 1)))
        .unwrap_or_default();
    format!(" ({} repeats{cv})", r.count)
}

fn decode_measurement_row(cell: &DecodeCell) -> [String; 12] {
    let mut status = match &cell.status {
        CellStatus::Error { .. } => status_text(&cell.status),
        _ => cell.status_label(),
    };
    if let Some(r) = cell.measurements.as_ref().and_then(|m| m.repeats.as_ref()) {
        status.push_str(&repeats_note(r));
    }
    let head = [
        "Sustained decode".to_owned(),
        cell.context.to_string(),
        cell.concurrency.to_string(),
        status,
    ];
    let tail = match &cell.measurements {
        Some(m) => [
            match &m.band {
                Some(b) => format::predicted(m.total_tokens_per_s, Some(b.total_tokens_per_s)),
                None => {
                    format::tokens_per_s_pm(m.total_tokens_per_s, m.total_tokens_per_s_interval())
                }
            },
            match &m.band {
                Some(b) => {
                    format::predicted(m.per_request_tokens_per_s, Some(b.per_request_tokens_per_s))
                }
                None => format::grouped(m.per_request_tokens_per_s, 1),
            },
            format::ms_whole(m.ttft_ms.p50),
            format::ms_tenths(m.time_between_tokens_ms.p50),
            format::grouped(m.average_active_requests, 1),
            format::count(m.completed_requests),
            format::count(m.output_tokens.get()),
            format::seconds(m.measured_s),
        ],
        None => std::array::from_fn(|_| DASH.to_owned()),
    };
    let mut row: [String; 12] = Default::default();
    for (slot, text) in row.iter_mut().zip(head.into_iter().chain(tail)) {
        *slot = text;
    }
    row
}

/// Memory in GiB, decimals only when needed: `24 GiB`, `23.58 GiB`.
pub(crate) fn memory(m: ByteSize) -> String {
    if m.get() < 1 << 30 {
        return m.to_string();
    }
    let text = format!("{:.2}", m.as_gib_f64());
    let text = text.trim_end_matches('0').trim_end_matches('.');
    format!("{text} GiB")
}

fn join_tokens(list: &[Tokens]) -> String {
    list.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

fn opt(v: Option<f64>, f: fn(f64) -> String) -> String {
    v.map_or_else(|| DASH.to_owned(), f)
}
