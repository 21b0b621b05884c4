//! Windows whose streams the server gave no count for: estimates calibrated
//! on the cell's finished requests, checked against the true token counts.

use std::time::Duration;

use proptest::prelude::*;
use speedmatrix_metrics::{
    Chunk, EstimateMethod, Outcome, RequestTimeline, Timestamp, TokenSource, Usage, Window,
    window_metrics,
};
use speedmatrix_units::Tokens;

fn ms(n: u64) -> Timestamp {
    Timestamp::from_millis(n)
}

fn window(start_ms: u64, len_ms: u64) -> Window {
    Window::new(ms(start_ms), Duration::from_millis(len_ms)).unwrap()
}

/// A stream with no usage: chunks every `step` ms from `first`, chunk `i`
/// truly carrying `tokens(i)` tokens of which the tokenizer finds
/// `seen(tokens(i))`.
fn blind(
    sent: u64,
    first: u64,
    step: u64,
    chunks: u64,
    tokens: impl Fn(u64) -> u64,
    seen: impl Fn(u64) -> u32,
) -> (RequestTimeline, u64) {
    let last = first + step * (chunks - 1);
    let mut t = RequestTimeline::new(ms(sent), ms(last), Outcome::Cancelled);
    let mut truth = 0;
    t.chunks = (0..chunks)
        .map(|i| {
            truth += tokens(i);
            Chunk::content(ms(first + step * i)).with_text_tokens(seen(tokens(i)))
        })
        .collect();
    (t, truth)
}

/// The same stream run to its end, with the server's final usage.
fn finished(mut t: RequestTimeline, truth: u64) -> RequestTimeline {
    t.outcome = Outcome::Finished {
        finish_reason: Some("length".into()),
    };
    t.final_usage = Some(Usage::new(Tokens::new(16), Tokens::new(truth)));
    t
}

#[test]
fn no_finished_request_leaves_the_estimate_uncalibrated() {
    let (t, _) = blind(0, 100, 10, 1_000, |_| 3, |k| k as u32);
    let m = window_metrics(&[t], window(2_000, 5_000)).unwrap();
    assert_eq!(m.token_source, Some(TokenSource::Tokenizer));
    let c = m.token_count.calibration.expect("estimated");
    assert_eq!((c.requests, c.factor), (0, 1.0));
    assert_eq!(m.token_count.relative_uncertainty(), None);
    assert!((m.total_output_rate.get() - 300.0).abs() < 1e-6);
}

#[test]
fn calibration_corrects_a_tokenizer_that_undercounts() {
    // The run's tokenizer sees 2 tokens where the server made 3.
    let (live, _) = blind(0, 100, 10, 1_000, |_| 3, |_| 2);
    let cal: Vec<RequestTimeline> = (0..3)
        .map(|i| {
            let (t, truth) = blind(11_000 + i, 11_100, 10, 50, |_| 3, |_| 2);
            finished(t, truth)
        })
        .collect();
    let mut all = vec![live];
    all.extend(cal);
    let m = window_metrics(&all, window(2_000, 5_000)).unwrap();
    let c = m.token_count.calibration.unwrap();
    assert_eq!(c.requests, 3);
    assert!((c.factor - 1.5).abs() < 1e-12);
    assert_eq!(c.relative_uncertainty, Some(0.0));
    assert!((m.total_output_rate.get() - 300.0).abs() < 1e-6);
    assert!((m.per_request_rate.unwrap().get() - 300.0).abs() < 1e-6);
    // Time between tokens follows the calibrated count: 10 ms over 3 tokens.
    let tbt = m.time_between_tokens.unwrap();
    assert!(tbt.p50 > Duration::from_micros(3_300) && tbt.p50 < Duration::from_micros(3_400));
    assert_eq!(m.token_count.relative_uncertainty(), Some(0.0));
    assert_eq!(m.token_count.estimated_share, 1.0);
}

#[test]
fn chunk_counts_win_when_they_agree_better() {
    // Every chunk is exactly 4 tokens (a TGI-like fixed chunking), while the
    // tokenizer's view of each calibration request wanders by ±10 %.
    let (live, _) = blind(0, 100, 10, 1_000, |_| 4, |_| 4);
    let mut all = vec![live];
    for (i, seen) in [3u32, 4, 5].into_iter().enumerate() {
        let (t, truth) = blind(11_000 + i as u64, 11_100, 10, 60, |_| 4, move |_| seen);
        all.push(finished(t, truth));
    }
    let m = window_metrics(&all, window(2_000, 5_000)).unwrap();
    let c = m.token_count.calibration.unwrap();
    assert_eq!(c.method, EstimateMethod::ChunkCount);
    assert_eq!(m.token_source, Some(TokenSource::ChunkCount));
    assert!((m.total_output_rate.get() - 400.0).abs() < 1e-6);
}

#[test]
fn a_spread_of_ratios_gives_an_uncertainty() {
    let (live, _) = blind(0, 100, 10, 1_000, |_| 1, |_| 1);
    let mut all = vec![live];
    for (i, truth) in [99u64, 100, 101, 100].into_iter().enumerate() {
        let (t, _) = blind(11_000 + i as u64, 11_100, 10, 100, |_| 1, |_| 1);
        all.push(finished(t, truth));
    }
    let m = window_metrics(&all, window(2_000, 5_000)).unwrap();
    let u = m.token_count.relative_uncertainty().unwrap();
    // s = 0.8165 %, t(0.975, 3) = 3.182, √(1/4 + 1) = 1.118: ±2.9 %.
    assert!((u - 0.029_05).abs() < 2e-4, "{u}");
}

#[test]
fn mixed_exact_and_estimated_streams_share_the_uncertainty() {
    let exact = {
        let mut t = RequestTimeline::new(ms(0), ms(10_100), Outcome::Cancelled);
        t.chunks = (0..1_000)
            .map(|i| {
                let u = Usage::new(Tokens::new(16), Tokens::new(i + 1));
                Chunk::content(ms(100 + 10 * i)).with_usage(u)
            })
            .collect();
        t
    };
    let (live, _) = blind(0, 100, 10, 1_000, |_| 1, |_| 1);
    let mut all = vec![exact, live];
    for (i, truth) in [98u64, 102].into_iter().enumerate() {
        let (t, _) = blind(11_000 + i as u64, 11_100, 10, 100, |_| 1, |_| 1);
        all.push(finished(t, truth));
    }
    let m = window_metrics(&all, window(2_000, 5_000)).unwrap();
    assert!((m.token_count.estimated_share - 0.5).abs() < 1e-9);
    let whole = m
        .token_count
        .calibration
        .unwrap()
        .relative_uncertainty
        .unwrap();
    assert!((m.token_count.relative_uncertainty().unwrap() - whole / 2.0).abs() < 1e-12);
    assert_eq!(
        m.token_count.requests_by_source[&TokenSource::ContinuousUsage],
        1
    );
    assert_eq!(m.token_count.requests_by_source[&TokenSource::Tokenizer], 1);
}

/// A calibration on a sample (64 of 400 finished requests had their text
/// tokenized) states an interval that holds the truth about as often as it
/// says: in at least 88 of 100 cells, for a nominal 95.
#[test]
fn a_sampled_calibration_states_an_interval_that_holds_the_truth() {
    let mut state = 0x2545_F491_4F6C_DD1D_u64;
    let mut draw = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let (cells, mut held) = (100, 0);
    for _ in 0..cells {
        // Each request truly carries 22–26 tokens on every chunk where the
        // run's tokenizer sees 20: ratios 1.1–1.3, one per request.
        let mut all = Vec::new();
        let mut truth = 0;
        for s in 0..16 {
            let per = 22 + draw(5);
            let (t, n) = blind(s, 100, 10, 100, |_| per, |_| 20);
            truth += n;
            all.push(t);
        }
        for i in 0..400 {
            let per = 22 + draw(5);
            let (mut t, n) = blind(2_000 + i, 2_100 + i, 1, 10, |_| per, |_| 20);
            if i >= 64 {
                t.chunks = t
                    .chunks
                    .iter()
                    .map(|c| Chunk {
                        text_tokens: None,
                        ..c
                    })
                    .collect();
            }
            all.push(finished(t, n));
        }
        // Every chunk of the 16 streams is inside the window.
        let m = window_metrics(&all, window(50, 1_100)).unwrap();
        let c = m.token_count.calibration.unwrap();
        assert_eq!((c.requests, c.finished), (64, 400));
        assert!(c.sample_widening.unwrap() > 1.0);
        let u = m.token_count.relative_uncertainty().unwrap();
        assert!(u > 0.0 && u < 0.1, "{u}");
        let got = m.total_output_rate.get() * 1.1;
        if (got / truth as f64 - 1.0).abs() <= u {
            held += 1;
        }
    }
    assert!(
        held >= 88,
        "the interval held the truth in {held} of {cells} cells"
    );
}

proptest! {
    /// Whatever the chunking (1–5 tokens per chunk, as speculative decoding
    /// or UTF-8 holdback make it) and however the run's tokenizer misjudges
    /// it by a fixed ratio, calibrated estimates equal the truth.
    #[test]
    fn calibrated_estimates_equal_the_truth(
        per_chunk in prop::collection::vec(1u64..6, 20..200),
        seen_num in 1u64..4,
        seen_den in 1u64..4,
        streams in 1usize..5,
        start in 500u64..1_500,
    ) {
        let k = |i: u64| per_chunk[i as usize % per_chunk.len()];
        // The tokenizer sees seen_num/seen_den of every token.
        let seen = |n: u64| (n * seen_num * 60 / seen_den) as u32;
        let scaled = |n: u64| n * 60;
        let mut all = Vec::new();
        let mut truth_in_window = 0.0;
        let w = window(start, 1_000);
        for s in 0..streams as u64 {
            let (t, _) = blind(s, 50 + s, 10, 300, |i| scaled(k(i)), seen);
            // Chunk j arrives at 50 + s + 10 j; its tokens spread over the gap before it.
            let end = w.end().offset().as_secs_f64() * 1e3;
            let begin = w.start().offset().as_secs_f64() * 1e3;
            let curve = |at: f64| -> f64 {
                let mut c = 0.0;
                for j in 0..300u64 {
                    let tj = (50 + s + 10 * j) as f64;
                    let n = scaled(k(j)) as f64;
                    if j == 0 { if at >= tj { c += n; } continue; }
                    let prev = tj - 10.0;
                    if at >= tj { c += n } else if at > prev { c += n * (at - prev) / 10.0 }
                }
                c
            };
            truth_in_window += curve(end) - curve(begin);
            all.push(t);
        }
        for i in 0..2u64 {
            let (t, truth) = blind(5_000 + i, 5_100, 10, 40, |j| scaled(k(j)), seen);
            all.push(finished(t, truth));
        }
        let m = window_metrics(&all, w).unwrap();
        let got = m.total_output_rate.get() * 1.0;
        prop_assert!((got - truth_in_window).abs() <= 1e-6 * truth_in_window.max(1.0) + 1e-6,
            "{got} vs {truth_in_window}");
    }
}
