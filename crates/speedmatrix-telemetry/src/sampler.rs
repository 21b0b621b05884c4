//! A background thread that samples the GPUs and the host at a fixed
//! interval beside a run, so that any window can be summarized afterwards.
//! It never blocks the caller: samples go into a shared buffer, and a
//! failing source is recorded as unavailable, not raised.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::gpu::nvml::NvmlSource;
use crate::gpu::smi::SmiLoop;
use crate::gpu::{GpuInfo, GpuSample, Timed, amd, smi};
use crate::host::{HostReading, read_host};

/// Which GPU source to use (`--telemetry`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TelemetryMode {
    /// No GPU sampling (the host is still sampled).
    Off,
    /// NVML, else `nvidia-smi`, else `amd-smi`.
    #[default]
    Auto,
    /// NVML only.
    Nvml,
    /// The command-line tools only: `nvidia-smi`, else `amd-smi`.
    Smi,
}

impl std::str::FromStr for TelemetryMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(TelemetryMode::Off),
            "auto" => Ok(TelemetryMode::Auto),
            "nvml" => Ok(TelemetryMode::Nvml),
            "smi" => Ok(TelemetryMode::Smi),
            other => Err(format!("`{other}`: expected off, auto, nvml or smi")),
        }
    }
}

/// What the sampler uses and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerConfig {
    /// GPU source.
    pub mode: TelemetryMode,
    /// Time between samples.
    pub interval: Duration,
    /// Also read `/proc/stat` and `/proc/meminfo`.
    pub host: bool,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            mode: TelemetryMode::Auto,
            interval: Duration::from_millis(250),
            host: true,
        }
    }
}

/// The GPU source in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuSourceKind {
    /// NVIDIA's management library.
    Nvml,
    /// `nvidia-smi` in its loop mode.
    NvidiaSmi,
    /// `amd-smi metric --json`, once per sample.
    AmdSmi,
}

impl GpuSourceKind {
    /// The source's name as reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            GpuSourceKind::Nvml => "NVML",
            GpuSourceKind::NvidiaSmi => "nvidia-smi",
            GpuSourceKind::AmdSmi => "amd-smi",
        }
    }
}

/// Everything sampled so far.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    /// The GPU source, when one opened.
    pub source: Option<GpuSourceKind>,
    /// Why there is no GPU source (each tried source's reason).
    pub unavailable: Option<String>,
    /// Static facts of each GPU.
    pub gpus: Vec<GpuInfo>,
    /// GPU samples, in time order.
    pub gpu_samples: Vec<Timed<GpuSample>>,
    /// Host readings, in time order.
    pub host: Vec<Timed<HostReading>>,
    /// Why the host is not sampled, if it is not.
    pub host_unavailable: Option<String>,
}

impl Recorded {
    /// The samples taken between `start` and `end`, with the last one
    /// before and the first one after (so edges can be interpolated).
    pub fn between(&self, start: Instant, end: Instant) -> Recorded {
        Recorded {
            source: self.source,
            unavailable: self.unavailable.clone(),
            gpus: self.gpus.clone(),
            gpu_samples: around(&self.gpu_samples, start, end),
            host: around(&self.host, start, end),
            host_unavailable: self.host_unavailable.clone(),
        }
    }
}

fn around<T: Clone>(samples: &[Timed<T>], start: Instant, end: Instant) -> Vec<Timed<T>> {
    let first = samples.partition_point(|s| s.at < start);
    let last = samples.partition_point(|s| s.at <= end);
    // Step back over every sample of the last tick before `start` (one per GPU).
    let before = samples[..first]
        .last()
        .map_or(first, |s| samples[..first].partition_point(|x| x.at < s.at));
    let after_tick = samples.get(last).map_or(last, |s| {
        last + samples[last..].partition_point(|x| x.at <= s.at)
    });
    samples[before..after_tick].to_vec()
}

enum Source {
    Nvml(Box<NvmlSource>),
    Smi(SmiLoop),
    Amd,
}

/// The GPUs the first source `mode` allows can see, read once (for a
/// report's hardware section or `speedmatrix probe`); the error lists why
/// each source failed.
///
/// # Errors
/// Every allowed source failed (or `mode` is off): each one's reason, joined.
pub fn probe_gpus(mode: TelemetryMode) -> Result<(GpuSourceKind, Vec<GpuInfo>), String> {
    let mut why = Vec::new();
    if matches!(mode, TelemetryMode::Auto | TelemetryMode::Nvml) {
        match NvmlSource::open() {
            Ok(s) => return Ok((GpuSourceKind::Nvml, s.info())),
            Err(e) => why.push(reason(e)),
        }
    }
    if matches!(mode, TelemetryMode::Auto | TelemetryMode::Smi) {
        match smi::info() {
            Ok(info) => return Ok((GpuSourceKind::NvidiaSmi, info)),
            Err(e) => why.push(reason(e)),
        }
        match amd::info() {
            Ok(info) => return Ok((GpuSourceKind::AmdSmi, info)),
            Err(e) => why.push(reason(e)),
        }
    }
    if mode == TelemetryMode::Off {
        why.push("--telemetry off".into());
    }
    Err(why.join("; "))
}

/// Opens the first source `mode` allows; the error lists why each failed.
fn open(mode: TelemetryMode, interval: Duration) -> Result<(Source, Vec<GpuInfo>), String> {
    let mut why = Vec::new();
    if matches!(mode, TelemetryMode::Auto | TelemetryMode::Nvml) {
        match NvmlSource::open() {
            Ok(s) => {
                let info = s.info();
                return Ok((Source::Nvml(Box::new(s)), info));
            }
            Err(e) => why.push(reason(e)),
        }
    }
    if matches!(mode, TelemetryMode::Auto | TelemetryMode::Smi) {
        match smi::info().and_then(|info| Ok((SmiLoop::start(interval)?, info))) {
            Ok((l, info)) => return Ok((Source::Smi(l), info)),
            Err(e) => why.push(reason(e)),
        }
        match amd::info() {
            Ok(info) => return Ok((Source::Amd, info)),
            Err(e) => why.push(reason(e)),
        }
    }
    if mode == TelemetryMode::Off {
        why.push("--telemetry off".into());
    }
    Err(why.join("; "))
}

/// A source's failure in a few words (without the "no GPU telemetry" prefix).
fn reason(e: crate::TelemetryError) -> String {
    match e {
        crate::TelemetryError::NoGpuSource(why) => why,
        other => other.to_string(),
    }
}

/// The running sampler.
pub struct Sampler {
    shared: Arc<Mutex<Recorded>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Opens the sources and starts sampling in a thread of its own.
    pub fn start(config: SamplerConfig) -> Sampler {
        let shared = Arc::new(Mutex::new(Recorded::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (Arc::clone(&shared), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("telemetry".into())
            .spawn(move || sample_loop(config, &s, &st))
            .ok();
        Sampler {
            shared,
            stop,
            thread,
        }
    }

    /// What has been sampled so far (a copy).
    pub fn snapshot(&self) -> Recorded {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What was sampled between two instants (see [`Recorded::between`]).
    pub fn between(&self, start: Instant, end: Instant) -> Recorded {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .between(start, end)
    }

    /// Stops sampling and returns everything.
    pub fn finish(mut self) -> Recorded {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.shared.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// `amd-smi` starts a Python process per sample: at most one a second.
const AMD_MIN_INTERVAL: Duration = Duration::from_secs(1);

fn sample_loop(config: SamplerConfig, shared: &Mutex<Recorded>, stop: &AtomicBool) {
    let lock = || shared.lock().unwrap_or_else(PoisonError::into_inner);
    let mut source = match open(config.mode, config.interval) {
        Ok((source, gpus)) => {
            let mut r = lock();
            r.source = Some(match &source {
                Source::Nvml(_) => GpuSourceKind::Nvml,
                Source::Smi(_) => GpuSourceKind::NvidiaSmi,
                Source::Amd => GpuSourceKind::AmdSmi,
            });
            r.gpus = gpus;
            Some(source)
        }
        Err(why) => {
            lock().unavailable = Some(why);
            None
        }
    };
    let mut last_amd: Option<Instant> = None;
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let gpus: Vec<Timed<GpuSample>> = match &mut source {
            Some(Source::Nvml(s)) => stamp(now, s.sample()),
            Some(Source::Smi(l)) => l.drain(),
            Some(Source::Amd) if last_amd.is_none_or(|t| now - t >= AMD_MIN_INTERVAL) => {
                last_amd = Some(now);
                amd::sample().map(|s| stamp(now, s)).unwrap_or_default()
            }
            _ => Vec::new(),
        };
        let host = if config.host { Some(read_host()) } else { None };
        {
            let mut r = lock();
            r.gpu_samples.extend(gpus);
            match host {
                Some(Ok(h)) => r.host.push(Timed { at: now, value: h }),
                Some(Err(e)) => r.host_unavailable = Some(e.to_string()),
                None => {}
            }
        }
        next += config.interval;
        let now = Instant::now();
        if next < now {
            // Fell behind (a slow tool): skip the missed ticks, do not burst.
            next = now + config.interval;
        }
        // Sleep in short steps so that `finish` returns promptly.
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now >= next {
                break;
            }
            std::thread::sleep((next - now).min(Duration::from_millis(50)));
        }
    }
}

fn stamp(at: Instant, samples: Vec<GpuSample>) -> Vec<Timed<GpuSample>> {
    samples
        .into_iter()
        .map(|value| Timed { at, value })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_is_sampled_and_finish_stops_promptly() {
        let sampler = Sampler::start(SamplerConfig {
            mode: TelemetryMode::Off,
            interval: Duration::from_millis(20),
            host: true,
        });
        std::thread::sleep(Duration::from_millis(150));
        let started = Instant::now();
        let r = sampler.finish();
        assert!(started.elapsed() < Duration::from_millis(500));
        assert!(r.source.is_none());
        assert!(r.unavailable.unwrap().contains("--telemetry off"));
        if r.host_unavailable.is_none() {
            assert!(r.host.len() >= 3, "{}", r.host.len());
            assert!(r.host.windows(2).all(|w| w[0].at <= w[1].at));
        }
    }

    #[test]
    fn a_window_keeps_its_samples_and_one_tick_each_side() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Two GPUs sampled at the same instants.
        let samples: Vec<Timed<u32>> = [0u64, 0, 100, 100, 200, 200, 300, 300, 400, 400]
            .iter()
            .enumerate()
            .map(|(i, &ms)| Timed {
                at: at(ms),
                value: i as u32,
            })
            .collect();
        let w = around(&samples, at(150), at(250));
        let times: Vec<u64> = w.iter().map(|s| (s.at - t0).as_millis() as u64).collect();
        assert_eq!(times, [100, 100, 200, 200, 300, 300]);
        assert!(around(&samples, at(500), at(600)).len() == 2);
        assert!(around::<u32>(&[], at(0), at(1)).is_empty());
    }

    #[test]
    fn modes_parse() {
        assert_eq!("NVML".parse::<TelemetryMode>(), Ok(TelemetryMode::Nvml));
        assert!("gpu".parse::<TelemetryMode>().is_err());
    }
}
