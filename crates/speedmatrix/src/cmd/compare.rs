//! `speedmatrix compare`: two saved runs cell by cell (B/A ratios with
//! their intervals), regressions flagged only where the noise allows.

use std::path::PathBuf;
use std::process::ExitCode;

use speedmatrix_report::{Comparison, MetricChoice, Threshold, compare_metrics};

use crate::cmd::report::{load, write_output};
use crate::out::tell;

/// Flags of `speedmatrix compare`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The baseline run (A), as written by `speedmatrix run`.
    #[arg(value_name = "A.json")]
    a: PathBuf,
    /// The run judged against it (B).
    #[arg(value_name = "B.json")]
    b: PathBuf,
    /// Change beyond which a cell counts as a regression or an improvement: lower tok/s
    /// or higher TTFT/ITL by more than this, with the 95 % interval of the ratio B/A
    /// wholly beyond it (a change the runs' own noise could explain is "within noise").
    #[arg(long, value_name = "PERCENT", default_value = "5%")]
    threshold: Threshold,
    /// Exit with code 1 when any cell regressed beyond PERCENT (used as the threshold),
    /// by the same rule.
    #[arg(long, value_name = "PERCENT", conflicts_with = "threshold")]
    fail_on_regression: Option<Threshold>,
    /// Which figures to judge: tok/s, ttft, itl or all.
    #[arg(long, value_name = "METRIC", default_value = "all")]
    metric: MetricChoice,
    /// Write the comparison as JSON (every cell, each figure's ratio, its interval and
    /// the judgement) instead of Markdown.
    #[arg(long)]
    json: bool,
    /// Write run B's HTML page (as `speedmatrix report --format html` draws it) with the
    /// comparison as a section beside its tables: when A is a prediction, the predicted
    /// figure, its 80 % band, the error and where the measurement fell for every measured
    /// cell; otherwise A's figure, B/A with its interval and the verdict.
    #[arg(long, conflicts_with = "json")]
    html: bool,
    /// Write to this file instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Overwrite the output file if it already exists.
    #[arg(long)]
    force: bool,
    /// Compare runs whose load workloads differ (another --dataset file, sample or seed,
    /// another --input-tokens): refused without it, since their cells sent other prompts.
    #[arg(long)]
    allow_different_workloads: bool,
}

/// Runs `speedmatrix compare`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (comparison, code, b) = execute(&args)?;
    let text = if args.html {
        comparison.to_html(&b)
    } else if args.json {
        let mut json = serde_json::to_string_pretty(&comparison)
            .map_err(|e| anyhow::anyhow!("could not write the comparison as JSON: {e}"))?;
        json.push('\n');
        json
    } else {
        comparison.to_markdown()
    };
    write_output(args.output.as_deref(), args.force, &text)?;
    if code != ExitCode::SUCCESS {
        let cells: Vec<String> = comparison
            .regressions()
            .map(|c| format!("{:?} {} × {}", c.section, c.context, c.concurrency))
            .collect();
        tell!(
            "error: {} cell(s) regressed beyond {} and beyond their noise (--fail-on-regression): {}",
            cells.len(),
            comparison.threshold,
            cells.join(", ")
        );
    }
    Ok(code)
}

fn execute(args: &Args) -> anyhow::Result<(Comparison, ExitCode, speedmatrix_report::Report)> {
    let a = load(&args.a)?;
    let b = load(&args.b)?;
    if let Some(diff) = speedmatrix_report::workload_difference(&a, &b)
        && !args.allow_different_workloads
    {
        return Err(crate::cmd::UsageError(format!(
            "the runs sent different prompts ({diff}): their cells measure other work, not the \
             server; give --allow-different-workloads to compare them anyway"
        ))
        .into());
    }
    let threshold = args.fail_on_regression.unwrap_or(args.threshold);
    let comparison = compare_metrics(&a, &b, threshold, args.metric);
    let failed = args.fail_on_regression.is_some() && comparison.has_regressions();
    let code = if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    };
    Ok((comparison, code, b))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../speedmatrix-report/tests/fixtures")
            .join(name)
    }

    /// The seed run with 0 × 1 made 10 % slower, written to a temporary file.
    fn slower_seed() -> PathBuf {
        let mut report = load(&fixture("seed-run.json")).unwrap();
        let m = report.decode[0].measurements.as_mut().unwrap();
        m.total_tokens_per_s *= 0.9;
        m.output_tokens =
            speedmatrix_units::Tokens::new((m.total_tokens_per_s * m.measured_s).round() as u64);
        let path =
            std::env::temp_dir().join(format!("speedmatrix-compare-{}.json", std::process::id()));
        std::fs::write(&path, report.to_json().unwrap()).unwrap();
        path
    }

    fn args(b: PathBuf, threshold: &str, fail: Option<&str>) -> Args {
        Args {
            a: fixture("seed-run.json"),
            b,
            threshold: threshold.parse().unwrap(),
            fail_on_regression: fail.map(|f| f.parse().unwrap()),
            metric: MetricChoice::All,
            json: false,
            html: false,
            output: None,
            force: false,
            allow_different_workloads: false,
        }
    }

    #[test]
    fn exit_code_follows_fail_on_regression() {
        let b = slower_seed();
        let (c, code, _) = execute(&args(b.clone(), "5%", None)).unwrap();
        assert_eq!(c.regressions().count(), 1);
        assert_eq!(code, ExitCode::SUCCESS, "flagging alone does not fail");
        let (_, code, _) = execute(&args(b.clone(), "5%", Some("5%"))).unwrap();
        assert_eq!(code, ExitCode::FAILURE);
        let (c, code, _) = execute(&args(b.clone(), "5%", Some("15%"))).unwrap();
        assert_eq!((c.regressions().count(), code), (0, ExitCode::SUCCESS));
        std::fs::remove_file(b).unwrap();
    }

    #[test]
    fn bad_paths_are_usage_errors() {
        let err = execute(&args(PathBuf::from("/nonexistent/b.json"), "5%", None)).unwrap_err();
        assert!(err.chain().any(|e| e.is::<crate::cmd::UsageError>()));
        assert!(format!("{err:#}").contains("/nonexistent/b.json"));
    }
}
