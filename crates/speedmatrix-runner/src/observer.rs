//! Progress reporting: the runner tells an [`Observer`] what it is doing; the
//! binary turns that into progress bars or log lines. Every method has a
//! no-op default so embedders implement only what they show.

use std::time::Duration;

/// Receives progress events from a run. Called from the runner's task; keep
/// implementations quick (they never extend a measurement window).
pub trait Observer: Send + Sync {
    /// The plan is known: how many steps and roughly how long.
    fn planned(&self, _steps: usize, _estimated: Duration) {}
    /// A step (a prefill point or a decode cell) begins.
    fn step_started(&self, _label: &str, _expected: Duration) {}
    /// The step's phase changed (e.g. "building prompts", "warming cache", "measuring").
    fn step_phase(&self, _label: &str, _phase: &str) {}
    /// A step ended with a one-line summary.
    fn step_finished(&self, _label: &str, _summary: &str) {}
    /// A step was skipped without running (over capacity, already in the journal).
    fn step_skipped(&self, _label: &str, _why: &str) {}
    /// Something the user should know (capacity source, queueing, mismatches).
    fn notice(&self, _message: &str) {}
}

/// An observer that shows nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

impl Observer for Silent {}
