//! How long the metrics take for the largest cell a run measures: 128 streams
//! decoding for 35 s at 60 tok/s each, one token per chunk with continuous usage.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use speedmatrix_metrics::{
    Chunk, Outcome, RequestTimeline, Summary, Timestamp, Usage, Window, request_metrics,
    window_metrics,
};
use speedmatrix_units::Tokens;

const STREAMS: u64 = 128;
const TOKENS_PER_STREAM: u64 = 2_100; // 35 s at 60 tok/s

fn cell() -> Vec<RequestTimeline> {
    (0..STREAMS)
        .map(|i| {
            let sent = Duration::from_micros(i * 997);
            let first = sent + Duration::from_millis(300);
            let step = Duration::from_micros(16_667);
            let at = |n: u64| Timestamp::from_offset(first + step * n as u32);
            let mut t = RequestTimeline::new(
                Timestamp::from_offset(sent),
                at(TOKENS_PER_STREAM),
                Outcome::Cancelled,
            );
            t.chunks = (0..TOKENS_PER_STREAM)
                .map(|n| {
                    let usage = Usage::new(Tokens::new(16_384), Tokens::new(n + 1));
                    Chunk::content(at(n)).with_usage(usage)
                })
                .collect();
            t
        })
        .collect()
}

fn time<T>(label: &str, runs: u32, mut f: impl FnMut() -> T) {
    let start = Instant::now();
    for _ in 0..runs {
        black_box(f());
    }
    let each = start.elapsed() / runs;
    println!("{label:<48} {:>10.3} ms", each.as_secs_f64() * 1e3);
}

fn main() {
    let requests = cell();
    let chunks = STREAMS * TOKENS_PER_STREAM;
    println!("cell: {STREAMS} streams, {chunks} chunks");
    let window = Window::new(Timestamp::from_secs(2), Duration::from_secs(30)).unwrap();
    let m = window_metrics(&requests, window).unwrap();
    println!(
        "check: {} total, {} per request, {} tokens",
        m.total_output_rate,
        m.per_request_rate.unwrap(),
        m.output_tokens
    );
    time("window_metrics (whole cell)", 20, || {
        window_metrics(&requests, window).unwrap()
    });
    time("request_metrics (every request of the cell)", 20, || {
        requests
            .iter()
            .map(|r| request_metrics(r).unwrap().output_tokens.get())
            .sum::<u64>()
    });
    let gaps: Vec<Duration> = (0..1_000_000u64)
        .map(|i| Duration::from_nanos(8_000_000 + (i * 7_919) % 2_000_000))
        .collect();
    time("Summary::of_durations (1,000,000 values)", 5, || {
        Summary::of_durations(&gaps).unwrap()
    });
}
