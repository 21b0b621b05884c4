//! Progress display for `speedmatrix run`: bars with an ETA on a terminal,
//! plain timestamped lines otherwise, nothing with --quiet; the runner's
//! events in `words.rs`'s words. The ETA is the runner's [`Eta`]: the plan's
//! per-step estimates corrected by what the finished steps took.

use std::io::IsTerminal as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use speedmatrix_runner::{Eta, Event, NotRun, Observer, StepEstimate, StepId, StepPhase};

use super::words;
use crate::out::tell;

/// The runner's observer for the command line.
pub(crate) struct Progress {
    quiet: bool,
    bar: Option<ProgressBar>,
    start: Instant,
    /// Shared with the bar's `{left}` key, which reads the ETA at every draw
    /// (so it counts down between events). Never held while calling the bar:
    /// a bar call may draw, and the draw takes this lock.
    tally: Arc<Mutex<Tally>>,
}

/// What the run has done so far.
#[derive(Default)]
struct Tally {
    /// The plan's steps, to find a step's index in the ETA.
    planned: Vec<StepEstimate>,
    finished: usize,
    eta: Eta,
}

impl Tally {
    fn left(&self, now: Instant) -> Option<Duration> {
        self.eta.remaining(now)
    }
}

impl Progress {
    /// A display on stderr; bars only when stderr is a terminal.
    pub(crate) fn new(quiet: bool) -> Progress {
        let tally = Arc::new(Mutex::new(Tally::default()));
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new(0);
            let shown = Arc::clone(&tally);
            let left = move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                let left = shown.lock().ok().and_then(|t| t.left(Instant::now()));
                if let Some(left) = left {
                    let _ = w.write_str(&words::time_left(left));
                }
            };
            let style = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps  {left}  {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key("left", left);
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            quiet,
            bar,
            start: Instant::now(),
            tally,
        }
    }

    fn line(&self, text: &str) {
        if self.quiet {
            return;
        }
        match &self.bar {
            Some(bar) => bar.println(speedmatrix_client::redact::clean(text)),
            None => tell!("[{:>7.1}s] {text}", self.start.elapsed().as_secs_f64()),
        }
    }

    /// Changes the tally; `None` if a panic elsewhere poisoned it.
    fn update<T>(&self, change: impl FnOnce(&mut Tally) -> T) -> Option<T> {
        self.tally.lock().ok().map(|mut t| change(&mut t))
    }

    /// Counts a step that ended (or did not run) and moves the bar; the plain
    /// line for it then ends with the steps done and the time left.
    fn step_ended(&self, step: StepId, ran: bool, text: &str) {
        let now = Instant::now();
        let Some((finished, steps, left)) = self.update(|t| {
            match speedmatrix_runner::step_index(&t.planned, step) {
                Some(i) if ran => t.eta.step_finished(i, now),
                Some(i) => t.eta.step_skipped(i),
                None => {}
            }
            t.finished += 1;
            (t.finished, t.planned.len(), t.left(now))
        }) else {
            return self.line(text);
        };
        match &self.bar {
            Some(bar) => {
                bar.set_position(finished.min(steps) as u64);
                self.line(text);
            }
            None => self.line(&format!(
                "{text} ({})",
                words::steps_done(finished.min(steps), steps, left)
            )),
        }
    }

    /// Removes the bar.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Observer for Progress {
    fn event(&self, event: Event<'_>) {
        match event {
            Event::Planned {
                capacity,
                steps,
                estimated,
                estimates,
            } => {
                self.update(|t| {
                    let each: Vec<Duration> = estimates.iter().map(|e| e.estimate).collect();
                    *t = Tally {
                        planned: estimates.to_vec(),
                        finished: 0,
                        eta: Eta::new(&each),
                    };
                });
                if let Some(bar) = &self.bar {
                    bar.set_length(steps as u64);
                    bar.set_position(0);
                }
                self.line(&words::capacity(capacity));
                self.line(&format!(
                    "{steps} steps planned, about {} (estimate)",
                    humantime::format_duration(Duration::from_secs(estimated.as_secs()))
                ));
            }
            Event::StepStarted { step, .. } => {
                let now = Instant::now();
                self.update(|t| {
                    if let Some(i) = speedmatrix_runner::step_index(&t.planned, step) {
                        t.eta.step_started(i, now);
                    }
                });
                match &self.bar {
                    Some(bar) => bar.set_message(
                        speedmatrix_client::redact::clean(&step.to_string()).into_owned(),
                    ),
                    None => self.line(&format!("{step}: started")),
                }
            }
            Event::Phase { step, phase } => {
                if let Some(bar) = &self.bar {
                    let text = format!("{step}: {}", phase_words(phase));
                    bar.set_message(speedmatrix_client::redact::clean(&text).into_owned());
                }
            }
            Event::PrefillFinished(p) => {
                let step = StepId::Prefill { context: p.context };
                let text = format!("prefill {}: {}", p.context, words::prefill_summary(p));
                self.step_ended(step, true, &text);
            }
            Event::CellFinished(c) => {
                let text = format!("{}: {}", c.step(), words::cell_summary(c));
                self.step_ended(c.step(), true, &text);
            }
            Event::LoadFinished(c) => {
                let text = format!("{}: {}", c.step(), words::load_summary(c));
                self.step_ended(c.step(), true, &text);
            }
            Event::StepNotRun { step, why } => {
                let why = match why {
                    NotRun::Excluded(ex) => words::verdict(ex),
                    NotRun::InJournal => "already in the journal".to_owned(),
                    _ => "not run".to_owned(),
                };
                self.step_ended(step, false, &format!("{step}: not run ({why})"));
            }
            Event::Notice(n) => self.line(&words::notice(n)),
            _ => {}
        }
    }
}

fn phase_words(phase: StepPhase) -> &'static str {
    match phase {
        StepPhase::BuildingPrompts => "building prompts",
        StepPhase::WarmingCache => "warming the prefix cache",
        StepPhase::StartingStreams => "starting streams",
        StepPhase::Measuring => "measuring",
        StepPhase::Draining => "waiting for the server to drain",
        StepPhase::Calibrating => "calibrating the token estimate",
        _ => "working",
    }
}
