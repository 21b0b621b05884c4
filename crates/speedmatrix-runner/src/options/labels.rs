//! What a run records about where it ran: the machine (CPU, cores, RAM, OS, GPUs, detected
//! best-effort), how the client runs (threads, cores, a local server's cores), and the labels
//! the options give (launch command, quantization, engine, GPU name).

use speedmatrix_report::{ClientHost, ClientSetup, Gpu, Hardware, LocalServer, Provenance, Tool};
use speedmatrix_telemetry::TelemetryMode;
use speedmatrix_units::ByteSize;

use super::RunOptions;
use crate::host::{Cores, allowed_cores, loopback_port};
use crate::{RunLabels, Target};

/// What the caller knows of its own process that the run records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostFacts {
    /// The client was pinned to cores (`--client-cores`).
    pub client_pinned: bool,
    /// The program that measures (its version, commit and build); `None`: the runner's.
    pub tool: Option<Tool>,
    /// How the run was made (command lines and flags, secrets removed); the host it ran on
    /// is filled in when absent.
    pub provenance: Option<Provenance>,
}

/// The host the client runs on, best effort: what cannot be read is absent.
pub fn client_host() -> ClientHost {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    let os = match read("/proc/sys/kernel/osrelease") {
        Some(release) => format!("{} {release}", std::env::consts::OS),
        None => std::env::consts::OS.to_owned(),
    };
    let cpus = allowed_cores()
        .map(|c| c.0.len())
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .and_then(|n| u32::try_from(n).ok());
    ClientHost {
        hostname: read("/proc/sys/kernel/hostname"),
        os: Some(os),
        arch: Some(std::env::consts::ARCH.to_owned()),
        cpus,
    }
}

/// The labels of a run of `options` against `target`.
pub(super) fn labels(options: &RunOptions, target: &Target, host: &HostFacts) -> RunLabels {
    let mut hardware = detect_hardware(options.telemetry);
    let embedded = target.is_embedded();
    if embedded {
        // The numbers are the profile's, not this machine's GPU's: say so where
        // the page names the hardware.
        hardware.kind = Some("Simulated engine (speedmatrix-sim) on this machine's CPU".into());
        hardware.gpus = vec![Gpu {
            name: format!("{} (simulated)", options.sim_profile),
            memory_bytes: None,
            count: 1,
        }];
    }
    if let Some(gpu) = &options.hardware_gpu {
        hardware.gpus = vec![Gpu {
            name: gpu.clone(),
            memory_bytes: None,
            count: 1,
        }];
    }
    RunLabels {
        hardware,
        model: None,
        launch_command: options.launch_command.clone().or_else(|| {
            embedded.then(|| format!("speedmatrix sim --profile {}", options.sim_profile))
        }),
        quantization: options.quantization.clone(),
        engine: options.engine.map(|e| e.name().to_owned()),
        revision: None,
        tokenizer: options.tokenizer.clone(),
        client: Some(client_setup(options, host)),
        server_key: None,
        tool: host.tool.clone(),
        provenance: host.provenance.clone().map(|mut p| {
            p.host.get_or_insert_with(client_host);
            p
        }),
    }
}

/// How the client runs, for the report: its runtime threads and cores, and
/// the cores of a server listening on this host.
fn client_setup(options: &RunOptions, host: &HostFacts) -> ClientSetup {
    let threads = tokio::runtime::Handle::try_current().map_or(1, |h| h.metrics().num_workers());
    let cores = allowed_cores();
    let local_server = options
        .url
        .as_deref()
        .and_then(loopback_port)
        .and_then(speedmatrix_telemetry::host::local_listener)
        .and_then(|l| Some((l.pid, l.cpus_allowed.parse::<Cores>().ok()?)))
        .map(|(pid, server)| {
            let shared = cores
                .as_ref()
                .map(|c| c.0.intersection(&server.0).copied().collect());
            LocalServer {
                pid,
                cores: server.to_string(),
                shared_cores: shared
                    .filter(|s: &std::collections::BTreeSet<usize>| !s.is_empty())
                    .map(|s| Cores(s).to_string()),
            }
        });
    ClientSetup {
        runtime_threads: u32::try_from(threads).unwrap_or(u32::MAX),
        cores: cores.map(|c| c.to_string()),
        pinned: host.client_pinned,
        local_server,
    }
}

/// What this machine is: CPU, cores, RAM, OS from /proc and /etc, GPUs from
/// the telemetry sources `mode` allows. Missing facts stay `None`.
pub fn detect_hardware(mode: TelemetryMode) -> Hardware {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned());
    let cores = std::thread::available_parallelism()
        .ok()
        .and_then(|n| u32::try_from(n.get()).ok());
    let ram = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kb| ByteSize::new(kb * 1024));
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_owned())
        });
    let gpus = local_gpus(mode);
    Hardware {
        kind: Some(if gpus.is_empty() {
            "CPU only".into()
        } else {
            "Discrete GPU".into()
        }),
        gpus,
        cpu,
        cpu_cores: cores,
        ram_bytes: ram,
        os,
    }
}

/// The GPUs the telemetry sources see (NVML, `nvidia-smi`, `amd-smi`, as
/// `mode` allows), counted by name and memory.
fn local_gpus(mode: TelemetryMode) -> Vec<Gpu> {
    let Ok((_, found)) = speedmatrix_telemetry::probe_gpus(mode) else {
        return Vec::new();
    };
    let mut gpus: Vec<Gpu> = Vec::new();
    for g in found {
        match gpus
            .iter_mut()
            .find(|h| h.name == g.name && h.memory_bytes == g.memory_total)
        {
            Some(h) => h.count += 1,
            None => gpus.push(Gpu {
                name: g.name,
                memory_bytes: g.memory_total,
                count: 1,
            }),
        }
    }
    gpus
}
