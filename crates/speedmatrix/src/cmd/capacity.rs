//! `speedmatrix capacity` (being built; see its issue).

use std::process::ExitCode;

/// Flags of `speedmatrix capacity`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

/// Runs `speedmatrix capacity`.
pub(crate) async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`speedmatrix capacity` is not built yet")
}
