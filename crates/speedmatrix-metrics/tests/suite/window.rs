//! Window metrics on synthetic timelines with hand-computed answers.

use std::time::Duration;

use proptest::prelude::*;
use speedmatrix_metrics::{
    Chunk, GaugeSample, MetricsError, Outcome, RequestTimeline, Timestamp, TokenSource, Usage,
    Window, average_gauges, window_metrics,
};
use speedmatrix_units::Tokens;

fn ms(n: u64) -> Timestamp {
    Timestamp::from_millis(n)
}

fn window(start_ms: u64, len_ms: u64) -> Window {
    Window::new(ms(start_ms), Duration::from_millis(len_ms)).unwrap()
}

/// A stream sent at `sent`, whose chunks arrive at `first`, `first + step`,
/// ... (`chunks` of them), each carrying `per_chunk` tokens of cumulative usage.
fn stream(sent: u64, first: u64, step: u64, chunks: u64, per_chunk: u64) -> RequestTimeline {
    let last = first + step * (chunks - 1);
    let mut t = RequestTimeline::new(ms(sent), ms(last), Outcome::Cancelled);
    t.chunks = (0..chunks)
        .map(|i| {
            let usage = Usage::new(Tokens::new(100), Tokens::new(per_chunk * (i + 1)));
            Chunk::content(ms(first + step * i)).with_usage(usage)
        })
        .collect();
    t
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn steady_100_tok_per_s_over_10_s_is_exactly_100() {
    // Tokens every 10 ms from 1.000 s to 20.990 s; window (5 s, 15 s].
    let m = window_metrics(&[stream(900, 1_000, 10, 2_000, 1)], window(5_000, 10_000)).unwrap();
    assert_eq!(m.total_output_rate.get(), 100.0);
    assert_eq!(m.per_request_rate.unwrap().get(), 100.0);
    assert_eq!(m.output_tokens, Tokens::new(1_000));
    assert_eq!(m.average_active_requests, 1.0);
    assert_eq!(m.average_decoding_requests, 1.0);
    assert_eq!(m.requests, 1);
    assert_eq!(m.completed_requests, 0);
    assert_eq!(m.ttft.unwrap().p50, Duration::from_millis(100));
    let tbt = m.time_between_tokens.unwrap();
    assert_eq!(tbt.count, 1_000);
    assert_eq!(
        (tbt.min, tbt.max),
        (Duration::from_millis(10), Duration::from_millis(10))
    );
    assert_eq!(m.window.duration(), Duration::from_secs(10));
    // 20 parts of 0.5 s, each at the steady rate.
    assert_eq!(m.output_rate_series.len(), 20);
    assert!(m.output_rate_series.iter().all(|r| close(r.get(), 100.0)));
}

#[test]
fn n_streams_through_the_window_give_n_times_per_request() {
    // Four streams at 50 tok/s with staggered phases, all decoding through (2 s, 12 s].
    let streams: Vec<RequestTimeline> = (0..4)
        .map(|i| stream(i * 5, 500 + i * 5, 20, 1_000, 1))
        .collect();
    let m = window_metrics(&streams, window(2_000, 10_000)).unwrap();
    assert!(close(m.total_output_rate.get(), 200.0));
    assert!(close(m.per_request_rate.unwrap().get(), 50.0));
    assert!(close(m.average_active_requests, 4.0));
    assert!(close(m.average_decoding_requests, 4.0));
    assert_eq!(m.output_tokens, Tokens::new(2_000));
}

#[test]
fn speculative_chunks_count_every_token() {
    // A chunk of 3 tokens every 30 ms is 100 tok/s with a token every 10 ms.
    let m = window_metrics(&[stream(0, 100, 30, 1_000, 3)], window(1_000, 6_000)).unwrap();
    assert!(close(m.total_output_rate.get(), 100.0));
    assert!(close(m.per_request_rate.unwrap().get(), 100.0));
    assert_eq!(
        m.time_between_tokens.unwrap().p99,
        Duration::from_millis(10)
    );
    assert_eq!(m.chunk_gaps.unwrap().p50, Duration::from_millis(30));
}

#[test]
fn edges_interpolate_inside_a_chunk_gap() {
    // Chunks of 4 tokens at 0, 100, 200, ... ms. Window (50 ms, 250 ms]:
    // C(50) = 4 + 0.5 * 4 = 6, C(250) = 12 + 0.5 * 4 = 14, so 8 tokens in 0.2 s.
    let m = window_metrics(&[stream(0, 0, 100, 10, 4)], window(50, 200)).unwrap();
    assert!(
        close(m.total_output_rate.get(), 40.0),
        "{:?}",
        m.total_output_rate
    );
    assert_eq!(m.output_tokens, Tokens::new(8));
    // Intervals whose chunk arrived in the window: the chunks at 100 and 200 ms,
    // 4 intervals of 25 ms each.
    let tbt = m.time_between_tokens.unwrap();
    assert_eq!(tbt.count, 8);
    assert_eq!(tbt.p50, Duration::from_millis(25));
    assert_eq!(m.chunk_gaps.unwrap().count, 2);
    assert_eq!(m.chunk_gaps.unwrap().p50, Duration::from_millis(100));
}

#[test]
fn first_chunk_counts_as_a_step_not_a_ramp() {
    // Sent at 0, first token at 500 ms, then one per 100 ms until 1,400 ms.
    let t = stream(0, 500, 100, 10, 1);
    // (0, 499]: nothing arrived. (0, 500]: the first token did.
    let before = window_metrics(std::slice::from_ref(&t), window(0, 499)).unwrap();
    assert_eq!(before.total_output_rate.get(), 0.0);
    assert_eq!(before.token_source, None);
    assert_eq!(before.per_request_rate, None);
    let upto = window_metrics(std::slice::from_ref(&t), window(0, 500)).unwrap();
    assert_eq!(upto.output_tokens, Tokens::new(1));
    // (0, 550]: the first token plus half the next.
    let mid = window_metrics(&[t], window(0, 550)).unwrap();
    assert!(close(mid.total_output_rate.get() * 0.55, 1.5));
    // Decoding only from 500 to 550 ms: half a token in 50 ms.
    assert!(close(mid.per_request_rate.unwrap().get(), 10.0));
    assert!(close(mid.average_decoding_requests, 50.0 / 550.0));
    assert_eq!(mid.average_active_requests, 1.0);
}

#[test]
fn flat_after_the_last_chunk_of_a_cancelled_stream() {
    // One token per 100 ms from 100 to 1,000 ms, then the stream is cancelled.
    let m = window_metrics(&[stream(0, 100, 100, 10, 1)], window(500, 1_000)).unwrap();
    // C(1500) - C(500) = 10 - 5 tokens over 1 s.
    assert!(close(m.total_output_rate.get(), 5.0));
    // Decoding from 500 to 1,000 ms only: 5 tokens in 0.5 s.
    assert!(close(m.per_request_rate.unwrap().get(), 10.0));
    assert!(close(m.average_active_requests, 0.5));
}

#[test]
fn active_requests_completions_and_failures() {
    let w = window(1_000, 1_000);
    let mut done = stream(0, 100, 100, 15, 1); // ends at 1,500 ms
    done.outcome = Outcome::Finished {
        finish_reason: Some("length".to_owned()),
    };
    let mut restarted = stream(1_500, 1_600, 100, 10, 1); // 1,500..2,500 ms
    restarted.outcome = Outcome::Cancelled;
    let mut failed = RequestTimeline::new(
        ms(1_200),
        ms(1_300),
        Outcome::Failed {
            kind: "http_status".to_owned(),
        },
    );
    failed.headers_at = Some(ms(1_300));
    let long_ago = stream(0, 10, 10, 5, 1); // over before the window
    let m = window_metrics(&[done, restarted, failed, long_ago], w).unwrap();
    // A failed request is counted as failed and left out of everything else.
    assert_eq!(m.requests, 2);
    assert_eq!(m.completed_requests, 1);
    assert_eq!(m.failed_requests, 1);
    // 0.5 s + 0.5 s of activity in a 1 s window.
    assert!(close(m.average_active_requests, 1.0));
    // TTFTs of the overlapping requests that got tokens: 100 ms and 100 ms.
    let ttft = m.ttft.unwrap();
    assert_eq!(ttft.count, 2);
    assert_eq!(ttft.p50, Duration::from_millis(100));
}

#[test]
fn window_token_source_is_the_weakest() {
    let exact = stream(0, 100, 100, 20, 1);
    let mut counted = RequestTimeline::new(ms(0), ms(2_000), Outcome::Cancelled);
    counted.chunks = (1..=20).map(|i| Chunk::content(ms(100 * i))).collect();
    let m = window_metrics(&[exact.clone(), counted], window(500, 1_000)).unwrap();
    assert_eq!(m.token_source, Some(TokenSource::ChunkCount));
    let m = window_metrics(&[exact], window(500, 1_000)).unwrap();
    assert_eq!(m.token_source, Some(TokenSource::ContinuousUsage));
}

#[test]
fn a_bad_timeline_fails_the_window() {
    let mut t = stream(0, 100, 100, 5, 1);
    let mut chunks: Vec<Chunk> = t.chunks.iter().collect();
    chunks.swap(1, 3);
    t.chunks = chunks.into();
    assert!(matches!(
        window_metrics(&[t], window(0, 1_000)),
        Err(MetricsError::InvalidTimeline { .. })
    ));
}

#[test]
fn gauges_average_the_samples_in_the_window() {
    let g = |at, running, waiting| GaugeSample {
        at: ms(at),
        running,
        waiting,
    };
    let samples = [
        g(0, 99.0, 9.0),
        g(1_000, 4.0, 0.0),
        g(1_500, 3.0, 1.0),
        g(2_000, 2.0, 2.0),
    ];
    let avg = average_gauges(&samples, window(1_000, 1_000))
        .unwrap()
        .unwrap();
    assert_eq!((avg.running, avg.waiting, avg.samples), (3.0, 1.0, 3));
    assert_eq!(average_gauges(&samples, window(5_000, 10)).unwrap(), None);
    // 3 running of 4 with one waiting on average: queueing by both rules.
    assert!(avg.shows_queueing(4));
    let steady = GaugeSample {
        at: ms(1_200),
        running: 4.0,
        waiting: 0.0,
    };
    let dip = GaugeSample {
        at: ms(1_400),
        running: 3.0,
        waiting: 0.0,
    };
    let a = average_gauges(&[steady, steady, steady, dip], window(1_000, 1_000))
        .unwrap()
        .unwrap();
    assert!(!a.shows_queueing(4), "a replacement's dip is not queueing");
    assert!(matches!(
        average_gauges(&[g(1_000, f64::NAN, 0.0)], window(0, 10)),
        Err(MetricsError::NotFinite { index: 0, .. })
    ));
}

/// Up to 6 streams with random starts, chunk gaps and tokens per chunk.
fn streams() -> impl Strategy<Value = Vec<RequestTimeline>> {
    let one = (
        0u64..2_000,
        0u64..500,
        prop::collection::vec((0u64..80, 0u64..5), 1..60),
    )
        .prop_map(|(sent, ttft, steps)| {
            let mut at = sent + ttft;
            let mut cum = 0;
            let chunks: Vec<Chunk> = steps
                .iter()
                .map(|(dt, k)| {
                    at += dt;
                    cum += k;
                    // A chunk that brings no token brings no text either.
                    let chunk = if *k == 0 {
                        Chunk::empty(ms(at))
                    } else {
                        Chunk::content(ms(at))
                    };
                    chunk.with_usage(Usage::new(Tokens::new(10), Tokens::new(cum)))
                })
                .collect();
            let mut t = RequestTimeline::new(ms(sent), ms(at + 5), Outcome::Cancelled);
            t.chunks = chunks.into();
            t
        });
    prop::collection::vec(one, 1..6)
}

fn tokens_in(ts: &[RequestTimeline], w: Window) -> f64 {
    let m = window_metrics(ts, w).unwrap();
    m.total_output_rate.get() * w.duration().as_secs_f64()
}

proptest! {
    #[test]
    fn token_counts_add_up_when_a_window_is_split(
        ts in streams(), start in 0u64..3_000, a in 1u64..3_000, b in 1u64..3_000,
    ) {
        let whole = tokens_in(&ts, window(start, a + b));
        let parts = tokens_in(&ts, window(start, a)) + tokens_in(&ts, window(start + a, b));
        prop_assert!((whole - parts).abs() <= 1e-6 * (1.0 + whole), "{whole} vs {parts}");
    }

    #[test]
    fn the_rate_series_parts_add_up_to_the_window(
        ts in streams(), start in 0u64..3_000, len in 1u64..40_000,
    ) {
        let w = window(start, len);
        let m = window_metrics(&ts, w).unwrap();
        let parts = m.output_rate_series.len();
        prop_assert_eq!(parts, speedmatrix_metrics::series_bins(w.duration()));
        let part_s = w.duration().as_secs_f64() / parts as f64;
        let sum: f64 = m.output_rate_series.iter().map(|r| r.get() * part_s).sum();
        let whole = m.total_output_rate.get() * w.duration().as_secs_f64();
        prop_assert!((whole - sum).abs() <= 1e-6 * (1.0 + whole), "{whole} vs {sum}");
    }

    #[test]
    fn a_window_over_everything_counts_every_token(ts in streams()) {
        let all: u64 = ts
            .iter()
            .map(|t| t.chunks.last().and_then(|c| c.usage).map_or(0, |u| u.completion_tokens.get()))
            .sum();
        // Every chunk arrives before 2,000 + 500 + 60 * 80 ms.
        let got = tokens_in(&ts, window(0, 8_000));
        prop_assert!((got - all as f64).abs() < 1e-6);
    }

    #[test]
    fn total_rate_is_at_most_the_sum_of_stream_rates(
        ts in streams(), start in 0u64..3_000, len in 1u64..3_000,
    ) {
        let w = window(start, len);
        // Where applicable: no stream's first token falls inside the window, so
        // every in-window token is a decoding token.
        let applicable = ts.iter().all(|t| {
            t.chunks.iter().find(|c| c.usage.is_some_and(|u| u.completion_tokens.get() > 0))
                .is_none_or(|c| !w.contains(c.at))
        });
        prop_assume!(applicable);
        let total = window_metrics(&ts, w).unwrap().total_output_rate.get();
        let sum: f64 = ts
            .iter()
            .filter_map(|t| window_metrics(std::slice::from_ref(t), w).unwrap().per_request_rate)
            .map(|r| r.get())
            .sum();
        prop_assert!(total <= sum * (1.0 + 1e-9) + 1e-9, "{total} > {sum}");
    }

    #[test]
    fn per_request_times_decoding_requests_is_total_when_no_stream_starts_inside(
        ts in streams(), start in 0u64..3_000, len in 1u64..3_000,
    ) {
        let w = window(start, len);
        let m = window_metrics(&ts, w).unwrap();
        let applicable = ts.iter().all(|t| {
            t.chunks.iter().find(|c| c.usage.is_some_and(|u| u.completion_tokens.get() > 0))
                .is_none_or(|c| !w.contains(c.at))
        });
        prop_assume!(applicable);
        let product = m.per_request_rate.map_or(0.0, |r| r.get()) * m.average_decoding_requests;
        prop_assert!(close(product, m.total_output_rate.get()), "{product} vs {:?}", m.total_output_rate);
    }
}

#[test]
fn a_steady_window_has_a_point_interval_and_a_noisy_one_a_wide_one() {
    let steady =
        window_metrics(&[stream(900, 1_000, 10, 2_000, 1)], window(5_000, 10_000)).unwrap();
    let i = steady.intervals;
    assert_eq!(i.batches, 10);
    let total = i.total_output_rate.unwrap();
    assert!(
        close(total.low, 100.0) && close(total.high, 100.0),
        "{total:?}"
    );
    assert!(i.per_request_rate.unwrap().contains(100.0));
    // One request: no interval of a median can be stated.
    assert_eq!(i.ttft_p50, None);
    // Every gap is 10 ms: the interval is the latency floor.
    let tbt = i.time_between_tokens_p50.unwrap();
    assert!(tbt.contains(0.010), "{tbt:?}");
    assert!(
        close(tbt.half_width(), 0.010 * speedmatrix_metrics::LATENCY_FLOOR),
        "{tbt:?}"
    );

    // Fast for the first half (5 ms a token), slow for the second (20 ms).
    let mut t = RequestTimeline::new(ms(0), ms(10_000), Outcome::Cancelled);
    let mut at = 0;
    let mut n = 0;
    let mut chunks = Vec::new();
    while at < 10_000 {
        at += if at < 5_000 { 5 } else { 20 };
        n += 1;
        chunks
            .push(Chunk::content(ms(at)).with_usage(Usage::new(Tokens::new(100), Tokens::new(n))));
    }
    t.chunks = chunks.into_iter().collect();
    let noisy = window_metrics(&[t], window(0, 10_000)).unwrap();
    let total = noisy.intervals.total_output_rate.unwrap();
    assert!(total.contains(noisy.total_output_rate.get()));
    // Batches of 200 and of 50 tok/s: a wide interval around 125 tok/s.
    assert!(total.half_width() > 40.0, "{total:?}");
}

#[test]
fn the_median_ttft_interval_is_between_order_statistics() {
    // 20 streams whose TTFTs are 10, 20, ..., 200 ms.
    let streams: Vec<_> = (1..=20).map(|k| stream(0, 10 * k, 10, 1_000, 1)).collect();
    let m = window_metrics(&streams, window(1_000, 5_000)).unwrap();
    let i = m.intervals.ttft_p50.unwrap();
    // Ranks 6 and 15 of 20 (wider than the 2 % floor around 105 ms).
    assert!(close(i.low, 0.060) && close(i.high, 0.150), "{i:?}");
    assert!(i.contains(m.ttft.unwrap().p50.as_secs_f64()));
}
