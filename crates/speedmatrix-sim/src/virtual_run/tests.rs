use std::time::Duration;

use super::*;
use crate::{RTX3090_QWEN35_4B_FP8, TINY};

fn tiny() -> Profile {
    Profile::builtin(TINY).unwrap()
}

fn cell(streams: u32, max_tokens: u32, noise: Option<StepNoise>) -> VirtualRun {
    VirtualRun {
        streams,
        prompt_tokens: 64,
        max_tokens,
        after_ready: Duration::from_secs(2),
        noise,
    }
}

#[test]
fn one_stream_without_noise_keeps_the_profiles_schedule() {
    let p = tiny();
    let out = cell(1, 50, None).run(&p).unwrap();
    assert!(out.end >= out.ready + Duration::from_secs(2));
    let first = &out.requests[0];
    assert_eq!(first.sent, Duration::ZERO);
    assert_eq!(first.output_tokens(), 50);
    assert_eq!(out.ready, first.emissions[0].at);
    // Every decode step of one stream takes the base, one sequence and its
    // context: 64 prompt tokens and the outputs computed so far.
    for (k, pair) in first.emissions.windows(2).enumerate() {
        let context = 64 + k as u64 + 1;
        assert_eq!(pair[1].at - pair[0].at, p.cost.decode_step(1, context));
    }
    // Each finished request is replaced at once, and the replacement is
    // served from the prefix cache: its TTFT is one step with no prefill of
    // the prompt's four full blocks.
    for pair in out.requests.windows(2) {
        let finished = pair[0].finished.unwrap();
        assert_eq!(pair[1].sent, finished);
        assert_eq!(pair[0].output_tokens(), 50);
        let ttft = pair[1].emissions[0].at - pair[1].sent;
        assert!(ttft < p.cost.prefill(64, 1_024), "{ttft:?}");
    }
    assert!(
        out.requests
            .last()
            .unwrap()
            .finished
            .is_none_or(|f| f <= out.end)
    );
}

#[test]
fn streams_are_served_together_and_replaced_one_for_one() {
    let out = cell(8, 20, None).run(&tiny()).unwrap();
    for stream in 0..8 {
        let mine: Vec<_> = out.requests.iter().filter(|r| r.stream == stream).collect();
        assert!(mine.len() > 5, "stream {stream}: {} requests", mine.len());
        // A stream has one request in flight at a time.
        for pair in mine.windows(2) {
            assert_eq!(pair[0].finished, Some(pair[1].sent));
        }
    }
}

#[test]
fn the_front_end_passes_one_request_at_a_time() {
    let p = Profile::builtin(RTX3090_QWEN35_4B_FP8).unwrap();
    let out = cell(4, 20, None).run(&p).unwrap();
    let front = p.cost.frontend(64);
    assert!(out.ready >= front * 4, "{:?} < 4 × {front:?}", out.ready);
}

#[test]
fn noise_is_seeded_and_keeps_the_mean() {
    let noise = |seed| Some(StepNoise { cv: 0.1, seed });
    let long = |noise| {
        let mut c = cell(1, 100_000, noise);
        c.prompt_tokens = 0;
        c.after_ready = Duration::from_secs(20);
        let out = c.run(&tiny()).unwrap();
        let e = &out.requests[0].emissions;
        (e.len(), e.last().unwrap().at - e[0].at, out)
    };
    let (exact_n, exact_t, _) = long(None);
    let (n, t, a) = long(noise(1));
    let (_, _, b) = long(noise(1));
    let (_, _, c) = long(noise(2));
    assert_eq!(a, b, "the same seed, the same run");
    assert_ne!(a, c, "another seed, another run");
    // 10,000 steps of ±10 %: the mean step within 0.5 % of the exact one.
    let per_step = |n: usize, t: Duration| t.as_secs_f64() / (n - 1) as f64;
    let ratio = per_step(n, t) / per_step(exact_n, exact_t);
    assert!((ratio - 1.0).abs() < 0.005, "{ratio}");
}

#[test]
fn runs_it_cannot_do_are_errors() {
    let p = tiny();
    let wrong = |c: VirtualRun| matches!(c.run(&p), Err(SimError::InvalidVirtualRun { .. }));
    assert!(wrong(cell(0, 10, None)));
    assert!(wrong(cell(1, 0, None)));
    assert!(wrong(VirtualRun {
        prompt_tokens: p.max_model_len,
        ..cell(1, 10, None)
    }));
    assert!(wrong(VirtualRun {
        after_ready: Duration::ZERO,
        ..cell(1, 10, None)
    }));
    for cv in [f64::NAN, -0.1, 11.0] {
        assert!(wrong(cell(1, 10, Some(StepNoise { cv, seed: 0 }))));
    }
    let mut timeless = tiny();
    timeless.cost.step_base_us = 0.0;
    timeless.cost.decode_per_seq_us = 0.0;
    timeless.cost.decode_per_context_token_ns = 0.0;
    timeless.cost.prefill_per_token_us = 0.0;
    timeless.cost.prefill_per_token_context_ns = 0.0;
    assert!(matches!(
        cell(1, 10, None).run(&timeless),
        Err(SimError::InvalidVirtualRun { .. })
    ));
    let mut broken = tiny();
    broken.max_num_seqs = 0;
    assert!(matches!(
        cell(1, 10, None).run(&broken),
        Err(SimError::InvalidProfile { .. })
    ));
}
