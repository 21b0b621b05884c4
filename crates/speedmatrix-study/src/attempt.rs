//! One point, start to stop: its server started on its port with its GPUs, waited for, its
//! matrix measured in this process, the server stopped on every way out; and the study's
//! progress (its time left, the observer's calls) told as it goes.

use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use speedmatrix_runner::options::{HostFacts, RunOptions};
use speedmatrix_runner::output::{RunDir, run_into};
use speedmatrix_runner::{
    CapacityPlan, CapacitySourceKind, Notice, RunOutcome, RunnerError, StopReason,
};
use tokio_util::sync::CancellationToken;

use crate::progress::{error_lines, last_lines, log_end};
use crate::server::{Launch, spawn, wait_ready};
use crate::{
    Point, PointFigures, PointFinish, PointOutcome, PointReady, PointRecord, PointStart, Study,
    StudyError, StudyEta, StudyObserver, StudySettings,
};

/// Lines of a failed point's log kept in its record.
const LOG_TAIL: usize = 20;
/// What a server's start is taken to take before one has been seen: vLLM loading a model and
/// compiling its graphs takes minutes, a simulator a moment; the first start seen replaces it.
const START_GUESS: Duration = Duration::from_secs(60);

/// What every point of a study shares while it runs.
#[derive(Clone, Copy)]
pub(crate) struct Attempt<'a> {
    pub(crate) study: &'a Study,
    pub(crate) settings: &'a StudySettings,
    /// The folder whose `speedmatrix` is the running program, first on the servers' PATH.
    pub(crate) programs: Option<&'a Path>,
    pub(crate) observer: &'a dyn StudyObserver,
    pub(crate) cancel: &'a CancellationToken,
    pub(crate) tracker: &'a Tracker,
}

/// A point given its place: its index in the study, its port, its GPUs.
pub(crate) struct Slot<'p> {
    pub(crate) index: usize,
    pub(crate) point: &'p Point,
    pub(crate) port: u16,
    pub(crate) gpus: Vec<String>,
}

/// A point that ended, and what its matrix measured.
pub(crate) struct Ended {
    pub(crate) record: PointRecord,
    pub(crate) figures: Option<PointFigures>,
}

/// The study's time left, shared by the points running at once.
pub(crate) struct Tracker {
    eta: Mutex<StudyEta>,
    total: usize,
}

impl Tracker {
    /// A tracker of `points`, `settings.parallel` at once, each estimated from its plan.
    pub(crate) fn new(study: &Study, points: &[Point], settings: &StudySettings) -> Tracker {
        let estimates: Vec<Duration> = points.iter().map(|p| plan_estimate(study, p)).collect();
        let guess = START_GUESS.min(study.server.ready_timeout);
        Tracker {
            eta: Mutex::new(StudyEta::new(&estimates, settings.slots(), guess)),
            total: points.len(),
        }
    }

    /// Changes or reads the estimator (a panic elsewhere leaves it usable: it holds no
    /// invariant a half-made change could break).
    fn with<T>(&self, f: impl FnOnce(&mut StudyEta) -> T) -> T {
        f(&mut self.eta.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub(crate) fn skipped(&self, index: usize) {
        self.with(|e| e.skipped(index));
    }

    fn starting(&self, index: usize) -> Option<Duration> {
        let now = Instant::now();
        self.with(|e| {
            e.starting(index, now);
            e.remaining(now)
        })
    }

    fn ready(&self, index: usize) {
        self.with(|e| e.ready(index, Instant::now()));
    }

    fn finished(&self, index: usize, measured: bool) -> Option<Duration> {
        let now = Instant::now();
        self.with(|e| {
            e.finished(index, now, measured);
            e.remaining(now)
        })
    }
}

/// How long a point's matrix is planned to take: the runner's per-step estimates of its plan,
/// with no capacity known (every cell counts; one the server's capacity excludes makes the
/// point faster than planned, which the slowdown then learns). Zero when its options do not
/// make a matrix: such a point fails at once.
fn plan_estimate(study: &Study, point: &Point) -> Duration {
    let Ok(spec) = study
        .run_options(point, 0)
        .and_then(|o| o.matrix().map_err(StudyError::Run))
    else {
        return Duration::ZERO;
    };
    let capacity = CapacityPlan {
        source: CapacitySourceKind::Unknown,
        pool: None,
        pool_tokens: None,
        measured_tokens: None,
        predicted_tokens: None,
        predicted_for: None,
    };
    speedmatrix_runner::plan(capacity, &spec, None).estimated
}

impl Attempt<'_> {
    /// Runs one point. The server is stopped on every way out; an error is one of the study's
    /// own (its folder), never the point's.
    pub(crate) async fn run(&self, slot: &Slot<'_>) -> Result<Ended, StudyError> {
        let (study, point) = (self.study, slot.point);
        let dir = self.settings.dir.join(&point.name);
        std::fs::create_dir_all(&dir).map_err(|source| StudyError::Io {
            path: dir.clone(),
            action: "create",
            source,
        })?;
        let log = dir.join("server.log");
        let command = point.server_command(&study.server, Some(slot.port))?;
        let options = study.run_options(point, slot.port)?;
        let url = options.url.clone().unwrap_or_default();
        self.observer.point_starting(point);
        self.observer.point_begins(&PointStart {
            point,
            number: slot.index + 1,
            total: self.tracker.total,
            command: &command,
            gpus: &slot.gpus,
            eta: self.tracker.starting(slot.index),
        });
        let started = Instant::now();
        let record = |outcome: PointOutcome| PointRecord {
            point: point.name.clone(),
            outcome,
            seconds: started.elapsed().as_secs_f64(),
            gpus: slot.gpus.clone(),
        };
        let failed = |reason: String| {
            let text = log_end(&log);
            Ended {
                record: record(PointOutcome::Failed {
                    reason,
                    log_tail: last_lines(&text, LOG_TAIL),
                    error_lines: error_lines(&text),
                }),
                figures: None,
            }
        };
        let launch = Launch {
            port: slot.port,
            log: &log,
            program_dir: self.programs,
            gpus: &slot.gpus,
        };
        let mut server = match spawn(study, point, &command, &launch) {
            Ok(s) => s,
            Err(e) => return Ok(failed(format!("could not start `{command}`: {e}"))),
        };
        if let Err(reason) = wait_ready(&mut server, &url, study, self.cancel).await {
            server.stop(study).await;
            if self.cancel.is_cancelled() {
                return Ok(interrupted(record(PointOutcome::Interrupted)));
            }
            return Ok(failed(reason));
        }
        self.tracker.ready(slot.index);
        self.observer.point_ready(&PointReady {
            point,
            number: slot.index + 1,
            total: self.tracker.total,
            after: started.elapsed(),
        });
        let run_dir = dir.join("run");
        let outcome = self.measure(point, &run_dir, &options).await;
        let died = server.exited();
        server.stop(study).await;
        Ok(match (outcome, died) {
            (Ok(o), _) if o.stopped == Some(StopReason::Cancelled) => {
                interrupted(record(PointOutcome::Interrupted))
            }
            (Ok(o), None) => {
                self.observer.run_ended(&run_dir, &o);
                Ended {
                    record: record(PointOutcome::Measured {
                        exit_code: if o.succeeded() { 0 } else { 1 },
                    }),
                    figures: Some(PointFigures::of(&o)),
                }
            }
            (Ok(_), Some(status)) => failed(format!("the server exited ({status}) during the run")),
            (Err(_), _) if self.cancel.is_cancelled() => {
                interrupted(record(PointOutcome::Interrupted))
            }
            (Err(e), _) => failed(format!("the run failed: {e}")),
        })
    }

    /// Tells the tracker and the observer that the point at `index` ended.
    pub(crate) fn ended(&self, index: usize, ended: &Ended) {
        let measured = matches!(ended.record.outcome, PointOutcome::Measured { .. });
        let eta = self.tracker.finished(index, measured);
        self.observer.point_ended(&ended.record);
        self.observer.point_finished(&PointFinish {
            record: &ended.record,
            number: index + 1,
            total: self.tracker.total,
            figures: ended.figures.as_ref(),
            eta,
        });
    }

    /// The point's matrix, measured into `run_dir` (continued when its journal is there). The
    /// journal's key names the point, not its port, which changes from attempt to attempt.
    async fn measure(
        &self,
        point: &Point,
        run_dir: &Path,
        options: &RunOptions,
    ) -> Result<RunOutcome, RunnerError> {
        let mut config = options.resolve(&HostFacts::default())?;
        let url = self
            .study
            .server
            .url
            .clone()
            .unwrap_or_else(|| "http://127.0.0.1:{port}".into());
        config.labels.server_key = Some(format!("study point {} at {url}", point.name));
        let dir = RunDir::create_or_resume(run_dir.to_owned())?;
        let word = |n: &Notice| self.observer.word(n);
        run_into(
            config,
            &dir,
            self.observer.run_observer(),
            self.cancel.child_token(),
            &word,
        )
        .await
    }
}

fn interrupted(record: PointRecord) -> Ended {
    Ended {
        record,
        figures: None,
    }
}
