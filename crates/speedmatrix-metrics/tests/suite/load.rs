//! Load cells (bursts, open-loop runs) on synthetic timelines: latencies
//! from the intended send time, lag, counts, the objective.

use std::time::Duration;

use proptest::prelude::*;
use speedmatrix_metrics::{
    Chunk, LoadRequest, Outcome, RequestTimeline, Slo, Timestamp, Usage, load_metrics,
};
use speedmatrix_units::Tokens;

fn ms(n: u64) -> Timestamp {
    Timestamp::from_millis(n)
}

fn d(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A request sent at `sent` whose `tokens` tokens arrive every `step` ms from `first`.
fn request(sent: u64, first: u64, step: u64, tokens: u64, outcome: Outcome) -> RequestTimeline {
    let last = first + step * (tokens - 1);
    let mut t = RequestTimeline::new(ms(sent), ms(last), outcome);
    t.chunks = (0..tokens)
        .map(|i| {
            let usage = Usage::new(Tokens::new(100), Tokens::new(i + 1));
            Chunk::content(ms(first + step * i)).with_usage(usage)
        })
        .collect();
    t
}

fn finished() -> Outcome {
    Outcome::Finished {
        finish_reason: Some("length".into()),
    }
}

#[test]
fn latencies_start_at_the_intended_time_and_the_lag_is_reported() {
    // Meant for 0 and 100 ms; the client sent the second 400 ms late.
    let a = request(0, 50, 10, 11, finished());
    let b = request(500, 560, 10, 11, finished());
    let reqs = [
        LoadRequest {
            timeline: &a,
            intended: ms(0),
        },
        LoadRequest {
            timeline: &b,
            intended: ms(100),
        },
    ];
    let m = load_metrics(&reqs, None).unwrap();
    assert_eq!((m.sent, m.completed, m.failed, m.unfinished), (2, 2, 0, 0));
    let ttft = m.ttft.unwrap();
    // 50 ms and 560 − 100 = 460 ms: the late send is not hidden.
    assert_eq!((ttft.min, ttft.max), (d(50), d(460)));
    let lag = m.send_lag.unwrap();
    assert_eq!((lag.min, lag.max), (d(0), d(400)));
    assert_eq!(m.end_to_end.unwrap().max, d(560 + 100 - 100));
    assert_eq!(m.tpot.unwrap().p50, d(10));
    assert_eq!(m.itl.unwrap().count, 20);
    assert_eq!(m.output_tokens, Tokens::new(22));
    // Span: intended 0 → last end 660 ms.
    assert_eq!(m.span, d(660));
    assert!((m.output_rate.get() - 22.0 / 0.66).abs() < 1e-9);
}

/// A model that reasons first: TTFT is its first reasoning token, TTFC its first answer
/// token; the lengths are each finished request's output tokens as the model ended it.
#[test]
fn time_to_first_content_waits_for_the_answer_and_lengths_are_per_request() {
    let plain = request(0, 50, 10, 11, finished());
    let mut thinking = RequestTimeline::new(ms(0), ms(400), finished());
    thinking.chunks = (0..5)
        .map(|i| {
            let usage = Usage::new(Tokens::new(100), Tokens::new(i + 1));
            let at = ms(100 + 50 * i);
            let chunk = if i < 3 {
                Chunk::reasoning(at)
            } else {
                Chunk::content(at)
            };
            chunk.with_usage(usage)
        })
        .collect();
    let reqs = [
        LoadRequest {
            timeline: &plain,
            intended: ms(0),
        },
        LoadRequest {
            timeline: &thinking,
            intended: ms(0),
        },
    ];
    let m = load_metrics(&reqs, None).unwrap();
    let (ttft, ttfc) = (m.ttft.unwrap(), m.ttfc.unwrap());
    assert_eq!((ttft.min, ttft.max), (d(50), d(100)));
    // The reasoning request's first answer token came at 100 + 3 × 50 ms.
    assert_eq!((ttfc.min, ttfc.max), (d(50), d(250)));
    let lengths = m.output_lengths.unwrap();
    assert_eq!((lengths.min, lengths.max, lengths.count), (5.0, 11.0, 2));
    // Three of the thinking request's five tokens came before its answer; none of the plain one's.
    let thought = m.reasoning_lengths.unwrap();
    assert_eq!((thought.min, thought.max), (0.0, 3.0));
    // Three thinking tokens from 100 to 250 ms; one answer gap from 250 to 300 ms (the
    // stream's end at 400 ms is not a token): 20 tok/s each, the plain request in neither.
    let (thinking_rate, answer_rate) = (m.reasoning_rates.unwrap(), m.answer_rates.unwrap());
    assert_eq!((thinking_rate.count, answer_rate.count), (1, 1));
    assert!((thinking_rate.p50 - 20.0).abs() < 1e-9, "{thinking_rate:?}");
    assert!((answer_rate.p50 - 20.0).abs() < 1e-9, "{answer_rate:?}");
    assert_eq!(
        m.output_length_histogram
            .iter()
            .map(|b| b.count)
            .sum::<u64>(),
        2
    );
    // A cell where no model reasoned has no reasoning figure at all.
    let plain_only = load_metrics(&reqs[..1], None).unwrap();
    assert!(plain_only.reasoning_lengths.is_none());
    assert!(plain_only.reasoning_rates.is_none() && plain_only.answer_rates.is_none());
}

#[test]
fn failed_and_unfinished_requests_count_but_have_no_latency_and_miss_the_objective() {
    let ok = request(0, 30, 10, 5, finished());
    let cut = request(0, 40, 10, 5, Outcome::Cancelled);
    let mut bad = RequestTimeline::new(
        ms(0),
        ms(5),
        Outcome::Failed {
            kind: "http_status".into(),
        },
    );
    bad.chunks = Vec::<Chunk>::new().into();
    let reqs: Vec<LoadRequest<'_>> = [&ok, &cut, &bad]
        .into_iter()
        .map(|t| LoadRequest {
            timeline: t,
            intended: ms(0),
        })
        .collect();
    let slo: Slo = "ttft_p99=1s".parse().unwrap();
    let m = load_metrics(&reqs, Some(&slo)).unwrap();
    assert_eq!((m.completed, m.failed, m.unfinished), (1, 1, 1));
    assert_eq!(m.ttft.unwrap().count, 1);
    let o = m.slo.unwrap();
    assert!(o.met, "the finished request's TTFT is under 1 s");
    assert_eq!((o.good_requests, o.requests), (1, 3));
    assert!(load_metrics(&[], None).is_err());
}

proptest! {
    #[test]
    fn lag_and_latencies_are_never_negative_and_latency_covers_lag(
        gaps in prop::collection::vec((0u64..500, 0u64..300, 1u64..20), 1..20),
    ) {
        let timelines: Vec<(u64, RequestTimeline)> = gaps
            .iter()
            .enumerate()
            .map(|(i, &(late, ttft, tokens))| {
                let intended = i as u64 * 100;
                let sent = intended + late;
                (intended, request(sent, sent + ttft + 1, 5, tokens, finished()))
            })
            .collect();
        let reqs: Vec<LoadRequest<'_>> = timelines
            .iter()
            .map(|(i, t)| LoadRequest { timeline: t, intended: ms(*i) })
            .collect();
        let m = load_metrics(&reqs, None).unwrap();
        let lag = m.send_lag.unwrap();
        let ttft = m.ttft.unwrap();
        // Each request's TTFT from its intended time is its lag plus its own TTFT.
        prop_assert!(ttft.max >= lag.max);
        prop_assert!(m.end_to_end.unwrap().min >= ttft.min);
        prop_assert_eq!(m.completed, gaps.len() as u64);
    }
}
