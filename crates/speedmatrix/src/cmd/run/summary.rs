//! `speedmatrix run --json`: the run's result as one JSON line on standard output, for
//! scripts that would otherwise parse the human summary on stderr. It adds nothing the
//! run's files do not hold: where they are, how the run ended, and its best cell.

use std::path::Path;

use serde_json::{Value, json};
use speedmatrix_report::{CellStatus, Report};
use speedmatrix_runner::{RunOutcome, StopReason};

/// The one-line summary; `exit_code` is the code the run exits with.
pub(crate) fn json_line(dir: &Path, outcome: &RunOutcome, exit_code: u8) -> String {
    let r = &outcome.report;
    let statuses: Vec<&CellStatus> = match &r.load {
        Some(load) => load.cells.iter().map(|c| &c.status).collect(),
        None => r.decode.iter().map(|c| &c.status).collect(),
    };
    let count = |f: fn(&CellStatus) -> bool| statuses.iter().filter(|s| f(s)).count();
    let stopped = match &outcome.stopped {
        None => Value::Null,
        Some(StopReason::Cancelled) => json!("interrupted"),
        Some(reason) => json!(reason.to_string()),
    };
    let line = json!({
        "schema_version": r.schema_version,
        "dir": dir.display().to_string(),
        "run_json": dir.join("run.json").display().to_string(),
        "kind": r.load.as_ref().map_or("decode", |l| l.mode.as_str()),
        "cells": statuses.len(),
        "cells_measured": count(CellStatus::is_valid),
        "cells_failed": count(|s| matches!(s, CellStatus::Error { .. })),
        "prefill_points": r.prefill.len(),
        "prefill_points_failed": r.prefill.iter().filter(|p| matches!(p.status, CellStatus::Error { .. })).count(),
        "complete": outcome.complete,
        "stopped": stopped,
        "exit_code": exit_code,
        "best": best(r),
    });
    // serde_json writes no newline inside a value: one line.
    line.to_string() + "\n"
}

/// The measured cell with the highest output tok/s, with its interval where it has one.
fn best(r: &Report) -> Value {
    if let Some(load) = &r.load {
        return load
            .cells
            .iter()
            .filter(|c| c.status.is_valid())
            .filter_map(|c| c.measurements.as_ref().map(|m| (c, m)))
            .max_by(|a, b| a.1.output_tokens_per_s.total_cmp(&b.1.output_tokens_per_s))
            .map_or(Value::Null, |(c, m)| {
                json!({
                    "context_tokens": c.context.get(),
                    "requests": c.requests,
                    "rate_per_s": c.rate_per_s,
                    "output_tokens_per_s": m.output_tokens_per_s,
                })
            });
    }
    r.decode
        .iter()
        .filter(|c| c.status.is_valid())
        .filter_map(|c| c.measurements.as_ref().map(|m| (c, m)))
        .max_by(|a, b| a.1.total_tokens_per_s.total_cmp(&b.1.total_tokens_per_s))
        .map_or(Value::Null, |(c, m)| {
            let ci = m
                .intervals
                .and_then(|i| i.total_tokens_per_s)
                .map(|i| json!([i.low, i.high]));
            json!({
                "context_tokens": c.context.get(),
                "concurrency": c.concurrency.get(),
                "total_tokens_per_s": m.total_tokens_per_s,
                "total_tokens_per_s_ci95": ci,
            })
        })
}
