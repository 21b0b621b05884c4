//! `speedmatrix study run STUDY.toml --out DIR`: for each point of a study,
//! start its server, wait until it answers, measure the matrix into
//! `DIR/POINT/run/`, stop the server by its process group, go on. A point
//! whose server does not start or dies is recorded with its log's tail; the
//! study goes on and is journaled (`DIR/study.jsonl`) so `--resume` skips
//! what is done.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use speedmatrix_study::{Point, PointOutcome, PointRecord, Study};

use crate::cmd::UsageError;

mod folder;
mod server;

pub(crate) use self::folder::{SiteArgs, site};
use self::folder::{collect, k8s};
use self::server::{free_port, spawn, stop_server, tail, wait_ready};

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
    #[arg(long, default_value_t = 1)]
    parallelism: u32,
    /// GPUs each pod asks for (nvidia.com/gpu).
    #[arg(long, default_value_t = 1)]
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
            println!("{}", serde_json::to_string_pretty(&Study::json_schema())?);
            Ok(ExitCode::SUCCESS)
        }
        Action::Run(a) => run_study(a).await,
        Action::K8s(a) => k8s(&a),
        Action::Collect(a) => collect(&a),
    }
}

async fn run_study(args: RunArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.study)
        .map_err(|e| UsageError(format!("cannot read {}: {e}", args.study.display())))?;
    let study = Study::from_toml(&text)
        .map_err(|e| UsageError(format!("{}: {e}", args.study.display())))?;
    let points = study
        .points()
        .map_err(|e| UsageError(format!("{}: {e}", args.study.display())))?;
    // Every template must fill before anything starts.
    for p in &points {
        p.fill(&study.server.command, 0)
            .and_then(|_| args_of(&study, p, 0).map(|_| ()))
            .map_err(|e| UsageError(format!("point {}: {e}", p.name)))?;
    }
    if args.dry_run {
        print!("{}", plan(&study, &points)?);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(i) = args.point_index {
        let point = points.get(i).ok_or_else(|| {
            UsageError(format!(
                "--point-index {i}: the study has {} points (0 to {})",
                points.len(),
                points.len().saturating_sub(1)
            ))
        })?;
        std::fs::create_dir_all(&args.out)
            .with_context(|| format!("could not create {}", args.out.display()))?;
        std::fs::write(args.out.join("study.toml"), &text)?;
        let record = run_point(&study, point, &args).await?;
        eprintln!("{}: {}", point.name, status(&record));
        let path = args.out.join(&point.name).join("outcome.json");
        std::fs::write(&path, record.to_line() + "\n")
            .with_context(|| format!("could not write {}", path.display()))?;
        return Ok(match record.outcome {
            PointOutcome::Measured { exit_code: 0 } => ExitCode::SUCCESS,
            _ => ExitCode::FAILURE,
        });
    }
    let journal_path = args.out.join("study.jsonl");
    let done = previous(&args, &journal_path)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("could not create {}", args.out.display()))?;
    std::fs::write(args.out.join("study.toml"), &text)?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            flag.store(true, Ordering::SeqCst);
        }
    });
    let mut records = Vec::new();
    for point in &points {
        if let Some(r) = done.iter().find(|r| r.point == point.name) {
            eprintln!("{}: done before ({}), skipped", point.name, status(r));
            records.push(r.clone());
            continue;
        }
        if stop.load(Ordering::SeqCst) {
            break;
        }
        eprintln!("{}: starting its server …", point.name);
        let record = run_point(&study, point, &args).await?;
        eprintln!("{}: {}", point.name, status(&record));
        append(&journal_path, &record)?;
        records.push(record);
    }
    print!("{}", summary(&args.out, &records));
    let all = records.len() == points.len()
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
    }
}

/// The journal's records a resumed study keeps.
fn previous(args: &RunArgs, journal: &Path) -> anyhow::Result<Vec<PointRecord>> {
    if !args.resume {
        if journal.exists() {
            return Err(UsageError(format!(
                "{} already holds a study: pass --resume to continue it, or another --out",
                args.out.display()
            ))
            .into());
        }
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(journal).unwrap_or_default();
    let records = PointRecord::parse_all(&text)
        .map_err(|e| UsageError(format!("{}: {e}", journal.display())))?;
    Ok(records
        .into_iter()
        .filter(|r| !(args.retry_failed && matches!(r.outcome, PointOutcome::Failed { .. })))
        .collect())
}

fn append(journal: &Path, record: &PointRecord) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(journal)
        .with_context(|| format!("could not open {}", journal.display()))?;
    writeln!(f, "{}", record.to_line())?;
    f.sync_data()?;
    Ok(())
}

/// The run's flags for `point`: the study's, filled in.
fn args_of(
    study: &Study,
    point: &Point,
    port: u16,
) -> Result<Vec<String>, speedmatrix_study::StudyError> {
    study.run.args.iter().map(|a| point.fill(a, port)).collect()
}

fn url_of(
    study: &Study,
    point: &Point,
    port: u16,
) -> Result<String, speedmatrix_study::StudyError> {
    match &study.server.url {
        Some(t) => point.fill(t, port),
        None => Ok(format!("http://127.0.0.1:{port}")),
    }
}

/// One point, start to stop.
async fn run_point(study: &Study, point: &Point, args: &RunArgs) -> anyhow::Result<PointRecord> {
    let dir = args.out.join(&point.name);
    std::fs::create_dir_all(&dir).with_context(|| format!("could not create {}", dir.display()))?;
    let log = dir.join("server.log");
    let port = free_port()?;
    let command = point.fill(&study.server.command, port)?;
    let url = url_of(study, point, port)?;
    let started = Instant::now();
    let failed = |reason: String| PointRecord {
        point: point.name.clone(),
        outcome: PointOutcome::Failed {
            reason,
            log_tail: tail(&log, 20),
        },
        seconds: started.elapsed().as_secs_f64(),
    };
    let mut server = match spawn(study, point, &command, port, &log) {
        Ok(s) => s,
        Err(e) => return Ok(failed(format!("could not start `{command}`: {e}"))),
    };
    if let Err(reason) = wait_ready(&mut server, &url, study).await {
        stop_server(&mut server, study).await;
        return Ok(failed(reason));
    }
    let run_dir = dir.join("run");
    let mut argv = args_of(study, point, port)?;
    argv.extend(["--url".to_owned(), url.clone()]);
    if !argv.iter().any(|a| a == "--quiet" || a == "-q") {
        argv.push("--quiet".to_owned());
    }
    if run_dir.join("journal.jsonl").exists() {
        argv.extend(["--resume".to_owned(), run_dir.display().to_string()]);
    } else {
        argv.extend(["--out".to_owned(), run_dir.display().to_string()]);
    }
    let outcome = match crate::cmd::run::parse_args(argv) {
        Ok(run_args) => crate::cmd::run::run(run_args).await,
        Err(e) => Err(UsageError(format!("[run] args: {e}")).into()),
    };
    let died = server.try_wait().ok().flatten();
    stop_server(&mut server, study).await;
    Ok(match (outcome, died) {
        (Ok(code), None) => PointRecord {
            point: point.name.clone(),
            outcome: PointOutcome::Measured {
                exit_code: if code == ExitCode::SUCCESS { 0 } else { 1 },
            },
            seconds: started.elapsed().as_secs_f64(),
        },
        (Ok(_), Some(status)) => failed(format!("the server exited ({status}) during the run")),
        (Err(e), _) => failed(format!("the run failed: {e:#}")),
    })
}

/// The dry run: every point, its command, its URL and its run flags.
fn plan(study: &Study, points: &[Point]) -> anyhow::Result<String> {
    let mut out = format!("Study \"{}\": {} points\n", study.name, points.len());
    for p in points {
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
            args_of(study, p, 0)?.join(" ")
        );
        let run = crate::cmd::run::parse_args(args_of(study, p, 0)?)
            .map_err(|e| UsageError(format!("point {}: [run] args: {e}", p.name)))?;
        let _ = writeln!(out, "  cells:   {}", cells(&run));
        match crate::cmd::run::predicted_grid(&run) {
            Ok(Some(grid)) => out.push_str(&grid_lines(&grid)),
            Ok(None) => {}
            Err(e) => {
                let _ = writeln!(out, "  capacity: not predicted ({e:#})");
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

/// The run's size in words, from its flags.
fn cells(run: &crate::cmd::run::Args) -> String {
    match (&run.contexts, &run.concurrency) {
        (Some(c), Some(n)) => {
            let window = run.duration.unwrap_or(Duration::from_secs(30));
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
