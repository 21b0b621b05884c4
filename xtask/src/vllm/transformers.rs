//! `cargo xtask transformers-e2e`: speedmatrix against a second, independently written engine,
//! Hugging Face `transformers serve` (continuous batching, CPU), in the vLLM stage's virtual
//! environment (Transformers and its serving dependencies come with vLLM; `accelerate`, which
//! `transformers serve` needs on top, is installed pinned into a folder of its own beside it)
//! with the same tiny model.
//!
//! The server refuses fields it does not know (`ignore_eos`, `min_tokens`: HTTP 422), sends
//! usage once at the end of a stream and answers `/v1/models` with 500 without a Hugging Face
//! cache folder: the run must say so and measure anyway. Checks: every cell measured with no
//! failed request; every prompt token count equal to the target (the server's usage); output
//! tokens per cell from the server's final usage of the finished requests, the rest estimated
//! by re-tokenizing their streamed text, their stated uncertainty ≤ 0.5 %; the engine named
//! plainly as unknown; no cell over capacity (no capacity source); the notes naming each
//! refused field and the failed probe; the page rendered.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use speedmatrix_report::{CellStatus, Report};

use super::{install, model, net::Net, server};
use crate::util::{WORKSPACE_TESTS, cargo, project_root, run as sh};

/// `accelerate`, which `transformers serve` needs to place the model, pinned.
const ACCELERATE: &str = "accelerate==1.16.0";

/// The largest token-count uncertainty a cell may state.
const MAX_UNCERTAINTY_PCT: f64 = 0.5;

/// Options of `cargo xtask transformers-e2e`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Decode context lengths of the matrix.
    #[arg(long, default_value = "0,256")]
    contexts: String,
    /// Concurrencies of the matrix.
    #[arg(long, default_value = "1,4,8")]
    concurrency: String,
    /// Measurement window of each cell, in seconds.
    #[arg(long, default_value_t = 3)]
    duration_s: u64,
    /// max_tokens of every request.
    #[arg(long, default_value_t = 64)]
    max_tokens: u64,
    /// Python (3.11 to 3.14) that creates the virtual environment, when it is not cached yet.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Where the virtual environment and the tiny model are cached
    /// [default: $XDG_CACHE_HOME/speedmatrix or ~/.cache/speedmatrix].
    #[arg(long)]
    cache_dir: Option<PathBuf>,
}

/// Runs the stage; fails when any step or check fails. The server is stopped whatever happens.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let cache = match &args.cache_dir {
        Some(dir) => dir.clone(),
        None => super::default_cache_dir()?,
    };
    let venv = super::stage("install vLLM (for its Transformers)", || {
        install::ensure(&cache, &args.python)
    })?;
    let model_dir = super::stage("make tiny model", || model::ensure(&cache, &venv))?;
    let extras = super::stage("install accelerate", || extras(&cache, &venv))?;
    let out = project_root().join("target").join("transformers-e2e");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut server = Serve::start(&venv, &extras, &model_dir, &out.join("server.log"))?;
    let result = super::stage("wait for /health", || server.wait_ready()).and_then(|_| {
        super::stage("speed matrix", || {
            matrix(&server.url, &model_dir, args, &out)
        })
    });
    server.stop();
    let report = result?;
    eprint!("{}", table(&report));
    let failures = check(&report, &out.join("run"));
    for f in &failures {
        eprintln!("transformers-e2e: check FAIL {f}");
    }
    if !failures.is_empty() {
        bail!(
            "{} check(s) failed (report in {}, server log in {})",
            failures.len(),
            out.join("run").display(),
            out.join("server.log").display()
        );
    }
    eprintln!("transformers-e2e: all done in {:.1?}", started.elapsed());
    Ok(())
}

/// `accelerate` in a folder of its own (no dependencies: the venv has them all), reused when
/// its pinned version is already there; the folder goes on the server's `PYTHONPATH`.
fn extras(cache: &Path, venv: &install::Venv) -> anyhow::Result<PathBuf> {
    let dir = cache.join("transformers-serve-extras");
    let marker = dir.join(".installed");
    if std::fs::read_to_string(&marker).is_ok_and(|s| s == ACCELERATE) {
        return Ok(dir);
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    sh(Command::new(venv.python())
        .args(["-m", "pip", "install", "--quiet", "--no-deps", "--target"])
        .arg(&dir)
        .arg(ACCELERATE))?;
    std::fs::write(&marker, ACCELERATE)?;
    Ok(dir)
}

/// `transformers serve` as a child process, stopped by PID with everything it started.
struct Serve {
    child: Option<Child>,
    url: String,
}

impl Serve {
    fn start(
        venv: &install::Venv,
        extras: &Path,
        model_dir: &Path,
        log: &Path,
    ) -> anyhow::Result<Serve> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let program = venv.dir().join("bin").join("transformers");
        let child = Command::new(&program)
            .arg("serve")
            .arg(model_dir)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--device", "cpu", "--continuous-batching"])
            .env("PYTHONPATH", extras)
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1")
            .env("DO_NOT_TRACK", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("could not start {}", program.display()))?;
        eprintln!(
            "transformers-e2e: `transformers serve` on 127.0.0.1:{port}, log in {}",
            log.display()
        );
        Ok(Serve {
            child: Some(child),
            url: format!("http://127.0.0.1:{port}"),
        })
    }

    /// Polls `/health` until it answers 2xx (5 minutes at most), or the server exits.
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let net = Net::new(&self.url)?;
        let deadline = Instant::now() + Duration::from_secs(300);
        while Instant::now() < deadline {
            if let Some(child) = &mut self.child
                && let Some(status) = child.try_wait()?
            {
                bail!("`transformers serve` exited ({status}) before it was ready");
            }
            if net.get("/health").is_ok_and(|r| r.is_success()) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        bail!("`transformers serve` did not answer /health within 5 minutes")
    }

    /// SIGTERM to the server and its descendants, SIGKILL after 20 s.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let mut pids = server::descendants(child.id());
        pids.push(child.id());
        server::signal("TERM", &pids);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && pids.iter().any(|&p| server::alive(p)) {
            let _ = child.try_wait();
            std::thread::sleep(Duration::from_millis(200));
        }
        let left: Vec<u32> = pids.into_iter().filter(|&p| server::alive(p)).collect();
        server::signal("KILL", &left);
        let _ = child.wait();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `speedmatrix run` against the server (the model named: its `/v1/models` fails) into
/// `out/run`; the report.
fn matrix(url: &str, model_dir: &Path, args: &Args, out: &Path) -> anyhow::Result<Report> {
    let build = [WORKSPACE_TESTS, &["--no-run", "--quiet"]].concat();
    sh(&mut cargo(&build))?;
    let run_dir = out.join("run");
    let mut cmd = Command::new(super::binary()?);
    cmd.args(["run", "--url", url, "--model"])
        .arg(model_dir)
        .arg("--tokenizer")
        .arg(model_dir)
        .args(["--api", "chat", "--contexts", &args.contexts])
        .args(["--concurrency", &args.concurrency])
        .args(["--prefill-contexts", "none", "--telemetry", "off"])
        .arg("--duration")
        .arg(format!("{}s", args.duration_s))
        .arg("--max-tokens")
        .arg(args.max_tokens.to_string())
        .args(["--quiet", "--force", "--out"])
        .arg(&run_dir)
        .env_remove("OPENAI_API_KEY");
    sh(&mut cmd).context("`speedmatrix run` against transformers serve failed")?;
    let text = std::fs::read_to_string(run_dir.join("run.json"))?;
    Report::from_json(&text).context("reading the run's report")
}

/// Each cell: tok/s, requests, output tokens and how they were counted.
fn table(report: &Report) -> String {
    let mut out = String::from(
        "| Cell | Total tok/s | Completed | Output tokens | From final usage | Estimated | Uncertainty |\n|---|---|---|---|---|---|---|\n",
    );
    for cell in &report.decode {
        let Some(m) = &cell.measurements else {
            out.push_str(&format!(
                "| {} × {} | {} | | | | | |\n",
                cell.context,
                cell.concurrency,
                cell.status.label()
            ));
            continue;
        };
        let count = m.token_count.as_ref();
        out.push_str(&format!(
            "| {} × {} | {:.1} | {} | {} | {} requests | {:.2} % | {:.3} % |\n",
            cell.context,
            cell.concurrency,
            m.total_tokens_per_s,
            m.completed_requests,
            m.output_tokens.get(),
            count
                .and_then(|c| c.requests_by_source.get("final_usage").copied())
                .unwrap_or(0),
            count.map_or(0.0, |c| c.estimated_share_pct),
            count.and_then(|c| c.uncertainty_pct).unwrap_or(0.0),
        ));
    }
    out
}

/// What the report must say; one line per failure.
fn check(report: &Report, run_dir: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    let mut fail = |what: String| failures.push(what);
    if report.decode.is_empty() {
        fail("no decode cell".into());
    }
    for cell in &report.decode {
        let name = format!("{} × {}", cell.context, cell.concurrency);
        match (&cell.status, &cell.measurements) {
            (CellStatus::Valid, Some(m)) => {
                if m.prompt_token_mismatches > 0 {
                    fail(format!(
                        "{name}: {} prompts counted otherwise by the server",
                        m.prompt_token_mismatches
                    ));
                }
                let uncertainty = m
                    .token_count
                    .as_ref()
                    .and_then(|c| c.uncertainty_pct)
                    .unwrap_or(0.0);
                if uncertainty > MAX_UNCERTAINTY_PCT {
                    fail(format!(
                        "{name}: output tokens uncertain by {uncertainty:.2} % (> {MAX_UNCERTAINTY_PCT} %)"
                    ));
                }
                if m.output_tokens.get() == 0 {
                    fail(format!("{name}: no output tokens"));
                }
            }
            (status, _) => fail(format!("{name}: {}", status.detail())),
        }
    }
    if report.engine.name != "unknown" {
        fail(format!(
            "the engine is named {:?}; nothing identifies transformers serve",
            report.engine.name
        ));
    }
    let notes = report.notes.join("\n");
    for said in ["`ignore_eos`", "`min_tokens`", "/v1/models"] {
        if !notes.contains(said) {
            fail(format!("the notes do not mention {said}"));
        }
    }
    let html = std::fs::read_to_string(run_dir.join("report.html")).unwrap_or_default();
    if !html.contains("Sustained decode") {
        fail("report.html has no Sustained decode section".into());
    }
    failures
}
