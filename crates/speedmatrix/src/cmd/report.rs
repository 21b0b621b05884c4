//! `speedmatrix report` (being built; see its issue).

use std::process::ExitCode;

/// Flags of `speedmatrix report`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

/// Runs `speedmatrix report`.
pub(crate) async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`speedmatrix report` is not built yet")
}
