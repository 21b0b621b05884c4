//! `speedmatrix probe` (being built; see its issue).

use std::process::ExitCode;

/// Flags of `speedmatrix probe`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

/// Runs `speedmatrix probe`.
pub(crate) async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`speedmatrix probe` is not built yet")
}
