//! What `study run` says as it goes: a line when a point's server starts (its place, its
//! command, its GPUs, the study's time left), one when it answers, and one when the point
//! ends (its figures, or why it failed with the lines of its log that say so). Each line names
//! its point, so the lines of points run at once can interleave.

use std::path::{Path, PathBuf};
use std::time::Duration;

use speedmatrix_runner::{Notice, Observer, RunOutcome};
use speedmatrix_study::{
    PointFigures, PointFinish, PointOutcome, PointReady, PointRecord, PointStart, StudyObserver,
};

use super::status;
use crate::cmd::run::{Progress, words};
use crate::out::tell;

/// The longest server command shown in a start line; the dry run shows it whole.
const COMMAND_SHOWN: usize = 120;

/// The study's lines; the runner's own progress inside a point is off.
pub(super) struct Lines {
    progress: Progress,
    dir: PathBuf,
}

impl Lines {
    /// Lines about the study in `dir`.
    pub(super) fn new(dir: &Path) -> Lines {
        Lines {
            progress: Progress::new(true),
            dir: dir.to_owned(),
        }
    }
}

impl StudyObserver for Lines {
    fn point_begins(&self, start: &PointStart<'_>) {
        tell!(
            "[{}/{}] {}: starting its server ({}){}{}",
            start.number,
            start.total,
            start.point.name,
            shortened(&start.command.to_string(), COMMAND_SHOWN),
            on_gpus(start.gpus),
            study_left(start.eta)
        );
    }

    fn point_ready(&self, ready: &PointReady<'_>) {
        tell!(
            "[{}/{}] {}: its server answered after {}",
            ready.number,
            ready.total,
            ready.point.name,
            seconds(ready.after.as_secs_f64())
        );
    }

    fn point_skipped(&self, record: &PointRecord) {
        tell!(
            "{}: done before ({}), skipped",
            record.point,
            status(record)
        );
    }

    fn journal_damaged(&self, warning: &str) {
        tell!("warning: {warning}");
    }

    fn run_ended(&self, dir: &Path, outcome: &RunOutcome) {
        if let Some(tail) = &outcome.journal_damage {
            tell!(
                "note: {}'s journal was damaged at line {} ({}); the steps from there on ran again",
                dir.display(),
                tail.line,
                tail.reason
            );
        }
    }

    fn point_finished(&self, finish: &PointFinish<'_>) {
        let r = finish.record;
        let head = format!("[{}/{}] {}", finish.number, finish.total, r.point);
        let left = study_left(finish.eta);
        let took = seconds(r.seconds);
        match &r.outcome {
            PointOutcome::Measured { exit_code } => {
                let figures = finish.figures.map(measured).unwrap_or_default();
                let exited = if *exit_code == 0 {
                    String::new()
                } else {
                    format!(" (its run exited {exit_code})")
                };
                tell!(
                    "{head}: measured in {took}{exited}{figures}; {}{left}",
                    self.dir.join(&r.point).join("run").display()
                );
            }
            PointOutcome::Failed {
                reason,
                error_lines,
                ..
            } => {
                tell!("{head}: failed after {took}: {reason}{left}");
                for line in error_lines {
                    tell!("    | {line}");
                }
                tell!(
                    "    (its log: {})",
                    self.dir.join(&r.point).join("server.log").display()
                );
            }
            PointOutcome::Interrupted => tell!("{head}: {}", status(r)),
        }
    }

    fn run_observer(&self) -> &dyn Observer {
        &self.progress
    }

    fn word(&self, notice: &Notice) -> String {
        words::notice(notice)
    }
}

/// `: best 812.3 total tok/s at 0 × 2, 2 cells measured, 1 failed`.
fn measured(f: &PointFigures) -> String {
    let best = match (f.best_total_tokens_per_s, &f.best_cell) {
        (Some(rate), Some(cell)) => format!(": best {rate:.1} total tok/s at {cell},"),
        _ => ":".to_owned(),
    };
    let not_run = if f.cells_not_run > 0 {
        format!(", {} not run", f.cells_not_run)
    } else {
        String::new()
    };
    format!(
        "{best} {} cells measured, {} failed{not_run}",
        f.cells_measured, f.cells_failed
    )
}

/// ` on GPU 0` / ` on GPUs 0,1`; nothing without GPUs.
fn on_gpus(gpus: &[String]) -> String {
    match gpus {
        [] => String::new(),
        [one] => format!(" on GPU {one}"),
        many => format!(" on GPUs {}", many.join(",")),
    }
}

/// ` — study: about 1h 2m left`; nothing once no point is left.
fn study_left(eta: Option<Duration>) -> String {
    eta.map(|left| format!(" — study: {}", words::time_left(left)))
        .unwrap_or_default()
}

/// `0.4s` under a minute, `4m 12s` above.
fn seconds(secs: f64) -> String {
    if secs < 60.0 {
        return format!("{:.1}s", secs.max(0.0));
    }
    let whole = Duration::try_from_secs_f64(secs.round()).unwrap_or(Duration::MAX);
    humantime::format_duration(whole).to_string()
}

/// `text` cut to `max` characters, with `…` where it was cut.
fn shortened(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_gpus_and_times_read_as_words() {
        let f = PointFigures {
            best_total_tokens_per_s: Some(812.34),
            best_cell: Some("0 × 2".into()),
            cells_measured: 2,
            cells_failed: 1,
            cells_not_run: 0,
        };
        assert_eq!(
            measured(&f),
            ": best 812.3 total tok/s at 0 × 2, 2 cells measured, 1 failed"
        );
        assert_eq!(
            measured(&PointFigures::default()),
            ": 0 cells measured, 0 failed"
        );
        assert_eq!(on_gpus(&[]), "");
        assert_eq!(on_gpus(&["3".into()]), " on GPU 3");
        assert_eq!(on_gpus(&["0".into(), "1".into()]), " on GPUs 0,1");
        assert_eq!(seconds(0.42), "0.4s");
        assert_eq!(seconds(252.4), "4m 12s");
        assert_eq!(shortened("abcdef", 4), "abc…");
        assert_eq!(shortened("abc", 4), "abc");
        assert_eq!(study_left(None), "");
        assert_eq!(
            study_left(Some(Duration::from_secs(62))),
            " — study: about 1m 2s left"
        );
    }
}
