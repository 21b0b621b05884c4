use proptest::prelude::*;

use super::*;
use crate::{Chunk, Outcome, Usage};

fn ms(n: u64) -> Timestamp {
    Timestamp::from_millis(n)
}

fn timeline(chunks: Vec<Chunk>) -> RequestTimeline {
    let mut t = RequestTimeline::new(ms(0), ms(10_000), Outcome::Cancelled);
    t.chunks = chunks.into();
    t
}

fn finished(chunks: Vec<Chunk>) -> RequestTimeline {
    let mut t = timeline(chunks);
    t.outcome = Outcome::Finished {
        finish_reason: Some("length".into()),
    };
    t
}

fn usage(n: u64) -> Usage {
    Usage::new(Tokens::new(10), Tokens::new(n))
}

fn pairs(a: &Arrivals) -> Vec<(u64, u64)> {
    a.list
        .iter()
        .map(|x| (x.at.offset().as_millis() as u64, x.tokens))
        .collect()
}

#[test]
fn cumulative_usage_gives_per_chunk_tokens() {
    let t = timeline(vec![
        Chunk::empty(ms(5)).with_usage(usage(0)),
        Chunk::reasoning(ms(10)).with_usage(usage(1)),
        Chunk::content(ms(20)).with_usage(usage(4)),
        Chunk::content(ms(30)).with_usage(usage(4)),
        Chunk::empty(ms(31)).with_usage(usage(6)),
    ]);
    let a = Arrivals::of(&t).unwrap();
    assert_eq!(a.source, TokenSource::ContinuousUsage);
    assert_eq!(pairs(&a), vec![(10, 1), (20, 3), (31, 2)]);
    assert_eq!(a.total(), Tokens::new(6));
}

#[test]
fn decreasing_usage_is_an_error() {
    let t = timeline(vec![
        Chunk::content(ms(10)).with_usage(usage(3)),
        Chunk::content(ms(20)).with_usage(usage(2)),
    ]);
    assert!(matches!(
        Arrivals::of(&t),
        Err(MetricsError::TokenCountDecreased { chunk: 1, .. })
    ));
}

#[test]
fn zero_usage_beside_text_is_not_a_running_count() {
    // Ollama's completions: an all-zero usage on every chunk, the real one at the end.
    let mut t = finished(vec![
        Chunk::content(ms(10)).with_usage(usage(0)),
        Chunk::content(ms(20)).with_usage(usage(0)),
        Chunk::empty(ms(21)).with_usage(usage(8)),
    ]);
    t.final_usage = Some(usage(8));
    let a = Arrivals::of(&t).unwrap();
    assert_eq!(a.source, TokenSource::FinalUsage);
    assert_eq!(a.total(), Tokens::new(8));
}

#[test]
fn engine_counts_are_exact_running_counts() {
    let t = timeline(vec![
        Chunk::content(ms(10)).with_engine_count(Tokens::new(1)),
        Chunk::content(ms(20)).with_engine_count(Tokens::new(3)),
        Chunk::content(ms(30)).with_engine_count(Tokens::new(5)),
    ]);
    let a = Arrivals::of(&t).unwrap();
    assert_eq!(a.source, TokenSource::EngineCount);
    assert_eq!(pairs(&a), vec![(10, 1), (20, 2), (30, 2)]);
}

#[test]
fn a_text_chunk_without_usage_falls_back() {
    let mut t = timeline(vec![
        Chunk::content(ms(10)).with_usage(usage(1)),
        Chunk::content(ms(20)),
        Chunk::content(ms(30)),
    ]);
    let a = Arrivals::of(&t).unwrap();
    assert_eq!(a.source, TokenSource::ChunkCount);
    assert_eq!(a.total(), Tokens::new(3));
    // A final usage only counts when the stream finished.
    t.final_usage = Some(usage(7));
    assert_eq!(Arrivals::of(&t).unwrap().source, TokenSource::ChunkCount);
    t.outcome = Outcome::Finished {
        finish_reason: None,
    };
    let a = Arrivals::of(&t).unwrap();
    assert_eq!(a.source, TokenSource::FinalUsage);
    let shares: Vec<u64> = a.list.iter().map(|x| x.tokens).collect();
    assert_eq!(shares, vec![2, 2, 3]);
}

#[test]
fn tokenized_text_estimates_and_weights_the_final_usage() {
    let mut t = timeline(vec![
        Chunk::content(ms(10)).with_text_tokens(1),
        Chunk::content(ms(20)).with_text_tokens(3),
        Chunk::empty(ms(25)),
        Chunk::content(ms(30)).with_text_tokens(0),
        Chunk::content(ms(40)).with_text_tokens(4),
    ]);
    let a = Arrivals::of(&t).unwrap();
    assert_eq!(a.source, TokenSource::Tokenizer);
    assert_eq!(pairs(&a), vec![(10, 1), (20, 3), (40, 4)]);
    let by_chunks = Arrivals::estimate(&t, EstimateMethod::ChunkCount).unwrap();
    assert_eq!(by_chunks.total(), Tokens::new(4));
    t.outcome = Outcome::Finished {
        finish_reason: None,
    };
    t.final_usage = Some(usage(16));
    let a = Arrivals::of(&t).unwrap();
    assert_eq!(a.source, TokenSource::FinalUsage);
    assert_eq!(pairs(&a), vec![(10, 2), (20, 6), (40, 8)]);
    // Without tokenized text on every chunk there is no tokenizer estimate.
    t.chunks.set_text_tokens(0, None);
    assert!(Arrivals::estimate(&t, EstimateMethod::Tokenizer).is_none());
}

#[test]
fn first_chunk_extra_tokens_are_zero_intervals() {
    let t = timeline(vec![
        Chunk::content(ms(100)).with_usage(usage(3)),
        Chunk::content(ms(130)).with_usage(usage(6)),
    ]);
    let a = Arrivals::of(&t).unwrap();
    let iv = a.token_intervals(|_| true);
    let expanded: Vec<Duration> = iv
        .iter()
        .flat_map(|(d, n)| std::iter::repeat_n(*d, *n as usize))
        .collect();
    let mut sorted = expanded.clone();
    sorted.sort();
    let z = Duration::ZERO;
    let ten = Duration::from_millis(10);
    assert_eq!(sorted, vec![z, z, ten, ten, ten]);
    let mut gaps = Vec::new();
    a.chunk_gaps(|_| true, |d| gaps.push(d));
    assert_eq!(gaps, vec![Duration::from_millis(30)]);
}

#[test]
fn scaled_intervals_split_gaps_by_the_estimated_tokens() {
    let t = timeline(vec![Chunk::content(ms(100)), Chunk::content(ms(130))]);
    let a = Arrivals::of(&t).unwrap();
    let mut iv = Vec::new();
    a.scaled_intervals(3.0, |_| true, |_, d, n| iv.push((d, n)));
    let n: u64 = iv.iter().map(|p| p.1).sum();
    assert_eq!(n, 5, "{iv:?}");
    assert!(
        iv.iter()
            .any(|(d, k)| *d == Duration::from_millis(10) && *k == 3)
    );
}

fn any_timeline() -> impl Strategy<Value = RequestTimeline> {
    let chunk = (
        0u64..40,
        any::<bool>(),
        prop::option::of(0u64..6),
        any::<bool>(),
    );
    (prop::collection::vec(chunk, 0..25), 0u64..3, any::<bool>()).prop_map(
        |(steps, end_early, finished)| {
            let (mut at, mut count) = (5u64, 0u64);
            let chunks: Vec<Chunk> = steps
                .iter()
                .map(|&(dt, text, grow, back)| {
                    // Now and then a chunk out of order or a count going down.
                    at = if back && dt % 7 == 0 {
                        at.saturating_sub(3)
                    } else {
                        at + dt
                    };
                    let mut c = if text {
                        Chunk::content(ms(at))
                    } else {
                        Chunk::empty(ms(at))
                    };
                    if let Some(g) = grow {
                        count = if back && g == 5 {
                            count.saturating_sub(1)
                        } else {
                            count + g
                        };
                        c = c.with_usage(usage(count));
                    }
                    c
                })
                .collect();
            let outcome = if finished {
                Outcome::Finished {
                    finish_reason: None,
                }
            } else {
                Outcome::Cancelled
            };
            let mut t =
                RequestTimeline::new(ms(0), ms((at + 10).saturating_sub(end_early * 20)), outcome);
            t.chunks = chunks.into();
            t
        },
    )
}

/// Timelines of a server that counts at the end: chunks with and without
/// text, some tokenized, now and then a usage or an engine count beside
/// them, a chunk out of order; a final usage, finished or not.
fn final_usage_timeline() -> impl Strategy<Value = RequestTimeline> {
    let chunk = (0u64..40, any::<bool>(), prop::option::of(0u32..5), 0u8..20);
    (
        prop::collection::vec(chunk, 0..25),
        0u64..3_000,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(steps, total, finished, all_tokenized)| {
            let mut at = 5u64;
            let chunks: Vec<Chunk> = steps
                .iter()
                .map(|&(dt, text, tokens, odd)| {
                    at = if odd == 1 {
                        at.saturating_sub(3)
                    } else {
                        at + dt
                    };
                    let mut c = if text {
                        Chunk::content(ms(at))
                    } else {
                        Chunk::empty(ms(at))
                    };
                    if let Some(n) = tokens.filter(|_| all_tokenized || odd % 3 == 0) {
                        c = c.with_text_tokens(n);
                    }
                    match odd {
                        2 => c.with_usage(usage(total / 2)),
                        3 => c.with_engine_count(Tokens::new(1)),
                        _ => c,
                    }
                })
                .collect();
            let outcome = if finished {
                Outcome::Finished {
                    finish_reason: None,
                }
            } else {
                Outcome::Cancelled
            };
            let mut t = RequestTimeline::new(ms(0), ms(at + 10), outcome);
            t.chunks = chunks.into();
            t.final_usage = Some(usage(total));
            t
        })
}

#[test]
fn a_usage_at_the_end_only_is_read_in_one_pass() {
    let mut t = finished(vec![
        Chunk::content(ms(10)).with_text_tokens(1),
        Chunk::content(ms(20)).with_text_tokens(3),
        Chunk::empty(ms(30)).with_usage(usage(8)),
    ]);
    t.final_usage = Some(usage(8));
    let fast = final_usage_in_one_pass(&t).expect("read in one pass");
    assert_eq!(fast.source, TokenSource::FinalUsage);
    assert_eq!(pairs(&fast), vec![(10, 2), (20, 6)]);
}

proptest! {
    // The one-pass reader of a usage at the end gives what the general path
    // gives whenever it reads a timeline at all.
    #[test]
    fn the_final_usage_reader_agrees_with_the_general_path(t in final_usage_timeline()) {
        if let Some(fast) = final_usage_in_one_pass(&t) {
            prop_assert_eq!(Ok(fast), Arrivals::of_any(&t));
        }
    }

    #[test]
    fn shares_of_huge_counts_sum_to_the_total(
        weights in prop::collection::vec(0u64..u64::MAX / 64, 1..10),
        n in (u64::MAX / 2)..u64::MAX,
    ) {
        let w: Vec<(Timestamp, u64)> =
            weights.iter().enumerate().map(|(i, w)| (ms(i as u64), *w)).collect();
        let total: u64 = share_out(&w, n).iter().map(|a| a.tokens).sum();
        let weight: u128 = weights.iter().map(|w| u128::from(*w)).sum();
        prop_assert_eq!(total, if weight == 0 { 0 } else { n });
    }

    // The one-pass reader of the usual timeline gives what the general
    // path gives, and takes every timeline the general path reads as
    // continuous usage.
    #[test]
    fn the_one_pass_reader_agrees_with_the_general_path(t in any_timeline()) {
        let general = Arrivals::of_any(&t);
        match continuous_usage_in_one_pass(&t) {
            Some(fast) => prop_assert_eq!(Ok(fast), general),
            None => {
                let continuous = general.is_ok_and(|a| a.source == TokenSource::ContinuousUsage);
                prop_assert!(!continuous);
            }
        }
    }

    #[test]
    fn spreading_preserves_the_gap(gap_ns in 0u64..10_000_000_000, k in 1u64..10_000) {
        let parts = spread(Duration::from_nanos(gap_ns), k);
        let count: u64 = parts.iter().map(|p| p.1).sum();
        let sum: u128 = parts.iter().map(|(d, n)| d.as_nanos() * u128::from(*n)).sum();
        prop_assert_eq!(count, k);
        prop_assert_eq!(sum, u128::from(gap_ns));
        prop_assert!(parts[0].0 - parts[1].0 <= Duration::from_nanos(1));
    }

    #[test]
    fn intervals_sum_to_first_to_last(
        steps in prop::collection::vec((0u64..50, 1u64..8), 1..40),
    ) {
        let mut at = 0;
        let mut cum = 0;
        let chunks: Vec<Chunk> = steps.iter().map(|(dt, k)| {
            at += dt;
            cum += k;
            Chunk::content(ms(at)).with_usage(usage(cum))
        }).collect();
        let a = Arrivals::of(&timeline(chunks)).unwrap();
        let iv = a.token_intervals(|_| true);
        let n: u64 = iv.iter().map(|p| p.1).sum();
        let sum: u128 = iv.iter().map(|(d, n)| d.as_nanos() * u128::from(*n)).sum();
        prop_assert_eq!(n, cum - 1);
        prop_assert_eq!(sum, Duration::from_millis(at - steps[0].0).as_nanos());
    }

    #[test]
    fn shares_sum_to_the_total_and_follow_the_weights(
        weights in prop::collection::vec(0u64..20, 1..50),
        n in 0u64..100_000,
    ) {
        let w: Vec<(Timestamp, u64)> =
            weights.iter().enumerate().map(|(i, w)| (ms(i as u64), *w)).collect();
        let shares = share_out(&w, n);
        let total: u64 = shares.iter().map(|a| a.tokens).sum();
        let weight: u64 = weights.iter().sum();
        prop_assert_eq!(total, if weight == 0 { 0 } else { n });
        for a in &shares {
            let i = a.at.offset().as_millis() as usize;
            let exact = weights[i] as f64 * n as f64 / weight.max(1) as f64;
            prop_assert!((a.tokens as f64 - exact).abs() < 1.0 + 1e-9);
        }
    }
}
