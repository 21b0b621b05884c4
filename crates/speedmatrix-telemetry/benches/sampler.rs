//! What telemetry costs the client: the sampler thread's CPU at the default
//! interval, host only and with an `nvidia-smi` loop (a stand-in script on
//! PATH that prints the documented CSV, since CI has no GPU), as a share of
//! one core; and the time to summarize the largest window (8 GPUs, 35 s at
//! 250 ms).
//!
//! CPU is the sum over this process's threads of `/proc/self/task/*/schedstat`
//! (nanoseconds) over the sampling time, with an idle baseline of the same
//! length measured in the same run and taken off; the tool's own CPU (the
//! stand-in's, not representative of the real one) is the reaped children's. The target is
//! under 1 % of one core at the default interval.
//!
//! `cargo bench -p speedmatrix-telemetry --bench sampler` (or `cargo xtask perf -p speedmatrix-telemetry`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use speedmatrix_telemetry::{
    GpuSample, Sampler, SamplerConfig, TelemetryMode, Timed, summarize_gpus,
};

const SAMPLING: Duration = Duration::from_secs(10);

/// CPU time of every thread of this process so far, nanoseconds (the first
/// field of each `/proc/self/task/*/schedstat`: nanosecond resolution, where
/// `/proc/self/stat`'s ticks are 10 ms).
fn cpu_ns() -> u64 {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// CPU of reaped children (their utime + stime), clock ticks of 10 ms.
fn children_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split_whitespace()
        .skip(13)
        .take(2)
        .map(|x| x.parse::<u64>().unwrap())
        .sum()
}

/// This process's CPU over `SAMPLING` with the sampler `config` running, as
/// a share of one core (percent), and the tool's (children's) share.
fn cpu_share(config: Option<SamplerConfig>) -> (f64, f64) {
    let sampler = config.map(Sampler::start);
    // Let the sources open (a tool's first runs) before measuring the steady state.
    std::thread::sleep(Duration::from_millis(500));
    let (c0, t0) = (cpu_ns(), Instant::now());
    std::thread::sleep(SAMPLING);
    let (c1, wall) = (cpu_ns(), t0.elapsed().as_secs_f64());
    let before_children = children_ticks();
    if let Some(s) = sampler {
        let recorded = s.finish();
        assert!(!recorded.host.is_empty(), "the host was sampled");
    }
    let tool = (children_ticks() - before_children) as f64 / 100.0 / (wall + 0.5) * 100.0;
    ((c1 - c0) as f64 / 1e9 / wall * 100.0, tool)
}

fn fake_nvidia_smi() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("speedmatrix-bench-smi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = r#"#!/bin/sh
case "$1" in
  --query-gpu=index,name,*) echo "0, NVIDIA H100 80GB HBM3, GPU-0, 550.90.07, 81559, 700.00, 5, 16"; exit 0;;
  --query-gpu=*) ;;
  *) echo "| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: 12.4 |"; exit 0;;
esac
line="0, 97, 70213, 81559, 400.00, 700.00, 1755, 2619, 71, 0x0000000000000004"
if [ "$3" = "-lms" ]; then
  while echo "$line"; do sleep 0.25; done
  exit 0
fi
echo "$line"
"#;
    let path = dir.join("nvidia-smi");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The `nvidia-smi` part, in a child process whose PATH finds the stand-in.
fn smi_part(idle: f64) {
    let interval = SamplerConfig::default().interval;
    let (ours, tool) = cpu_share(Some(SamplerConfig {
        mode: TelemetryMode::Smi,
        interval,
        host: true,
    }));
    println!(
        "sampler, host + nvidia-smi loop, every {} ms: {:.4} % of one core in this process \
         (the stand-in tool, not the real one: {tool:.2} %)",
        interval.as_millis(),
        (ours - idle).max(0.0)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--smi-part") {
        return smi_part(args[2].parse().unwrap());
    }
    let interval = SamplerConfig::default().interval;
    let idle = cpu_share(None).0;
    println!(
        "idle baseline: {idle:.4} % of one core over {} s",
        SAMPLING.as_secs()
    );
    let (host, _) = cpu_share(Some(SamplerConfig {
        mode: TelemetryMode::Off,
        interval,
        host: true,
    }));
    println!(
        "sampler, host only, every {} ms: {:.4} % of one core",
        interval.as_millis(),
        (host - idle).max(0.0)
    );
    let tools = fake_nvidia_smi();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--smi-part", &idle.to_string()])
        .env("PATH", format!("{}:/usr/bin:/bin", tools.display()))
        .status()
        .unwrap();
    assert!(status.success());
    let _ = std::fs::remove_dir_all(&tools);

    // The largest window: 8 GPUs, 35 s at 250 ms (141 samples each).
    let t0 = Instant::now();
    let samples: Vec<Timed<GpuSample>> = (0..141u32)
        .flat_map(|k| {
            (0..8u32).map(move |g| Timed {
                at: t0 + Duration::from_millis(250 * u64::from(k)),
                value: GpuSample {
                    index: g,
                    utilization_pct: Some(90.0 + f64::from(k % 10)),
                    power_w: Some(600.0 + f64::from(k % 50)),
                    energy_mj: Some(u64::from(k) * 150_000),
                    sm_clock_mhz: Some(1_980 - k % 200),
                    ..GpuSample::default()
                },
            })
        })
        .collect();
    let runs = 200u32;
    let start = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(summarize_gpus(
            &samples,
            t0 + Duration::from_secs(2),
            t0 + Duration::from_secs(32),
        ));
    }
    println!(
        "summarize 8 GPUs × 141 samples (a 30 s window): {:.1} µs",
        start.elapsed().as_secs_f64() * 1e6 / f64::from(runs)
    );
}
