//! How long a study has left: each point's plan estimate (the runner's per-step estimates of
//! its matrix, summed), plus its server's start, corrected by what finished points took.
//!
//! [`StudyEta`] is pure: the study tells it when points start, are ready and end, and asks it
//! at any instant how long is left. Kept simple on purpose:
//!
//! - a server's start is the mean of the starts seen so far, or a guess before the first;
//! - the slowdown is the finished measurements' time over their estimates (1 until one has
//!   finished), within [`StudyEta::MIN_SLOWDOWN`]..=[`StudyEta::MAX_SLOWDOWN`];
//! - a pending point takes start + slowdown × estimate; a running one what is left of that;
//! - with several points at once the points are laid on the study's slots in order, each on
//!   the slot that frees first, and the time left is when the last slot frees.
//!
//! A point that fails, or is skipped, is no evidence of the matrix's speed either way.

use std::time::{Duration, Instant};

/// The study's time left, from the points' estimates and what they took.
#[derive(Debug, Clone)]
pub struct StudyEta {
    points: Vec<PointState>,
    slots: usize,
    guess: Duration,
    /// Sum and count of the server starts seen.
    starts: (Duration, u32),
    /// Measurement time and estimates of the points measured to their end.
    took: Duration,
    planned: Duration,
}

#[derive(Debug, Clone, Copy)]
struct PointState {
    estimate: Duration,
    state: State,
}

#[derive(Debug, Clone, Copy)]
enum State {
    Pending,
    Starting { since: Instant },
    Measuring { since: Instant },
    Done,
}

impl StudyEta {
    /// The least time left shown while a point has still to end.
    pub const FLOOR: Duration = Duration::from_secs(1);
    /// The smallest slowdown believed: plans 5× too pessimistic.
    pub const MIN_SLOWDOWN: f64 = 0.2;
    /// The largest slowdown believed: plans 20× too optimistic.
    pub const MAX_SLOWDOWN: f64 = 20.0;

    /// An estimator for points whose matrices take `estimates` (in the study's order; indices
    /// below refer to it), `parallel` at once (0 is read as 1), each server taking
    /// `start_guess` to come up until one has been seen to.
    pub fn new(estimates: &[Duration], parallel: usize, start_guess: Duration) -> StudyEta {
        StudyEta {
            points: estimates
                .iter()
                .map(|&estimate| PointState {
                    estimate,
                    state: State::Pending,
                })
                .collect(),
            slots: parallel.max(1),
            guess: start_guess,
            starts: (Duration::ZERO, 0),
            took: Duration::ZERO,
            planned: Duration::ZERO,
        }
    }

    /// Point `index` will not run (the journal holds it, or another process runs it).
    pub fn skipped(&mut self, index: usize) {
        self.set(index, State::Done);
    }

    /// Point `index`'s server started at `at`.
    pub fn starting(&mut self, index: usize, at: Instant) {
        self.set(index, State::Starting { since: at });
    }

    /// Point `index`'s server answered at `at`: its start is one more seen, and its matrix
    /// begins.
    pub fn ready(&mut self, index: usize, at: Instant) {
        if let Some(PointState {
            state: State::Starting { since },
            ..
        }) = self.points.get(index).copied()
        {
            self.starts.0 = self
                .starts
                .0
                .saturating_add(at.saturating_duration_since(since));
            self.starts.1 = self.starts.1.saturating_add(1);
            self.set(index, State::Measuring { since: at });
        }
    }

    /// Point `index` ended at `at`; `measured`: its matrix ran to its end, so what it took
    /// counts toward the slowdown.
    pub fn finished(&mut self, index: usize, at: Instant, measured: bool) {
        let Some(p) = self.points.get(index).copied() else {
            return;
        };
        if let (State::Measuring { since }, true) = (p.state, measured)
            && !p.estimate.is_zero()
        {
            self.took = self
                .took
                .saturating_add(at.saturating_duration_since(since));
            self.planned = self.planned.saturating_add(p.estimate);
        }
        self.set(index, State::Done);
    }

    /// A server's start as seen so far (the guess before any).
    pub fn start_time(&self) -> Duration {
        match self.starts {
            (_, 0) => self.guess,
            (sum, n) => sum / n,
        }
    }

    /// How much longer than their estimates the finished matrices took (below 1: faster).
    pub fn slowdown(&self) -> f64 {
        if self.planned.is_zero() {
            return 1.0;
        }
        (self.took.as_secs_f64() / self.planned.as_secs_f64())
            .clamp(Self::MIN_SLOWDOWN, Self::MAX_SLOWDOWN)
    }

    /// The study's time left at `now`, at least [`StudyEta::FLOOR`] while a point has still to
    /// end; `None` when none has.
    pub fn remaining(&self, now: Instant) -> Option<Duration> {
        if self.points.iter().all(|p| matches!(p.state, State::Done)) {
            return None;
        }
        let start = self.start_time();
        let slowdown = self.slowdown();
        let matrix = |p: &PointState| scale(p.estimate, slowdown);
        let mut slots: Vec<Duration> = Vec::with_capacity(self.slots);
        // Running points hold their slots for what they have left.
        for p in &self.points {
            let left = match p.state {
                State::Starting { since } => start
                    .saturating_sub(now.saturating_duration_since(since))
                    .saturating_add(matrix(p)),
                State::Measuring { since } => {
                    matrix(p).saturating_sub(now.saturating_duration_since(since))
                }
                State::Pending | State::Done => continue,
            };
            slots.push(left);
        }
        slots.resize(slots.len().max(self.slots), Duration::ZERO);
        // Pending points, in order, each on the slot that frees first.
        for p in self
            .points
            .iter()
            .filter(|p| matches!(p.state, State::Pending))
        {
            if let Some(first) = slots.iter_mut().min() {
                *first = first.saturating_add(start).saturating_add(matrix(p));
            }
        }
        let last = slots.into_iter().max().unwrap_or_default();
        Some(last.max(Self::FLOOR))
    }

    fn set(&mut self, index: usize, state: State) {
        if let Some(p) = self.points.get_mut(index) {
            p.state = state;
        }
    }
}

/// `d × factor`, saturating instead of panicking on overflow.
fn scale(d: Duration, factor: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * factor.max(0.0)).unwrap_or(Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn one_after_another_the_points_add_up_with_their_starts() {
        let t0 = Instant::now();
        let mut eta = StudyEta::new(&[S(100), S(200), S(50)], 1, S(30));
        assert_eq!(eta.remaining(t0), Some(S(30 * 3 + 350)));
        eta.starting(0, t0);
        // 10 s into the first start: 20 s of it left.
        assert_eq!(
            eta.remaining(t0 + S(10)),
            Some(S(20 + 100 + 30 + 200 + 30 + 50))
        );
        // It came up in 60 s: starts now count 60 s, and its matrix began.
        eta.ready(0, t0 + S(60));
        assert_eq!(eta.start_time(), S(60));
        assert_eq!(eta.remaining(t0 + S(60)), Some(S(100 + 60 + 200 + 60 + 50)));
        // Its matrix took twice its estimate: the rest is expected to as well.
        eta.finished(0, t0 + S(260), true);
        assert!((eta.slowdown() - 2.0).abs() < 1e-9);
        assert_eq!(eta.remaining(t0 + S(260)), Some(S(60 + 400 + 60 + 100)));
    }

    #[test]
    fn skipped_and_failed_points_are_no_evidence_and_the_end_is_none() {
        let t0 = Instant::now();
        let mut eta = StudyEta::new(&[S(100), S(100), S(100)], 1, S(10));
        eta.skipped(0);
        eta.starting(1, t0);
        // A server that dies at once: its point ends, its start is no start seen.
        eta.finished(1, t0 + S(1), false);
        assert_eq!(eta.start_time(), S(10));
        assert!((eta.slowdown() - 1.0).abs() < 1e-9);
        assert_eq!(eta.remaining(t0 + S(1)), Some(S(110)));
        eta.starting(2, t0 + S(1));
        eta.ready(2, t0 + S(2));
        // Past its estimate, a running point is not "nothing left".
        assert_eq!(eta.remaining(t0 + S(500)), Some(StudyEta::FLOOR));
        eta.finished(2, t0 + S(500), true);
        assert_eq!(eta.remaining(t0 + S(500)), None);
        // Out of range indices are ignored.
        eta.starting(9, t0);
        eta.ready(9, t0);
        eta.finished(9, t0, true);
        assert_eq!(StudyEta::new(&[], 1, S(1)).remaining(t0), None);
    }

    #[test]
    fn points_at_once_share_the_time_and_the_slowdown_is_clamped() {
        let t0 = Instant::now();
        // Four points of 100 s on two slots: two rounds.
        let eta = StudyEta::new(&[S(100); 4], 2, S(0));
        assert_eq!(eta.remaining(t0), Some(S(200)));
        // A long point first: the others fill the second slot meanwhile.
        let eta = StudyEta::new(&[S(300), S(100), S(100), S(100)], 2, S(0));
        assert_eq!(eta.remaining(t0), Some(S(300)));
        let mut eta = StudyEta::new(&[S(100), S(100), S(100)], 2, S(0));
        eta.starting(0, t0);
        eta.ready(0, t0);
        eta.starting(1, t0);
        eta.ready(1, t0);
        // 40 s in: 60 s left on each slot, the third point after one of them.
        assert_eq!(eta.remaining(t0 + S(40)), Some(S(160)));
        // A matrix 1000× faster than planned is believed only 5× faster.
        eta.finished(0, t0 + Duration::from_millis(100), true);
        assert!((eta.slowdown() - StudyEta::MIN_SLOWDOWN).abs() < 1e-9);
    }
}
