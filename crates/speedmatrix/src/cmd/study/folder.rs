//! What a study folder becomes afterwards: the collected points and the site.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use speedmatrix_study::{Point, PointRecord, Study};

use super::{CollectArgs, status};
use crate::cmd::UsageError;
use crate::cmd::run::words;
use crate::out::{say, say_raw, tell};

/// One point as `study collect` gathers it.
#[derive(Debug, serde::Serialize)]
struct Collected {
    point: String,
    values: std::collections::BTreeMap<String, String>,
    outcome: Option<PointRecord>,
    run: Option<String>,
    best_total_tokens_per_s: Option<f64>,
    best_cell: Option<String>,
}

/// A study folder's points: each with its latest record and its run document.
type Gathered = (
    Study,
    Vec<(
        Point,
        Option<PointRecord>,
        Option<speedmatrix_report::Report>,
    )>,
);

fn gather(dir: &Path) -> anyhow::Result<Gathered> {
    let (study, _) = super::load(&dir.join(speedmatrix_study::STUDY_FILE))?;
    let journal_path = dir.join(speedmatrix_study::STUDY_JOURNAL);
    let journal = match std::fs::read_to_string(&journal_path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(UsageError(format!("cannot read {}: {e}", journal_path.display())).into());
        }
    };
    let read = PointRecord::parse_all(&journal);
    if let Some(warning) = read.warning(&journal_path.display().to_string()) {
        tell!("warning: {warning}");
    }
    let mut records = read.records;
    let mut points = Vec::new();
    for p in study.points()? {
        let outcome_file = dir.join(&p.name).join("outcome.json");
        if let Ok(line) = std::fs::read_to_string(&outcome_file) {
            let read = PointRecord::parse_all(&line);
            if let Some(warning) = read.warning(&outcome_file.display().to_string()) {
                tell!("warning: {warning}");
            }
            records.extend(read.records);
        }
        let outcome = records.iter().rev().find(|r| r.point == p.name).cloned();
        let run_json = dir.join(&p.name).join("run").join("run.json");
        let report = std::fs::read_to_string(&run_json)
            .ok()
            .map(|t| speedmatrix_report::Report::from_json(&t))
            .transpose()
            .map_err(|e| UsageError(format!("{}: {e}", run_json.display())))?;
        points.push((p, outcome, report));
    }
    Ok((study, points))
}

pub(super) fn collect(args: &CollectArgs) -> anyhow::Result<ExitCode> {
    let (study, gathered) = gather(&args.dir)?;
    let mut points = Vec::new();
    for (p, outcome, report) in gathered {
        let best = report.as_ref().and_then(|r| {
            r.decode
                .iter()
                .filter_map(|c| Some((c, c.measurements.as_ref()?.total_tokens_per_s)))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(c, t)| (t, format!("{} × {}", c.context, c.concurrency)))
        });
        let run_json = args.dir.join(&p.name).join("run").join("run.json");
        points.push(Collected {
            point: p.name.clone(),
            values: p.values.clone(),
            outcome,
            run: report.is_some().then(|| run_json.display().to_string()),
            best_total_tokens_per_s: best.as_ref().map(|b| b.0),
            best_cell: best.map(|b| b.1),
        });
    }
    let doc = serde_json::json!({
        "name": study.name,
        "labels": study.labels,
        "points": points,
    });
    let out = args.dir.join("study.json");
    speedmatrix_runner::output::write_path(&out, &(serde_json::to_string_pretty(&doc)? + "\n"))?;
    let mut table = String::from("| Point | Status | Best total tok/s | At |\n|---|---|---|---|\n");
    for p in &points {
        let _ = writeln!(
            table,
            "| {} | {} | {} | {} |",
            p.point,
            p.outcome.as_ref().map_or("not run".to_owned(), status),
            p.best_total_tokens_per_s
                .map_or("–".to_owned(), |t| format!("{t:.1}")),
            p.best_cell.as_deref().unwrap_or("–")
        );
    }
    say_raw!("{table}");
    say!("wrote {}", out.display());
    let complete = points.iter().all(|p| p.run.is_some());
    Ok(if complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Flags of `speedmatrix site`.
#[derive(Debug, clap::Args)]
pub(crate) struct SiteArgs {
    /// A study's folder (as `study run` or the pods of `study k8s` left it).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Where to write index.html and points/NAME.html.
    #[arg(short, long, value_name = "SITE")]
    out: PathBuf,
    /// The point the others are compared with, per cell (default: the first measured).
    #[arg(long, value_name = "POINT")]
    baseline: Option<String>,
    /// Flag a cell whose total tok/s is below the baseline's by more than this (5%).
    #[arg(long, value_name = "PERCENT", default_value = "5%")]
    threshold: speedmatrix_report::Threshold,
    /// Overwrite the output if it already exists (every command's outputs are refused
    /// otherwise).
    #[arg(long)]
    force: bool,
}

/// Runs `speedmatrix site`.
pub(crate) fn site(args: &SiteArgs) -> anyhow::Result<ExitCode> {
    let (study, gathered) = gather(&args.dir)?;
    let points: Vec<speedmatrix_report::SitePoint> = gathered
        .into_iter()
        .map(|(p, outcome, report)| speedmatrix_report::SitePoint {
            name: p.name,
            values: p.values,
            status: outcome.as_ref().map_or("not run".to_owned(), status),
            report,
        })
        .collect();
    let baseline = match &args.baseline {
        Some(name) => points.iter().position(|p| &p.name == name).ok_or_else(|| {
            UsageError(format!(
                "--baseline {name}: the study's points are {}",
                points
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?,
        None => points.iter().position(|p| p.report.is_some()).unwrap_or(0),
    };
    let input = speedmatrix_report::SiteInput {
        name: study.name.clone(),
        labels: study.labels.clone(),
        points,
        baseline,
        threshold: args.threshold.fraction(),
    };
    let files = speedmatrix_report::site(&input);
    speedmatrix_runner::output::claim_dir(&args.out, "--out", args.force)
        .map_err(|e| words::error(e, None))?;
    std::fs::create_dir_all(args.out.join("points"))
        .with_context(|| format!("could not create {}", args.out.display()))?;
    for (name, html) in &files {
        speedmatrix_runner::output::write_path(&args.out.join(name), html)?;
    }
    say!(
        "wrote {} pages into {} (open index.html)",
        files.len(),
        args.out.display()
    );
    Ok(ExitCode::SUCCESS)
}
