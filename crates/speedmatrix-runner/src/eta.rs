//! How long a run has left: the plan's per-step estimates, corrected by
//! what the finished steps actually took.
//!
//! [`Eta`] is pure: a front end tells it when steps start, finish or are
//! skipped, and asks it at any instant how long is left. It counts each step
//! by its own estimate (a 60 s decode cell is not worth the same as a 0.5 s
//! prefill point, as in a per-step average), and scales the time still
//! planned by the run's observed slowdown:
//!
//! - slowdown = (time the finished steps took + P) / (their estimates + P),
//!   where the prior P (a tenth of the plan, 1 s to 2 min of estimated time)
//!   keeps the first short steps from swinging it; a running step that has
//!   already taken longer than that predicts counts as if it ended now, so
//!   the estimate grows while a step drags; clamped to
//!   [`Eta::MIN_SLOWDOWN`]..=[`Eta::MAX_SLOWDOWN`];
//! - remaining = slowdown × (estimates of the steps not yet started + what is
//!   left of each running step's estimate), never below [`Eta::FLOOR`] until
//!   the last step ends: a step past its estimate is not "0 s left".
//!
//! A skipped step (excluded, already in a resumed run's journal) takes no
//! time and is no evidence of speed either way.

use std::time::{Duration, Instant};

use crate::outcome::StepId;
use crate::plan::StepEstimate;

/// The run's time left, from per-step estimates and what steps took.
#[derive(Debug, Clone, Default)]
pub struct Eta {
    steps: Vec<Step>,
    /// Estimated time that weighs as much as the plan's own speed (see the module).
    prior: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Step {
    estimate: Duration,
    state: State,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Pending,
    /// `before`: time of earlier parts (a knee search's earlier tries).
    Running {
        since: Instant,
        before: Duration,
    },
    Finished {
        took: Duration,
    },
    Skipped,
}

impl Eta {
    /// The least time left shown while a step has still to end.
    pub const FLOOR: Duration = Duration::from_secs(1);
    /// The smallest slowdown believed: a plan 5× too pessimistic.
    pub const MIN_SLOWDOWN: f64 = 0.2;
    /// The largest slowdown believed: a plan 20× too optimistic.
    pub const MAX_SLOWDOWN: f64 = 20.0;

    /// An estimator for steps with these estimates, in the plan's order (see
    /// [`crate::Plan::step_estimates`]); indices below refer to this order.
    pub fn new(estimates: &[Duration]) -> Eta {
        let total = estimates
            .iter()
            .fold(Duration::ZERO, |sum, e| sum.saturating_add(*e));
        Eta {
            steps: estimates
                .iter()
                .map(|&estimate| Step {
                    estimate,
                    state: State::Pending,
                })
                .collect(),
            prior: (total / 10).clamp(Duration::from_secs(1), Duration::from_secs(120)),
        }
    }

    /// How many steps the plan has.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether the plan has no step.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Step `index` started at `at`. A finished step that starts again (a
    /// knee search's next try, counted against its context's planned step)
    /// adds to the time it took; an index out of range is ignored.
    pub fn step_started(&mut self, index: usize, at: Instant) {
        let Some(step) = self.steps.get_mut(index) else {
            return;
        };
        step.state = match step.state {
            State::Pending | State::Skipped => State::Running {
                since: at,
                before: Duration::ZERO,
            },
            State::Finished { took } => State::Running {
                since: at,
                before: took,
            },
            running @ State::Running { .. } => running,
        };
    }

    /// Step `index` ended at `at`. One that was never seen to start (a
    /// prefill point measured on a decode cell's warm-up) is counted as
    /// skipped: what it took is unknown. An index out of range is ignored;
    /// an `at` before the start counts as no time.
    pub fn step_finished(&mut self, index: usize, at: Instant) {
        let Some(step) = self.steps.get_mut(index) else {
            return;
        };
        step.state = match step.state {
            State::Running { since, before } => State::Finished {
                took: before.saturating_add(at.saturating_duration_since(since)),
            },
            State::Pending => State::Skipped,
            done @ (State::Finished { .. } | State::Skipped) => done,
        };
    }

    /// Step `index` will not run (excluded, in the journal, or given up):
    /// it is left out of both the time left and the slowdown. A step that
    /// already finished keeps what it took; an index out of range is ignored.
    pub fn step_skipped(&mut self, index: usize) {
        if let Some(step) = self.steps.get_mut(index)
            && !matches!(step.state, State::Finished { .. })
        {
            step.state = State::Skipped;
        }
    }

    /// Whether no step is left to start or to end.
    pub fn is_done(&self) -> bool {
        self.steps
            .iter()
            .all(|s| matches!(s.state, State::Finished { .. } | State::Skipped))
    }

    /// The run's observed slowdown at `now`: how much longer than their
    /// estimates the steps take (below 1: faster), damped toward 1 while
    /// little has finished, within [`Eta::MIN_SLOWDOWN`]..=[`Eta::MAX_SLOWDOWN`].
    pub fn slowdown(&self, now: Instant) -> f64 {
        let prior = self.prior.as_secs_f64();
        let (mut took, mut planned) = (prior, prior);
        for s in &self.steps {
            if let State::Finished { took: t } = s.state {
                took += t.as_secs_f64();
                planned += s.estimate.as_secs_f64();
            }
        }
        let settled = took / planned;
        // A running step counts only once it has taken longer than the
        // finished ones predict: so the slowdown is continuous as it starts,
        // overruns and ends.
        for s in &self.steps {
            if let State::Running { .. } = s.state {
                took += s.elapsed(now).as_secs_f64();
                planned += s.estimate.as_secs_f64();
            }
        }
        let with_running = took / planned;
        let slowdown = settled.max(with_running);
        if slowdown.is_nan() {
            return 1.0;
        }
        slowdown.clamp(Self::MIN_SLOWDOWN, Self::MAX_SLOWDOWN)
    }

    /// The plan's own time left at `now`, uncorrected: the estimates of the
    /// steps not yet started, and what is left of each running step's.
    pub fn remaining_plan(&self, now: Instant) -> Duration {
        self.steps
            .iter()
            .map(|s| match s.state {
                State::Pending => s.estimate,
                State::Running { .. } => s.estimate.saturating_sub(s.elapsed(now)),
                State::Finished { .. } | State::Skipped => Duration::ZERO,
            })
            .fold(Duration::ZERO, Duration::saturating_add)
    }

    /// The time left at `now`: the slowdown times the plan's time left, at
    /// least [`Eta::FLOOR`] while a step has still to end; `None` when none
    /// has (every step ended or skipped, or the plan is empty).
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        if self.is_done() {
            return None;
        }
        let left = scale(self.remaining_plan(now), self.slowdown(now));
        Some(left.max(Self::FLOOR))
    }
}

impl Step {
    fn elapsed(&self, now: Instant) -> Duration {
        match self.state {
            State::Running { since, before } => {
                before.saturating_add(now.saturating_duration_since(since))
            }
            State::Finished { took } => took,
            State::Pending | State::Skipped => Duration::ZERO,
        }
    }
}

/// `d × factor`, saturating instead of panicking on overflow.
fn scale(d: Duration, factor: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * factor.max(0.0)).unwrap_or(Duration::MAX)
}

/// Where `step` is in the plan's steps, for [`Eta`]'s indices: its own
/// entry, or for a knee search's try (a load point the plan does not list)
/// its context's planned load step, which stands for the whole search.
pub fn step_index(steps: &[StepEstimate], step: StepId) -> Option<usize> {
    steps.iter().position(|s| s.step == step).or_else(|| {
        let StepId::Load { context, .. } = step else {
            return None;
        };
        steps
            .iter()
            .position(|s| matches!(s.step, StepId::Load { context: c, .. } if c == context))
    })
}

#[cfg(test)]
mod tests;
