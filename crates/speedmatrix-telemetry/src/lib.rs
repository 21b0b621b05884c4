//! What the GPUs and the host did while a benchmark ran.
//!
//! A [`Sampler`] runs in a thread of its own beside a run and records, at a
//! fixed interval, every GPU (through NVIDIA's management library loaded at
//! run time, else `nvidia-smi`'s loop mode, else `amd-smi`, else
//! `rocm-smi`; or any [`GpuReader`] the caller gives) and the host's
//! CPU time per core and memory (`/proc`). Nothing it meets fails a run: a
//! missing driver or tool is recorded as unavailable, with why.
//! [`summarize_gpus`] and [`summarize_host`] then say what happened in any
//! window: mean and highest utilization and power, energy (the driver's
//! counter, else power integrated), peak memory, lowest clock, seconds
//! throttled by reason, CPU use.
//!
//! The tools' outputs are parsed by pure functions ([`gpu::smi`],
//! [`gpu::amd`], [`host`]) written to their documented formats.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use speedmatrix_telemetry::{GpuSample, Timed, summarize_gpus, gpu::smi};
//!
//! // Two lines of `nvidia-smi --query-gpu=… --format=csv,noheader,nounits`, a second apart.
//! let t0 = Instant::now();
//! let lines = ["0, 98, 70213, 81559, 650.00, 700.00, 1980, 2619, 70, 0x0000000000000000",
//!              "0, 99, 70213, 81559, 690.00, 700.00, 1755, 2619, 72, 0x0000000000000004"];
//! let samples: Vec<Timed<GpuSample>> = lines
//!     .iter()
//!     .enumerate()
//!     .map(|(i, l)| Timed { at: t0 + Duration::from_secs(i as u64), value: smi::parse_sample_line(l).unwrap() })
//!     .collect();
//! let w = &summarize_gpus(&samples, t0, t0 + Duration::from_secs(1))[0];
//! assert_eq!(w.energy_j, Some(670.0)); // (650 + 690) / 2 W over 1 s
//! assert_eq!(w.sm_clock_min_mhz, Some(1755));
//! ```

mod error;
mod export;
pub mod gpu;
pub mod host;
mod sampler;
mod summary;

pub use error::TelemetryError;
pub use export::SAMPLES_SCHEMA;
pub use gpu::{GpuInfo, GpuReader, GpuSample, Replay, TOOL_TIMEOUT, Throttle, Timed};
pub use host::HostReading;
pub use sampler::{
    GpuSourceKind, MAX_INTERVAL, MIN_INTERVAL, Recorded, Sampler, SamplerConfig, TelemetryMode,
    probe_gpus,
};
pub use summary::{
    EnergySource, GpuWindow, HostWindow, ThrottleSeconds, integrate, integrate_steps,
    summarize_gpus, summarize_host,
};
