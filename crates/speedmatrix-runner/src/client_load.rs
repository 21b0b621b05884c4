//! How busy the client itself was during a window: a client near
//! saturation measures its own limit, not the server's.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::outcome::duration_ns;

/// Share of its runtime threads' time past which a cell is "client-bound".
pub const CLIENT_BOUND: f64 = 0.8;

/// The client process's CPU use over a window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClientLoad {
    /// CPU time the whole client process used (every thread, user and system).
    #[serde(with = "duration_ns")]
    pub cpu: Duration,
    /// Wall time it was measured over.
    #[serde(with = "duration_ns")]
    pub wall: Duration,
    /// Threads of the async runtime that ran the streams.
    pub threads: u32,
}

impl ClientLoad {
    /// Cores' worth of CPU used on average: CPU time over wall time.
    pub fn cores(&self) -> f64 {
        if self.wall.is_zero() {
            return 0.0;
        }
        self.cpu.as_secs_f64() / self.wall.as_secs_f64()
    }

    /// [`Self::cores`] as a share of the runtime threads (0–1; more when
    /// threads outside the runtime were busy too).
    pub fn busy_share(&self) -> f64 {
        self.cores() / f64::from(self.threads.max(1))
    }

    /// Whether the client was busy enough that it may have limited what it measured.
    pub fn is_client_bound(&self) -> bool {
        self.busy_share() >= CLIENT_BOUND
    }
}

/// A reading of the process CPU clock, to measure a window with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuReading {
    cpu: Duration,
    at: Instant,
}

impl CpuReading {
    /// Now; `None` where the system has no process CPU clock.
    pub(crate) fn now() -> Option<CpuReading> {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        let cpu = Duration::new(
            u64::try_from(t.tv_sec).ok()?,
            u32::try_from(t.tv_nsec).ok()?,
        );
        Some(CpuReading {
            cpu,
            at: Instant::now(),
        })
    }

    /// The load between this reading and `later`, on `threads` runtime threads.
    pub(crate) fn until(self, later: CpuReading, threads: usize) -> ClientLoad {
        ClientLoad {
            cpu: later.cpu.saturating_sub(self.cpu),
            wall: later.at.saturating_duration_since(self.at),
            threads: u32::try_from(threads).unwrap_or(u32::MAX),
        }
    }
}

/// Worker threads of the runtime this is called on (1 for a current-thread one).
pub(crate) fn runtime_threads() -> usize {
    tokio::runtime::Handle::try_current().map_or(1, |h| h.metrics().num_workers())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_share_decides_client_bound() {
        let load = |cpu_ms, threads| ClientLoad {
            cpu: Duration::from_millis(cpu_ms),
            wall: Duration::from_millis(1_000),
            threads,
        };
        assert!((load(900, 1).cores() - 0.9).abs() < 1e-12);
        assert!(load(900, 1).is_client_bound());
        assert!(!load(900, 2).is_client_bound());
        assert!(load(1_700, 2).is_client_bound());
        let idle = ClientLoad {
            wall: Duration::ZERO,
            ..load(5, 1)
        };
        assert_eq!(idle.cores(), 0.0);
    }

    #[test]
    fn the_process_clock_counts_at_least_this_threads_work() {
        let thread_cpu = || {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
            Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
        };
        let (before, thread_before) = (CpuReading::now().unwrap(), thread_cpu());
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let thread = thread_cpu() - thread_before;
        let load = before.until(CpuReading::now().unwrap(), 1);
        // Other test threads may add to the process's clock, never take away.
        assert!(thread > Duration::ZERO, "{x}");
        assert!(load.cpu >= thread, "{load:?} < {thread:?}");
    }
}
