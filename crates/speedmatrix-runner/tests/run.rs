//! The runner's protocol called in-process, against the simulator on a fast
//! profile: journal, resume, a resume with other settings, an older journal,
//! cancellation and a server that goes away. Seconds each, no binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// `cargo xtask fuzz` builds every test binary of the package with libFuzzer's
// coverage instrumentation; linking bolero brings the runtime it needs.
#[cfg(fuzzing)]
use bolero as _;

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use speedmatrix_runner::{
    CapacityHints, Event, JOURNAL_VERSION, JournalOptions, MatrixSpec, NotRun, Observer,
    PrefillMode, PromptSharing, RunConfig, RunLabels, RunOutcome, RunnerError, Silent, SkipReason,
    StepId, StepStatus, StopReason, Target, run,
};
use speedmatrix_sim::{Profile, SimServer};
use speedmatrix_units::{Api, Concurrency, Tokens};
use tokio_util::sync::CancellationToken;

/// The check that a window's 95 % intervals cover the simulator's truth,
/// shared with the `coverage` bench (which prints every figure).
#[allow(dead_code)]
#[path = "../benches/coverage/check.rs"]
mod coverage_check;

/// The tiny profile: 2 ms steps, so a 300 ms window is ~150 tokens a stream.
fn profile() -> Profile {
    let mut p = Profile::builtin("tiny").unwrap();
    p.eos_after_tokens = None;
    p
}

fn config(target: Target) -> RunConfig {
    RunConfig {
        target,
        api_key: None,
        insecure: false,
        model: None,
        tokenizer: speedmatrix_workload::Tokenizer::bundled().unwrap(),
        api: Api::Completions,
        matrix: MatrixSpec {
            contexts: vec![Tokens::ZERO, Tokens::new(256)],
            concurrencies: [1, 2].map(|n| Concurrency::new(n).unwrap()).to_vec(),
            prefill_contexts: vec![Tokens::new(512)],
            prefill_repeats: 1,
            repeats: 1,
            prefill_mode: PrefillMode::Cold,
            window: Duration::from_millis(300),
            max_output: Tokens::new(512),
            load: Default::default(),
            slo: None,
            search: None,
            shared_prefix: None,
            inject: None,
            respect_eos: false,
        },
        prompt_sharing: PromptSharing::Unique,
        seed: 3,
        capacity: CapacityHints::default(),
        timeouts: speedmatrix_client::Timeouts::default(),
        send_min_tokens: false,
        reasoning_parser: Default::default(),
        extra_body: Default::default(),
        labels: RunLabels::default(),
        telemetry: Default::default(),
        workload: None,
    }
}

fn embedded() -> RunConfig {
    config(Target::Embedded(Box::new(profile())))
}

fn journal_path(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("speedmatrix-runner-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("journal.jsonl")
}

fn journal(path: &std::path::Path, resume: bool) -> JournalOptions {
    JournalOptions {
        path: Some(path.to_owned()),
        resume,
    }
}

/// A run nobody cancels.
async fn run_uncancelled(
    config: RunConfig,
    journal: JournalOptions,
    observer: &dyn Observer,
) -> Result<RunOutcome, RunnerError> {
    run(config, journal, observer, CancellationToken::new()).await
}

/// Records the steps an observer was told about.
#[derive(Default)]
struct Seen {
    finished: Mutex<Vec<StepId>>,
    in_journal: Mutex<Vec<StepId>>,
}

impl Observer for Seen {
    fn event(&self, event: Event<'_>) {
        match event {
            Event::CellFinished(c) => self.finished.lock().unwrap().push(c.step()),
            Event::PrefillFinished(p) => self
                .finished
                .lock()
                .unwrap()
                .push(StepId::Prefill { context: p.context }),
            Event::StepNotRun {
                step,
                why: NotRun::InJournal,
            } => self.in_journal.lock().unwrap().push(step),
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_run_journals_every_step_and_a_resume_measures_nothing_again() {
    let path = journal_path("resume");
    let first = run_uncancelled(embedded(), journal(&path, false), &Silent)
        .await
        .unwrap();
    assert!(first.complete);
    assert!(
        first
            .decode
            .iter()
            .all(|c| c.status == StepStatus::Measured)
    );
    assert_eq!(first.prefill[0].status, StepStatus::Measured);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.len(),
        1 + 1 + 4,
        "start, one prefill point, four cells"
    );
    assert!(
        lines
            .iter()
            .all(|l| l["journal_version"] == u64::from(JOURNAL_VERSION))
    );
    assert_eq!(lines[0]["record"], "start");
    assert_eq!(lines[0]["key"]["seed"], 3);

    let seen = Seen::default();
    let again = run_uncancelled(embedded(), journal(&path, true), &seen)
        .await
        .unwrap();
    assert!(seen.finished.lock().unwrap().is_empty(), "a step ran again");
    assert_eq!(seen.in_journal.lock().unwrap().len(), 5);
    assert_eq!(again.decode, first.decode);
    assert_eq!(again.report.decode, first.report.decode);
}

#[tokio::test]
async fn a_resume_with_other_settings_names_every_difference() {
    let path = journal_path("mismatch");
    run_uncancelled(embedded(), journal(&path, false), &Silent)
        .await
        .unwrap();
    let mut other = embedded();
    other.seed = 4;
    other.prompt_sharing = PromptSharing::Shared;
    other.extra_body.insert("top_k".into(), 1.into());
    let err = run_uncancelled(other, journal(&path, true), &Silent)
        .await
        .unwrap_err();
    let RunnerError::ResumeMismatch { differences, .. } = err else {
        panic!("expected a mismatch, got {err}");
    };
    let fields: Vec<&str> = differences.iter().map(|d| d.field.as_str()).collect();
    assert_eq!(fields, ["extra_body_hash", "prompt_sharing", "seed"]);
}

#[tokio::test]
async fn a_journal_from_before_journal_versions_is_refused_clearly() {
    let path = journal_path("old");
    std::fs::write(
        &path,
        "{\"record\":\"start\",\"matrix\":{\"contexts\":[0]},\"model\":\"tiny\"}\n",
    )
    .unwrap();
    let err = run_uncancelled(embedded(), journal(&path, true), &Silent)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            RunnerError::JournalVersion {
                found: None,
                supported: JOURNAL_VERSION,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("before journal versions"), "{err}");
}

/// Cancels the run once `after` cells have finished.
struct CancelAfter {
    after: usize,
    done: Mutex<usize>,
    cancel: CancellationToken,
}

impl Observer for CancelAfter {
    fn event(&self, event: Event<'_>) {
        if let Event::CellFinished(_) = event {
            let mut done = self.done.lock().unwrap();
            *done += 1;
            if *done == self.after {
                self.cancel.cancel();
            }
        }
    }
}

#[tokio::test]
async fn cancelling_keeps_the_finished_cells_and_skips_the_rest() {
    let path = journal_path("cancel");
    let cancel = CancellationToken::new();
    let observer = CancelAfter {
        after: 1,
        done: Mutex::new(0),
        cancel: cancel.clone(),
    };
    let out = run(embedded(), journal(&path, false), &observer, cancel)
        .await
        .unwrap();
    assert!(!out.complete);
    assert_eq!(out.stopped, Some(StopReason::Cancelled));
    assert_eq!(out.decode[0].status, StepStatus::Measured);
    assert!(
        out.decode[1..]
            .iter()
            .all(|c| matches!(c.status, StepStatus::Skipped(_))),
        "{:?}",
        out.decode
    );
    let skipped: Vec<SkipReason> = out
        .decode
        .iter()
        .filter_map(|c| match c.status {
            StepStatus::Skipped(why) => Some(why),
            _ => None,
        })
        .collect();
    assert!(skipped.contains(&SkipReason::RunStopped), "{skipped:?}");
}

/// Stops the server once the first cell has finished.
struct KillAfterFirst {
    sim: Mutex<Option<speedmatrix_sim::RunningSim>>,
}

impl Observer for KillAfterFirst {
    fn event(&self, event: Event<'_>) {
        if let Event::CellFinished(_) = event {
            // Dropping a running simulator stops it and breaks its connections.
            drop(self.sim.lock().unwrap().take());
        }
    }
}

#[tokio::test]
async fn a_server_that_goes_away_stops_the_run_and_keeps_what_was_measured() {
    let sim = SimServer::start(profile(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let url = sim.url();
    let observer = KillAfterFirst {
        sim: Mutex::new(Some(sim)),
    };
    let path = journal_path("gone");
    let mut cfg = config(Target::Url(url));
    cfg.timeouts = speedmatrix_client::Timeouts::new(
        Duration::from_secs(1),
        Duration::from_secs(2),
        Duration::from_secs(2),
    );
    let out = run_uncancelled(cfg, journal(&path, false), &observer)
        .await
        .unwrap();
    assert!(!out.complete);
    assert!(
        matches!(out.stopped, Some(StopReason::ServerGone(_))),
        "{:?}",
        out.stopped
    );
    assert_eq!(out.decode[0].status, StepStatus::Measured);
    assert_eq!(
        out.decode[1].status,
        StepStatus::Skipped(SkipReason::ServerStopped),
        "the cell the server died under runs again on resume"
    );
    let journaled = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"record\":\"decode\""))
        .count();
    assert_eq!(journaled, 1, "only the finished cell is journaled");
}

/// A fast run of the coverage bench's check: 16 streams of the tiny
/// profile (2 ms steps, no front-end time) with 5 % noise on every step,
/// 64-token requests (each stream's turn over every ~0.14 s, so the cell is
/// stationary), 40 seeds of a 2 s window (ten parts of ~95 steps). The truth
/// is 20 windows' worth from two other seeds.
#[test]
fn a_windows_total_rate_interval_covers_the_simulators_truth() {
    use coverage_check::{Cell, Figure, coverage, truth};
    let cell = Cell {
        label: "tiny 16x0/64@5".into(),
        profile: profile(),
        streams: 16,
        prompt_tokens: 0,
        max_tokens: 64,
        window: Duration::from_secs(2),
        cv: 0.05,
    };
    let truth = truth(&cell, 20, 2).unwrap();
    let rows = coverage(&cell, truth, 40).unwrap();
    let total = rows.iter().find(|r| r.figure == Figure::Total).unwrap();
    assert_eq!(total.stated, 40, "every window states an interval");
    // Nominal is 95 %: 80 % or less in 40 seeds has odds under 1 in 1,000.
    assert!(
        total.coverage() >= 0.8,
        "the total rate's interval held the truth in {} of 40 windows: {total:?}",
        total.covered
    );
    // And the check has the power to notice intervals half as wide.
    assert!(
        total.coverage_at_half() < 0.8,
        "half-width intervals would still pass: {total:?}"
    );
}
