//! `cargo xtask gpu-check`: on a machine with a GPU, records what the real
//! tools print, under a small load, in the fixtures' format
//! (`crates/speedmatrix-telemetry/tests/fixtures/`), then replays every
//! fixture through the parsers. The folder it writes is meant to be
//! committed: it turns fixtures written from documentation into recorded
//! ones. On demand only; CI has no GPU.

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use speedmatrix_telemetry::gpu::smi;

use crate::util::{cargo, project_root, run as sh};

/// Options of `cargo xtask gpu-check`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// How long to sample, seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// A command that loads the GPU while sampling (run with `sh -c`). Default: a
    /// PyTorch matrix-multiply loop when `python3 -c 'import torch'` works, else none
    /// (the capture is then of an idle GPU, and says so).
    #[arg(long, value_name = "COMMAND")]
    load: Option<String>,
    /// Also run `speedmatrix run --url URL` for one short cell with `--telemetry auto`
    /// (NVML where it loads) and keep its telemetry.jsonl with the capture.
    #[arg(long, value_name = "URL")]
    url: Option<String>,
}

/// A loop of bf16 matrix multiplies, until stopped: enough to raise power and clocks.
const TORCH_LOAD: &str = "python3 -c \"
import torch
a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)
while True:
    b = a @ a
    torch.cuda.synchronize()
\"";

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let nvidia = tool_runs("nvidia-smi", &["-L"]);
    let amd = tool_runs("amd-smi", &["version"]);
    let rocm = !amd && tool_runs("rocm-smi", &speedmatrix_telemetry::gpu::rocm::SAMPLE_ARGS);
    if !nvidia && !amd && !rocm {
        bail!(
            "none of nvidia-smi, amd-smi and rocm-smi runs here: gpu-check needs a GPU machine. \
             The fixtures in crates/speedmatrix-telemetry/tests/fixtures stay as written \
             from the documentation."
        );
    }
    let load_cmd = args.load.clone().or_else(|| {
        tool_runs(
            "python3",
            &["-c", "import torch; assert torch.cuda.is_available()"],
        )
        .then(|| TORCH_LOAD.to_owned())
    });
    let fixtures = project_root().join("crates/speedmatrix-telemetry/tests/fixtures");
    let mut load = match &load_cmd {
        // A process group of its own, so that stopping it stops whatever it started.
        Some(cmd) => Some(
            Command::new("sh")
                .args(["-c", cmd])
                .stdout(Stdio::null())
                .process_group(0)
                .spawn()
                .context("starting the load")?,
        ),
        None => {
            eprintln!(
                "gpu-check: no load (no --load and no PyTorch with CUDA): recording an idle GPU"
            );
            None
        }
    };
    // Let the load reach its clocks before sampling.
    std::thread::sleep(Duration::from_secs(2));
    let sampling = Duration::from_secs(args.seconds.max(2));
    let result = (|| -> anyhow::Result<Vec<PathBuf>> {
        let mut written = Vec::new();
        if nvidia {
            written.push(record_nvidia(&fixtures, sampling)?);
        }
        if amd {
            written.push(record_amd(&fixtures)?);
        }
        if rocm {
            written.push(record_rocm(&fixtures)?);
        }
        if let (Some(url), Some(dir)) = (&args.url, written.first()) {
            record_run(url, dir)?;
        }
        Ok(written)
    })();
    if let Some(child) = load.as_mut() {
        let _ = Command::new("kill")
            .args(["--", &format!("-{}", child.id())])
            .status();
        stop(child);
    }
    let written = result?;
    let describe = match &load_cmd {
        Some(cmd) => format!("under load: {}", cmd.lines().next().unwrap_or(cmd)),
        None => "idle (no load)".to_owned(),
    };
    for dir in &written {
        std::fs::write(
            dir.join("RECORDED.txt"),
            format!(
                "Recorded by `cargo xtask gpu-check` on this machine, {describe}, sampled for {} s.\n",
                sampling.as_secs()
            ),
        )?;
        eprintln!("gpu-check: wrote {}", dir.display());
    }
    sh(&mut cargo(&[
        "test",
        "-p",
        "speedmatrix-telemetry",
        "--test",
        "fixtures",
    ]))?;
    eprintln!("gpu-check: every fixture parses; commit the folders above.");
    Ok(())
}

fn tool_runs(tool: &str, args: &[&str]) -> bool {
    Command::new(tool)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn output(tool: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(tool)
        .args(args)
        .output()
        .with_context(|| format!("running {tool}"))?;
    if !out.status.success() {
        bail!(
            "{tool} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A folder name from the first GPU's name and driver: `recorded-nvidia-h100-80gb-hbm3-550.90.07`.
fn slug(name: &str, driver: &str) -> String {
    let clean: String = format!("{name}-{driver}")
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut out = String::from("recorded");
    for part in clean.split('-').filter(|p| !p.is_empty()) {
        out.push('-');
        out.push_str(part);
    }
    out
}

fn record_nvidia(fixtures: &Path, sampling: Duration) -> anyhow::Result<PathBuf> {
    let info_query = format!("--query-gpu={}", smi::INFO_FIELDS);
    let info = output(
        "nvidia-smi",
        &[&info_query, "--format=csv,noheader,nounits"],
    )?;
    let gpus = smi::parse_info(&info);
    let first = gpus.first().context("nvidia-smi listed no GPU")?;
    let dir = fixtures.join("nvidia-smi").join(slug(
        &first.name,
        first.driver_version.as_deref().unwrap_or("driver"),
    ));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("info.csv"), &info)?;
    std::fs::write(dir.join("banner.txt"), output("nvidia-smi", &[])?)?;
    // Which GPUs' power.draw is a 1 s mean (a driver that refuses the field records nothing).
    if let Ok(average) = output(
        "nvidia-smi",
        &[
            &format!("--query-gpu={}", smi::POWER_AVERAGE_FIELDS),
            "--format=csv,noheader,nounits",
        ],
    ) {
        std::fs::write(dir.join("power-average.csv"), average)?;
    }
    let fields = [smi::SAMPLE_FIELDS, smi::SAMPLE_FIELDS_NO_THROTTLE]
        .into_iter()
        .find(|f| {
            tool_runs(
                "nvidia-smi",
                &[&format!("--query-gpu={f}"), "--format=csv,noheader,nounits"],
            )
        })
        .context("nvidia-smi refused both sample queries")?;
    let mut child = Command::new("nvidia-smi")
        .args([
            &format!("--query-gpu={fields}"),
            "--format=csv,noheader,nounits",
            "-lms",
            "250",
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().context("no pipe")?;
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let end = Instant::now() + sampling;
    while Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop(&mut child);
    let lines = reader.join().unwrap_or_default();
    std::fs::write(dir.join("samples.csv"), lines.join("\n") + "\n")?;
    eprintln!("gpu-check: {} nvidia-smi sample lines", lines.len());
    Ok(dir)
}

fn record_amd(fixtures: &Path) -> anyhow::Result<PathBuf> {
    let statics = output("amd-smi", &["static", "--json"])?;
    let gpus = speedmatrix_telemetry::gpu::amd::parse_static(&statics)
        .map_err(|e| anyhow::anyhow!("amd-smi static: {e}"))?;
    let first = gpus.first().context("amd-smi listed no GPU")?;
    let dir = fixtures.join("amd-smi").join(slug(
        &first.name,
        first.driver_version.as_deref().unwrap_or("driver"),
    ));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("static.json"), statics)?;
    std::fs::write(
        dir.join("metric.json"),
        output("amd-smi", &["metric", "--json"])?,
    )?;
    Ok(dir)
}

fn record_rocm(fixtures: &Path) -> anyhow::Result<PathBuf> {
    let text = output("rocm-smi", &speedmatrix_telemetry::gpu::rocm::SAMPLE_ARGS)?;
    let gpus = speedmatrix_telemetry::gpu::rocm::parse_info(&text)
        .map_err(|e| anyhow::anyhow!("rocm-smi: {e}"))?;
    let first = gpus.first().context("rocm-smi listed no card")?;
    let memory = first
        .memory_total
        .map_or("unknown".to_owned(), |m| format!("{}b", m.get()));
    let dir = fixtures.join("rocm-smi").join(slug("amd", &memory));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("sample.json"), text)?;
    Ok(dir)
}

/// One short cell against a real server, with NVML where it loads; keeps
/// the raw samples beside the capture.
fn record_run(url: &str, dir: &Path) -> anyhow::Result<()> {
    let out = project_root().join("target/gpu-check-run");
    let mut run = cargo(&[
        "run",
        "--quiet",
        "-p",
        "speedmatrix",
        "--",
        "run",
        "--quiet",
    ]);
    run.args(["--url", url, "--contexts", "0", "--concurrency", "8"])
        .args(["--prefill-contexts", "none", "--duration", "10s"])
        .args(["--telemetry", "auto", "--out"])
        .arg(&out);
    sh(&mut run)?;
    std::fs::copy(out.join("telemetry.jsonl"), dir.join("telemetry.jsonl"))
        .context("copying telemetry.jsonl")?;
    Ok(())
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}
