//! Running a study: for each point, start its server, wait until it answers, measure the
//! matrix in this process with the runner into `DIR/POINT/run/`, stop the server by its
//! process group, record the point in `DIR/study.jsonl`, go on. A point whose server does not
//! start, is not ready or dies is recorded with its log's tail, and the study goes on;
//! `resume` skips what the journal holds.

use std::path::{Path, PathBuf};
use std::time::Instant;

use speedmatrix_runner::options::HostFacts;
use speedmatrix_runner::output::{RunDir, run_into};
use speedmatrix_runner::{Journal, Notice, Observer, RunOutcome};
use tokio_util::sync::CancellationToken;

use crate::server::{free_port, spawn, stop_server, tail, wait_ready};
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
    let done = previous(settings, &journal_path)?;
    prepare_dir(&settings.dir, text)?;
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
        journal.append(&record).map_err(StudyError::Run)?;
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
    prepare_dir(&settings.dir, text)?;
    observer.point_starting(point);
    let record = run_point(study, point, settings, observer, cancel).await?;
    observer.point_ended(&record);
    let path = settings.dir.join(&point.name).join(POINT_OUTCOME);
    std::fs::write(&path, record.to_line() + "\n").map_err(|source| StudyError::Io {
        path,
        action: "write",
        source,
    })?;
    Ok(record)
}

/// The study folder, with a copy of the study file.
fn prepare_dir(dir: &Path, text: &str) -> Result<(), StudyError> {
    let io = |path: &Path, action: &'static str| {
        let path = path.to_owned();
        move |source| StudyError::Io {
            path,
            action,
            source,
        }
    };
    std::fs::create_dir_all(dir).map_err(io(dir, "create"))?;
    let copy = dir.join(STUDY_FILE);
    std::fs::write(&copy, text).map_err(io(&copy, "write"))
}

/// The journal's records a resumed study keeps.
fn previous(settings: &StudySettings, journal: &Path) -> Result<Vec<PointRecord>, StudyError> {
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
    let records = PointRecord::parse_all(&text)?;
    Ok(records
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

/// One point, start to stop.
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
    let failed = |reason: String| PointRecord {
        point: point.name.clone(),
        outcome: PointOutcome::Failed {
            reason,
            log_tail: tail(&log, 20),
        },
        seconds: started.elapsed().as_secs_f64(),
    };
    let programs = program_dir(settings)?;
    let mut server = match spawn(study, point, &command, port, &log, programs.as_deref()) {
        Ok(s) => s,
        Err(e) => return Ok(failed(format!("could not start `{command}`: {e}"))),
    };
    if let Err(reason) = wait_ready(&mut server, &url, study).await {
        stop_server(&mut server, study).await;
        return Ok(failed(reason));
    }
    let run_dir = dir.join("run");
    let outcome = match options.resolve(&HostFacts::default()) {
        Ok(config) => match RunDir::create_or_resume(run_dir.clone()) {
            Ok(d) => {
                let word = |n: &Notice| observer.word(n);
                run_into(
                    config,
                    &d,
                    observer.run_observer(),
                    cancel.child_token(),
                    &word,
                )
                .await
            }
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    };
    let died = server.try_wait().ok().flatten();
    stop_server(&mut server, study).await;
    Ok(match (outcome, died) {
        (Ok(outcome), None) => {
            observer.run_ended(&run_dir, &outcome);
            PointRecord {
                point: point.name.clone(),
                outcome: PointOutcome::Measured {
                    exit_code: if outcome.succeeded() { 0 } else { 1 },
                },
                seconds: started.elapsed().as_secs_f64(),
            }
        }
        (Ok(_), Some(status)) => failed(format!("the server exited ({status}) during the run")),
        (Err(e), _) => failed(format!("the run failed: {e}")),
    })
}
