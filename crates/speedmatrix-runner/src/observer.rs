//! Progress reporting: the runner tells an [`Observer`] what it is doing, as
//! typed [`Event`]s; the binary turns them into progress bars, log lines and
//! its own words. The method has a no-op default so embedders show only what
//! they want.

use std::time::Duration;

use crate::outcome::{CellOutcome, Exclusion, LoadOutcome, Notice, PrefillOutcome, StepId};
use crate::plan::{CapacityPlan, StepEstimate};

/// What a step is doing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepPhase {
    /// Building the step's exact-length prompts.
    BuildingPrompts,
    /// Sending the prompts once so the server's prefix cache holds them.
    WarmingCache,
    /// Starting the cell's streams and waiting for every first token.
    StartingStreams,
    /// Inside the measurement window.
    Measuring,
    /// Waiting for the server to finish the cancelled requests.
    Draining,
    /// Running requests to their end to calibrate a token estimate.
    Calibrating,
}

/// Why a step did not run.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum NotRun<'a> {
    /// The plan excluded it.
    Excluded(&'a Exclusion),
    /// The journal of the run being resumed already has it.
    InJournal,
}

/// One thing that happened during a run.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The capacity decision and the plan are known: how many steps, roughly how long.
    Planned {
        /// The capacity decision.
        capacity: &'a CapacityPlan,
        /// Steps in all (run or not).
        steps: usize,
        /// Rough duration of the steps that run.
        estimated: Duration,
        /// Every step in run order with its own rough duration (zero when
        /// excluded), for an ETA ([`crate::Eta`]).
        estimates: &'a [StepEstimate],
    },
    /// A step begins.
    StepStarted {
        /// Which.
        step: StepId,
        /// Roughly how long it takes.
        expected: Duration,
    },
    /// The step's phase changed.
    Phase {
        /// Which step.
        step: StepId,
        /// Its new phase.
        phase: StepPhase,
    },
    /// A prefill point ended (also one measured on a decode cell's warm-up).
    PrefillFinished(&'a PrefillOutcome),
    /// A decode cell ended.
    CellFinished(&'a CellOutcome),
    /// A burst or rate cell ended.
    LoadFinished(&'a LoadOutcome),
    /// A step was not run.
    StepNotRun {
        /// Which.
        step: StepId,
        /// Why.
        why: NotRun<'a>,
    },
    /// Something worth telling (queueing, retries, estimates, ...).
    Notice(&'a Notice),
}

/// Receives progress events from a run. Called from the runner's task; keep
/// implementations quick (they never extend a measurement window).
pub trait Observer: Send + Sync {
    /// Something happened.
    fn event(&self, _event: Event<'_>) {}
}

/// An observer that shows nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Observer for Silent {}
