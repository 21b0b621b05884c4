//! GPU sources read by polling, behind one trait: NVML, `amd-smi`,
//! `rocm-smi`, and a replay of recorded samples (for tests, and for tools
//! that embed the sampler with a source of their own).

use std::time::Duration;

use super::nvml::NvmlSource;
use super::{GpuInfo, GpuSample, amd, rocm};
use crate::{GpuSourceKind, TelemetryError};

/// A GPU source the sampler polls at each tick.
pub trait GpuReader: Send {
    /// Which source this is, for the report.
    fn kind(&self) -> GpuSourceKind;
    /// Each GPU's static facts, read once when sampling starts.
    fn info(&self) -> Vec<GpuInfo>;
    /// One reading of every GPU; a GPU (or a whole reading) that fails is left out.
    fn sample(&mut self) -> Vec<GpuSample>;
    /// The shortest time between two readings (a tool that starts a process
    /// per reading should not be run more often).
    fn min_interval(&self) -> Duration {
        Duration::ZERO
    }
}

impl GpuReader for NvmlSource {
    fn kind(&self) -> GpuSourceKind {
        GpuSourceKind::Nvml
    }
    fn info(&self) -> Vec<GpuInfo> {
        NvmlSource::info(self)
    }
    fn sample(&mut self) -> Vec<GpuSample> {
        NvmlSource::sample(self)
    }
}

/// `amd-smi metric --json`, a process per reading: at most one a second.
#[derive(Debug)]
pub struct AmdSmi {
    info: Vec<GpuInfo>,
}

impl AmdSmi {
    /// Runs `amd-smi static --json` to see that the tool works and what it sees.
    ///
    /// # Errors
    /// As [`amd::info`].
    pub fn open() -> Result<AmdSmi, TelemetryError> {
        Ok(AmdSmi { info: amd::info()? })
    }
}

impl GpuReader for AmdSmi {
    fn kind(&self) -> GpuSourceKind {
        GpuSourceKind::AmdSmi
    }
    fn info(&self) -> Vec<GpuInfo> {
        self.info.clone()
    }
    fn sample(&mut self) -> Vec<GpuSample> {
        amd::sample().unwrap_or_default()
    }
    fn min_interval(&self) -> Duration {
        Duration::from_secs(1)
    }
}

/// `rocm-smi … --json`, a process per reading: at most one a second.
#[derive(Debug)]
pub struct RocmSmi {
    info: Vec<GpuInfo>,
}

impl RocmSmi {
    /// Runs one sample query to see that the tool works and what it sees.
    ///
    /// # Errors
    /// As [`rocm::sample_text`], or [`TelemetryError::Unreadable`].
    pub fn open() -> Result<RocmSmi, TelemetryError> {
        let info = rocm::parse_info(&rocm::sample_text()?)?;
        if info.is_empty() {
            return Err(TelemetryError::NoGpuSource(format!(
                "{}: no card",
                rocm::TOOL
            )));
        }
        Ok(RocmSmi { info })
    }
}

impl GpuReader for RocmSmi {
    fn kind(&self) -> GpuSourceKind {
        GpuSourceKind::RocmSmi
    }
    fn info(&self) -> Vec<GpuInfo> {
        self.info.clone()
    }
    fn sample(&mut self) -> Vec<GpuSample> {
        rocm::sample_text()
            .and_then(|t| rocm::parse_sample(&t))
            .unwrap_or_default()
    }
    fn min_interval(&self) -> Duration {
        Duration::from_secs(1)
    }
}

/// Recorded readings played back in order, the last one held: a source
/// whose answers are known, to test the sampler and the summaries with.
#[derive(Debug, Clone)]
pub struct Replay {
    kind: GpuSourceKind,
    info: Vec<GpuInfo>,
    frames: Vec<Vec<GpuSample>>,
    next: usize,
    min_interval: Duration,
}

impl Replay {
    /// A source that answers as `kind` with `info`, then gives `frames` one
    /// per reading (every GPU's sample of one tick in each).
    pub fn new(kind: GpuSourceKind, info: Vec<GpuInfo>, frames: Vec<Vec<GpuSample>>) -> Replay {
        Replay {
            kind,
            info,
            frames,
            next: 0,
            min_interval: Duration::ZERO,
        }
    }

    /// The same, read no more often than every `d` (as a tool that runs a process per reading).
    pub fn with_min_interval(mut self, d: Duration) -> Replay {
        self.min_interval = d;
        self
    }

    /// How many readings have been taken.
    pub fn taken(&self) -> usize {
        self.next
    }
}

impl GpuReader for Replay {
    fn kind(&self) -> GpuSourceKind {
        self.kind
    }
    fn info(&self) -> Vec<GpuInfo> {
        self.info.clone()
    }
    fn sample(&mut self) -> Vec<GpuSample> {
        let Some(last) = self.frames.len().checked_sub(1) else {
            return Vec::new();
        };
        let frame = self.frames[self.next.min(last)].clone();
        self.next += 1;
        frame
    }
    fn min_interval(&self) -> Duration {
        self.min_interval
    }
}
