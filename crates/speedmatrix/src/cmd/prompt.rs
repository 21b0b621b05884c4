//! `speedmatrix prompt` (being built; see its issue).

use std::process::ExitCode;

/// Flags of `speedmatrix prompt`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

/// Runs `speedmatrix prompt`.
pub(crate) async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`speedmatrix prompt` is not built yet")
}
