//! `cargo xtask screenshot`: renders a run document to HTML and screenshots it
//! with headless Chromium, to check that the page looks right in a real browser.
//! A manual step: CI does not need Chromium (`apt-get install -y chromium`).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

use crate::util::{cargo, project_root, run as sh};

/// Options of `cargo xtask screenshot`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The run document; defaults to the seed fixture.
    run: Option<PathBuf>,
    /// Where to write the PNG.
    #[arg(long, short, default_value = "target/report-screenshot.png")]
    out: PathBuf,
    /// Browser window size, WIDTH,HEIGHT in pixels.
    #[arg(long, default_value = "1400,2400")]
    window_size: String,
    /// The Chromium binary.
    #[arg(long, env = "CHROMIUM", default_value = "/usr/bin/chromium")]
    chromium: PathBuf,
}

/// Renders and screenshots; prints the PNG's path.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    crate::util::require_chromium(&args.chromium)?;
    let root = project_root();
    let run = args
        .run
        .clone()
        .unwrap_or_else(|| root.join("crates/speedmatrix-report/tests/fixtures/seed-run.json"));
    let work = root.join("target/screenshot");
    std::fs::create_dir_all(&work).context("creating target/screenshot")?;
    let html = work.join("report.html");
    let mut render = cargo(&["run", "--quiet", "-p", "speedmatrix", "--", "report"]);
    render.arg(&run).args(["--format", "html", "-o"]).arg(&html);
    sh(&mut render)?;
    let png = root.join(&args.out);
    if let Some(parent) = png.parent() {
        std::fs::create_dir_all(parent).context("creating the PNG's folder")?;
    }
    let mut shot = Command::new(&args.chromium);
    shot.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!(
        "--user-data-dir={}",
        work.join("profile").display()
    ))
    .arg(format!("--window-size={}", args.window_size))
    .arg(format!("--screenshot={}", png.display()))
    .arg(format!("file://{}", html.display()));
    sh(&mut shot)?;
    if std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0) == 0 {
        bail!("Chromium wrote no screenshot to {}", png.display());
    }
    println!("{}", png.display());
    Ok(())
}
