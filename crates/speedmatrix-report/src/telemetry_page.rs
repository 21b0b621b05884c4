//! The telemetry parts of the pages, shared by Markdown and HTML: the
//! run's sources and, per measured cell, what the GPUs, the host and the
//! server did, with the verdicts.

use crate::format;
use crate::model::{
    CellTelemetry, DecodeCell, DecodeMeasurements, Report, ServerStats, VerdictThresholds,
};

/// The telemetry table's columns.
pub(crate) const TELEMETRY_COLUMNS: [&str; 16] = [
    "Context",
    "Concurrency",
    "GPU util mean / max",
    "Power mean / max",
    "Energy",
    "J / token",
    "GPU memory peak",
    "Lowest SM clock",
    "Throttled",
    "Host CPU mean / busiest core",
    "Server tok/s (ours ÷ server)",
    "KV usage max",
    "Preemptions",
    "Prefix-cache hits",
    "Spec. acceptance",
    "Verdicts",
];

/// The run's telemetry sources, for the facts list.
pub(crate) fn telemetry_facts(report: &Report) -> Vec<(&'static str, String)> {
    let Some(t) = &report.telemetry else {
        return Vec::new();
    };
    let mut facts = vec![(
        "GPU source",
        match (&t.gpu_source, &t.gpu_unavailable) {
            (Some(s), _) => format!("{s}, sampled every {} ms", t.interval_ms),
            (None, Some(why)) => format!("none ({why})"),
            (None, None) => "none".to_owned(),
        },
    )];
    for g in &t.gpus {
        let mut parts = vec![g.name.clone()];
        if let Some(d) = &g.driver_version {
            parts.push(format!("driver {d}"));
        }
        if let Some(r) = &g.runtime_version {
            parts.push(format!("CUDA {r}"));
        }
        if let Some(p) = g.power_limit_w {
            parts.push(format!("power limit {p:.0} W"));
        }
        if let (Some(gen_), Some(w)) = (g.pcie_generation, g.pcie_width) {
            parts.push(format!("PCIe gen {gen_} ×{w}"));
        }
        facts.push(("GPU", format!("{}: {}", g.index, parts.join(", "))));
    }
    facts.push((
        "Server metrics",
        format!(
            "/metrics scraped every {} ms inside each window and at its edges",
            t.metrics_interval_ms
        ),
    ));
    if let Some(f) = &t.samples_file {
        facts.push((
            "Raw samples",
            format!("{f} (JSON Lines, one sample a line)"),
        ));
    }
    facts
}

/// One row per measured cell that has telemetry.
pub(crate) fn telemetry_rows(report: &Report) -> Vec<[String; 16]> {
    report
        .decode
        .iter()
        .filter_map(|c| {
            let m = c.measurements.as_ref()?;
            Some((c, m, m.telemetry.as_ref()?))
        })
        .map(|(c, m, t)| row(c, m, t))
        .collect()
}

/// The server's own output rate over the window and ours as a share of it.
fn server_rate(m: &DecodeMeasurements) -> String {
    match m.server_counter {
        Some(c) if c.tokens_per_s() > 0.0 => format!(
            "{} ({:.3})",
            format::tokens_per_s(c.tokens_per_s()),
            m.total_tokens_per_s / c.tokens_per_s()
        ),
        _ => "—".to_owned(),
    }
}

fn row(cell: &DecodeCell, m: &DecodeMeasurements, t: &CellTelemetry) -> [String; 16] {
    let dash = || "—".to_owned();
    let per_gpu = |f: &dyn Fn(&crate::model::GpuUse) -> Option<String>| {
        let parts: Vec<String> = t.gpus.iter().filter_map(f).collect();
        if parts.is_empty() {
            dash()
        } else {
            parts.join(" · ")
        }
    };
    let pct = |v: Option<f64>| v.map_or_else(|| "?".to_owned(), |v| format!("{v:.0} %"));
    let watts = |v: Option<f64>| v.map_or_else(|| "?".to_owned(), |v| format!("{v:.0} W"));
    let server = t.server.as_ref();
    [
        cell.context.to_string(),
        cell.concurrency.to_string(),
        per_gpu(&|g| {
            g.utilization_mean_pct.map(|_| {
                format!(
                    "{} / {}",
                    pct(g.utilization_mean_pct),
                    pct(g.utilization_max_pct)
                )
            })
        }),
        per_gpu(&|g| {
            g.power_mean_w
                .map(|_| format!("{} / {}", watts(g.power_mean_w), watts(g.power_max_w)))
        }),
        t.energy_j
            .map_or_else(dash, |e| format!("{} J", format::grouped(e, 0))),
        t.joules_per_output_token
            .map_or_else(dash, |j| format!("{j:.3} J")),
        per_gpu(&|g| g.memory_peak_bytes.map(|b| b.to_string())),
        per_gpu(&|g| g.sm_clock_min_mhz.map(|m| format!("{m} MHz"))),
        per_gpu(&|g| g.throttled.map(|s| format!("{:.1} s", s.any_s))),
        t.host.as_ref().map_or_else(dash, |h| {
            format!("{:.0} % / {:.0} %", h.cpu_mean_pct, h.cpu_busiest_core_pct)
        }),
        server_rate(m),
        server
            .and_then(|s| s.kv_usage_max_pct)
            .map_or_else(dash, |u| format!("{u:.0} %")),
        server
            .and_then(|s| s.preemptions)
            .map_or_else(dash, |p| format!("{p:.0}")),
        server.map_or_else(dash, |s| {
            s.prefix_cache_hit_rate
                .map_or_else(dash, |r| format!("{:.0} %{}", r * 100.0, finished_mark(s)))
        }),
        server.map_or_else(dash, spec_text),
        if t.verdicts.is_empty() {
            dash()
        } else {
            t.verdicts
                .iter()
                .map(|v| v.kind.replace('_', " "))
                .collect::<Vec<_>>()
                .join(", ")
        },
    ]
}

/// Marks counters that cover only the requests that finished in the window.
fn finished_mark(s: &ServerStats) -> &'static str {
    if s.counted_at_finish { " ‡" } else { "" }
}

fn spec_text(s: &ServerStats) -> String {
    let rate = s
        .spec_acceptance_rate
        .map(|r| format!("{:.0} %", r * 100.0));
    let length = s
        .spec_mean_accepted_length
        .map(|l| format!("{l:.2} tok/step"));
    match (rate, length) {
        (None, None) => "—".to_owned(),
        (r, l) => {
            let parts: Vec<String> = r.into_iter().chain(l).collect();
            format!("{}{}", parts.join(", "), finished_mark(s))
        }
    }
}

/// What the telemetry table's numbers are and how the verdicts were given
/// (the thresholds are the run's own, from its telemetry setup).
pub(crate) fn telemetry_note(report: &Report) -> String {
    let rules = report
        .telemetry
        .as_ref()
        .map(|t| t.verdict_rules)
        .unwrap_or_default();
    note_with(&rules)
}

fn note_with(rules: &VerdictThresholds) -> String {
    format!(
        "GPU figures are time-weighted over the window from samples of the GPU source named \
         above; energy is the driver's counter where it has one, else power integrated, and \
         J / token divides it by the window's output tokens. Server tok/s is the server's own \
         output counter over the window, with our total tok/s as a share of it. KV usage, \
         preemptions and speculative acceptance are the server's counters over the window \
         (differences, not lifetime totals); prefix-cache hits are those of the cell's requests, \
         from the streams' start after the warm-up to the window's close. ‡ marks an engine \
         whose counters move only when a request ends, so they cover the requests that \
         finished. Verdicts: throttled (a GPU throttled ≥ {:.0} % of the window), client bound \
         (the client busy ≥ {:.0} % of its threads), server queued (fewer than {:.0} % of the \
         requests running on average, or ≥ {} waiting), preempted (any preemption), cache cold \
         (hit rate ≥ {:.0} points below what the prompts should give); docs/metrics.md has the \
         rules.",
        rules.throttled_pct,
        rules.client_busy_pct,
        rules.running_pct,
        rules.waiting_mean,
        rules.cache_gap_points
    )
}
