//! The footnotes under a page's tables: what "Over capacity" means, where token counts came
//! from, which figures are estimates, and every flag and error a cell carries.

use super::plural;
use crate::format;
use crate::model::{
    CellStatus, DecodeCell, MAX_PLAIN_UNCERTAINTY_PCT, PrefillMode, Report, TokenCountSource,
};

/// Footnotes under the tables, each a sentence.
pub(crate) fn footnotes(report: &Report) -> Vec<String> {
    let mut notes = vec![
        "Over capacity: not run because this many requests at this context would exceed the \
         server's KV cache."
            .to_owned(),
    ];
    if let Some(cap) = &report.capacity {
        notes.push(format!(
            "The over-capacity rule: {}.",
            cap.rule.trim_end_matches('.')
        ));
    }
    if let Some(server) = report.client.as_ref().and_then(|c| c.local_server.as_ref())
        && let Some(shared) = &server.shared_cores
    {
        notes.push(format!(
            "The client shared cores {shared} with the server process on the same host (pid {}, \
             cores {}): the two competed for CPU, which can lower the numbers. Pin them apart \
             (the client with --client-cores, the server with taskset or numactl).",
            server.pid, server.cores
        ));
    }
    let bound = report
        .decode
        .iter()
        .filter(|d| {
            d.measurements
                .as_ref()
                .and_then(|m| m.client)
                .is_some_and(|c| c.client_bound)
        })
        .count();
    if bound > 0 {
        notes.push(format!(
            "Client-bound: in {} the client was busy at least 80 % of its runtime threads' time \
             during the window, so its own speed may have limited the numbers.",
            plural(bound, "cell", "cells")
        ));
    }
    notes.push(if report.run.decode_cache_warmed {
        "TTFT is measured after the benchmark warms the server's prompt cache, so it mostly \
         excludes prefill."
            .to_owned()
    } else {
        "Decode prompts were not pre-warmed: decode TTFT includes prefill of the prompt.".to_owned()
    });
    notes.push(
        "Latencies are medians (p50); p90 and p99 are in the JSON and CSV. Total tok/s is output \
         across all simultaneous requests."
            .to_owned(),
    );
    if report.decode.iter().any(|c| {
        c.measurements
            .as_ref()
            .is_some_and(|m| m.total_tokens_per_s_interval().is_some())
    }) {
        notes.push(
            "± is the half-width of a 95 % confidence interval: batch means over ten equal \
             parts of the window, or, for a cell measured several times (--repeats), \
             Student's t over its repeats, whose mean the cell shows (CV: their coefficient \
             of variation). Intervals of the other figures are in the JSON and CSV \
             (docs/metrics.md, \"Uncertainty\")."
                .to_owned(),
        );
    }
    notes.push(format!(
        "Sustained decode: each cell keeps its number of requests in flight (a finished request \
         is replaced at once) and is measured over a fixed window of {}. Total tok/s = output \
         tokens arriving inside the window / window length; per request tok/s is the streams' \
         decoding tokens / their decoding time inside the window (so total ≈ N × per request); \
         time between tokens spreads a chunk of k tokens evenly over its gap; average active \
         requests is time-weighted.",
        format::seconds(report.run.window_s)
    ));
    notes.push(match report.run.prefill_mode {
        PrefillMode::Cold => "Prefill: prompt tok/s = server-reported prompt tokens / TTFT of a \
             cold request (nothing cached); TTFT is from sending the request to the first \
             streamed token."
            .to_owned(),
        PrefillMode::Warmup => "Prefill: measured during decode warm-up: the first warm-up \
             request of each context's first cell, sent alone with nothing of its prompt cached; \
             prompt tok/s = server-reported prompt tokens / its TTFT. Contexts without a decode \
             row of their own get a separate cold request."
            .to_owned(),
    });
    notes.push(format!(
        "Output tokens are counted from {}.",
        token_sources(report)
    ));
    notes.extend(estimate_notes(report));
    notes.extend(flag_notes(report));
    notes.extend(error_notes(report));
    notes
}

fn token_sources(report: &Report) -> String {
    let mut sources: Vec<TokenCountSource> = Vec::new();
    for m in report.decode.iter().filter_map(|c| c.measurements.as_ref()) {
        match &m.token_count {
            // Every source any request of the cell used, not only the weakest.
            Some(t) => sources.extend(t.requests_by_source.keys().filter_map(|k| source_named(k))),
            None => sources.push(m.token_count_source),
        }
    }
    sources.sort();
    sources.dedup();
    if sources.is_empty() {
        "server-reported usage where available".to_owned()
    } else {
        sources
            .iter()
            .map(|s| s.describe())
            .collect::<Vec<_>>()
            .join("; in some cells from ")
    }
}

fn source_named(name: &str) -> Option<TokenCountSource> {
    [
        TokenCountSource::UsagePerChunk,
        TokenCountSource::EngineCount,
        TokenCountSource::FinalUsage,
        TokenCountSource::Tokenizer,
        TokenCountSource::ChunkCount,
    ]
    .into_iter()
    .find(|s| s.as_str() == name)
}

/// Where counts are estimates: how, calibrated on what, and how uncertain.
fn estimate_notes(report: &Report) -> Vec<String> {
    let estimated: Vec<String> = report
        .decode
        .iter()
        .filter_map(|c| {
            let m = c.measurements.as_ref().filter(|m| m.is_estimated())?;
            let t = m.token_count.as_ref();
            let method = t
                .and_then(|t| t.estimate_method)
                .unwrap_or(m.token_count_source);
            let share = t.map_or(100.0, |t| t.estimated_share_pct);
            let calibration = match t {
                Some(t) if t.calibration_requests > 0 => format!(
                    "× {:.3} from {} finished requests",
                    t.calibration_factor.unwrap_or(1.0),
                    t.calibration_requests
                ),
                _ => "uncalibrated (no finished request reported usage)".to_owned(),
            };
            let uncertainty = t
                .and_then(|t| t.uncertainty_pct)
                .map_or_else(|| "unknown".to_owned(), |u| format!("±{u:.1} %"));
            let how = match method {
                TokenCountSource::ChunkCount => "by counting chunks",
                _ => "by re-tokenizing each stream's text",
            };
            Some(format!(
                "{} × {}: {share:.0} % of tokens estimated {how}, {calibration}, uncertainty {uncertainty}",
                c.context, c.concurrency,
            ))
        })
        .collect();
    if estimated.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "≈ Estimated output tokens: the server sent no count for streams cancelled at the end of \
         the window, so their tokens were estimated and calibrated on finished requests of the \
         same cell with a server count (the uncertainty is the half-width of a 95 % interval; a \
         cell over ±{MAX_PLAIN_UNCERTAINTY_PCT:.0} % or uncalibrated is marked Estimated, not \
         Valid). {}.",
        estimated.join("; ")
    )]
}

fn flag_notes(report: &Report) -> Vec<String> {
    let cells_where = |pred: &dyn Fn(&DecodeCell) -> bool| -> Vec<String> {
        report
            .decode
            .iter()
            .filter(|c| pred(c))
            .map(|c| format!("{} × {}", c.context, c.concurrency))
            .collect()
    };
    let mut notes = Vec::new();
    let partial = cells_where(&|c| matches!(c.status, CellStatus::Partial { .. }));
    if !partial.is_empty() {
        notes.push(format!(
            "‡ Partial: some requests failed in {}; the numbers are those of the good requests \
             (failed ones are counted, never averaged in), and at least one stream ran the whole \
             window.",
            partial.join(", ")
        ));
    }
    let queued = cells_where(&|c| c.measurements.as_ref().is_some_and(|m| m.queueing_detected));
    if !queued.is_empty() {
        notes.push(format!(
            "† The server queued requests (some were waiting, not running) during the window of: {}. \
             Those cells measure fewer requests at once than their column says.",
            queued.join(", ")
        ));
    }
    let mismatched = cells_where(&|c| {
        c.measurements
            .as_ref()
            .is_some_and(|m| m.prompt_token_mismatches > 0)
    });
    if !mismatched.is_empty() {
        notes.push(format!(
            "† The server counted a different prompt length than was sent in: {}.",
            mismatched.join(", ")
        ));
    }
    for row in &report.prefill {
        if let Some(reported) = row.prompt_tokens_reported
            && reported != row.prompt_tokens_requested
        {
            notes.push(format!(
                "Prefill at {}: the server counted {} prompt tokens for {} sent.",
                row.context,
                format::count(reported.get()),
                format::count(row.prompt_tokens_requested.get())
            ));
        }
    }
    notes
}

fn error_notes(report: &Report) -> Vec<String> {
    let prefill = report
        .prefill
        .iter()
        .filter(|r| {
            !matches!(
                r.status,
                CellStatus::Valid | CellStatus::OverCapacity { .. }
            )
        })
        .map(|r| format!("Prefill at {}: {}.", r.context, r.status.detail()));
    let decode = report
        .decode
        .iter()
        .filter(|c| {
            !matches!(
                c.status,
                CellStatus::Valid | CellStatus::OverCapacity { .. }
            )
        })
        .map(|c| {
            format!(
                "{} at {} × {}: {}.",
                c.status.label(),
                c.context,
                c.concurrency,
                c.status.detail()
            )
        });
    prefill.chain(decode).collect()
}
