//! `cargo xtask bench`: the developers' benchmark of a server, producing the
//! same output directory as `speedmatrix run`, under `target/bench/`.

use std::time::SystemTime;

use crate::util::{cargo, project_root, run as sh};

/// Options of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Server to measure; the built-in simulator when omitted.
    #[arg(long)]
    url: Option<String>,
    /// Everything else is passed to `speedmatrix run` (e.g. --preset seed --tokenizer DIR).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// Builds the binary in release mode and runs the matrix.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let stamp = humantime_stamp();
    let out = project_root().join("target").join("bench").join(stamp);
    let out = out.to_string_lossy().into_owned();
    let mut cmd = cargo(&[
        "run",
        "--release",
        "--quiet",
        "-p",
        "speedmatrix",
        "--",
        "run",
        "--out",
        &out,
    ]);
    if let Some(url) = &args.url {
        cmd.args(["--url", url]);
    }
    cmd.args(&args.rest);
    sh(&mut cmd)?;
    eprintln!("report: {out}/report.md");
    Ok(())
}

/// Seconds since the Unix epoch: sortable and unique enough for a folder name.
fn humantime_stamp() -> String {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    format!("run-{secs}")
}
