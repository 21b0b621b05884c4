//! `speedmatrix compare`: two saved runs cell by cell (B/A ratios), regressions flagged.

use std::path::PathBuf;
use std::process::ExitCode;

use speedmatrix_report::{Comparison, Threshold, compare};

use crate::cmd::report::{load, write_stdout};
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
    /// or higher TTFT by more than this.
    #[arg(long, value_name = "PERCENT", default_value = "5%")]
    threshold: Threshold,
    /// Exit with code 1 when any cell regressed beyond PERCENT (used as the threshold).
    #[arg(long, value_name = "PERCENT", conflicts_with = "threshold")]
    fail_on_regression: Option<Threshold>,
}

/// Runs `speedmatrix compare`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (comparison, code) = execute(&args)?;
    write_stdout(&comparison.to_markdown())?;
    if code != ExitCode::SUCCESS {
        tell!(
            "error: {} cell(s) regressed beyond {} (--fail-on-regression)",
            comparison.regressions().count(),
            comparison.threshold
        );
    }
    Ok(code)
}

fn execute(args: &Args) -> anyhow::Result<(Comparison, ExitCode)> {
    let a = load(&args.a)?;
    let b = load(&args.b)?;
    let threshold = args.fail_on_regression.unwrap_or(args.threshold);
    let comparison = compare(&a, &b, threshold);
    let failed = args.fail_on_regression.is_some() && comparison.has_regressions();
    let code = if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    };
    Ok((comparison, code))
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
        }
    }

    #[test]
    fn exit_code_follows_fail_on_regression() {
        let b = slower_seed();
        let (c, code) = execute(&args(b.clone(), "5%", None)).unwrap();
        assert_eq!(c.regressions().count(), 1);
        assert_eq!(code, ExitCode::SUCCESS, "flagging alone does not fail");
        let (_, code) = execute(&args(b.clone(), "5%", Some("5%"))).unwrap();
        assert_eq!(code, ExitCode::FAILURE);
        let (c, code) = execute(&args(b.clone(), "5%", Some("15%"))).unwrap();
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
