//! The host: CPU time per core from `/proc/stat`, memory from `/proc/meminfo`, and which
//! local process listens on a TCP port (`/proc/net/tcp{,6}` and the processes' open sockets),
//! all per proc(5). The parsers are pure; [`read_host`] and [`local_listener`] read the files.

use serde::Serialize;
use speedmatrix_units::ByteSize;

use crate::TelemetryError;

/// Cumulative CPU time of one core, in clock ticks (USER_HZ).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CpuTimes {
    /// user + nice + system + irq + softirq + steal.
    pub busy: u64,
    /// busy + idle + iowait.
    pub total: u64,
}

/// One reading of the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostReading {
    /// Per core, in `cpuN` order.
    pub cores: Vec<CpuTimes>,
    /// `MemTotal`.
    pub memory_total: ByteSize,
    /// `MemAvailable`: what new work could use without swapping.
    pub memory_available: ByteSize,
}

impl HostReading {
    /// Memory in use: total less available.
    pub fn memory_used(&self) -> ByteSize {
        ByteSize::new(
            self.memory_total
                .get()
                .saturating_sub(self.memory_available.get()),
        )
    }
}

/// The `cpuN` lines of `/proc/stat` (the aggregate `cpu` line is skipped).
///
/// # Errors
/// [`TelemetryError::Unreadable`] when no per-core line is there.
pub fn parse_proc_stat(text: &str) -> Result<Vec<CpuTimes>, TelemetryError> {
    let cores: Vec<CpuTimes> = text
        .lines()
        .filter(|l| {
            l.strip_prefix("cpu")
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        })
        .filter_map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .map_while(|v| v.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal (guest is inside user).
            let at = |i: usize| f.get(i).copied().unwrap_or(0);
            (f.len() >= 4).then(|| {
                let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
                CpuTimes {
                    busy,
                    total: busy + at(3) + at(4),
                }
            })
        })
        .collect();
    if cores.is_empty() {
        return Err(TelemetryError::Unreadable {
            what: "/proc/stat",
            why: "no cpuN line".into(),
        });
    }
    Ok(cores)
}

/// `MemTotal` and `MemAvailable` of `/proc/meminfo` (in kB there).
///
/// # Errors
/// [`TelemetryError::Unreadable`] when either is missing.
pub fn parse_meminfo(text: &str) -> Result<(ByteSize, ByteSize), TelemetryError> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| ByteSize::new(kb * 1024))
    };
    match (field("MemTotal:"), field("MemAvailable:")) {
        (Some(t), Some(a)) => Ok((t, a)),
        _ => Err(TelemetryError::Unreadable {
            what: "/proc/meminfo",
            why: "no MemTotal or MemAvailable".into(),
        }),
    }
}

/// Reads `/proc/stat` and `/proc/meminfo` now.
///
/// # Errors
/// [`TelemetryError::Unreadable`] when a file is missing (not Linux) or malformed.
pub fn read_host() -> Result<HostReading, TelemetryError> {
    let read = |path: &'static str| {
        std::fs::read_to_string(path).map_err(|e| TelemetryError::Unreadable {
            what: path,
            why: e.to_string(),
        })
    };
    let cores = parse_proc_stat(&read("/proc/stat")?)?;
    let (memory_total, memory_available) = parse_meminfo(&read("/proc/meminfo")?)?;
    Ok(HostReading {
        cores,
        memory_total,
        memory_available,
    })
}

/// Each core's busy fraction (0–1) between two readings; a core whose
/// counters did not move (or went back) reads 0.
pub fn core_utilization(before: &[CpuTimes], after: &[CpuTimes]) -> Vec<f64> {
    before
        .iter()
        .zip(after)
        .map(|(a, b)| {
            let total = b.total.saturating_sub(a.total);
            let busy = b.busy.saturating_sub(a.busy);
            if total == 0 {
                0.0
            } else {
                (busy as f64 / total as f64).min(1.0)
            }
        })
        .collect()
}

/// A process of this host listening on a TCP port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    /// Its process id.
    pub pid: u32,
    /// The cores it may run on, as `/proc/PID/status` lists them (`0-3,8`).
    pub cpus_allowed: String,
}

/// The process (other than this one) listening on TCP `port` of this host, found through
/// `/proc/net/tcp{,6}` and the processes' open sockets. `None` when it cannot be seen
/// (another user's process, no /proc).
pub fn local_listener(port: u16) -> Option<Listener> {
    let inodes: std::collections::BTreeSet<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|table| listening_inodes(&table, port))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let me = std::process::id();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .ok()
                .and_then(|l| socket_inode(&l.to_string_lossy()))
                .is_some_and(|i| inodes.contains(&i))
        });
        if holds {
            let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
            let cpus_allowed = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?
                .trim()
                .to_owned();
            return Some(Listener { pid, cpus_allowed });
        }
    }
    None
}

/// Inodes of the sockets in LISTEN state on `port` in a `/proc/net/tcp` table.
pub fn listening_inodes(table: &str, port: u16) -> Vec<u64> {
    const LISTEN: &str = "0A";
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f.get(1)?.rsplit_once(':')?.1;
            let listening = *f.get(3)? == LISTEN;
            (listening && u16::from_str_radix(local_port, 16).ok()? == port)
                .then(|| f.get(9)?.parse().ok())
                .flatten()
        })
        .collect()
}

/// The inode of a `/proc/PID/fd/N` link to a socket (`socket:[4242]`).
fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const STAT: &str = "cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0\n\
        cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0\n\
        cpu1 1335987 30624 548225 13508563 6253 0 4380 7 24157 0\n\
        intr 1462898 30 0\nctxt 1990473\nbtime 1062191376\n";

    #[test]
    fn proc_stat_gives_each_core_without_the_aggregate() {
        let cores = parse_proc_stat(STAT).unwrap();
        assert_eq!(cores.len(), 2);
        assert_eq!(cores[0].busy, 1393280 + 32966 + 572056 + 17875);
        assert_eq!(cores[0].total, cores[0].busy + 13343292 + 6130);
        assert_eq!(cores[1].busy, 1335987 + 30624 + 548225 + 4380 + 7);
        assert!(parse_proc_stat("intr 1\n").is_err());
    }

    #[test]
    fn meminfo_gives_total_and_available() {
        let text = "MemTotal:       24539128 kB\nMemFree:         1114144 kB\n\
                    MemAvailable:   20121640 kB\nBuffers:          337316 kB\n";
        let (t, a) = parse_meminfo(text).unwrap();
        assert_eq!(t.get(), 24539128 * 1024);
        assert_eq!(a.get(), 20121640 * 1024);
        assert!(parse_meminfo("MemTotal: 1 kB\n").is_err());
    }

    #[test]
    fn this_machine_reads() {
        // Linux is the only platform CI runs on; elsewhere the error says why.
        if let Ok(h) = read_host() {
            assert!(!h.cores.is_empty());
            assert!(h.memory_used() <= h.memory_total);
        }
    }

    proptest! {
        #[test]
        fn utilization_is_a_fraction(
            a in prop::collection::vec((0u64..1_000_000, 0u64..1_000_000), 1..8),
            d in prop::collection::vec((0u64..10_000, 0u64..10_000), 1..8),
        ) {
            let before: Vec<CpuTimes> = a.iter().map(|&(busy, idle)| CpuTimes { busy, total: busy + idle }).collect();
            let after: Vec<CpuTimes> = before.iter().zip(d.iter().cycle()).map(|(c, &(db, di))| CpuTimes {
                busy: c.busy + db,
                total: c.total + db + di,
            }).collect();
            for u in core_utilization(&before, &after) {
                prop_assert!((0.0..=1.0).contains(&u));
            }
        }
    }

    #[test]
    fn listening_sockets_are_found_by_port() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
            0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000 100 0 0 10 0\n   \
            1: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 4243 1 0000 100 0 0 10 0\n";
        assert_eq!(listening_inodes(table, 8080), vec![4242]);
        assert!(listening_inodes(table, 8000).is_empty());
        assert_eq!(socket_inode("socket:[4242]"), Some(4242));
        assert_eq!(socket_inode("/dev/null"), None);
    }
}
