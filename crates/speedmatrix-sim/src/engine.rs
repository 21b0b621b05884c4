//! The pure engine: a vLLM-v1-like scheduler over a paged KV cache, stepping in virtual time.
//!
//! Nothing here knows about clocks, sockets or text: [`Engine::step`] schedules one step,
//! "runs" it by computing its duration from the [`StepCost`], and returns the tokens it produced.
//! The server drives it in (scaled) real time; tests drive it as fast as they like.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::blocks::{BlockId, BlockPool, block_hash};
use crate::profile::{Profile, StepCost};

/// An engine-wide request id.
pub(crate) type ReqId = u64;

/// Why a request stopped producing tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FinishReason {
    /// The simulated model ended its answer (end of sequence).
    Stop,
    /// `max_tokens` or `max_model_len` was reached.
    Length,
}

impl FinishReason {
    /// The OpenAI `finish_reason` string.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// A request as the engine sees it: token ids and stopping rules.
#[derive(Debug, Clone)]
pub(crate) struct NewRequest {
    pub(crate) id: ReqId,
    pub(crate) prompt: Vec<u32>,
    /// At least 1; the engine also stops at `max_model_len`.
    pub(crate) max_tokens: u32,
    pub(crate) min_tokens: u32,
    pub(crate) ignore_eos: bool,
}

/// Token counts of a finished request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Usage {
    pub(crate) prompt_tokens: u32,
    pub(crate) completion_tokens: u32,
}

/// What a step produced for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// One new output token.
    Token { id: ReqId, token: u32 },
    /// The request is done; no more events for it.
    Finished {
        id: ReqId,
        reason: FinishReason,
        usage: Usage,
    },
}

/// One step: how long it took and what it produced.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StepOutcome {
    pub(crate) duration: Duration,
    pub(crate) events: Vec<Event>,
}

/// Monotonic counters, as vLLM's Prometheus counters report them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Counters {
    /// Prompt tokens of requests that produced their first token.
    pub(crate) prompt_tokens: u64,
    pub(crate) generation_tokens: u64,
    pub(crate) preemptions: u64,
    /// Tokens looked up in the prefix cache when a request was (re)admitted.
    pub(crate) prefix_queries: u64,
    /// Of those, tokens found cached.
    pub(crate) prefix_hits: u64,
    /// Requests that finished with `stop`.
    pub(crate) finished_stop: u64,
    /// Requests that finished with `length`.
    pub(crate) finished_length: u64,
    /// Speculative drafts: one per decode step when the engine speculates.
    pub(crate) spec_drafts: u64,
    /// Draft tokens proposed.
    pub(crate) spec_draft_tokens: u64,
    /// Draft tokens accepted: the step's tokens less the one the target model adds.
    pub(crate) spec_accepted_tokens: u64,
    /// Engine time requests waited from arrival to first being scheduled, nanoseconds.
    pub(crate) queue_time_ns: u64,
    /// Requests whose queue time is counted.
    pub(crate) queued_requests: u64,
}

/// The engine's state at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct Snapshot {
    pub(crate) running: usize,
    pub(crate) waiting: usize,
    pub(crate) free_blocks: usize,
    pub(crate) total_blocks: usize,
    pub(crate) counters: Counters,
}

impl Snapshot {
    /// Fraction of KV blocks held by requests, 0–1.
    pub(crate) fn kv_cache_usage(&self) -> f64 {
        if self.total_blocks == 0 {
            return 0.0;
        }
        1.0 - self.free_blocks as f64 / self.total_blocks as f64
    }
}

#[derive(Debug)]
struct Req {
    /// Prompt, then the outputs so far.
    tokens: Vec<u32>,
    prompt_len: usize,
    max_tokens: u32,
    min_tokens: u32,
    ignore_eos: bool,
    /// Tokens whose KV is in the cache.
    computed: usize,
    blocks: Vec<BlockId>,
    /// Its blocks in the other KV groups and of its recurrent state (hybrid
    /// models), held while it runs.
    state: Vec<BlockId>,
    /// Chained hashes of the full blocks of `tokens`.
    hashes: Vec<u64>,
    /// `blocks[..registered]` are in the prefix-cache index.
    registered: usize,
    /// Output tokens the last step emitted (0 after a preemption): computing
    /// them is the next decode step.
    emitted_last: usize,
    /// Decode steps taken, which picks the next step's token count.
    decode_steps: usize,
    /// The engine clock when the request arrived; `None` once it was first
    /// scheduled (its queue time is then counted).
    queued_at: Option<Duration>,
}

impl Req {
    fn outputs(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    fn extend_hashes(&mut self, block_size: usize) {
        while (self.hashes.len() + 1) * block_size <= self.tokens.len() {
            let i = self.hashes.len();
            let parent = self.hashes.last().copied();
            self.hashes.push(block_hash(
                parent,
                &self.tokens[i * block_size..(i + 1) * block_size],
            ));
        }
    }
}

/// The blocks of a request's other KV groups and recurrent state, by its
/// length (see [`Profile::extra_blocks`]). A sliding group holds at most its
/// window's blocks: vLLM frees those that slide out as it takes new ones, so
/// its count stops growing there.
#[derive(Debug, Clone)]
struct ExtraBlocks(Profile);

impl ExtraBlocks {
    fn of(profile: &Profile) -> Self {
        ExtraBlocks(profile.clone())
    }

    fn at(&self, tokens: usize) -> usize {
        usize::try_from(self.0.extra_blocks(tokens as u64)).unwrap_or(usize::MAX)
    }
}

/// The scheduler, the KV cache and the requests.
#[derive(Debug)]
pub(crate) struct Engine {
    block_size: usize,
    /// Blocks a request holds besides its first attention group's, by its length.
    extra: ExtraBlocks,
    max_model_len: usize,
    max_num_seqs: usize,
    token_budget: usize,
    eos_after: Option<u32>,
    cost: StepCost,
    pool: BlockPool,
    reqs: HashMap<ReqId, Req>,
    waiting: VecDeque<ReqId>,
    running: Vec<ReqId>,
    output_vocab: Arc<[u32]>,
    tokens_per_step: Vec<u32>,
    num_speculative_tokens: Option<u32>,
    counters: Counters,
    clock: Duration,
}

impl Engine {
    /// An idle engine for `profile` whose outputs are drawn from `output_vocab` (non-empty).
    pub(crate) fn new(profile: &Profile, output_vocab: Arc<[u32]>) -> Self {
        let usable = usize::try_from(profile.usable_blocks()).unwrap_or(usize::MAX);
        Engine {
            block_size: profile.block_size.max(1) as usize,
            extra: ExtraBlocks::of(profile),
            max_model_len: profile.max_model_len as usize,
            max_num_seqs: profile.max_num_seqs as usize,
            token_budget: profile.max_num_batched_tokens.max(1) as usize,
            eos_after: profile.eos_after_tokens,
            cost: profile.cost.clone(),
            pool: BlockPool::new(usable, profile.enable_prefix_caching),
            reqs: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            output_vocab: if output_vocab.is_empty() {
                Arc::from([0u32])
            } else {
                output_vocab
            },
            tokens_per_step: if profile.tokens_per_step.is_empty() {
                vec![1]
            } else {
                profile.tokens_per_step.clone()
            },
            num_speculative_tokens: profile.num_speculative_tokens,
            counters: Counters::default(),
            clock: Duration::ZERO,
        }
    }

    /// Queues a request. Its prompt must fit `max_model_len` (the server checks; a longer one is
    /// truncated here rather than wedging the scheduler).
    pub(crate) fn add(&mut self, req: NewRequest) {
        let mut prompt = req.prompt;
        prompt.truncate(self.max_model_len.max(1));
        if prompt.is_empty() {
            // vLLM rejects empty prompts; the server never sends one, but keep the engine total.
            prompt.push(0);
        }
        let prompt_len = prompt.len();
        self.reqs.insert(
            req.id,
            Req {
                tokens: prompt,
                prompt_len,
                max_tokens: req.max_tokens.max(1),
                min_tokens: req.min_tokens,
                ignore_eos: req.ignore_eos,
                computed: 0,
                blocks: Vec::new(),
                state: Vec::new(),
                hashes: Vec::new(),
                registered: 0,
                emitted_last: 0,
                decode_steps: 0,
                queued_at: Some(self.clock),
            },
        );
        self.waiting.push_back(req.id);
    }

    /// Drops a request at once, freeing its blocks; `false` if it was unknown or finished.
    pub(crate) fn abort(&mut self, id: ReqId) -> bool {
        let Some(req) = self.reqs.remove(&id) else {
            return false;
        };
        self.pool.release(&req.blocks);
        self.pool.release(&req.state);
        self.waiting.retain(|&w| w != id);
        self.running.retain(|&r| r != id);
        true
    }

    /// No request is waiting or running.
    pub(crate) fn is_idle(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Virtual time: the sum of all step durations so far.
    #[cfg(test)]
    pub(crate) fn clock(&self) -> Duration {
        self.clock
    }

    /// Counts and KV usage now.
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot {
            running: self.running.len(),
            waiting: self.waiting.len(),
            free_blocks: self.pool.free(),
            total_blocks: self.pool.total(),
            counters: self.counters,
        }
    }

    #[cfg(test)]
    pub(crate) fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Schedules and runs one step; `None` when there is nothing to do.
    pub(crate) fn step(&mut self) -> Option<StepOutcome> {
        let scheduled = self.schedule();
        if scheduled.is_empty() {
            return None;
        }
        let duration = self.step_duration(&scheduled);
        self.clock += duration;
        let events = self.advance(&scheduled);
        Some(StepOutcome { duration, events })
    }

    /// vLLM v1's order: running requests first (preempting from the back when blocks run out),
    /// then, if nobody was preempted, waiting requests while seats, budget and blocks allow.
    fn schedule(&mut self) -> Vec<(ReqId, usize)> {
        let mut budget = self.token_budget;
        let mut scheduled = Vec::new();
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let id = self.running[i];
            let want = self
                .reqs
                .get(&id)
                .map_or(0, |r| (r.tokens.len() - r.computed).min(budget));
            if want == 0 {
                i += 1;
                continue;
            }
            loop {
                if self.grow(id, want) {
                    scheduled.push((id, want));
                    budget -= want;
                    i += 1;
                    break;
                }
                let Some(victim) = self.running.pop() else {
                    break;
                };
                self.preempt(victim);
                preempted = true;
                if victim == id {
                    break;
                }
            }
        }
        if !preempted {
            self.admit(&mut budget, &mut scheduled);
        }
        scheduled
    }

    fn admit(&mut self, budget: &mut usize, scheduled: &mut Vec<(ReqId, usize)>) {
        let bs = self.block_size;
        while let Some(&id) = self.waiting.front() {
            if self.running.len() >= self.max_num_seqs || *budget == 0 {
                break;
            }
            let Some(req) = self.reqs.get_mut(&id) else {
                self.waiting.pop_front();
                continue;
            };
            req.extend_hashes(bs);
            // At least one token is always computed, so a fully cached prompt still runs a step.
            let max_hit_blocks = ((req.tokens.len() - 1) / bs).min(req.hashes.len());
            let hits = self.pool.lookup(&req.hashes[..max_hit_blocks]);
            let cached = hits.len() * bs;
            let n = (req.tokens.len() - cached).min(*budget);
            let needed = (cached + n).div_ceil(bs) - hits.len();
            let extra = self.extra.at(cached + n);
            if !self.pool.can_allocate(&hits, needed + extra) {
                break;
            }
            self.pool.touch(&hits);
            let Some(fresh) = self.pool.allocate(needed) else {
                self.pool.release(&hits);
                break;
            };
            let Some(state) = self.pool.allocate(extra) else {
                self.pool.release(&hits);
                self.pool.release(&fresh);
                break;
            };
            req.state = state;
            self.counters.prefix_queries += req.tokens.len() as u64;
            self.counters.prefix_hits += cached as u64;
            req.registered = hits.len();
            req.blocks = hits;
            req.blocks.extend(fresh);
            req.computed = cached;
            // vLLM's queue time: arrival to first scheduled (a preempted
            // request's second wait is not counted again).
            if let Some(at) = req.queued_at.take() {
                self.counters.queue_time_ns += (self.clock - at).as_nanos() as u64;
                self.counters.queued_requests += 1;
            }
            self.waiting.pop_front();
            self.running.push(id);
            scheduled.push((id, n));
            *budget -= n;
        }
    }

    /// Makes room in `id`'s block table for `n` more tokens.
    fn grow(&mut self, id: ReqId, n: usize) -> bool {
        let Some(req) = self.reqs.get_mut(&id) else {
            return false;
        };
        let needed = (req.computed + n)
            .div_ceil(self.block_size)
            .saturating_sub(req.blocks.len());
        let extra = self
            .extra
            .at(req.computed + n)
            .saturating_sub(req.state.len());
        if self.pool.free() < needed + extra {
            return false;
        }
        match (self.pool.allocate(needed), self.pool.allocate(extra)) {
            (Some(fresh), Some(more)) => {
                req.blocks.extend(fresh);
                req.state.extend(more);
                true
            }
            (a, b) => {
                for got in [a, b].into_iter().flatten() {
                    self.pool.release(&got);
                }
                false
            }
        }
    }

    /// Frees all of a request's blocks; it recomputes from scratch (with prefix hits) later.
    fn preempt(&mut self, id: ReqId) {
        if let Some(req) = self.reqs.get_mut(&id) {
            self.pool.release(&req.blocks);
            self.pool.release(&req.state);
            req.blocks.clear();
            req.state.clear();
            req.computed = 0;
            req.registered = 0;
            req.emitted_last = 0;
            self.waiting.push_front(id);
            self.counters.preemptions += 1;
        }
    }

    fn step_duration(&self, scheduled: &[(ReqId, usize)]) -> Duration {
        let mut prefill = Duration::ZERO;
        let (mut batch, mut context) = (0u64, 0u64);
        for &(id, n) in scheduled {
            let Some(req) = self.reqs.get(&id) else {
                continue;
            };
            // A decode step computes the tokens the last step emitted (one, or
            // several when the engine speculates).
            if n >= 1 && n <= req.emitted_last && req.computed >= req.prompt_len {
                batch += 1;
                // Attention covers the cached context and the new tokens.
                context += (req.computed + n) as u64;
            } else {
                prefill += self.cost.prefill_chunk(n as u64, req.computed as u64);
            }
        }
        self.cost.step_base() + prefill + self.cost.decode(batch, context)
    }

    fn advance(&mut self, scheduled: &[(ReqId, usize)]) -> Vec<Event> {
        let mut events = Vec::with_capacity(scheduled.len());
        let mut finished = Vec::new();
        for &(id, n) in scheduled {
            let Some(req) = self.reqs.get_mut(&id) else {
                continue;
            };
            req.computed += n;
            register_full_blocks(&mut self.pool, req, self.block_size);
            if req.computed < req.tokens.len() {
                continue; // a prefill chunk that did not reach the end of the prompt
            }
            // The first token comes from prefill; a decode step gives the
            // profile's next count (speculative decoding accepts several).
            let k = if req.outputs() == 0 {
                1
            } else {
                let k = self.tokens_per_step[req.decode_steps % self.tokens_per_step.len()];
                req.decode_steps += 1;
                if let Some(draft) = self.num_speculative_tokens {
                    // Counted per step as the scheduler verifies it, before any
                    // stop cuts the step's tokens short (as vLLM counts them).
                    self.counters.spec_drafts += 1;
                    self.counters.spec_draft_tokens += u64::from(draft);
                    self.counters.spec_accepted_tokens += u64::from(k.saturating_sub(1));
                }
                k as usize
            };
            req.emitted_last = 0;
            for _ in 0..k {
                let token = self.output_vocab[pick(id, req.outputs()) % self.output_vocab.len()];
                req.tokens.push(token);
                req.emitted_last += 1;
                if req.outputs() == 1 {
                    self.counters.prompt_tokens += req.prompt_len as u64;
                }
                self.counters.generation_tokens += 1;
                events.push(Event::Token { id, token });
                if let Some(reason) = finish_reason(req, self.max_model_len, self.eos_after) {
                    finished.push(id);
                    match reason {
                        FinishReason::Stop => self.counters.finished_stop += 1,
                        FinishReason::Length => self.counters.finished_length += 1,
                    }
                    let usage = Usage {
                        prompt_tokens: count(req.prompt_len),
                        completion_tokens: count(req.outputs()),
                    };
                    events.push(Event::Finished { id, reason, usage });
                    break;
                }
            }
        }
        for id in finished {
            if let Some(req) = self.reqs.remove(&id) {
                self.pool.release(&req.blocks);
                self.pool.release(&req.state);
            }
            self.running.retain(|&r| r != id);
        }
        events
    }
}

fn register_full_blocks(pool: &mut BlockPool, req: &mut Req, block_size: usize) {
    let full = (req.computed / block_size).min(req.blocks.len());
    if full <= req.registered {
        return;
    }
    req.extend_hashes(block_size);
    for i in req.registered..full.min(req.hashes.len()) {
        pool.cache(req.blocks[i], req.hashes[i]);
    }
    req.registered = full;
}

fn finish_reason(req: &Req, max_model_len: usize, eos_after: Option<u32>) -> Option<FinishReason> {
    let outputs = req.outputs();
    if outputs >= req.max_tokens as usize || req.tokens.len() >= max_model_len {
        return Some(FinishReason::Length);
    }
    let eos = eos_after.is_some_and(|e| outputs >= e as usize);
    (eos && !req.ignore_eos && outputs >= req.min_tokens as usize).then_some(FinishReason::Stop)
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A deterministic pseudo-random index for output token `index` of request `id` (splitmix64).
fn pick(id: ReqId, index: usize) -> usize {
    let mut z = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (index as u64);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) as usize
}

#[cfg(test)]
mod tests;
