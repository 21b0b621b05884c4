//! Small helpers to run cargo and other programs from the workspace root.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The workspace root (the folder above `xtask/`).
pub(crate) fn project_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `cargo test` over the whole workspace as `cargo xtask ci` runs it. Other
/// workflows that need the `speedmatrix` binary build it with these same
/// flags (plus `--no-run`), so they reuse CI's build: a plain `cargo build`
/// unifies features without the dev-dependencies and would compile a second
/// copy of most crates (about 2 GB more of `target/`).
pub(crate) const WORKSPACE_TESTS: &[&str] = &[
    "test",
    "--workspace",
    "--lib",
    "--bins",
    "--tests",
    "--locked",
];

/// A `cargo` command with `args`, run from the workspace root.
pub(crate) fn cargo(args: &[&str]) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(args).current_dir(project_root());
    cmd
}

/// Runs `cmd`, echoing it first; fails when it does not exit 0.
pub(crate) fn run(cmd: &mut Command) -> anyhow::Result<()> {
    eprintln!("$ {}", describe(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{}`", describe(cmd)))?;
    if !status.success() {
        bail!("`{}` failed with {status}", describe(cmd));
    }
    Ok(())
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// `chromium` when it is a file, else an error saying how to install it.
pub(crate) fn require_chromium(chromium: &std::path::Path) -> anyhow::Result<()> {
    if !chromium.is_file() {
        bail!(
            "{} not found; install it with `apt-get update && apt-get install -y chromium`",
            chromium.display()
        );
    }
    Ok(())
}
