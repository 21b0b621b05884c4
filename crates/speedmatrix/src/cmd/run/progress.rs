//! Progress display for `speedmatrix run`: bars with an ETA on a terminal,
//! plain timestamped lines otherwise, nothing with --quiet; the runner's
//! events in `words.rs`'s words.

use std::io::IsTerminal as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use speedmatrix_runner::{Event, NotRun, Observer, StepPhase};

use super::words;
use crate::out::tell;

/// The runner's observer for the command line.
pub(crate) struct Progress {
    quiet: bool,
    bar: Option<ProgressBar>,
    start: Instant,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    steps: usize,
    finished: usize,
}

impl Progress {
    /// A display on stderr; bars only when stderr is a terminal.
    pub(crate) fn new(quiet: bool) -> Progress {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::new(0);
            let style = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps  ETA {eta}  {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            quiet,
            bar,
            start: Instant::now(),
            state: Mutex::new(State::default()),
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

    fn advance(&self) {
        let (finished, steps) = match self.state.lock() {
            Ok(mut s) => {
                s.finished += 1;
                (s.finished, s.steps)
            }
            Err(_) => return,
        };
        if let Some(bar) = &self.bar {
            bar.set_position(finished.min(steps) as u64);
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
            } => {
                if let Ok(mut s) = self.state.lock() {
                    s.steps = steps;
                }
                if let Some(bar) = &self.bar {
                    bar.set_length(steps as u64);
                }
                self.line(&words::capacity(capacity));
                self.line(&format!(
                    "{steps} steps planned, about {} (estimate)",
                    humantime::format_duration(Duration::from_secs(estimated.as_secs()))
                ));
            }
            Event::StepStarted { step, .. } => match &self.bar {
                Some(bar) => bar
                    .set_message(speedmatrix_client::redact::clean(&step.to_string()).into_owned()),
                None => self.line(&format!("{step}: started")),
            },
            Event::Phase { step, phase } => {
                if let Some(bar) = &self.bar {
                    let text = format!("{step}: {}", phase_words(phase));
                    bar.set_message(speedmatrix_client::redact::clean(&text).into_owned());
                }
            }
            Event::PrefillFinished(p) => {
                self.line(&format!(
                    "prefill {}: {}",
                    p.context,
                    words::prefill_summary(p)
                ));
                self.advance();
            }
            Event::CellFinished(c) => {
                self.line(&format!("{}: {}", c.step(), words::cell_summary(c)));
                self.advance();
            }
            Event::LoadFinished(c) => {
                self.line(&format!("{}: {}", c.step(), words::load_summary(c)));
                self.advance();
            }
            Event::StepNotRun { step, why } => {
                let why = match why {
                    NotRun::Excluded(ex) => words::verdict(ex),
                    NotRun::InJournal => "already in the journal".to_owned(),
                    _ => "not run".to_owned(),
                };
                self.line(&format!("{step}: not run ({why})"));
                self.advance();
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
