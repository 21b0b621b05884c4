//! `cargo xtask site-check`: runs the simulator example study, writes its
//! site, and opens every page in headless Chromium: each must load with no
//! console message or failed resource, and its screenshot must not be blank
//! (the PNGs stay in target/site-check/ to look at). CI runs it after the
//! vLLM stage; `.ci/run` installs Debian's chromium first.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::util::{WORKSPACE_TESTS, cargo, project_root, run as sh};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The Chromium binary.
    #[arg(long, env = "CHROMIUM", default_value = "/usr/bin/chromium")]
    chromium: PathBuf,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    crate::util::require_chromium(&args.chromium)?;
    let root = project_root();
    // The binary as `cargo xtask ci` built it (nothing to compile after CI).
    let build = [WORKSPACE_TESTS, &["--no-run", "--quiet"]].concat();
    sh(&mut cargo(&build))?;
    let speedmatrix = crate::vllm::binary()?;
    let bin_dir = speedmatrix
        .parent()
        .map_or_else(|| root.join("target/debug"), Path::to_path_buf);
    let work = root.join("target/site-check");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The example study has a failing point on purpose: exit 1 is expected.
    let status = Command::new(&speedmatrix)
        .args(["study", "run"])
        .arg(root.join("examples/studies/simulator.toml"))
        .arg("--out")
        .arg(work.join("study"))
        .env("PATH", &path)
        .status()
        .context("running the example study")?;
    if status.code() != Some(1) {
        bail!("the example study ended with {status}, not with its one failed point");
    }
    sh(Command::new(&speedmatrix)
        .arg("site")
        .arg(work.join("study"))
        .arg("-o")
        .arg(work.join("site")))?;
    let mut pages = vec![work.join("site/index.html")];
    for entry in std::fs::read_dir(work.join("site/points"))? {
        pages.push(entry?.path());
    }
    for page in &pages {
        check(&args.chromium, page, &work)?;
    }
    println!(
        "{} pages load cleanly; screenshots in {}",
        pages.len(),
        work.display()
    );
    Ok(())
}

fn check(chromium: &Path, page: &Path, work: &Path) -> anyhow::Result<()> {
    let name = page
        .file_stem()
        .map_or("page".into(), |s| s.to_string_lossy().into_owned());
    let png = work.join(format!("{name}.png"));
    // A fresh profile, and none of Chromium's own network traffic: the machine's
    // network is closed and the page needs none.
    let profile = work.join(format!("chromium-profile-{name}"));
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1300,1900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .with_context(|| format!("running {}", chromium.display()))?;
    let log = String::from_utf8_lossy(&out.stderr);
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("Failed to load"))
        .collect();
    if !bad.is_empty() {
        bail!("{}: {}", page.display(), bad.join("\n"));
    }
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    if size < 20_000 {
        bail!("{}: its screenshot is {size} bytes: blank?", page.display());
    }
    println!("{}: ok ({size} bytes of screenshot)", page.display());
    Ok(())
}
