//! Best-effort detection of the machine the run is on, for the report.

use std::process::Command;

use speedmatrix_report::{Gpu, Hardware};
use speedmatrix_units::ByteSize;

/// What this machine is: CPU, cores, RAM, OS from /proc and /etc, GPUs from
/// `nvidia-smi` when it is installed. Missing facts stay `None`.
pub(crate) fn detect() -> Hardware {
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
    let gpus = nvidia_gpus();
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

fn nvidia_gpus() -> Vec<Gpu> {
    let Ok(out) = Command::new("nvidia-smi")
        .args([
            "--query-gpu=name,memory.total",
            "--format=csv,noheader,nounits",
        ])
        .output()
    else {
        return Vec::new();
    };
    if !out.status.success() {
        return Vec::new();
    }
    let mut gpus: Vec<Gpu> = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut parts = line.split(',').map(str::trim);
        let (Some(name), mib) = (parts.next(), parts.next()) else {
            continue;
        };
        let memory = mib
            .and_then(|m| m.parse::<u64>().ok())
            .map(|m| ByteSize::new(m << 20));
        match gpus
            .iter_mut()
            .find(|g| g.name == name && g.memory_bytes == memory)
        {
            Some(g) => g.count += 1,
            None => gpus.push(Gpu {
                name: name.to_owned(),
                memory_bytes: memory,
                count: 1,
            }),
        }
    }
    gpus
}
