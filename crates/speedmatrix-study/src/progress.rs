//! What a study's front end is told as points start and end: the point's place in the study,
//! its command and GPUs, the study's time left ([`crate::StudyEta`]), a measured point's
//! figures, and for a failed one the lines of its server's log that say why.

use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::Path;
use std::time::Duration;

use speedmatrix_report::{CellStatus, Report};
use speedmatrix_runner::RunOutcome;

use crate::{Point, PointRecord, ServerCommand};

/// A point whose server is starting.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct PointStart<'a> {
    /// The point.
    pub point: &'a Point,
    /// Its place in the study's order, from 1.
    pub number: usize,
    /// The study's points, skipped ones included.
    pub total: usize,
    /// Its server's command, as started.
    pub command: &'a ServerCommand,
    /// The GPUs it holds (empty without `--gpus`).
    pub gpus: &'a [String],
    /// The study's time left, this point included (see [`crate::StudyEta`]).
    pub eta: Option<Duration>,
}

/// A point whose server answered its health path.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct PointReady<'a> {
    /// The point.
    pub point: &'a Point,
    /// Its place in the study's order, from 1.
    pub number: usize,
    /// The study's points.
    pub total: usize,
    /// How long after its start it answered.
    pub after: Duration,
}

/// A point that ended.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct PointFinish<'a> {
    /// Its record (as journaled, unless interrupted).
    pub record: &'a PointRecord,
    /// Its place in the study's order, from 1.
    pub number: usize,
    /// The study's points.
    pub total: usize,
    /// What its matrix measured, when it ran.
    pub figures: Option<&'a PointFigures>,
    /// The study's time left after it; `None` when no point is left.
    pub eta: Option<Duration>,
}

/// A measured point in a few figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PointFigures {
    /// The highest total output tok/s of its cells (decode, burst or rate).
    pub best_total_tokens_per_s: Option<f64>,
    /// That cell: `16k × 32` (decode) or `16k, burst of 8`.
    pub best_cell: Option<String>,
    /// Cells measured (some requests may have failed).
    pub cells_measured: usize,
    /// Cells that ran and measured nothing.
    pub cells_failed: usize,
    /// Cells not run (over capacity, skipped).
    pub cells_not_run: usize,
}

/// One cell as [`PointFigures`] counts it.
#[derive(Debug, Clone, PartialEq)]
pub struct CellFigure {
    /// The cell in words.
    pub label: String,
    /// Whether it was measured; `None`: it was not run.
    pub measured: Option<bool>,
    /// Its total output tok/s, when measured.
    pub total_tokens_per_s: Option<f64>,
}

impl PointFigures {
    /// The figures of a point's run.
    pub fn of(outcome: &RunOutcome) -> PointFigures {
        PointFigures::of_cells(&cells(&outcome.report))
    }

    /// The figures of these cells.
    pub fn of_cells(cells: &[CellFigure]) -> PointFigures {
        let mut f = PointFigures::default();
        for c in cells {
            match c.measured {
                Some(true) => f.cells_measured += 1,
                Some(false) => f.cells_failed += 1,
                None => f.cells_not_run += 1,
            }
            let Some(rate) = c.total_tokens_per_s.filter(|r| r.is_finite()) else {
                continue;
            };
            if f.best_total_tokens_per_s.is_none_or(|best| rate > best) {
                f.best_total_tokens_per_s = Some(rate);
                f.best_cell = Some(c.label.clone());
            }
        }
        f
    }
}

/// The report's decode and load cells as [`CellFigure`]s.
fn cells(report: &Report) -> Vec<CellFigure> {
    let ran = |s: &CellStatus| match s {
        CellStatus::OverCapacity { .. } | CellStatus::Skipped { .. } => None,
        other => Some(other.is_measured()),
    };
    let decode = report.decode.iter().map(|c| CellFigure {
        label: format!("{} × {}", c.context, c.concurrency),
        measured: ran(&c.status),
        total_tokens_per_s: c.measurements.as_ref().map(|m| m.total_tokens_per_s),
    });
    let load = report
        .load
        .iter()
        .flat_map(|l| &l.cells)
        .map(|c| CellFigure {
            label: match (c.requests, c.rate_per_s) {
                (Some(n), _) => format!("{}, {n} at once", c.context),
                (None, Some(r)) => format!("{}, {r} req/s", c.context),
                (None, None) => c.context.to_string(),
            },
            measured: ran(&c.status),
            total_tokens_per_s: c.measurements.as_ref().map(|m| m.output_tokens_per_s),
        });
    decode.chain(load).collect()
}

/// How much of a server's log is read for its tail and its error lines: enough for a long
/// traceback, not the whole of a log that grew for hours.
const LOG_WINDOW: u64 = 256 * 1024;
/// Error lines kept of a failed point's log.
const ERROR_LINES: usize = 5;
/// Lines kept instead when none looks like an error.
const LAST_LINES: usize = 3;
/// Words that mark a log line as the one that explains a failure (engines' own words: Python's
/// tracebacks and exceptions, Rust's panics, a shell's missing program or file).
const ERROR_WORDS: [&str; 14] = [
    "error",
    "Error",
    "ERROR",
    "Traceback",
    "exception",
    "Exception",
    "No such file",
    "not found",
    "panicked",
    "FATAL",
    "Fatal",
    "Killed",
    "out of memory",
    "Out of memory",
];

/// The end of a log as text: its last [`LOG_WINDOW`] bytes (the first line, cut, dropped),
/// invalid UTF-8 replaced; empty when it cannot be read.
pub(crate) fn log_end(path: &Path) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let from = len.saturating_sub(LOG_WINDOW);
    if file.seek(SeekFrom::Start(from)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = file.take(LOG_WINDOW).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes).into_owned();
    match (from > 0, text.find('\n')) {
        (true, Some(i)) => text[i + 1..].to_owned(),
        _ => text,
    }
}

/// The last `n` lines of a log's text.
pub(crate) fn last_lines(text: &str, n: usize) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| (*l).to_owned())
        .collect()
}

/// The lines of a log's text that say why its server failed: the last few that carry an
/// error's words, or its last lines when none does. Blank lines never count.
pub fn error_lines(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let errors: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| ERROR_WORDS.iter().any(|w| l.contains(w)))
        .collect();
    let chosen = if errors.is_empty() {
        &lines[lines.len().saturating_sub(LAST_LINES)..]
    } else {
        &errors[errors.len().saturating_sub(ERROR_LINES)..]
    };
    chosen.iter().map(|l| l.trim_end().to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_that_explain_a_failure_are_picked_from_the_log() {
        let log = "INFO starting\nINFO loading weights\n\nTraceback (most recent call last):\n  File \"x.py\", line 1\ntorch.OutOfMemoryError: CUDA out of memory\nINFO shutting down\n";
        assert_eq!(
            error_lines(log),
            [
                "Traceback (most recent call last):",
                "torch.OutOfMemoryError: CUDA out of memory"
            ]
        );
        assert_eq!(
            error_lines("sh: 1: vllm: not found\n"),
            ["sh: 1: vllm: not found"]
        );
        // No error's words: the last three lines.
        assert_eq!(error_lines("a\nb\nc\nd\n\n"), ["b", "c", "d"]);
        assert!(error_lines("").is_empty());
        // At most five error lines: the last ones.
        let many: String = (0..9).map(|i| format!("ERROR {i}\n")).collect();
        assert_eq!(error_lines(&many)[0], "ERROR 4");
        assert_eq!(error_lines(&many).len(), ERROR_LINES);
    }

    #[test]
    fn a_long_or_binary_log_is_read_from_its_end() {
        let dir = std::env::temp_dir().join(format!("speedmatrix-log-end-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("server.log");
        let mut bytes = vec![b'x'; 300 * 1024];
        bytes.extend_from_slice(b"\nline \xff one\nerror: the end\n");
        std::fs::write(&path, &bytes).unwrap();
        let text = log_end(&path);
        assert_eq!(
            last_lines(&text, 2),
            ["line \u{fffd} one", "error: the end"]
        );
        assert!(!text.starts_with('x'), "the cut first line is dropped");
        assert_eq!(log_end(&dir.join("missing")), "");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn figures_count_the_cells_and_find_the_best() {
        let cell = |label: &str, measured: Option<bool>, rate: Option<f64>| CellFigure {
            label: label.into(),
            measured,
            total_tokens_per_s: rate,
        };
        let f = PointFigures::of_cells(&[
            cell("0 × 1", Some(true), Some(50.0)),
            cell("0 × 8", Some(true), Some(310.5)),
            cell("16k × 8", Some(false), None),
            cell("16k × 64", None, None),
            cell("0 × 64", Some(true), Some(f64::NAN)),
        ]);
        assert_eq!(f.best_total_tokens_per_s, Some(310.5));
        assert_eq!(f.best_cell.as_deref(), Some("0 × 8"));
        assert_eq!(
            (f.cells_measured, f.cells_failed, f.cells_not_run),
            (3, 1, 1)
        );
        assert_eq!(PointFigures::of_cells(&[]), PointFigures::default());
    }
}
