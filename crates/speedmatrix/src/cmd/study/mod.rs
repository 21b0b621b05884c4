//! `speedmatrix study`: run a study (the loop is `speedmatrix_study::run_study`: each point's
//! server started, the matrix measured into `DIR/POINT/run/`, the server stopped, the point
//! journaled), print its plan, its schema, its Kubernetes manifests, or collect its points.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use speedmatrix_runner::{Notice, Observer, RunOutcome};
use speedmatrix_study::{Point, PointOutcome, PointRecord, Study, StudyObserver, StudySettings};

use crate::cmd::UsageError;
use crate::cmd::run::{Progress, cancel_on_signal, summarize, words};

mod folder;

pub(crate) use self::folder::{SiteArgs, site};
use self::folder::{collect, k8s};
use crate::out::{say, say_raw, tell};

/// `speedmatrix study`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    /// Run every point of a study: start its server, measure the matrix, stop it.
    Run(RunArgs),
    /// Print the JSON Schema of study files (their TOML read as JSON).
    Schema,
    /// Write Kubernetes manifests that run the study as an Indexed Job, one point per pod.
    K8s(K8sArgs),
    /// Gather a study's points (their outcome records and run documents) into DIR/study.json
    /// and a table: after `study run`, or after the pods of `study k8s` wrote their points.
    Collect(CollectArgs),
}

#[derive(Debug, clap::Args)]
pub(super) struct K8sArgs {
    /// The study file.
    #[arg(value_name = "STUDY.toml")]
    study: PathBuf,
    /// Where to write configmap.yaml (the study file), pvc.yaml (the results volume) and
    /// job.yaml (an Indexed Job: pod i runs `study run --point-index i`); apply them with
    /// `kubectl apply -f DIR`, then `speedmatrix study collect` on the volume's contents.
    #[arg(short, long, value_name = "DIR")]
    out: PathBuf,
    /// The image each pod runs: speedmatrix beside the engine the study's command starts
    /// (the repo's Dockerfile, target with-vllm).
    #[arg(long)]
    image: String,
    /// Points measured at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    parallelism: u32,
    /// GPUs each pod asks for (nvidia.com/gpu).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=1_024))]
    gpus_per_point: u32,
    /// Size of the results volume (ReadWriteMany).
    #[arg(long, default_value = "100Gi")]
    results_size: String,
    /// Storage class of the results volume (default: the cluster's).
    #[arg(long)]
    storage_class: Option<String>,
    /// Namespace of every object (default: kubectl's current one).
    #[arg(long)]
    namespace: Option<String>,
    /// Overwrite the output if it already exists (every command's outputs are refused
    /// otherwise).
    #[arg(long)]
    force: bool,
}

#[derive(Debug, clap::Args)]
pub(super) struct CollectArgs {
    /// The study's folder (holding study.toml and a folder per point).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The study file (TOML; `speedmatrix study schema` prints its schema, examples/ has
    /// studies to start from).
    #[arg(value_name = "STUDY.toml")]
    study: PathBuf,
    /// The study's folder: DIR/study.toml (a copy), DIR/study.jsonl (the journal), and per
    /// point DIR/POINT/server.log and DIR/POINT/run/ (the run's files).
    #[arg(short, long, value_name = "DIR")]
    out: PathBuf,
    /// Print the points, their commands and the measurement they take, and start nothing.
    #[arg(long)]
    dry_run: bool,
    /// Continue a study in DIR: points the journal has are skipped, a point whose run was
    /// cut short resumes from its own journal.
    #[arg(long)]
    resume: bool,
    /// With --resume, run the points that failed again too.
    #[arg(long, requires = "resume")]
    retry_failed: bool,
    /// Run only this point (0-based, in the study's order), recording its outcome in
    /// DIR/POINT/outcome.json instead of the study's journal: what each pod of `study k8s`
    /// runs, so pods can share DIR.
    #[arg(long, value_name = "INDEX", conflicts_with_all = ["resume", "dry_run"])]
    point_index: Option<usize>,
}

/// Runs `speedmatrix study`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.action {
        Action::Schema => {
            say!("{}", serde_json::to_string_pretty(&Study::json_schema())?);
            Ok(ExitCode::SUCCESS)
        }
        Action::Run(a) => run_study(a).await,
        Action::K8s(a) => k8s(&a),
        Action::Collect(a) => collect(&a),
    }
}

/// A study file, read and checked (every point's run options included).
pub(super) fn load(path: &Path) -> anyhow::Result<(Study, String)> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("cannot read {}: {e}", path.display())))?;
    let study =
        Study::from_toml(&text).map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    // Points whose names clash or no folder can hold are refused here, before anything starts.
    study
        .points()
        .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    Ok((study, text))
}

/// What the study says as it goes: a line per point, the run's own summary, progress off.
struct Lines(Progress);

impl StudyObserver for Lines {
    fn point_starting(&self, point: &Point) {
        tell!("{}: starting its server …", point.name);
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
        let _ = summarize(dir, outcome);
    }

    fn point_ended(&self, record: &PointRecord) {
        tell!("{}: {}", record.point, status(record));
    }

    fn run_observer(&self) -> &dyn Observer {
        &self.0
    }

    fn word(&self, notice: &Notice) -> String {
        words::notice(notice)
    }
}

async fn run_study(args: RunArgs) -> anyhow::Result<ExitCode> {
    let (study, text) = load(&args.study)?;
    if args.dry_run {
        say_raw!("{}", plan(&study)?);
        return Ok(ExitCode::SUCCESS);
    }
    let settings = StudySettings {
        dir: args.out.clone(),
        resume: args.resume,
        retry_failed: args.retry_failed,
        program: std::env::current_exe().ok(),
    };
    let observer = Lines(Progress::new(true));
    let cancel = cancel_on_signal();
    let study_error = |e: speedmatrix_study::StudyError| -> anyhow::Error {
        match e {
            speedmatrix_study::StudyError::Io { .. } | speedmatrix_study::StudyError::Run(_) => {
                anyhow::Error::new(e)
            }
            other => UsageError(other.to_string()).into(),
        }
    };
    if let Some(i) = args.point_index {
        let record = speedmatrix_study::run_one(&study, &text, i, &settings, &observer, &cancel)
            .await
            .map_err(study_error)?;
        return Ok(match record.outcome {
            PointOutcome::Measured { exit_code: 0 } => ExitCode::SUCCESS,
            _ => ExitCode::FAILURE,
        });
    }
    let records = speedmatrix_study::run_study(&study, &text, &settings, &observer, &cancel)
        .await
        .map_err(study_error)?;
    say_raw!("{}", summary(&args.out, &records));
    let all = records.len() == study.points()?.len()
        && records
            .iter()
            .all(|r| matches!(r.outcome, PointOutcome::Measured { exit_code: 0 }));
    Ok(if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub(super) fn status(r: &PointRecord) -> String {
    match &r.outcome {
        PointOutcome::Measured { exit_code: 0 } => "measured".to_owned(),
        PointOutcome::Measured { exit_code } => format!("measured, run exited {exit_code}"),
        PointOutcome::Failed { reason, .. } => format!("failed: {reason}"),
        PointOutcome::Interrupted => {
            "interrupted (not recorded: `--resume` runs it again)".to_owned()
        }
    }
}

/// The dry run: every point, its command, its URL, its run flags and predicted grid.
fn plan(study: &Study) -> anyhow::Result<String> {
    let points = study.points()?;
    let mut out = format!("Study \"{}\": {} points\n", study.name, points.len());
    for p in &points {
        let _ = writeln!(out, "\n{}", p.name);
        let url = match &study.server.url {
            Some(t) => p.fill_shown(t)?,
            None => "http://127.0.0.1:{port}".to_owned(),
        };
        let _ = writeln!(out, "  server:  {}", p.fill_shown(&study.server.command)?);
        let _ = writeln!(
            out,
            "  ready:   {url}{} within {}",
            study.server.health_path,
            humantime::format_duration(study.server.ready_timeout)
        );
        let _ = writeln!(
            out,
            "  run:     speedmatrix run {}",
            speedmatrix_study::shown_flags(study, p)?
        );
        let run = study.run_options(p, 0)?;
        let _ = writeln!(out, "  cells:   {}", cells(&run));
        match run.predicted_grid() {
            Ok(Some(grid)) => out.push_str(&grid_lines(&grid)),
            Ok(None) => {}
            Err(e) => {
                let _ = writeln!(out, "  capacity: not predicted ({})", words::error(e, None));
            }
        }
    }
    Ok(out)
}

/// The predicted capacity grid, a row per context: `✓` runs, `·` over capacity.
fn grid_lines(grid: &speedmatrix_capacity::CapacityGrid) -> String {
    let mut out = format!(
        "  capacity (predicted, {} tokens of KV cache; ✓ runs, · over capacity):\n",
        grid.pool_tokens
    );
    let mut contexts: Vec<speedmatrix_units::Tokens> = Vec::new();
    for c in &grid.cells {
        if !contexts.contains(&c.context) {
            contexts.push(c.context);
        }
    }
    for ctx in contexts {
        let row: Vec<String> = grid
            .cells
            .iter()
            .filter(|c| c.context == ctx)
            .map(|c| format!("{}{}", c.concurrency, if c.fits { "✓" } else { "·" }))
            .collect();
        let _ = writeln!(out, "    {:>6}: {}", ctx.to_string(), row.join(" "));
    }
    out
}

/// The run's size in words, from its options.
fn cells(run: &speedmatrix_runner::options::RunOptions) -> String {
    match (&run.contexts, &run.concurrency) {
        (Some(c), Some(n)) => {
            let window = run.window.unwrap_or(Duration::from_secs(30));
            let cells = c.len() * n.len();
            format!(
                "{cells} decode cells of {} (≈ {} of windows), plus warm-ups and prefill",
                humantime::format_duration(window),
                humantime::format_duration(window * u32::try_from(cells).unwrap_or(u32::MAX))
            )
        }
        _ => "the preset's matrix (`speedmatrix run --dry-run` against a server prints it)"
            .to_owned(),
    }
}

fn summary(dir: &Path, records: &[PointRecord]) -> String {
    let mut out = String::from("\n| Point | Status | Seconds | Run |\n|---|---|---|---|\n");
    for r in records {
        let run = dir.join(&r.point).join("run");
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {} |",
            r.point,
            status(r),
            r.seconds,
            if matches!(r.outcome, PointOutcome::Measured { .. }) {
                run.display().to_string()
            } else {
                dir.join(&r.point).join("server.log").display().to_string()
            }
        );
    }
    out
}
