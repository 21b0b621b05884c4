//! One module per subcommand; each owns its clap `Args` and an async `run`.

use std::process::ExitCode;

use clap::Subcommand;

mod calibrate;
mod capacity;
mod compare;
mod predict;
mod probe;
mod prompt;
mod report;
mod run;
mod sim;
mod study;

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Measure the speed test matrix (the main job); without --url, on the built-in simulator.
    Run(Box<run::Args>),
    /// Ask a server what it says about itself: models, max_model_len, KV cache, version.
    Probe(probe::Args),
    /// Run the built-in simulated inference server until Ctrl-C.
    Sim(sim::Args),
    /// Print prompts of an exact token count, for this or any other tool.
    Prompt(prompt::Args),
    /// Predict which matrix cells fit a server's KV cache, offline.
    Capacity(capacity::Args),
    /// Render a saved run (run.json) as Markdown, CSV or HTML.
    Report(report::Args),
    /// Compare two saved runs cell by cell (B/A ratios) and flag regressions.
    Compare(compare::Args),
    /// Write shell completions and man pages (for packagers: `cargo xtask dist`).
    #[command(hide = true)]
    Assets(crate::assets::Args),
    /// Run a study: one server configuration per point (a command template and a parameter
    /// grid), the same matrix measured at each, journaled and resumable.
    Study(study::Args),
    /// Write a study's static site: an index of its points, each point's report, per-cell
    /// ratios against a baseline, total vs per-request tok/s, the capacity grids.
    Site(study::SiteArgs),
    /// Predict the whole matrix (prefill, decode tok/s, the capacity grid) from config.json
    /// and a GPU before renting it: a report marked predicted; --simulate runs it too.
    Predict(Box<predict::Args>),
    /// Fit the simulator's step-time model to a measured run (run.json): a profile for
    /// what-if runs beyond what was measured (more streams, longer contexts, a bigger cache).
    Calibrate(calibrate::Args),
}

/// Keeps what `run`'s command line gave (for the run's provenance and `--resume`), which
/// only clap's matches know.
pub(crate) fn note_invocation(command: &mut Command, matches: &clap::ArgMatches) {
    if let (Command::Run(args), Some(("run", m))) = (command, matches.subcommand()) {
        args.invocation = Some(run::provenance::from_matches(m));
    }
}

/// Runs one subcommand.
pub(crate) async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run(args) => run::run(*args).await,
        Command::Probe(args) => probe::run(args).await,
        Command::Sim(args) => sim::run(args).await,
        Command::Prompt(args) => prompt::run(args).await,
        Command::Capacity(args) => capacity::run(args).await,
        Command::Report(args) => report::run(args).await,
        Command::Compare(args) => compare::run(args).await,
        Command::Calibrate(args) => calibrate::run(args).await,
        Command::Predict(args) => predict::run(*args).await,
        Command::Study(args) => study::run(args).await,
        Command::Site(args) => study::site(&args),
        // Written from the whole command line's definition, before the runtime starts.
        Command::Assets(_) => Ok(ExitCode::SUCCESS),
    }
}

/// Sets up the process for `command` before the async runtime starts: pins
/// `run --client-cores`, raises the open-file limit for its streams, and
/// returns the runtime's worker threads (`None`: one per core).
pub(crate) fn prepare_client(command: &Command) -> anyhow::Result<Option<usize>> {
    match command {
        Command::Run(args) => run::prepare_client(args),
        _ => Ok(None),
    }
}

/// Bad input the user can fix: exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub(crate) String);

/// Exit code for a failed command: 2 when the input was bad, 1 otherwise.
pub(crate) fn exit_code_for(err: &anyhow::Error) -> ExitCode {
    if err.chain().any(|e| e.is::<UsageError>()) {
        ExitCode::from(2)
    } else {
        ExitCode::FAILURE
    }
}
