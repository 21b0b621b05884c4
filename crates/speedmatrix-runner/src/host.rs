//! The client's share of the machine: how many runtime threads it runs,
//! which cores it may use, its open-file limit, and whether it shares cores
//! with a server on the same host (found by `speedmatrix_telemetry::host`).
//!
//! On a GPU box the client runs beside the engine, whose API server is
//! CPU-bound: a client spread over every core lowers the throughput it
//! measures. So against a URL the client runs a few threads sized to the
//! load, on the cores `--client-cores` names when given.

use std::collections::BTreeSet;
use std::fmt::Write as _;

/// Streams one runtime thread serves by default: one thread ingests about
/// 600 k tokens/s on a 2-core laptop core (see `cargo xtask perf`), far
/// beyond what 512 streams of any engine produce.
const STREAMS_PER_THREAD: u32 = 512;
/// Most default threads: more only with `--client-threads`.
const MOST_DEFAULT_THREADS: usize = 4;
/// Open files a run needs besides one socket per stream: scrapes, probes,
/// the journal, the tokenizer, stdio.
const SPARE_FILES: u64 = 64;

/// A set of CPU cores, as `0-3,8` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cores(pub BTreeSet<usize>);

impl std::str::FromStr for Cores {
    type Err = String;

    /// A Linux CPU list: comma-separated cores or inclusive ranges (`0-3,8,10-11`).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut set = BTreeSet::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let core = |t: &str| {
                t.trim()
                    .parse::<usize>()
                    .map_err(|_| format!("`{t}` in `{s}` is not a core number (e.g. 0-3,8)"))
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (core(a)?, core(b)?);
                    if a > b {
                        return Err(format!("range `{part}` in `{s}` runs backwards"));
                    }
                    set.extend(a..=b);
                }
                None => {
                    set.insert(core(part)?);
                }
            }
        }
        if set.is_empty() {
            return Err(format!("`{s}` names no core (e.g. 0-3,8)"));
        }
        if let Some(&big) = set.iter().find(|&&c| c >= rustix::thread::CpuSet::MAX_CPU) {
            return Err(format!(
                "core {big} is past the {} this system can address",
                rustix::thread::CpuSet::MAX_CPU
            ));
        }
        Ok(Cores(set))
    }
}

impl std::fmt::Display for Cores {
    /// The shortest CPU list: runs of three or more as ranges.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        let cores: Vec<usize> = self.0.iter().copied().collect();
        let mut i = 0;
        while i < cores.len() {
            let mut j = i;
            while j + 1 < cores.len() && cores[j + 1] == cores[j] + 1 {
                j += 1;
            }
            if !out.is_empty() {
                out.push(',');
            }
            match j - i {
                0 => write!(out, "{}", cores[i])?,
                1 => write!(out, "{},{}", cores[i], cores[j])?,
                _ => write!(out, "{}-{}", cores[i], cores[j])?,
            }
            i = j + 1;
        }
        f.write_str(&out)
    }
}

/// Pins this process (every thread started after the call) to `cores`.
pub fn pin(cores: &Cores) -> Result<(), String> {
    let mut set = rustix::thread::CpuSet::new();
    for &c in &cores.0 {
        set.set(c);
    }
    rustix::thread::sched_setaffinity(None, &set).map_err(|e| {
        format!("--client-cores {cores}: could not pin the client to those cores: {e}")
    })
}

/// The cores this process may run on, `None` where the system does not say.
pub fn allowed_cores() -> Option<Cores> {
    let set = rustix::thread::sched_getaffinity(None).ok()?;
    let cores: BTreeSet<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&c| set.is_set(c))
        .collect();
    (!cores.is_empty()).then_some(Cores(cores))
}

/// Runtime threads for `streams` concurrent streams on `usable` cores: one
/// per 512 streams, at most half the usable cores (the
/// rest are the engine's), at least one, at most 4.
pub fn default_threads(streams: u32, usable: usize) -> usize {
    let wanted = usize::try_from(streams.div_ceil(STREAMS_PER_THREAD)).unwrap_or(usize::MAX);
    wanted.min(usable / 2).clamp(1, MOST_DEFAULT_THREADS)
}

/// Raises the soft open-file limit to the hard one when `streams` sockets
/// need more, and checks that they fit. Returns the limit now in force.
pub fn open_files_for(streams: u64) -> Result<u64, String> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let (soft, hard) = (
        limit.current.unwrap_or(u64::MAX),
        limit.maximum.unwrap_or(u64::MAX),
    );
    let wanted = open_files_wanted(streams, soft, hard)?;
    if wanted > soft {
        let raised = Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        setrlimit(Resource::Nofile, raised).map_err(|e| {
            format!("could not raise the open-file limit from {soft} to {hard}: {e}; raise it before the run with `ulimit -n {hard}`")
        })?;
    }
    Ok(wanted)
}

/// The soft limit a run of `streams` sockets needs under limits `soft` and
/// `hard`: unchanged when it suffices, else the hard limit, else an error
/// naming `ulimit -n`.
fn open_files_wanted(streams: u64, soft: u64, hard: u64) -> Result<u64, String> {
    let needed = streams.saturating_add(SPARE_FILES);
    if needed <= soft {
        return Ok(soft);
    }
    if needed <= hard {
        return Ok(hard);
    }
    Err(format!(
        "{streams} concurrent streams need about {needed} open files, but this process may open \
         at most {hard} (soft limit {soft}); raise the hard limit before the run (as root: \
         `ulimit -Hn {n} && ulimit -n {n}`, or in /etc/security/limits.conf), or run fewer streams",
        n = needed.next_power_of_two()
    ))
}

/// Whether `url` names this host (a loopback address or `localhost`), and its port.
pub fn loopback_port(url: &str) -> Option<u16> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']')?;
            (host, after.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return None;
    }
    match port {
        Some(p) => p.parse().ok(),
        None if url.starts_with("https") => Some(443),
        None => Some(80),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn cpu_lists_parse_and_print() {
        let c: Cores = "0-3, 8,10-11".parse().unwrap();
        assert_eq!(
            c.0.iter().copied().collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(c.to_string(), "0-3,8,10,11");
        assert!("3-1".parse::<Cores>().is_err());
        assert!("a".parse::<Cores>().is_err());
        assert!("".parse::<Cores>().is_err());
        assert!("99999".parse::<Cores>().is_err());
    }

    proptest! {
        #[test]
        fn a_printed_list_parses_back(cores in prop::collection::btree_set(0usize..64, 1..20)) {
            let c = Cores(cores);
            prop_assert_eq!(c.to_string().parse::<Cores>().unwrap(), c);
        }
    }

    #[test]
    fn threads_follow_the_load_and_leave_the_engine_its_cores() {
        assert_eq!(default_threads(1, 2), 1);
        assert_eq!(default_threads(128, 2), 1);
        assert_eq!(default_threads(4_096, 2), 1);
        assert_eq!(default_threads(128, 32), 1);
        assert_eq!(default_threads(1_024, 32), 2);
        assert_eq!(default_threads(100_000, 64), 4);
        assert_eq!(default_threads(4_096, 1), 1);
    }

    #[test]
    fn loopback_urls_give_their_port() {
        assert_eq!(loopback_port("http://127.0.0.1:8000/v1"), Some(8000));
        assert_eq!(loopback_port("http://localhost"), Some(80));
        assert_eq!(loopback_port("https://[::1]:9443"), Some(9443));
        assert_eq!(loopback_port("http://user:pw@127.0.0.2:81"), Some(81));
        assert_eq!(loopback_port("http://10.0.0.5:8000"), None);
        assert_eq!(loopback_port("http://gpu-box:8000"), None);
    }

    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_one_or_named() {
        assert_eq!(open_files_wanted(128, 1_024, 4_096), Ok(1_024));
        assert_eq!(open_files_wanted(4_096, 1_024, 524_288), Ok(524_288));
        let err = open_files_wanted(4_096, 1_024, 4_096).unwrap_err();
        assert!(err.contains("ulimit -Hn 8192 && ulimit -n 8192"), "{err}");
        // This process can always open a few.
        assert!(open_files_for(1).is_ok());
    }
}
