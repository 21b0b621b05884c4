//! `speedmatrix compare` (being built; see its issue).

use std::process::ExitCode;

/// Flags of `speedmatrix compare`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

/// Runs `speedmatrix compare`.
pub(crate) async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`speedmatrix compare` is not built yet")
}
