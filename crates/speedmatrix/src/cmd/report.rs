//! `speedmatrix report`: render a saved run (run.json) as Markdown, CSV or HTML.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use speedmatrix_report::Report;

use crate::cmd::UsageError;

/// Output formats of `speedmatrix report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// Markdown laid out like the speed test matrix page.
    #[value(alias = "markdown")]
    Md,
    /// Every measurement, one row per cell and phase.
    Csv,
    /// One self-contained page with charts (no network assets).
    Html,
    /// The run document itself (the schema in crates/speedmatrix-report/schema), as this
    /// version writes it: an older document comes out upgraded.
    Json,
}

/// Flags of `speedmatrix report`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The run document written by `speedmatrix run`.
    #[arg(value_name = "RUN.json")]
    run: PathBuf,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Md)]
    format: Format,
    /// Write to this file instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Overwrite the output if it already exists (every command's outputs are refused
    /// otherwise).
    #[arg(long)]
    force: bool,
}

/// Runs `speedmatrix report`.
pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let report = load(&args.run)?;
    let text = render(&report, args.format)?;
    write_output(args.output.as_deref(), args.force, &text)?;
    Ok(ExitCode::SUCCESS)
}

fn render(report: &Report, format: Format) -> anyhow::Result<String> {
    Ok(match format {
        Format::Md => speedmatrix_report::to_markdown(report),
        Format::Csv => speedmatrix_report::to_csv(report),
        Format::Html => speedmatrix_report::to_html(report),
        Format::Json => {
            report
                .to_json()
                .context("could not write the run document")?
                + "\n"
        }
    })
}

/// Reads and checks a run document; every failure is the user's to fix (exit code 2).
pub(crate) fn load(path: &Path) -> anyhow::Result<Report> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        UsageError(format!(
            "could not read run file `{}`: {e}; give the path of a run.json written by \
             `speedmatrix run`",
            path.display()
        ))
    })?;
    Report::from_json(&text).map_err(|e| UsageError(format!("`{}`: {e}", path.display())).into())
}

/// `text` into `--output PATH` (refused when it exists, unless `force`), or to stdout.
pub(crate) fn write_output(path: Option<&Path>, force: bool, text: &str) -> anyhow::Result<()> {
    let Some(path) = path else {
        return write_stdout(text);
    };
    speedmatrix_runner::output::claim_file(path, "--output", force)
        .map_err(|e| crate::cmd::run::words::error(e, None))?;
    speedmatrix_runner::output::write_path(path, text)
        .map_err(|e| UsageError(format!("{e}; check that its folder exists and is writable")))?;
    Ok(())
}

/// Prints `text`; a closed pipe (`| head`) is not an error.
pub(crate) fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let text = speedmatrix_client::redact::clean(text);
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("could not write to standard output"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../speedmatrix-report/tests/fixtures")
            .join(name)
    }

    fn is_usage_error(err: &anyhow::Error) -> bool {
        err.chain().any(|e| e.is::<UsageError>())
    }

    fn temp_file(name: &str, contents: &str) -> PathBuf {
        let path =
            std::env::temp_dir().join(format!("speedmatrix-report-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        path
    }

    #[test]
    fn renders_each_format() {
        let report = load(&fixture("seed-run.json")).unwrap();
        let text = |f| render(&report, f).unwrap();
        assert!(text(Format::Md).starts_with("# Speed test matrix"));
        assert!(text(Format::Csv).starts_with("phase,context_tokens,"));
        assert!(text(Format::Html).starts_with("<!DOCTYPE html>"));
        // The document reads back as the one it was rendered from, upgraded to this schema.
        let again = Report::from_json(&text(Format::Json)).unwrap();
        assert_eq!(again.schema_version, speedmatrix_report::SCHEMA_VERSION);
        assert_eq!(again.decode.len(), report.decode.len());
        assert_eq!(again.prefill.len(), report.prefill.len());
    }

    #[test]
    fn missing_file_is_a_usage_error_naming_the_path() {
        let err = load(Path::new("/nonexistent/run.json")).unwrap_err();
        assert!(is_usage_error(&err));
        let text = format!("{err:#}");
        assert!(text.contains("`/nonexistent/run.json`"), "{text}");
        assert!(text.contains("speedmatrix run"), "{text}");
    }

    #[test]
    fn malformed_and_inconsistent_files_are_usage_errors() {
        let path = temp_file("bad.json", "{\"schema_version\": 1, \"hardware\": 3}");
        let err = load(&path).unwrap_err();
        assert!(is_usage_error(&err));
        let text = format!("{err:#}");
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("not a speedmatrix run document"), "{text}");
        std::fs::remove_file(&path).unwrap();
    }

    #[tokio::test]
    async fn writes_the_output_file() {
        let out = std::env::temp_dir().join(format!(
            "speedmatrix-report-{}-out.html",
            std::process::id()
        ));
        let args = Args {
            run: fixture("small-run.json"),
            format: Format::Html,
            output: Some(out.clone()),
            force: false,
        };
        assert_eq!(run(args).await.unwrap(), ExitCode::SUCCESS);
        let html = std::fs::read_to_string(&out).unwrap();
        assert!(html.contains("<svg"));
        std::fs::remove_file(&out).unwrap();
        let args = Args {
            run: fixture("small-run.json"),
            format: Format::Md,
            output: Some(PathBuf::from("/nonexistent-dir/out.md")),
            force: false,
        };
        assert!(is_usage_error(&run(args).await.unwrap_err()));
    }
}
