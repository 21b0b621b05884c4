//! Running a study: for each point, start its server, wait until it answers, measure the
//! matrix in this process with the runner into `DIR/POINT/run/`, stop the server by its
//! process group, record the point in `DIR/study.jsonl`, go on; one point after another, or
//! several at once on GPUs of their own (`parallel`, `gpus`). A point whose server does not
//! start, is not ready or dies is recorded with its log's tail and the lines that say why, and
//! the study goes on; `resume` skips what the journal holds.

use std::path::{Path, PathBuf};

use speedmatrix_runner::output::{DirLock, write_file};
use speedmatrix_runner::{Journal, Notice, Observer, RunOutcome};
use tokio_util::sync::CancellationToken;

use crate::attempt::{Attempt, Slot, Tracker};
use crate::gpus::GpuPool;
use crate::schedule::run_points;
use crate::server::free_port;
use crate::{
    Point, PointFinish, PointOutcome, PointReady, PointRecord, PointStart, Study, StudyError,
};

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
    /// Points measured at once (0 and 1: one after another). More than one needs `gpus`: two
    /// engines on one GPU would measure each other, not their configurations.
    pub parallel: usize,
    /// The host's GPUs the points may use (indices or UUIDs, as CUDA and HIP read them): each
    /// point's server is given `gpus_per_point` of them that no other running point holds, in
    /// `CUDA_VISIBLE_DEVICES` and `HIP_VISIBLE_DEVICES`. Empty: the servers see what the
    /// study's environment shows them.
    pub gpus: Vec<String>,
    /// GPUs each point's server is given, with `gpus` (0 is read as 1).
    pub gpus_per_point: usize,
}

impl StudySettings {
    /// Points measured at once: `parallel`, at least 1.
    pub fn slots(&self) -> usize {
        self.parallel.max(1)
    }

    /// The GPUs to hand out (`None` without `gpus`), once the settings are checked: more than
    /// one point at once needs GPUs, and as many as the points at once hold
    /// (`parallel × gpus_per_point`). The errors name the flags.
    pub fn gpu_pool(&self) -> Result<Option<GpuPool>, StudyError> {
        let slots = self.slots();
        if self.gpus.is_empty() {
            if slots > 1 {
                return Err(StudyError::Invalid(format!(
                    "--parallel {slots} starts {slots} servers at once, and on the same GPUs \
                     they would measure each other, not their configurations: give each point \
                     GPUs of its own with --gpus (e.g. --gpus 0,1,2,3)"
                )));
            }
            return Ok(None);
        }
        let pool = GpuPool::new(&self.gpus, self.gpus_per_point.max(1))?;
        if slots > pool.capacity() {
            return Err(StudyError::Invalid(format!(
                "--parallel {slots} needs {slots} × {} GPUs, and --gpus lists {} ({}): give more \
                 GPUs, or at most --parallel {}",
                pool.per_point(),
                self.gpus.len(),
                self.gpus.join(","),
                pool.capacity()
            )));
        }
        Ok(Some(pool))
    }
}

/// What a study's front end hears and says: the points as they go, the runner's progress
/// inside each, and the words of the runner's notices in each point's report. With several
/// points at once the calls of different points interleave; each names its point.
pub trait StudyObserver: Sync {
    /// A point's server is starting.
    fn point_starting(&self, _point: &Point) {}
    /// A point's server is starting: its place in the study, its command, its GPUs and the
    /// study's time left. Called right after [`StudyObserver::point_starting`].
    fn point_begins(&self, _start: &PointStart<'_>) {}
    /// A point's server answered its health path.
    fn point_ready(&self, _ready: &PointReady<'_>) {}
    /// A point is skipped: the journal holds its record.
    fn point_skipped(&self, _record: &PointRecord) {}
    /// Lines of the study's journal could not be read and were skipped (the sentence says
    /// which).
    fn journal_damaged(&self, _warning: &str) {}
    /// A point's run ended (its files are in `dir`).
    fn run_ended(&self, _dir: &Path, _outcome: &RunOutcome) {}
    /// A point ended.
    fn point_ended(&self, _record: &PointRecord) {}
    /// A point ended: its record, what its matrix measured, the study's time left. Called
    /// right after [`StudyObserver::point_ended`].
    fn point_finished(&self, _finish: &PointFinish<'_>) {}
    /// Where the runner's events go during a point's run.
    fn run_observer(&self) -> &dyn Observer;
    /// A notice as a point's report says it.
    fn word(&self, notice: &Notice) -> String {
        notice.describe()
    }
}

/// Runs every point of `study` (whose file's text is `text`) into `settings.dir`, in order, or
/// `settings.parallel` at once, until `cancel` fires; returns every point's record in the
/// study's order, skipped ones included. The journal holds the records in the order the points
/// ended.
pub async fn run_study(
    study: &Study,
    text: &str,
    settings: &StudySettings,
    observer: &dyn StudyObserver,
    cancel: &CancellationToken,
) -> Result<Vec<PointRecord>, StudyError> {
    let points = study.points()?;
    let gpus = settings.gpu_pool()?;
    let journal_path = settings.dir.join(STUDY_JOURNAL);
    prepare_dir(&settings.dir)?;
    let _lock = DirLock::take(&settings.dir).map_err(StudyError::Run)?;
    let done = previous(settings, &journal_path, observer)?;
    copy_study(&settings.dir, text)?;
    let mut journal = Journal::open_append(&journal_path).map_err(StudyError::Run)?;
    let programs = program_dir(settings)?;
    let tracker = Tracker::new(study, &points, settings);
    let mut records = Vec::new();
    let mut pending = Vec::new();
    for (index, point) in points.iter().enumerate() {
        match done.iter().find(|r| r.point == point.name) {
            Some(r) => {
                observer.point_skipped(r);
                tracker.skipped(index);
                records.push((index, r.clone()));
            }
            None => pending.push((index, point)),
        }
    }
    let attempt = Attempt {
        study,
        settings,
        programs: programs.as_deref(),
        observer,
        cancel,
        tracker: &tracker,
    };
    records.extend(run_points(attempt, pending, gpus, &mut journal).await?);
    records.sort_by_key(|(index, _)| *index);
    Ok(records.into_iter().map(|(_, r)| r).collect())
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
    let gpus = settings
        .gpu_pool()?
        .and_then(|mut pool| pool.take())
        .unwrap_or_default();
    prepare_dir(&settings.dir)?;
    copy_study(&settings.dir, text)?;
    let programs = program_dir(settings)?;
    // The other points are other processes' (pods'): this one's time left is its own.
    let tracker = Tracker::new(study, &points, settings);
    (0..points.len())
        .filter(|i| *i != index)
        .for_each(|i| tracker.skipped(i));
    let attempt = Attempt {
        study,
        settings,
        programs: programs.as_deref(),
        observer,
        cancel,
        tracker: &tracker,
    };
    let slot = Slot {
        index,
        point,
        port: free_port()?,
        gpus,
    };
    let ended = attempt.run(&slot).await?;
    attempt.ended(index, &ended);
    let record = ended.record;
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
