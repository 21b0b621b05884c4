//! Do a window's 95 % intervals cover the truth at about their nominal rate?
//! Sustained-decode cells of the seed's simulator profile run in virtual
//! time with noisy steps, each over many seeds. Per cell and figure:
//! `coverage`, how often the stated interval held the truth, with that
//! share's own Wilson interval; `½ width`, how often it would have at half
//! its width (near `coverage`: the intervals are wider than they need be);
//! `of mean`, how often it held the mean of the seeds' own estimates (the
//! figure as this window measures it: high here and low against the truth
//! means the cell is not stationary, not that the interval is too narrow);
//! `±median`, the median half-width over the estimate; `bias` and `sd`, the
//! estimates' mean and spread against the truth. Method and figures:
//! `docs/metrics.md`, "Checked on the simulator".
//!
//! `cargo bench -p speedmatrix-runner --bench coverage` (or `cargo xtask perf
//! -p speedmatrix-runner`). `COVERAGE_SEEDS=N` sets the seeds per cell
//! (default 400); `COVERAGE_CELLS=16x0/256@5,128x0/256@5` runs only the
//! cells named (streams x context / max_tokens @ step cv %).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

mod check;

use std::time::{Duration, Instant};

use check::{Cell, Figure, Row, coverage, truth, wilson};
use speedmatrix_sim::{Profile, RTX3090_QWEN35_4B_FP8};

/// A realistic window.
const WINDOW: Duration = Duration::from_secs(30);
/// The truth's window, in cell windows, and the seeds it is split over.
const TRUTH_WINDOWS: u32 = 60;
const TRUTH_RUNS: u32 = 4;
/// Seeds per cell.
const SEEDS: u64 = 400;
/// Noise on each step's duration, unless a cell says otherwise.
const CV: f64 = 0.05;

fn cells() -> Vec<Cell> {
    let seed = Profile::builtin(RTX3090_QWEN35_4B_FP8).unwrap();
    let cell = |streams: u32, prompt_tokens: u32, max_tokens: u32, cv: f64| Cell {
        label: format!("{streams}x{prompt_tokens}/{max_tokens}@{:.0}", cv * 100.0),
        profile: seed.clone(),
        streams,
        prompt_tokens,
        max_tokens,
        window: WINDOW,
        cv,
    };
    vec![
        // Requests that turn over within the window: stationary cells.
        cell(1, 0, 256, CV),
        cell(16, 0, 256, CV),
        cell(128, 0, 256, CV),
        cell(16, 16_384, 256, CV),
        cell(16, 0, 256, 0.01),
        cell(16, 0, 256, 0.20),
        // The runner's default max_tokens: requests outlive the window.
        cell(1, 0, 8_192, CV),
        cell(16, 0, 8_192, CV),
    ]
}

fn main() {
    let seeds: u64 = std::env::var("COVERAGE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS);
    let only: Option<Vec<String>> = std::env::var("COVERAGE_CELLS")
        .ok()
        .map(|s| s.split(',').map(str::to_owned).collect());
    println!(
        "interval coverage on {RTX3090_QWEN35_4B_FP8}: {} s windows, {seeds} seeds a cell, \
         truth over {TRUTH_WINDOWS} windows ({TRUTH_RUNS} other seeds); cell = \
         streams x context / max_tokens @ step cv %",
        WINDOW.as_secs(),
    );
    println!(
        "{:<18} {:<18} {:>10} {:>7} {:>8} {:>13} {:>8} {:>9} {:>8} {:>8} {:>7}",
        "cell",
        "figure",
        "truth",
        "stated",
        "coverage",
        "(Wilson 95 %)",
        "½ width",
        "of mean",
        "±median",
        "bias",
        "sd"
    );
    let started = Instant::now();
    for cell in cells() {
        if only.as_ref().is_some_and(|o| !o.contains(&cell.label)) {
            continue;
        }
        let truth = truth(&cell, TRUTH_WINDOWS, TRUTH_RUNS).unwrap();
        for row in coverage(&cell, truth, seeds).unwrap() {
            print_row(&cell.label, &row);
        }
    }
    println!("took {:.1} s", started.elapsed().as_secs_f64());
}

fn print_row(label: &str, row: &Row) {
    let truth = match row.figure {
        Figure::Total | Figure::PerRequest => format!("{:.2}", row.truth),
        Figure::TtftP50 | Figure::ItlP50 => format!("{:.2} ms", row.truth * 1e3),
    };
    // A share of no stated intervals is no share at all.
    let stated = row.stated > 0;
    let pct = |x: f64| match stated {
        true => format!("{:.1} %", x * 100.0),
        false => "—".to_owned(),
    };
    let (lo, hi) = wilson(row.covered, row.stated);
    let wilson = match stated {
        true => format!("{:.1}–{:.1}", lo * 100.0, hi * 100.0),
        false => "—".to_owned(),
    };
    let half = match stated {
        true => format!("{:.2} %", row.median_half * 100.0),
        false => "—".to_owned(),
    };
    println!(
        "{label:<18} {:<18} {truth:>10} {:>7} {:>8} {wilson:>13} {:>8} {:>9} {half:>8} {:>8} {:>7}",
        row.figure.name(),
        format!("{}/{}", row.stated, row.seeds),
        pct(row.coverage()),
        pct(row.coverage_at_half()),
        pct(row.coverage_of_mean()),
        format!("{:+.2} %", row.bias * 100.0),
        format!("{:.2} %", row.sd * 100.0),
    );
}
