//! A sustained-decode cell in virtual time: the engine stepped as fast as the
//! process can, with no real waiting, for checks that need many long runs
//! (the coverage of the metrics' confidence intervals, `docs/metrics.md`).
//!
//! It follows the server and the runner's sustained cells: every stream's
//! prompt is sent once with one output token to warm the prefix cache, then
//! `streams` requests are sent together and each finished request is
//! replaced at once by its stream; requests pass the profile's front end one
//! at a time, reach the engine before its next step, and every token a step
//! gives arrives at the step's end. Each step's duration may carry seeded
//! random noise ([`StepNoise`]); without it the run is exactly the profile's
//! schedule. The answer is plain data (times as offsets from the first
//! measured send), so the simulator knows nothing of the metrics that read it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::{Engine, Event, NewRequest, ReqId};
use crate::{Profile, SimError};

/// Multiplicative noise on every step's duration: each step takes its
/// modelled time times an independent lognormal factor of mean 1 and
/// coefficient of variation `cv`, drawn from a generator seeded by `seed`
/// (the same seed gives the same run).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepNoise {
    /// Standard deviation of the factor over its mean (0.05: 5 %), 0–10.
    pub cv: f64,
    /// Seed of the generator.
    pub seed: u64,
}

/// A sustained-decode cell to run in virtual time (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualRun {
    /// Streams kept busy, at least 1.
    pub streams: u32,
    /// Prompt tokens of every request (each stream its own prompt), below
    /// the profile's `max_model_len`.
    pub prompt_tokens: u32,
    /// `max_tokens` of every request (with `ignore_eos`), at least 1.
    pub max_tokens: u32,
    /// How long to run once every stream has had its first token.
    pub after_ready: Duration,
    /// Noise on each step's duration; `None`: the profile's exact schedule.
    pub noise: Option<StepNoise>,
}

/// The tokens one step gave one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Emission {
    /// When the step ended, after the first measured send.
    pub at: Duration,
    /// Tokens given (one, or more when the profile speculates).
    pub tokens: u32,
}

/// One request of a [`VirtualRun`], as a client would have seen it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualRequest {
    /// The stream that sent it, `0..streams`.
    pub stream: u32,
    /// When it was sent, after the first measured send.
    pub sent: Duration,
    /// Its prompt tokens.
    pub prompt_tokens: u32,
    /// Its tokens, in order.
    pub emissions: Vec<Emission>,
    /// When it finished (with its last token); `None` when still running at
    /// the run's end.
    pub finished: Option<Duration>,
}

impl VirtualRequest {
    /// Output tokens it received.
    pub fn output_tokens(&self) -> u64 {
        self.emissions.iter().map(|e| u64::from(e.tokens)).sum()
    }
}

/// What a [`VirtualRun`] produced.
#[derive(Debug, Clone, PartialEq)]
pub struct VirtualOutcome {
    /// Every measured request, in the order sent.
    pub requests: Vec<VirtualRequest>,
    /// When every stream had had its first token (a runner opens its window then).
    pub ready: Duration,
    /// When the run stopped: the end of the first step to end at least
    /// `after_ready` after `ready`.
    pub end: Duration,
}

/// Steps in a row that may take no time before the run gives up.
const MAX_TIMELESS_STEPS: u32 = 1_000_000;

impl VirtualRun {
    /// Runs the cell on `profile`.
    ///
    /// # Errors
    /// [`SimError::InvalidProfile`] for a profile that does not validate,
    /// [`SimError::InvalidVirtualRun`] for a run it cannot do (no streams, a
    /// prompt with no room for a token, noise out of range, steps that take
    /// no time or run past what a [`Duration`] holds).
    pub fn run(&self, profile: &Profile) -> Result<VirtualOutcome, SimError> {
        profile.validate()?;
        self.check(profile)?;
        let mut cell = Cell::new(self, profile);
        cell.warm_up()?;
        cell.start = cell.now;
        for stream in 0..self.streams {
            cell.send(stream, self.max_tokens, true)?;
        }
        let ready = loop {
            if let Some(ready) = cell.ready {
                break ready;
            }
            cell.step()?;
        };
        let end = ready
            .checked_add(self.after_ready)
            .ok_or_else(|| bad("the run ends past what a duration holds"))?;
        while cell.now.saturating_sub(cell.start) < end {
            cell.step()?;
        }
        Ok(VirtualOutcome {
            end: cell.now.saturating_sub(cell.start),
            requests: cell.requests,
            ready,
        })
    }

    fn check(&self, profile: &Profile) -> Result<(), SimError> {
        if self.streams == 0 || self.max_tokens == 0 {
            return Err(bad("streams and max_tokens must be at least 1"));
        }
        if self.prompt_tokens >= profile.max_model_len {
            return Err(bad(format!(
                "a {}-token prompt leaves no room for a token in max_model_len {}",
                self.prompt_tokens, profile.max_model_len
            )));
        }
        if self.after_ready.is_zero() {
            return Err(bad("after_ready must be longer than zero"));
        }
        match self.noise {
            Some(n) if !(0.0..=10.0).contains(&n.cv) => Err(bad(format!(
                "noise cv must be a number from 0 to 10, got {}",
                n.cv
            ))),
            _ => Ok(()),
        }
    }
}

fn bad(reason: impl Into<String>) -> SimError {
    SimError::InvalidVirtualRun {
        reason: reason.into(),
    }
}

/// The cell being run: the engine, the front end's queue and what the
/// streams received.
struct Cell<'a> {
    run: &'a VirtualRun,
    profile: &'a Profile,
    engine: Engine,
    noise: Option<Noise>,
    /// Virtual time since the warm-up began.
    now: Duration,
    /// When the measured streams were first sent.
    start: Duration,
    /// When the front end is free again (it passes one request at a time).
    frontend_free: Duration,
    /// Requests through the front end, by the time they reach the engine (in order).
    pending: VecDeque<(Duration, NewRequest)>,
    /// Each engine request's index in `requests`; warm-up ones are absent.
    index: HashMap<ReqId, usize>,
    requests: Vec<VirtualRequest>,
    next_id: ReqId,
    /// Whether each stream's first measured request has had a token.
    started: Vec<bool>,
    /// How many have.
    first_tokens: u32,
    ready: Option<Duration>,
    timeless_steps: u32,
}

impl<'a> Cell<'a> {
    fn new(run: &'a VirtualRun, profile: &'a Profile) -> Self {
        // The output tokens' ids do not matter to the timing.
        let vocab: Arc<[u32]> = (0..1_000).collect();
        Cell {
            run,
            profile,
            engine: Engine::new(profile, vocab),
            noise: run.noise.map(Noise::new),
            now: Duration::ZERO,
            start: Duration::ZERO,
            frontend_free: Duration::ZERO,
            pending: VecDeque::new(),
            index: HashMap::new(),
            requests: Vec::new(),
            next_id: 0,
            started: vec![false; run.streams as usize],
            first_tokens: 0,
            ready: None,
            timeless_steps: 0,
        }
    }

    /// Each stream's prompt once, one token each, until the engine is idle:
    /// the prefix cache then holds every prompt, as after a runner's warm-up.
    fn warm_up(&mut self) -> Result<(), SimError> {
        for stream in 0..self.run.streams {
            self.send(stream, 1, false)?;
        }
        while !self.pending.is_empty() || !self.engine.is_idle() {
            self.step()?;
        }
        Ok(())
    }

    /// Sends `stream`'s request now; `measured` ones are recorded.
    fn send(&mut self, stream: u32, max_tokens: u32, measured: bool) -> Result<(), SimError> {
        let id = self.next_id;
        self.next_id += 1;
        let front = self
            .profile
            .cost
            .frontend(u64::from(self.run.prompt_tokens));
        let arrives = self
            .now
            .max(self.frontend_free)
            .checked_add(front)
            .ok_or_else(|| bad("the front end's time runs past what a duration holds"))?;
        self.frontend_free = arrives;
        let request = NewRequest {
            id,
            prompt: prompt(stream, self.run.prompt_tokens),
            max_tokens,
            min_tokens: 0,
            ignore_eos: true,
        };
        self.pending.push_back((arrives, request));
        if measured {
            self.index.insert(id, self.requests.len());
            self.requests.push(VirtualRequest {
                stream,
                sent: self.now.saturating_sub(self.start),
                prompt_tokens: self.run.prompt_tokens,
                emissions: Vec::new(),
                finished: None,
            });
        }
        Ok(())
    }

    /// Admits what reached the engine and runs one step, or waits for the
    /// next arrival when nothing can run.
    fn step(&mut self) -> Result<(), SimError> {
        while let Some((_, request)) = self.pending.pop_front_if(|(at, _)| *at <= self.now) {
            self.engine.add(request);
        }
        let Some(outcome) = self.engine.step() else {
            self.now = match self.pending.front() {
                Some(&(at, _)) => at,
                None => return Err(bad("the engine stopped with nothing left to arrive")),
            };
            return Ok(());
        };
        let duration = match &mut self.noise {
            Some(noise) => noise.apply(outcome.duration),
            None => Some(outcome.duration),
        };
        self.now = duration
            .and_then(|d| self.now.checked_add(d))
            .ok_or_else(|| bad("the run's time runs past what a duration holds"))?;
        self.count_timeless(outcome.duration)?;
        for event in outcome.events {
            self.record(event)?;
        }
        Ok(())
    }

    /// A profile whose steps take no time would never reach the end.
    fn count_timeless(&mut self, step: Duration) -> Result<(), SimError> {
        self.timeless_steps = if step.is_zero() {
            self.timeless_steps + 1
        } else {
            0
        };
        if self.timeless_steps > MAX_TIMELESS_STEPS {
            return Err(bad("the profile's steps take no time"));
        }
        Ok(())
    }

    /// Notes a step's event for a measured request, and replaces it when it finished.
    fn record(&mut self, event: Event) -> Result<(), SimError> {
        let at = self.now.saturating_sub(self.start);
        match event {
            Event::Token { id, .. } => {
                let Some(r) = self.index.get(&id).and_then(|&i| self.requests.get_mut(i)) else {
                    return Ok(());
                };
                match r.emissions.last_mut() {
                    Some(last) if last.at == at => last.tokens += 1,
                    _ => r.emissions.push(Emission { at, tokens: 1 }),
                }
                let started = &mut self.started[r.stream as usize];
                if !*started {
                    *started = true;
                    self.first_tokens += 1;
                    if self.first_tokens == self.run.streams {
                        self.ready = Some(at);
                    }
                }
            }
            Event::Finished { id, .. } => {
                let Some(i) = self.index.remove(&id) else {
                    return Ok(());
                };
                self.requests[i].finished = Some(at);
                let stream = self.requests[i].stream;
                self.send(stream, self.run.max_tokens, true)?;
            }
        }
        Ok(())
    }
}

/// Stream `stream`'s prompt: `len` token ids of its own, so that streams
/// share no cached block (as the runner's prompts do not).
fn prompt(stream: u32, len: u32) -> Vec<u32> {
    (0..len)
        .map(|i| (mix(u64::from(stream) << 32 | u64::from(i)) % 50_000) as u32)
        .collect()
}

/// splitmix64's output function.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The lognormal factors of [`StepNoise`] (splitmix64 and Box–Muller: no
/// dependency for a few lines, and the same numbers on every platform).
#[derive(Debug)]
struct Noise {
    state: u64,
    /// Parameters of the factor's logarithm, chosen for mean 1.
    mu: f64,
    sigma: f64,
}

impl Noise {
    fn new(n: StepNoise) -> Self {
        let var = n.cv.mul_add(n.cv, 1.0).ln();
        Noise {
            state: n.seed,
            mu: -var / 2.0,
            sigma: var.sqrt(),
        }
    }

    /// A uniform number in (0, 1].
    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        ((mix(self.state) >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// `d` times the next factor; `None` past what a duration holds.
    fn apply(&mut self, d: Duration) -> Option<Duration> {
        let z =
            (-2.0 * self.uniform().ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos();
        let factor = (self.mu + self.sigma * z).exp();
        Duration::try_from_secs_f64(d.as_secs_f64() * factor).ok()
    }
}

#[cfg(test)]
mod tests;
