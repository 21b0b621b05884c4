//! The flags of `speedmatrix run`: what to measure ([`RunOptions`], defined once in the runner
//! and shared with a study's `[run]` table), plus the command line's own concerns — the output
//! folder, resuming, progress, the client's threads and cores.

use std::path::PathBuf;

use speedmatrix_runner::host::Cores;
use speedmatrix_runner::options::RunOptions;

/// Flags of `speedmatrix run`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) run: RunOptions,

    /// Output directory; default `speedmatrix-runs/<UTC time>`.
    #[arg(long, short, value_name = "DIR", help_heading = "Output")]
    pub(crate) out: Option<PathBuf>,
    /// Write into --out even if it already holds files.
    #[arg(long, help_heading = "Output")]
    pub(crate) force: bool,
    /// Continue the run whose output directory is DIR with the flags it was started with,
    /// skipping finished cells; a flag given with it replaces its own (one that changes a
    /// measurement must agree with the journal).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["out", "force"], help_heading = "Output")]
    pub(crate) resume: Option<PathBuf>,
    /// Print the plan (cells, capacity source, estimated duration) and exit.
    #[arg(long, help_heading = "Output")]
    pub(crate) dry_run: bool,
    /// No progress display.
    #[arg(long, short, help_heading = "Output")]
    pub(crate) quiet: bool,
    /// Also print the result as one JSON line on standard output (the folder, the run.json
    /// path, cells measured and failed, how the run ended, its best cell with its interval),
    /// for scripts; the files written are the same.
    #[arg(long, conflicts_with = "dry_run", help_heading = "Output")]
    pub(crate) json: bool,

    /// Runtime threads of the client. Default against --url: one per 512 streams, at most half
    /// the usable cores, 1 to 4, so the engine keeps the rest; with the built-in simulator, one
    /// per core. The report says per cell how busy they were ("client-bound" past 80 %).
    #[arg(long, value_name = "N", help_heading = "Client", value_parser = client_threads)]
    pub(crate) client_threads: Option<std::num::NonZeroUsize>,
    /// Pin the client to these cores, a CPU list such as 0-3,8 (see `lscpu`, `taskset`), away
    /// from the engine's; the report warns when a server on this host may use the same cores.
    #[arg(long, value_name = "LIST", help_heading = "Client")]
    pub(crate) client_cores: Option<Cores>,

    /// The command line's run flags as given, filled from clap's matches after parsing.
    #[arg(skip)]
    pub(crate) invocation: Option<super::provenance::Invocation>,
}

const AFTER_HELP: &str = "\
Examples:
  speedmatrix run                                   # quick matrix on the built-in simulator
  speedmatrix run --preset seed                     # the seed page's matrix on the simulator
  speedmatrix run --mode burst --requests 1,8,64 --contexts 1k --max-tokens 256
  speedmatrix run --mode rate --request-rate 1,2,4 --duration 60s --slo ttft_p99=2s,itl_p99=100ms
  speedmatrix run --url http://127.0.0.1:8000 --tokenizer Qwen/Qwen3.5-4B --preset seed
  speedmatrix run --resume speedmatrix-runs/2026-11-30T07-00-00Z

Exit codes: 0 every planned step ran (failed cells are marked Error in the report); 1 the run
stopped early (Ctrl-C, server gone) and the partial report was written, or every step failed;
2 bad input (nothing is written).

Requests answered 429 or 503 are retried up to 3 times after the server's Retry-After.";

/// `--client-threads`: a runtime of 1 to 1,024 threads (more than any host's cores).
const CLIENT_THREADS: speedmatrix_runner::limits::Limit<u32> = speedmatrix_runner::limits::Limit {
    flag: "--client-threads",
    min: 1,
    min_excluded: false,
    max: 1_024,
};

fn client_threads(text: &str) -> Result<std::num::NonZeroUsize, String> {
    let n = CLIENT_THREADS.parse(text)?;
    std::num::NonZeroUsize::new(n as usize)
        .ok_or_else(|| "--client-threads must be at least 1".into())
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    /// The flags' defaults and the options' (a study's `[run]` table without a key) agree.
    #[test]
    fn no_flag_means_the_default_options() {
        let cli = Cli::try_parse_from(["run"]).unwrap();
        // The key may come from the environment of whoever runs the tests.
        let defaults = RunOptions {
            api_key: cli.args.run.api_key.clone(),
            ..RunOptions::default()
        };
        assert_eq!(cli.args.run, defaults);
    }

    #[test]
    fn an_unknown_engine_is_refused_naming_the_known_ones() {
        let err = Cli::try_parse_from(["run", "--engine", "sglangx"]).unwrap_err();
        let text = err.to_string();
        for known in ["vllm", "sglang", "llama.cpp", "tgi", "ollama"] {
            assert!(text.contains(known), "{text}");
        }
        let cli = Cli::try_parse_from(["run", "--engine", "llama.cpp"]).unwrap();
        assert_eq!(
            cli.args.run.engine,
            Some(speedmatrix_units::Engine::LlamaCpp)
        );
    }
}
