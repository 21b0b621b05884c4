//! `speedmatrix`: the command-line face of the speedmatrix crates.
//!
//! This binary is glue: it parses flags into the libraries' typed
//! configurations, calls them, prints what they return and maps failures to
//! exit codes (0 done, 1 the work failed or is incomplete, 2 bad input).

mod assets;
mod cmd;
mod out;

use std::process::ExitCode;

use crate::out::tell;

/// The version and the commit it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("SPEEDMATRIX_COMMIT"),
    ")"
);

/// Measure how fast an OpenAI-compatible LLM inference server really is.
///
/// speedmatrix runs a speed test matrix: prefill speed per context length and
/// sustained decode speed for every context × concurrency cell that fits the
/// server's KV cache. With no --url it uses a built-in simulated server, so
/// every command can be tried on a laptop with no GPU and no network.
#[derive(Debug, clap::Parser)]
#[command(name = "speedmatrix", version = VERSION, about, long_about)]
struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,

    #[command(subcommand)]
    command: cmd::Command,
}

fn main() -> ExitCode {
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    let mut cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err
            .format(&mut <Cli as clap::CommandFactory>::command())
            .exit(),
    };
    cmd::note_invocation(&mut cli.command, &matches);
    init_logging(cli.verbose);
    if let cmd::Command::Assets(args) = &cli.command {
        return match assets::write(<Cli as clap::CommandFactory>::command(), args) {
            Ok(code) => code,
            Err(err) => {
                tell!("error: {err:#}");
                ExitCode::FAILURE
            }
        };
    }
    // Threads and cores are fixed before the runtime starts its threads.
    let threads = match cmd::prepare_client(&cli.command) {
        Ok(threads) => threads,
        Err(err) => {
            tell!("error: {err:#}");
            return cmd::exit_code_for(&err);
        }
    };
    let mut builder = match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    if let Some(n) = threads {
        builder.worker_threads(n);
    }
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(err) => {
            tell!("error: could not start the async runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cmd::dispatch(cli.command)) {
        Ok(code) => code,
        Err(err) => {
            tell!("error: {err:#}");
            cmd::exit_code_for(&err)
        }
    }
}

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SPEEDMATRIX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| out::LogWriter)
        .try_init();
}
