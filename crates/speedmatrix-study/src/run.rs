//! Running a study: for each point, start its server, wait until it answers, measure the
//! matrix in this process with the runner into `DIR/POINT/run/`, stop the server by its
//! process group, record the point in `DIR/study.jsonl`, go on. A point whose server does not
//! start, is not ready or dies is recorded with its log's tail, and the study goes on;
//! `resume` skips what the journal holds.

use std::path::{Path, PathBuf};
use std::time::Instant;

use speedmatrix_runner::options::{HostFacts, RunOptions};
use speedmatrix_runner::output::{DirLock, RunDir, run_into, write_file};
use speedmatrix_runner::{Journal, Notice, Observer, RunOutcome, RunnerError, StopReason};
use tokio_util::sync::CancellationToken;

use crate::server::{free_port, spawn, tail, wait_ready};
use crate::{Point, PointOutcome, PointRecord, Study, StudyError};

/// The study journal's name in a study folder.
pub const STUDY_JOURNAL: &str = "study.jsonl";
/// The copy of the study file in a study folder.
pub const STUDY_FILE: &str = "study.toml";
/// A point's record when it ran alone (`run_one`), in its folder.
pub const POINT_OUTCOME: &str = "outcome.json";

/// How a study runs.
#[derive(Debug, Clone, Default)]
pub struct StudySettings {
    /// The study's folder.
    pub dir: PathBuf,
    /// Continue the study in `dir`: points its journal holds are skipped.
    pub resume: bool,
    /// With `resume`, run the points that failed again too.
    pub retry_failed: bool,
    /// The program a server command's `speedmatrix` runs (the running program, usually), so
    /// a study of `speedmatrix sim` servers needs no `speedmatrix` on the PATH.
    pub program: Option<PathBuf>,
}

/// What a study's front end hears and says: the points as they go, the runner's progress
/// inside each, and the words of the runner's notices in each point's report.
pub trait StudyObserver: Sync {
    /// A point's server is starting.
    fn point_starting(&self, _point: &Point) {}
    /// A point is skipped: the journal holds its record.
    fn point_skipped(&self, _record: &PointRecord) {}
    /// Lines of the study's journal could not be read and were skipped (the sentence says
    /// which).
    fn journal_damaged(&self, _warning: &str) {}
    /// A point's run ended (its files are in `dir`).
    fn run_ended(&self, _dir: &Path, _outcome: &RunOutcome) {}
    /// A point ended.
    fn point_ended(&self, _record: &PointRecord) {}
    /// Where the runner's events go during a point's run.
    fn run_observer(&self) -> &dyn Observer;
    /// A notice as a point's report says it.
    fn word(&self, notice: &Notice) -> String {
        notice.describe()
    }
}

/// Runs every point of `study` (whose file's text is `text`) into `settings.dir`, in order,
/// until `cancel` fires; returns every point's record, skipped ones included.
pub async fn run_study(
    study: &Study,
    text: &str,
    settings: &StudySettings,
    observer: &dyn StudyObserver,
    cancel: &CancellationToken,
) -> Result<Vec<PointRecord>, StudyError> {
    let points = study.points()?;
    let journal_path = settings.dir.join(STUDY_JOURNAL);
    prepare_dir(&settings.dir)?;
    let _lock = DirLock::take(&settings.dir).map_err(StudyError::Run)?;
    let done = previous(settings, &journal_path, observer)?;
    copy_study(&settings.dir, text)?;
    let mut journal = Journal::open_append(&journal_path).map_err(StudyError::Run)?;
    let mut records = Vec::new();
    for point in &points {
        if let Some(r) = done.iter().find(|r| r.point == point.name) {
            observer.point_skipped(r);
            records.push(r.clone());
            continue;
        }
        if cancel.is_cancelled() {
            break;
        }
        observer.point_starting(point);
        let record = run_point(study, point, settings, observer, cancel).await?;
        observer.point_ended(&record);
        if record.outcome != PointOutcome::Interrupted {
            journal.append(&record).map_err(StudyError::Run)?;
        }
        records.push(record);
    }
    Ok(records)
}

/// Runs the point at `index` alone (what each pod of `study k8s` does), recording it in
/// `DIR/POINT/outcome.json` so that pods can share the folder.
pub async fn run_one(
    study: &Study,
    text: &str,
    index: usize,
    settings: &StudySettings,
    observer: &dyn StudyObserver,
    cancel: &CancellationToken,
) -> Result<PointRecord, StudyError> {
    let points = study.points()?;
    let point = points.get(index).ok_or_else(|| {
        StudyError::Invalid(format!(
            "--point-index {index}: the study has {} points (0 to {})",
            points.len(),
            points.len().saturating_sub(1)
        ))
    })?;
    prepare_dir(&settings.dir)?;
    copy_study(&settings.dir, text)?;
    observer.point_starting(point);
    let record = run_point(study, point, settings, observer, cancel).await?;
    observer.point_ended(&record);
    if record.outcome != PointOutcome::Interrupted {
        let dir = settings.dir.join(&point.name);
        write_file(&dir, POINT_OUTCOME, &(record.to_line() + "\n")).map_err(StudyError::Run)?;
    }
    Ok(record)
}

/// The study folder.
fn prepare_dir(dir: &Path) -> Result<(), StudyError> {
    std::fs::create_dir_all(dir).map_err(|source| StudyError::Io {
        path: dir.to_owned(),
        action: "create",
        source,
    })
}

/// A copy of the study file in its folder.
fn copy_study(dir: &Path, text: &str) -> Result<(), StudyError> {
    write_file(dir, STUDY_FILE, text).map_err(StudyError::Run)
}

/// The journal's records a resumed study keeps.
fn previous(
    settings: &StudySettings,
    journal: &Path,
    observer: &dyn StudyObserver,
) -> Result<Vec<PointRecord>, StudyError> {
    if !settings.resume {
        if journal.exists() {
            return Err(StudyError::Invalid(format!(
                "{} already holds a study: pass --resume to continue it, or another --out",
                settings.dir.display()
            )));
        }
        return Ok(Vec::new());
    }
    let text = match std::fs::read_to_string(journal) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(StudyError::Io {
                path: journal.to_owned(),
                action: "read",
                source,
            });
        }
    };
    let read = PointRecord::parse_all(&text);
    if let Some(warning) = read.warning(&journal.display().to_string()) {
        observer.journal_damaged(&warning);
    }
    Ok(read
        .records
        .into_iter()
        .filter(|r| !(settings.retry_failed && matches!(r.outcome, PointOutcome::Failed { .. })))
        .collect())
}

/// The folder whose `speedmatrix` is `program`, made in the study folder.
fn program_dir(settings: &StudySettings) -> Result<Option<PathBuf>, StudyError> {
    let Some(program) = &settings.program else {
        return Ok(None);
    };
    let dir = settings.dir.join(".speedmatrix-bin");
    let link = dir.join("speedmatrix");
    let io = |action: &'static str| {
        let link = link.clone();
        move |source| StudyError::Io {
            path: link,
            action,
            source,
        }
    };
    std::fs::create_dir_all(&dir).map_err(io("create the folder of"))?;
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(program, &link).map_err(io("link"))?;
    Ok(Some(dir))
}

/// One point, start to stop. The server is stopped on every way out.
async fn run_point(
    study: &Study,
    point: &Point,
    settings: &StudySettings,
    observer: &dyn StudyObserver,
    cancel: &CancellationToken,
) -> Result<PointRecord, StudyError> {
    let dir = settings.dir.join(&point.name);
    std::fs::create_dir_all(&dir).map_err(|source| StudyError::Io {
        path: dir.clone(),
        action: "create",
        source,
    })?;
    let log = dir.join("server.log");
    let port = free_port()?;
    let command = point.fill(&study.server.command, port)?;
    let options = study.run_options(point, port)?;
    let url = options.url.clone().unwrap_or_default();
    let started = Instant::now();
    let record = |outcome: PointOutcome| PointRecord {
        point: point.name.clone(),
        outcome,
        seconds: started.elapsed().as_secs_f64(),
    };
    let failed = |reason: String| {
        record(PointOutcome::Failed {
            reason,
            log_tail: tail(&log, 20),
        })
    };
    let programs = program_dir(settings)?;
    let mut server = match spawn(study, point, &command, port, &log, programs.as_deref()) {
        Ok(s) => s,
        Err(e) => return Ok(failed(format!("could not start `{command}`: {e}"))),
    };
    if let Err(reason) = wait_ready(&mut server, &url, study, cancel).await {
        server.stop(study).await;
        if cancel.is_cancelled() {
            return Ok(record(PointOutcome::Interrupted));
        }
        return Ok(failed(reason));
    }
    let outcome = measure(study, point, &dir.join("run"), &options, observer, cancel).await;
    let died = server.exited();
    server.stop(study).await;
    Ok(match (outcome, died) {
        (Ok(o), _) if o.stopped == Some(StopReason::Cancelled) => record(PointOutcome::Interrupted),
        (Ok(o), None) => {
            observer.run_ended(&dir.join("run"), &o);
            record(PointOutcome::Measured {
                exit_code: if o.succeeded() { 0 } else { 1 },
            })
        }
        (Ok(_), Some(status)) => failed(format!("the server exited ({status}) during the run")),
        (Err(_), _) if cancel.is_cancelled() => record(PointOutcome::Interrupted),
        (Err(e), _) => failed(format!("the run failed: {e}")),
    })
}

/// The point's matrix, measured into `run_dir` (continued when its journal is there). The
/// journal's key names the point, not its port, which changes from attempt to attempt.
async fn measure(
    study: &Study,
    point: &Point,
    run_dir: &Path,
    options: &RunOptions,
    observer: &dyn StudyObserver,
    cancel: &CancellationToken,
) -> Result<RunOutcome, RunnerError> {
    let mut config = options.resolve(&HostFacts::default())?;
    let url = study
        .server
        .url
        .clone()
        .unwrap_or_else(|| "http://127.0.0.1:{port}".into());
    config.labels.server_key = Some(format!("study point {} at {url}", point.name));
    let dir = RunDir::create_or_resume(run_dir.to_owned())?;
    let word = |n: &Notice| observer.word(n);
    run_into(
        config,
        &dir,
        observer.run_observer(),
        cancel.child_token(),
        &word,
    )
    .await
}
