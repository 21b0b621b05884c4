//! `speedmatrix sim` (being built; see its issue).

use std::process::ExitCode;

/// Flags of `speedmatrix sim`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

/// Runs `speedmatrix sim`.
pub(crate) async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`speedmatrix sim` is not built yet")
}
