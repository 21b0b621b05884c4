//! Best-effort detection of the machine the run is on, for the report.

use speedmatrix_report::{Gpu, Hardware};
use speedmatrix_telemetry::TelemetryMode;
use speedmatrix_units::ByteSize;

/// What this machine is: CPU, cores, RAM, OS from /proc and /etc, GPUs from
/// the telemetry sources `mode` allows. Missing facts stay `None`.
pub(crate) fn detect(mode: TelemetryMode) -> Hardware {
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
