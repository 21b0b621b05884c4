//! A run's folder: made (or resumed) before the run, then filled with its files — run.json,
//! report.md, report.html, measurements.csv, telemetry.jsonl beside the journal. Every file is
//! written to a temporary name and renamed into place, so an interrupted write leaves the old
//! file whole and a link in the folder is replaced, never written through.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use speedmatrix_report::Report;
use tokio_util::sync::CancellationToken;

use crate::{JournalOptions, Notice, Observer, RunConfig, RunOutcome, RunnerError};

/// The journal's name in a run's folder.
pub const JOURNAL: &str = "journal.jsonl";
/// Every GPU and host sample of the run (see `speedmatrix_telemetry::SAMPLES_SCHEMA`).
pub const TELEMETRY_SAMPLES: &str = "telemetry.jsonl";
/// The result document.
pub const RUN_JSON: &str = "run.json";
/// The files every finished run writes besides the journal.
pub const OUTPUTS: [&str; 4] = [RUN_JSON, "report.md", "report.html", "measurements.csv"];

/// The lock file in a folder a run or a study writes.
pub const LOCK: &str = ".speedmatrix.lock";

/// An exclusive hold on a folder for as long as it lives, so that two runs (or two studies)
/// never write one folder at once: the second is refused, naming the first's process.
#[derive(Debug)]
pub struct DirLock {
    _file: std::fs::File,
}

impl DirLock {
    /// Takes the lock of `dir` (an advisory `flock` on `dir/.speedmatrix.lock`), or says who
    /// holds it.
    pub fn take(dir: &Path) -> Result<DirLock, RunnerError> {
        let path = dir.join(LOCK);
        let io = |source| RunnerError::Output {
            path: path.clone(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io)?;
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            return Err(RunnerError::Busy {
                dir: dir.to_owned(),
                holder: holder.trim().parse().ok(),
            });
        }
        file.set_len(0).map_err(io)?;
        file.write_all(std::process::id().to_string().as_bytes())
            .map_err(io)?;
        Ok(DirLock { _file: file })
    }
}

/// The folder a run writes into, held ([`DirLock`]) while the run lives.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    resume: bool,
    created: bool,
    _lock: DirLock,
}

impl RunDir {
    /// A folder for a new run: made if missing; one that holds files is refused unless
    /// `force` (then its journal is removed and its files are overwritten).
    pub fn create(path: PathBuf, force: bool) -> Result<RunDir, RunnerError> {
        let existed = path.exists();
        if path.is_dir() {
            if holds_files(&path) && !force {
                return Err(RunnerError::BadOption(format!(
                    "--out {} already holds files; pass --force to overwrite them, --resume {} to continue that run, or choose another directory",
                    path.display(),
                    path.display()
                )));
            }
            if force {
                // Held by another run: refused before its journal is touched.
                drop(DirLock::take(&path)?);
                let _ = std::fs::remove_file(path.join(JOURNAL));
            }
        }
        std::fs::create_dir_all(&path).map_err(|e| {
            RunnerError::BadOption(format!(
                "cannot create the output directory {}: {e}; choose a writable folder with --out",
                path.display()
            ))
        })?;
        let probe = path.join(".speedmatrix-write-test");
        std::fs::write(&probe, b"").map_err(|e| {
            RunnerError::BadOption(format!(
                "cannot write into the output directory {}: {e}; choose a writable folder with --out",
                path.display()
            ))
        })?;
        let _ = std::fs::remove_file(probe);
        let lock = DirLock::take(&path)?;
        Ok(RunDir {
            path,
            resume: false,
            created: !existed,
            _lock: lock,
        })
    }

    /// The folder of an earlier run to continue: it must hold its journal.
    pub fn resume(path: PathBuf) -> Result<RunDir, RunnerError> {
        if !path.join(JOURNAL).is_file() {
            return Err(RunnerError::BadOption(format!(
                "--resume {}: no {JOURNAL} there; give the output directory of an earlier run",
                path.display()
            )));
        }
        let lock = DirLock::take(&path)?;
        Ok(RunDir {
            path,
            resume: true,
            created: false,
            _lock: lock,
        })
    }

    /// The folder, or to continue a run the folder of an earlier one (whose journal it holds).
    pub fn create_or_resume(path: PathBuf) -> Result<RunDir, RunnerError> {
        if path.join(JOURNAL).is_file() {
            RunDir::resume(path)
        } else {
            RunDir::create(path, false)
        }
    }

    /// The folder's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the run continues an earlier one.
    pub fn resumes(&self) -> bool {
        self.resume
    }

    /// Where the journal is and whether to continue it.
    pub fn journal(&self) -> JournalOptions {
        JournalOptions {
            path: Some(self.path.join(JOURNAL)),
            resume: self.resume,
        }
    }

    /// Writes the run's files: telemetry.jsonl (when sampled), then run.json, report.md,
    /// report.html and measurements.csv. The report's notes are the notices as `word` says
    /// them; a run on a fitted or predicted simulator profile is marked a what-if.
    pub fn write(
        &self,
        outcome: &mut RunOutcome,
        word: &dyn Fn(&Notice) -> String,
    ) -> Result<(), RunnerError> {
        if let (Some(samples), Some(t)) = (&outcome.telemetry, outcome.report.telemetry.as_mut()) {
            write_file(&self.path, TELEMETRY_SAMPLES, &samples.to_jsonl())?;
            t.samples_file = Some(TELEMETRY_SAMPLES.to_owned());
        }
        outcome.report.notes = outcome.notices.iter().map(word).collect();
        #[cfg(feature = "embedded")]
        if let Some(origin) = &outcome.simulated_from {
            crate::report::what_if::mark(&mut outcome.report, origin);
        }
        write_report(&self.path, &outcome.report)
    }
}

/// Runs `config` into `dir`: the journal there, then every file. A run that could not start
/// leaves no folder it made behind.
pub async fn run_into(
    config: RunConfig,
    dir: &RunDir,
    observer: &dyn Observer,
    cancel: CancellationToken,
    word: &dyn Fn(&Notice) -> String,
) -> Result<RunOutcome, RunnerError> {
    let outcome = crate::run(config, dir.journal(), observer, cancel).await;
    let mut outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            if dir.created {
                // Nothing ran: leave no empty output directory behind (remove_dir
                // refuses a folder that holds anything).
                let _ = std::fs::remove_file(dir.path.join(LOCK));
                let _ = std::fs::remove_dir(&dir.path);
            }
            return Err(e);
        }
    };
    dir.write(&mut outcome, word)?;
    Ok(outcome)
}

/// Whether `target` is a simulator profile fitted or predicted rather than written by hand.
#[cfg(feature = "embedded")]
pub(crate) fn simulated_from(target: &crate::Target) -> Option<speedmatrix_sim::ProfileOrigin> {
    match target {
        crate::Target::Embedded(p) => p.origin.clone(),
        crate::Target::Url(_) => None,
    }
}

/// Whether `dir` holds anything but its lock file.
fn holds_files(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|mut d| d.any(|e| e.is_ok_and(|e| e.file_name() != LOCK)))
        .unwrap_or(false)
}

/// Claims the folder `dir` for a command's outputs, by the one overwrite policy of every
/// command: a folder that holds files is refused unless `force` (the flag that names it is
/// `flag`); the folder is made when missing.
pub fn claim_dir(dir: &Path, flag: &str, force: bool) -> Result<(), RunnerError> {
    if holds_files(dir) && !force {
        return Err(RunnerError::BadOption(format!(
            "{flag} {} already holds files; pass --force to overwrite them, or choose another folder",
            dir.display()
        )));
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        RunnerError::BadOption(format!(
            "cannot create {flag} {}: {e}; choose a writable folder",
            dir.display()
        ))
    })
}

/// Claims the file `path` for a command's output by the same policy: an existing file is
/// refused unless `force`.
pub fn claim_file(path: &Path, flag: &str, force: bool) -> Result<(), RunnerError> {
    if std::fs::symlink_metadata(path).is_ok() && !force {
        return Err(RunnerError::BadOption(format!(
            "{flag} {} already exists; pass --force to overwrite it, or choose another file",
            path.display()
        )));
    }
    Ok(())
}

/// Writes `text` as the file `path` by [`write_file`] (cleaned, atomic, never through a link).
pub fn write_path(path: &Path, text: &str) -> Result<(), RunnerError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| RunnerError::BadOption(format!("{} names no file", path.display())))?;
    write_file(dir, &name, text)
}

/// Writes a result document's four files into `dir`.
pub fn write_report(dir: &Path, report: &Report) -> Result<(), RunnerError> {
    let json = report.to_json().map_err(RunnerError::Report)?;
    write_file(dir, RUN_JSON, &json)?;
    write_file(dir, "report.md", &speedmatrix_report::to_markdown(report))?;
    write_file(dir, "report.html", &speedmatrix_report::to_html(report))?;
    write_file(dir, "measurements.csv", &speedmatrix_report::to_csv(report))
}

/// Writes `text` as `dir/name`: cleaned (`speedmatrix_client::redact::clean`: no secret, no
/// control character, whatever a server put in it), into a new temporary file beside it,
/// synced, then renamed over the name, so the file is whole or untouched and a link at the
/// name is replaced, never written through.
pub fn write_file(dir: &Path, name: &str, text: &str) -> Result<(), RunnerError> {
    let text = speedmatrix_client::redact::clean(text);
    let path = dir.join(name);
    let failed = |source: std::io::Error| RunnerError::Output {
        path: path.clone(),
        source,
    };
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}-{n}.tmp", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(failed)?;
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| file.sync_data());
    drop(file);
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, &path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(failed(e));
    }
    Ok(())
}
