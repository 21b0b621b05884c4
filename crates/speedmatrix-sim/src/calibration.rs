//! The built-in `rtx3090-qwen3.5-4b-fp8` profile against the seed matrix, computed from the cost
//! model (no wall clock): every Valid prefill TTFT and decode cell within ±5 % (the profile is
//! `speedmatrix calibrate`'s fit of the seed page), the warm TTFTs of the decode cells within
//! ±45 % (the front end's line through them), and the same Valid/Over-capacity pattern.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::{Engine, Event, NewRequest};
use crate::profile::{Profile, RTX3090_QWEN35_4B_FP8};

const K: u64 = 1_024;
/// The seed's output cap: a cell fits when N × (context + 8,192) fits the KV cache.
const MAX_OUTPUT: u64 = 8_192;
/// The seed's measurement window.
const WINDOW: Duration = Duration::from_secs(30);

/// (context, TTFT ms) of the seed's Valid prefill rows.
const PREFILL: [(u64, f64); 5] = [
    (8 * K, 779.0),
    (16 * K, 1_639.0),
    (32 * K, 3_609.0),
    (64 * K, 8_616.0),
    (128 * K, 23_154.0),
];

const CONCURRENCY: [u64; 8] = [1, 2, 4, 8, 16, 32, 64, 128];

/// (context, total tok/s per concurrency; `None` = Over capacity) of the seed's decode rows.
const DECODE: [(u64, [Option<f64>; 8]); 6] = [
    (
        0,
        [
            Some(117.3),
            Some(225.7),
            Some(432.6),
            Some(788.5),
            Some(1_376.6),
            Some(2_124.5),
            None,
            None,
        ],
    ),
    (
        16 * K,
        [
            Some(109.1),
            Some(201.2),
            Some(375.5),
            Some(635.9),
            Some(955.0),
            None,
            None,
            None,
        ],
    ),
    (
        32 * K,
        [
            Some(102.5),
            Some(180.9),
            Some(328.2),
            Some(518.9),
            None,
            None,
            None,
            None,
        ],
    ),
    (
        64 * K,
        [
            Some(91.4),
            Some(150.7),
            Some(260.4),
            None,
            None,
            None,
            None,
            None,
        ],
    ),
    (
        128 * K,
        [Some(75.1), Some(113.2), None, None, None, None, None, None],
    ),
    (
        248 * K,
        [Some(56.2), None, None, None, None, None, None, None],
    ),
];

fn profile() -> Profile {
    Profile::builtin(RTX3090_QWEN35_4B_FP8).unwrap()
}

/// Total tok/s of `n` streams decoding from `context` for the seed's 30 s window, with the
/// context growing by one token per step as it does on a real server.
fn modelled_decode_rate(p: &Profile, context: u64, n: u64) -> f64 {
    let (mut t, mut steps, mut ctx) = (Duration::ZERO, 0u64, context);
    while t < WINDOW {
        t += p.cost.decode_step(n, ctx);
        steps += 1;
        ctx += 1;
    }
    (n * steps) as f64 / WINDOW.as_secs_f64()
}

fn within(model: f64, seed: f64, tolerance: f64) -> bool {
    (model / seed - 1.0).abs() <= tolerance
}

#[test]
fn prefill_ttft_matches_the_seed_within_5_percent() {
    let p = profile();
    for (context, seed_ms) in PREFILL {
        let model_ms = crate::fit::cold_ttft(&p.cost, context, p.max_num_batched_tokens.into())
            .as_secs_f64()
            * 1e3;
        let error = (model_ms / seed_ms - 1.0) * 100.0;
        eprintln!(
            "prefill {context:>7}: seed {seed_ms:>6.0} ms, model {model_ms:>6.0} ms, {error:+.1}%"
        );
        assert!(
            within(model_ms, seed_ms, 0.05),
            "prefill {context}: model {model_ms:.0} ms vs seed {seed_ms} ms"
        );
    }
}

#[test]
fn decode_throughput_matches_the_seed_within_5_percent() {
    let p = profile();
    for (context, row) in DECODE {
        for (n, seed) in CONCURRENCY.into_iter().zip(row) {
            if let Some(seed) = seed {
                let model = modelled_decode_rate(&p, context, n);
                let error = (model / seed - 1.0) * 100.0;
                eprintln!(
                    "decode {context:>6}×{n:<3}: seed {seed:>7.1}, model {model:>7.1} tok/s, {error:+.1}%"
                );
                assert!(
                    within(model, seed, 0.05),
                    "decode {context}×{n}: model {model:.1} vs seed {seed} tok/s"
                );
            }
        }
    }
}

/// (context, median TTFT ms per concurrency) of the seed's Valid decode cells.
const WARM_TTFT: [(u64, &[f64]); 6] = [
    (0, &[54.0, 71.0, 129.0, 213.0, 362.0, 533.0]),
    (16 * K, &[53.0, 68.0, 105.0, 177.0, 354.0]),
    (32 * K, &[115.0, 153.0, 234.0, 391.0]),
    (64 * K, &[158.0, 206.0, 297.0]),
    (128 * K, &[285.0, 347.0]),
    (248 * K, &[600.0]),
];

#[test]
fn warm_ttft_of_the_decode_cells_follows_the_seed_within_45_percent() {
    let p = profile();
    for (context, row) in WARM_TTFT {
        for (&n, &seed) in CONCURRENCY.iter().zip(row) {
            let step = p.cost.decode_step(n, context);
            let model = crate::fit::warm_ttft(&p.cost, n, context, step).as_secs_f64() * 1e3;
            eprintln!("ttft {context:>6}×{n:<3}: seed {seed:>5.0} ms, model {model:>5.0} ms");
            assert!(
                within(model, seed, 0.45),
                "{context}×{n}: {model:.0} vs {seed} ms"
            );
        }
    }
}

#[test]
fn capacity_pattern_matches_the_seed() {
    let p = profile();
    for (context, row) in DECODE {
        for (n, seed) in CONCURRENCY.into_iter().zip(row) {
            assert_eq!(
                p.fits(n, context + MAX_OUTPUT),
                seed.is_some(),
                "cell {context}×{n}"
            );
        }
    }
}

/// The engine itself, driven in virtual time, produces the modelled rate: two cells checked end
/// to end (prefill, then a 30 s decode window once every stream has its first token).
#[test]
fn the_engine_reproduces_the_modelled_decode_rate() {
    let p = profile();
    for (context, n) in [(16 * K, 16u64), (128 * K, 2)] {
        let mut e = Engine::new(&p, Arc::from(vec![1u32, 2, 3]));
        for id in 0..n {
            let prompt = (0..context as u32)
                .map(|t| t.wrapping_mul(7).wrapping_add(id as u32 * 1_000_003))
                .collect();
            e.add(NewRequest {
                id,
                prompt,
                max_tokens: MAX_OUTPUT as u32,
                min_tokens: 0,
                ignore_eos: true,
            });
        }
        let mut first = std::collections::HashSet::new();
        while first.len() < n as usize {
            let out = e.step().unwrap();
            for ev in out.events {
                if let Event::Token { id, .. } = ev {
                    first.insert(id);
                }
            }
        }
        let start = e.clock();
        let mut tokens = 0u64;
        while e.clock() - start < WINDOW {
            let out = e.step().unwrap();
            tokens += out
                .events
                .iter()
                .filter(|ev| matches!(ev, Event::Token { .. }))
                .count() as u64;
        }
        let engine_rate = tokens as f64 / (e.clock() - start).as_secs_f64();
        let model = modelled_decode_rate(&p, context, n);
        assert!(
            within(engine_rate, model, 0.02),
            "{context}×{n}: engine {engine_rate:.1} vs model {model:.1}"
        );
    }
}
