//! Progress display for `speedmatrix run`: bars with an ETA on a terminal,
//! plain timestamped lines otherwise, nothing with --quiet.

use std::io::IsTerminal as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use speedmatrix_runner::Observer;

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
            Some(bar) => bar.println(text),
            None => eprintln!("[{:>7.1}s] {text}", self.start.elapsed().as_secs_f64()),
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
    fn planned(&self, steps: usize, estimated: Duration) {
        if let Ok(mut s) = self.state.lock() {
            s.steps = steps;
        }
        if let Some(bar) = &self.bar {
            bar.set_length(steps as u64);
        }
        self.line(&format!(
            "{steps} steps planned, about {} (estimate)",
            humantime::format_duration(Duration::from_secs(estimated.as_secs()))
        ));
    }

    fn step_started(&self, label: &str, _expected: Duration) {
        match &self.bar {
            Some(bar) => bar.set_message(label.to_owned()),
            None => self.line(&format!("{label}: started")),
        }
    }

    fn step_phase(&self, label: &str, phase: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{label}: {phase}"));
        }
    }

    fn step_finished(&self, label: &str, summary: &str) {
        self.line(&format!("{label}: {summary}"));
        self.advance();
    }

    fn step_skipped(&self, label: &str, why: &str) {
        self.line(&format!("{label}: not run ({why})"));
        self.advance();
    }

    fn notice(&self, message: &str) {
        self.line(message);
    }
}
