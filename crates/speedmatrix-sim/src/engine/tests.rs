use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

fn profile(num_gpu_blocks: u32, block_size: u32, max_num_seqs: u32, budget: u32) -> Profile {
    let mut p = Profile::builtin(crate::profile::TINY).unwrap();
    p.num_gpu_blocks = num_gpu_blocks;
    p.block_size = block_size;
    p.max_num_seqs = max_num_seqs;
    p.max_num_batched_tokens = budget;
    p.max_model_len = (num_gpu_blocks - 1) * block_size;
    p.eos_after_tokens = None;
    p
}

fn engine(p: &Profile) -> Engine {
    Engine::new(p, Arc::from(vec![7u32, 8, 9]))
}

fn req(id: ReqId, prompt: Vec<u32>, max_tokens: u32) -> NewRequest {
    NewRequest {
        id,
        prompt,
        max_tokens,
        min_tokens: 0,
        ignore_eos: true,
    }
}

fn distinct_prompt(id: ReqId, len: usize) -> Vec<u32> {
    (0..len).map(|i| (id as u32) * 100_000 + i as u32).collect()
}

/// Runs to idle; returns each request's token count and finish.
fn run(e: &mut Engine) -> HashMap<ReqId, (u32, FinishReason, Usage)> {
    let mut tokens: HashMap<ReqId, u32> = HashMap::new();
    let mut done = HashMap::new();
    let mut steps = 0;
    while let Some(out) = e.step() {
        steps += 1;
        assert!(steps < 1_000_000, "engine did not drain");
        for ev in out.events {
            match ev {
                Event::Token { id, .. } => *tokens.entry(id).or_default() += 1,
                Event::Finished { id, reason, usage } => {
                    done.insert(id, (tokens.get(&id).copied().unwrap_or(0), reason, usage));
                }
            }
        }
    }
    done
}

#[test]
fn admission_stops_at_max_num_seqs() {
    let p = profile(1_001, 16, 2, 4_096);
    let mut e = engine(&p);
    for id in 0..3 {
        e.add(req(id, distinct_prompt(id, 10), 5));
    }
    e.step().unwrap();
    let s = e.snapshot();
    assert_eq!((s.running, s.waiting), (2, 1));
}

#[test]
fn a_hybrid_models_state_blocks_count_against_the_pool() {
    // 20 usable blocks of 16 tokens, 3 state blocks a request: a 64-token prompt holds
    // 4 + 3 = 7 blocks, so two run (14) and a third waits although its attention blocks
    // alone (4 more) would fit.
    let mut p = profile(21, 16, 8, 4_096);
    p.state_blocks_per_request = 3;
    assert!(p.fits(2, 64) && !p.fits(3, 64));
    let mut e = engine(&p);
    for id in 0..3 {
        e.add(req(id, distinct_prompt(id, 64), 2));
    }
    e.step().unwrap();
    let s = e.snapshot();
    assert_eq!((s.running, s.waiting), (2, 1));
    assert_eq!(s.free_blocks, 20 - 14);
    // Finishing gives the state back: every request completes and the pool is whole again.
    let done = run(&mut e);
    assert_eq!(done.len(), 3);
    assert_eq!((e.snapshot().free_blocks, e.pool().held()), (20, 0));
}

#[test]
fn sliding_groups_hold_their_window_and_full_groups_every_block() {
    // Blocks of 16 tokens; one full group, two sliding groups of a 32-token window: a
    // request holds cdiv(ℓ, 16) + 2 × min(cdiv(ℓ, 16), 3) blocks.
    let mut p = profile(101, 16, 8, 4_096);
    p.sliding_groups = 2;
    p.sliding_window = 32;
    p.max_model_len = 1_024;
    p.validate().unwrap();
    assert_eq!(p.blocks_per_request(16), 1 + 2);
    assert_eq!(p.blocks_per_request(64), 4 + 6);
    assert_eq!(
        p.blocks_per_request(640),
        40 + 6,
        "the window caps the sliding groups"
    );
    let mut e = engine(&p);
    e.add(req(0, distinct_prompt(0, 64), 400));
    e.step().unwrap();
    assert_eq!(e.snapshot().free_blocks, 100 - 10);
    // Decoding to 263 tokens: 17 full blocks, the sliding ones still 3 each.
    for _ in 0..199 {
        e.step();
    }
    assert_eq!(e.snapshot().free_blocks, 100 - (17 + 6));
}

#[test]
fn admission_waits_for_free_blocks() {
    // 10 usable blocks of 4 tokens; each 16-token prompt needs 4 blocks.
    let p = profile(11, 4, 8, 4_096);
    let mut e = engine(&p);
    for id in 0..3 {
        e.add(req(id, distinct_prompt(id, 16), 2));
    }
    e.step().unwrap();
    let s = e.snapshot();
    assert_eq!((s.running, s.waiting), (2, 1));
    assert_eq!(s.free_blocks, 2);
    // Decoding token 17 takes a fifth block each: the pool is full, the third still waits.
    e.step().unwrap();
    let s = e.snapshot();
    assert_eq!((s.running, s.waiting, s.free_blocks), (0, 1, 10));
    let done = run(&mut e);
    assert_eq!(done[&2].0, 2);
    assert_eq!(e.snapshot().free_blocks, 10);
}

#[test]
fn growing_requests_preempt_from_the_back_and_recompute() {
    // 10 usable blocks of 4 tokens = 40 tokens; two requests of 15 + 20 tokens cannot both finish.
    let p = profile(11, 4, 8, 4_096);
    let mut e = engine(&p);
    e.add(req(1, distinct_prompt(1, 15), 20));
    e.add(req(2, distinct_prompt(2, 15), 20));
    let mut first_preempted = None;
    let mut tokens: HashMap<ReqId, u32> = HashMap::new();
    let mut done = HashMap::new();
    while let Some(out) = e.step() {
        if first_preempted.is_none() && e.snapshot().counters.preemptions > 0 {
            // The later request is the victim: the earlier keeps running.
            first_preempted = Some(e.running.clone());
        }
        for ev in out.events {
            match ev {
                Event::Token { id, .. } => *tokens.entry(id).or_default() += 1,
                Event::Finished { id, usage, .. } => {
                    done.insert(id, usage);
                }
            }
        }
    }
    assert_eq!(first_preempted, Some(vec![1]));
    assert_eq!(done[&1].completion_tokens, 20);
    assert_eq!(done[&2].completion_tokens, 20);
    assert_eq!(
        tokens[&2], 20,
        "a recomputed request does not resend tokens"
    );
    assert_eq!(e.snapshot().free_blocks, 10);
}

#[test]
fn a_repeated_prompt_hits_the_prefix_cache_and_skips_prefill() {
    let p = profile(1_001, 4, 8, 64);
    let prompt = distinct_prompt(1, 256);
    let mut e = engine(&p);
    e.add(req(1, prompt.clone(), 1));
    let cold_start = e.clock();
    run(&mut e);
    let cold = e.clock() - cold_start;
    let before = e.snapshot().counters;
    e.add(req(2, prompt, 1));
    let warm_start = e.clock();
    run(&mut e);
    let warm = e.clock() - warm_start;
    let after = e.snapshot().counters;
    // All but the last block (at least one token is computed) came from the cache.
    assert_eq!(after.prefix_hits - before.prefix_hits, 252);
    assert_eq!(after.prefix_queries - before.prefix_queries, 256);
    assert!(warm * 3 < cold, "warm {warm:?} vs cold {cold:?}");
}

#[test]
fn prefix_caching_off_never_hits() {
    let mut p = profile(1_001, 4, 8, 64);
    p.enable_prefix_caching = false;
    let prompt = distinct_prompt(1, 64);
    let mut e = engine(&p);
    e.add(req(1, prompt.clone(), 1));
    run(&mut e);
    e.add(req(2, prompt, 1));
    run(&mut e);
    assert_eq!(e.snapshot().counters.prefix_hits, 0);
}

#[test]
fn long_prompts_are_chunked_by_the_token_budget() {
    let p = profile(1_001, 16, 8, 100);
    let mut e = engine(&p);
    e.add(req(1, distinct_prompt(1, 450), 1));
    let mut steps = 0;
    while e.step().is_some() {
        steps += 1;
    }
    assert_eq!(steps, 5, "450 tokens in chunks of 100");
}

#[test]
fn generation_stops_at_max_model_len_with_length() {
    let p = profile(65, 16, 8, 4_096); // max_model_len 1,024
    let mut e = engine(&p);
    e.add(req(1, distinct_prompt(1, 1_020), 100));
    let done = run(&mut e);
    assert_eq!(done[&1].0, 4);
    assert_eq!(done[&1].1, FinishReason::Length);
}

#[test]
fn eos_min_tokens_and_ignore_eos() {
    let mut p = profile(1_001, 16, 8, 4_096);
    p.eos_after_tokens = Some(5);
    let mut e = engine(&p);
    e.add(NewRequest {
        id: 1,
        prompt: vec![1; 8],
        max_tokens: 50,
        min_tokens: 0,
        ignore_eos: false,
    });
    e.add(NewRequest {
        id: 2,
        prompt: vec![2; 8],
        max_tokens: 50,
        min_tokens: 9,
        ignore_eos: false,
    });
    e.add(NewRequest {
        id: 3,
        prompt: vec![3; 8],
        max_tokens: 50,
        min_tokens: 0,
        ignore_eos: true,
    });
    let done = run(&mut e);
    assert_eq!((done[&1].0, done[&1].1), (5, FinishReason::Stop));
    assert_eq!((done[&2].0, done[&2].1), (9, FinishReason::Stop));
    assert_eq!((done[&3].0, done[&3].1), (50, FinishReason::Length));
    assert_eq!(
        done[&3].2,
        Usage {
            prompt_tokens: 8,
            completion_tokens: 50
        }
    );
}

#[test]
fn abort_frees_blocks_at_once() {
    let p = profile(101, 16, 8, 4_096);
    let mut e = engine(&p);
    e.add(req(1, distinct_prompt(1, 200), 500));
    e.step().unwrap();
    assert!(e.snapshot().free_blocks < 100);
    assert!(e.abort(1));
    assert_eq!(e.snapshot().free_blocks, 100);
    assert!(!e.abort(1));
    assert!(e.step().is_none());
    assert!(e.is_idle());
}

#[test]
fn decode_steps_follow_the_cost_model() {
    let p = profile(1_001, 16, 8, 4_096);
    let mut e = engine(&p);
    e.add(req(1, distinct_prompt(1, 100), 3));
    e.add(req(2, distinct_prompt(2, 100), 3));
    let prefill = e.step().unwrap();
    let expected = p.cost.step_base() + p.cost.prefill_chunk(100, 0) * 2;
    assert_eq!(prefill.duration, expected);
    let decode = e.step().unwrap();
    assert_eq!(decode.duration, p.cost.decode_step(2, 101));
}

#[derive(Debug, Clone)]
struct Arrival {
    prefix: usize,
    len: usize,
    max_tokens: u32,
    abort_at_step: Option<usize>,
    arrive_at_step: usize,
}

fn arrival() -> impl Strategy<Value = Arrival> {
    (
        0usize..3,
        1usize..120,
        1u32..40,
        proptest::option::of(0usize..60),
        0usize..40,
    )
        .prop_map(
            |(prefix, len, max_tokens, abort_at_step, arrive_at_step)| Arrival {
                prefix,
                len,
                max_tokens,
                abort_at_step,
                arrive_at_step,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn block_accounting_holds_for_any_request_mix(
        arrivals in proptest::collection::vec(arrival(), 1..24),
        blocks in 9u32..80,
        seqs in 1u32..8,
        budget in 8u32..200,
        caching: bool,
    ) {
        let mut p = profile(blocks, 4, seqs, budget);
        p.enable_prefix_caching = caching;
        let max_len = p.max_model_len as usize;
        let mut e = engine(&p);
        let total = e.snapshot().total_blocks;
        let mut tokens: HashMap<ReqId, u32> = HashMap::new();
        let mut finished: HashMap<ReqId, Usage> = HashMap::new();
        let mut aborted = Vec::new();
        let mut step = 0usize;
        loop {
            for (i, a) in arrivals.iter().enumerate() {
                if a.arrive_at_step == step {
                    let mut prompt: Vec<u32> = (0..a.len).map(|t| (a.prefix * 1_000 + t) as u32).collect();
                    prompt.truncate(max_len);
                    e.add(req(i as ReqId, prompt, a.max_tokens));
                }
                if a.abort_at_step == Some(step) && !finished.contains_key(&(i as ReqId)) && e.abort(i as ReqId) {
                    aborted.push(i as ReqId);
                }
            }
            let out = e.step();
            let s = e.snapshot();
            prop_assert!(s.free_blocks <= s.total_blocks);
            prop_assert_eq!(s.free_blocks + e.pool().held(), total);
            prop_assert!(s.running <= seqs as usize);
            if let Some(out) = out {
                for ev in out.events {
                    match ev {
                        Event::Token { id, .. } => *tokens.entry(id).or_default() += 1,
                        Event::Finished { id, usage, .. } => {
                            prop_assert!(finished.insert(id, usage).is_none());
                        }
                    }
                }
            } else if step > 100 {
                break;
            }
            step += 1;
            prop_assert!(step < 200_000, "engine did not drain");
        }
        prop_assert!(e.is_idle());
        prop_assert_eq!(e.snapshot().free_blocks, total);
        prop_assert_eq!(finished.len() + aborted.len(), arrivals.len());
        for (id, usage) in &finished {
            let a = &arrivals[*id as usize];
            prop_assert_eq!(tokens[id], usage.completion_tokens);
            prop_assert!(usage.completion_tokens >= 1);
            prop_assert!(usage.completion_tokens <= a.max_tokens);
            // A prompt of exactly max_model_len still gets its one token, as in vLLM.
            let limit = max_len.max(usage.prompt_tokens as usize + 1);
            prop_assert!(usage.prompt_tokens as usize + usage.completion_tokens as usize <= limit);
        }
        let c = e.snapshot().counters;
        prop_assert!(c.prefix_hits <= c.prefix_queries);
    }
}

#[test]
fn speculative_steps_emit_the_profiles_token_counts() {
    let mut p = profile(1_001, 16, 4, 4_096);
    p.tokens_per_step = vec![3, 4];
    let mut e = engine(&p);
    e.add(req(1, distinct_prompt(1, 40), 30));
    let mut per_step = Vec::new();
    let mut decode_steps = Vec::new();
    while let Some(out) = e.step() {
        let n = out
            .events
            .iter()
            .filter(|ev| matches!(ev, Event::Token { .. }))
            .count();
        per_step.push(n);
        decode_steps.push(out.duration);
        if out
            .events
            .iter()
            .any(|ev| matches!(ev, Event::Finished { .. }))
        {
            break;
        }
    }
    // Prefill gives the first token, then 3, 4, 3, 4, ... up to max_tokens.
    assert_eq!(per_step, vec![1, 3, 4, 3, 4, 3, 4, 3, 4, 1]);
    assert_eq!(per_step.iter().sum::<usize>(), 30);
    // A speculative step is a decode step, not a prefill chunk.
    let decode = p.cost.step_base() + p.cost.decode(1, 40 + 1 + 3);
    assert_eq!(decode_steps[1], p.cost.step_base() + p.cost.decode(1, 41));
    assert_eq!(decode_steps[2], decode);
}

#[test]
fn a_speculating_engine_counts_drafts_and_acceptances_per_decode_step() {
    let mut p = profile(1_001, 16, 4, 4_096);
    p.tokens_per_step = vec![3, 4];
    p.num_speculative_tokens = Some(3);
    let mut e = engine(&p);
    e.add(req(1, distinct_prompt(1, 40), 30));
    run(&mut e);
    let c = e.snapshot().counters;
    // Nine decode steps (3, 4, ..., 3, 4, then a 3-token step cut to 1 by max_tokens).
    assert_eq!(c.spec_drafts, 9);
    assert_eq!(c.spec_draft_tokens, 27);
    // Accepted as verified, before the stop: 2 + 3 per pair of steps, 2 for the cut one.
    assert_eq!(c.spec_accepted_tokens, 4 * 5 + 2);
    let quiet = profile(1_001, 16, 4, 4_096);
    let mut e = engine(&quiet);
    e.add(req(1, distinct_prompt(1, 40), 30));
    run(&mut e);
    assert_eq!(
        e.snapshot().counters.spec_drafts,
        0,
        "no speculation, no drafts"
    );
}

#[test]
fn the_queue_time_record_is_arrival_to_first_scheduled() {
    // One seat: the second request waits for the whole of the first.
    let p = profile(1_001, 16, 1, 4_096);
    let mut e = engine(&p);
    e.add(req(1, distinct_prompt(1, 40), 10));
    e.add(req(2, distinct_prompt(2, 40), 10));
    let mut first_done = None;
    let mut clock = Duration::ZERO;
    while let Some(out) = e.step() {
        clock += out.duration;
        if first_done.is_none()
            && out
                .events
                .iter()
                .any(|ev| matches!(ev, Event::Finished { id: 1, .. }))
        {
            first_done = Some(clock);
        }
    }
    let c = e.snapshot().counters;
    assert_eq!(c.queued_requests, 2);
    // The first waited nothing; the second from 0 to the step after the first ended.
    assert_eq!(c.queue_time_ns, first_done.unwrap().as_nanos() as u64);
}
