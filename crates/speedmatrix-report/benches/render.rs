//! How long parsing and rendering the seed run (5 prefill rows, 48 decode cells) take.
//! Run with `cargo xtask perf -p speedmatrix-report` (or `cargo bench -p speedmatrix-report`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use speedmatrix_report::{Report, Threshold, compare, to_csv, to_html, to_markdown};

const SEED: &str = include_str!("../tests/fixtures/seed-run.json");

/// Runs `f` for at least half a second and prints the mean time per call.
fn time<T>(name: &str, mut f: impl FnMut() -> T) {
    let budget = Duration::from_millis(500);
    let start = Instant::now();
    let mut calls = 0u32;
    while start.elapsed() < budget {
        black_box(f());
        calls += 1;
    }
    let per_call = start.elapsed() / calls;
    println!(
        "{name:<28} {:>10.1} µs/call  ({calls} calls)",
        per_call.as_secs_f64() * 1e6
    );
}

fn main() {
    let report = Report::from_json(SEED).unwrap();
    println!(
        "speedmatrix-report, seed run ({} cells):",
        report.prefill.len() + report.decode.len()
    );
    time("from_json + validate", || {
        Report::from_json(black_box(SEED)).unwrap()
    });
    time("validate", || report.validate().unwrap());
    time("to_json", || report.to_json().unwrap());
    time("to_markdown", || to_markdown(black_box(&report)));
    time("to_csv", || to_csv(black_box(&report)));
    time("to_html", || to_html(black_box(&report)));
    time("compare", || compare(&report, &report, Threshold::DEFAULT));
    println!(
        "html size: {} bytes, markdown size: {} bytes",
        to_html(&report).len(),
        to_markdown(&report).len()
    );
}
