//! `cargo xtask ci`: the checks every submission must pass.

use crate::util::{WORKSPACE_TESTS, cargo, run as sh};

/// Options of `cargo xtask ci`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Skip rustfmt and clippy (tests and docs only).
    #[arg(long)]
    pub(crate) no_lint: bool,
}

/// Runs fmt, clippy (also on the runner without its simulator), the whole test suite and the
/// doc build, stopping at the first failure.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    if !args.no_lint {
        sh(&mut cargo(&["fmt", "--all", "--check"]))?;
        sh(&mut cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ]))?;
        // The runner without its simulator, as an embedder that measures real servers builds it.
        sh(&mut cargo(&[
            "clippy",
            "-p",
            "speedmatrix-runner",
            "--no-default-features",
            "--locked",
            "--",
            "-D",
            "warnings",
        ]))?;
    }
    sh(&mut cargo(WORKSPACE_TESTS))?;
    sh(&mut cargo(&["test", "--workspace", "--doc", "--locked"]))?;
    let mut doc = cargo(&["doc", "--workspace", "--no-deps", "--locked"]);
    doc.env("RUSTDOCFLAGS", "-D warnings");
    sh(&mut doc)
}
