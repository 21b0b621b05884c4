//! `speedmatrix study`: run a study (the loop is `speedmatrix_study::run_study`: each point's
//! server started, the matrix measured into `DIR/POINT/run/`, the server stopped, the point
//! journaled), print its plan, its schema, its Kubernetes manifests, or collect its points.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use speedmatrix_study::{PointOutcome, PointRecord, Study, StudySettings};

use crate::cmd::UsageError;
use crate::cmd::run::{cancel_on_signal, words};

mod folder;
mod k8s;
mod lines;

use self::folder::collect;
pub(crate) use self::folder::{SiteArgs, site};
use self::k8s::{K8sArgs, k8s};
use crate::out::{say, say_raw};

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
    K8s(Box<K8sArgs>),
    /// Gather a study's points (their outcome records and run documents) into DIR/study.json
    /// and a table: after `study run`, or after the pods of `study k8s` wrote their points.
    Collect(CollectArgs),
}

#[derive(Debug, clap::Args)]
pub(super) struct CollectArgs {
    /// The study's folder (holding study.toml and a folder per point).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

#[derive(Debug, clap::Args)]
#[command(after_long_help = RUN_HELP)]
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
    /// With --point-index: exit 0 when the point failed and its failure was recorded in its
    /// outcome.json (for Jobs of Kubernetes before 1.29, which cannot fail one index alone).
    #[arg(long, requires = "point_index")]
    recorded_failure_ok: bool,
    /// Points measured at once, each on GPUs of its own (needs --gpus: two engines on one GPU
    /// would measure each other). At most the GPUs listed ÷ --gpus-per-point. The journal
    /// then holds the points in the order they end.
    #[arg(long, value_name = "N", default_value_t = 1, conflicts_with = "point_index",
          value_parser = clap::value_parser!(u32).range(1..=1_024))]
    parallel: u32,
    /// The GPUs the points may use, as CUDA and HIP number them (indices or UUIDs): each
    /// point's server is given --gpus-per-point of them that no running point holds, in
    /// CUDA_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES, and its record names them.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        conflicts_with = "point_index"
    )]
    gpus: Vec<String>,
    /// GPUs each point's server is given (with --gpus): 2 for `--tensor-parallel-size 2`.
    #[arg(long, value_name = "G", default_value_t = 1, requires = "gpus",
          value_parser = clap::value_parser!(u32).range(1..=1_024))]
    gpus_per_point: u32,
}

const RUN_HELP: &str = "\
Examples:
  speedmatrix study run examples/studies/simulator.toml --out sim-study
  speedmatrix study run kv.toml --out kv-study --dry-run          # the points, started nothing
  speedmatrix study run kv.toml --out kv-study --resume           # go on after a stop
  speedmatrix study run kv.toml --out kv-study --parallel 4 --gpus 0,1,2,3
  speedmatrix study run tp2.toml --out tp2 --parallel 2 --gpus 0,1,2,3 --gpus-per-point 2

Each point prints a line when its server starts and one when it ends, with the study's time
left (each point's planned matrix, plus the server starts seen so far, corrected by how long
the finished points took):
  [3/8] kv=fp8_seqs=64: starting its server (vllm serve …) on GPU 2 — study: about 1h 12m left
  [3/8] kv=fp8_seqs=64: its server answered after 1m 52s
  [3/8] kv=fp8_seqs=64: measured in 6m 2s: best 4210.3 total tok/s at 16k × 32, 11 cells …
  [4/8] kv=fp8_seqs=256: failed after 41s: the server exited (exit status: 1) before it …
      | torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
A failed point's line is followed by the lines of its server's log that say why (kept in its
record in DIR/study.jsonl as error_lines).

Exit codes: 0 every point measured every cell; 1 a point failed or the study was stopped
(--resume continues it); 2 bad input (nothing starts).";

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

async fn run_study(args: RunArgs) -> anyhow::Result<ExitCode> {
    let (study, text) = load(&args.study)?;
    let settings = StudySettings {
        dir: args.out.clone(),
        resume: args.resume,
        retry_failed: args.retry_failed,
        program: std::env::current_exe().ok(),
        parallel: args.parallel as usize,
        gpus: args.gpus.clone(),
        gpus_per_point: args.gpus_per_point as usize,
    };
    let study_error = |e: speedmatrix_study::StudyError| -> anyhow::Error {
        match e {
            speedmatrix_study::StudyError::Io { .. } | speedmatrix_study::StudyError::Run(_) => {
                anyhow::Error::new(e)
            }
            other => UsageError(other.to_string()).into(),
        }
    };
    // --parallel and --gpus are checked before anything starts, the dry run included.
    settings.gpu_pool().map_err(study_error)?;
    if args.dry_run {
        say_raw!("{}{}", plan(&study)?, at_once(&settings));
        return Ok(ExitCode::SUCCESS);
    }
    let observer = lines::Lines::new(&args.out);
    let cancel = cancel_on_signal();
    if let Some(i) = args.point_index {
        let record = speedmatrix_study::run_one(&study, &text, i, &settings, &observer, &cancel)
            .await
            .map_err(study_error)?;
        return Ok(match record.outcome {
            PointOutcome::Measured { exit_code: 0 } => ExitCode::SUCCESS,
            PointOutcome::Measured { .. } | PointOutcome::Failed { .. }
                if args.recorded_failure_ok =>
            {
                ExitCode::SUCCESS
            }
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

/// How the dry run's points would share the GPUs; nothing without --gpus.
fn at_once(settings: &StudySettings) -> String {
    if settings.gpus.is_empty() {
        return String::new();
    }
    format!(
        "\n{} point(s) at once, each on {} of GPUs {} (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES)\n",
        settings.slots(),
        settings.gpus_per_point.max(1),
        settings.gpus.join(",")
    )
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
        let _ = writeln!(out, "  server:  {}", p.server_command(&study.server, None)?);
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

/// The study's table: a row per point, with its GPUs when the study gave any.
fn summary(dir: &Path, records: &[PointRecord]) -> String {
    let gpus = records.iter().any(|r| !r.gpus.is_empty());
    let mut out = if gpus {
        String::from("\n| Point | Status | Seconds | GPUs | Run |\n|---|---|---|---|---|\n")
    } else {
        String::from("\n| Point | Status | Seconds | Run |\n|---|---|---|---|\n")
    };
    for r in records {
        let files = if matches!(r.outcome, PointOutcome::Measured { .. }) {
            dir.join(&r.point).join("run")
        } else {
            dir.join(&r.point).join("server.log")
        };
        let held = if gpus {
            format!(" {} |", r.gpus.join(","))
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} |{held} {} |",
            r.point,
            status(r),
            r.seconds,
            files.display()
        );
    }
    out
}
