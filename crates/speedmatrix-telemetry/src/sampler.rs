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
use crate::gpu::{AmdSmi, GpuInfo, GpuReader, GpuSample, RocmSmi, Timed, smi};
use crate::host::{HostReading, read_host};

/// Which GPU source to use (`--telemetry`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TelemetryMode {
    /// No GPU sampling (the host is still sampled).
    Off,
    /// NVML, else `nvidia-smi`, else `amd-smi`, else `rocm-smi`.
    #[default]
    Auto,
    /// NVML only.
    Nvml,
    /// The command-line tools only: `nvidia-smi`, else `amd-smi`, else `rocm-smi`.
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

/// The shortest time between samples: GPU counters do not change faster.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// The longest time between samples: a window sampled less often than this
/// has no telemetry worth the name.
pub const MAX_INTERVAL: Duration = Duration::from_secs(3_600);

/// What the sampler uses and how often.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerConfig {
    /// GPU source.
    pub mode: TelemetryMode,
    /// Time between samples, held between [`MIN_INTERVAL`] and [`MAX_INTERVAL`].
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
    /// `rocm-smi --json`, once per sample.
    RocmSmi,
    /// Readings given by the embedding program (e.g. a replay).
    Given,
}

impl GpuSourceKind {
    /// The source's name as reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            GpuSourceKind::Nvml => "NVML",
            GpuSourceKind::NvidiaSmi => "nvidia-smi",
            GpuSourceKind::AmdSmi => "amd-smi",
            GpuSourceKind::RocmSmi => "rocm-smi",
            GpuSourceKind::Given => "given",
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
    /// before and the first one after (so edges can be interpolated); GPU
    /// samples whose power is a trailing mean also up to half its span past
    /// `end` (the summary reads such power that much later).
    pub fn between(&self, start: Instant, end: Instant) -> Recorded {
        let reach = self
            .gpu_samples
            .last()
            .and_then(|s| s.value.power_average_s)
            .filter(|w| w.is_finite() && *w > 0.0)
            .map_or(Duration::ZERO, |w| Duration::from_secs_f64(w / 2.0));
        Recorded {
            source: self.source,
            unavailable: self.unavailable.clone(),
            gpus: self.gpus.clone(),
            gpu_samples: around(&self.gpu_samples, start, end + reach),
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
    Polled(Box<dyn GpuReader>),
    Smi(SmiLoop),
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
        for open in [open_amd, open_rocm] {
            match open() {
                Ok(r) => return Ok((r.kind(), r.info())),
                Err(e) => why.push(e),
            }
        }
    }
    if mode == TelemetryMode::Off {
        why.push("--telemetry off".into());
    }
    Err(why.join("; "))
}

fn open_amd() -> Result<Box<dyn GpuReader>, String> {
    AmdSmi::open()
        .map(|r| Box::new(r) as Box<dyn GpuReader>)
        .map_err(reason)
}

fn open_rocm() -> Result<Box<dyn GpuReader>, String> {
    RocmSmi::open()
        .map(|r| Box::new(r) as Box<dyn GpuReader>)
        .map_err(reason)
}

/// Opens the first source `mode` allows; the error lists why each failed.
fn open(mode: TelemetryMode, interval: Duration) -> Result<(Source, Vec<GpuInfo>), String> {
    let mut why = Vec::new();
    if matches!(mode, TelemetryMode::Auto | TelemetryMode::Nvml) {
        match NvmlSource::open() {
            Ok(s) => {
                let info = s.info();
                return Ok((Source::Polled(Box::new(s)), info));
            }
            Err(e) => why.push(reason(e)),
        }
    }
    if matches!(mode, TelemetryMode::Auto | TelemetryMode::Smi) {
        match smi::info().and_then(|info| Ok((SmiLoop::start(interval)?, info))) {
            Ok((l, info)) => return Ok((Source::Smi(l), info)),
            Err(e) => why.push(reason(e)),
        }
        for open in [open_amd, open_rocm] {
            match open() {
                Ok(r) => {
                    let info = r.info();
                    return Ok((Source::Polled(r), info));
                }
                Err(e) => why.push(e),
            }
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
    /// Opens the sources `config.mode` allows and starts sampling in a
    /// thread of its own.
    pub fn start(config: SamplerConfig) -> Sampler {
        Sampler::spawn(config, None)
    }

    /// Samples `reader` instead of the sources `config.mode` names (a
    /// replay in tests, or a source the embedding program has).
    pub fn with_reader(config: SamplerConfig, reader: Box<dyn GpuReader>) -> Sampler {
        Sampler::spawn(config, Some(reader))
    }

    fn spawn(config: SamplerConfig, reader: Option<Box<dyn GpuReader>>) -> Sampler {
        let shared = Arc::new(Mutex::new(Recorded::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (Arc::clone(&shared), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("telemetry".into())
            .spawn(move || {
                // Opening runs the tools: in the thread, so that starting never blocks.
                let source = match reader {
                    Some(r) => {
                        let info = r.info();
                        Ok((Source::Polled(r), info))
                    }
                    None => open(config.mode, config.interval),
                };
                sample_loop(config, source, &s, &st);
            })
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

fn sample_loop(
    config: SamplerConfig,
    opened: Result<(Source, Vec<GpuInfo>), String>,
    shared: &Mutex<Recorded>,
    stop: &AtomicBool,
) {
    let lock = || shared.lock().unwrap_or_else(PoisonError::into_inner);
    let mut source = match opened {
        Ok((source, gpus)) => {
            let mut r = lock();
            r.source = Some(match &source {
                Source::Polled(reader) => reader.kind(),
                Source::Smi(_) => GpuSourceKind::NvidiaSmi,
            });
            r.gpus = gpus;
            Some(source)
        }
        Err(why) => {
            lock().unavailable = Some(why);
            None
        }
    };
    let mut last_read: Option<Instant> = None;
    let mut next = Instant::now();
    let interval = config.interval.clamp(MIN_INTERVAL, MAX_INTERVAL);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let gpus: Vec<Timed<GpuSample>> = match &mut source {
            Some(Source::Polled(r)) if last_read.is_none_or(|t| now - t >= r.min_interval()) => {
                last_read = Some(now);
                stamp(now, r.sample())
            }
            Some(Source::Smi(l)) => l.drain(),
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
        let now = Instant::now();
        next = match next.checked_add(interval) {
            // Fell behind (a slow tool): skip the missed ticks, do not burst.
            Some(n) if n >= now => n,
            _ => now + interval,
        };
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
    fn a_window_of_averaged_power_reaches_half_its_span_past_the_end() {
        let t0 = Instant::now();
        let gpu_samples: Vec<Timed<GpuSample>> = (0..12u64)
            .map(|k| Timed {
                at: t0 + Duration::from_millis(250 * k),
                value: GpuSample {
                    power_w: Some(100.0),
                    power_average_s: Some(1.0),
                    ..GpuSample::default()
                },
            })
            .collect();
        let r = Recorded {
            gpu_samples,
            ..Recorded::default()
        };
        let w = r.between(
            t0 + Duration::from_millis(500),
            t0 + Duration::from_millis(1000),
        );
        let ms: Vec<u128> = w
            .gpu_samples
            .iter()
            .map(|s| (s.at - t0).as_millis())
            .collect();
        // The tick before, the window, half a second past it, and the tick after that.
        assert_eq!(ms, [250, 500, 750, 1000, 1250, 1500, 1750]);
    }

    /// The documented H100 capture's lines as frames of two GPUs.
    fn h100_frames() -> Vec<Vec<GpuSample>> {
        let lines = [
            "0, 0, 412, 81559, 68.21, 700.00, 345, 2619, 34, 0x0000000000000001",
            "1, 0, 412, 81559, 70.02, 700.00, 345, 2619, 33, 0x0000000000000001",
            "0, 97, 70213, 81559, 687.42, 700.00, 1755, 2619, 71, 0x0000000000000004",
            "1, 96, 70213, 81559, 690.10, 700.00, 1740, 2619, 72, 0x0000000000000004",
        ];
        let samples: Vec<GpuSample> = lines
            .iter()
            .filter_map(|l| smi::parse_sample_line(l))
            .collect();
        samples.chunks(2).map(<[GpuSample]>::to_vec).collect()
    }

    #[test]
    fn a_given_reader_is_polled_every_tick_and_summarized() {
        let info = vec![
            GpuInfo {
                index: 0,
                name: "NVIDIA H100 80GB HBM3".into(),
                ..GpuInfo::default()
            },
            GpuInfo {
                index: 1,
                name: "NVIDIA H100 80GB HBM3".into(),
                ..GpuInfo::default()
            },
        ];
        let replay = crate::Replay::new(GpuSourceKind::Nvml, info, h100_frames());
        let config = SamplerConfig {
            mode: TelemetryMode::Off,
            interval: Duration::from_millis(20),
            host: false,
        };
        let start = Instant::now();
        let sampler = Sampler::with_reader(config, Box::new(replay));
        std::thread::sleep(Duration::from_millis(300));
        let end = Instant::now();
        let r = sampler.finish();
        assert_eq!(r.source, Some(GpuSourceKind::Nvml));
        assert_eq!(r.gpus.len(), 2);
        assert!(r.gpu_samples.len() >= 10, "{}", r.gpu_samples.len());
        let w = crate::summarize_gpus(&r.gpu_samples, start, end);
        assert_eq!(w.len(), 2);
        // Idle first, then the power-capped frame held to the end.
        let power = w[0].power_mean_w.unwrap();
        assert!(power > 68.21 && power <= 687.42, "{power}");
        let t = w[0].throttled.unwrap();
        let window = (end - start).as_secs_f64();
        assert!(t.power_cap_s > 0.0 && t.power_cap_s < window, "{t:?}");
        assert_eq!(w[1].sm_clock_min_mhz, Some(345));
    }

    #[test]
    fn a_slow_source_is_read_no_more_often_than_it_allows() {
        let replay = crate::Replay::new(GpuSourceKind::AmdSmi, Vec::new(), h100_frames())
            .with_min_interval(Duration::from_millis(200));
        let config = SamplerConfig {
            mode: TelemetryMode::Off,
            interval: Duration::from_millis(10),
            host: false,
        };
        let sampler = Sampler::with_reader(config, Box::new(replay));
        std::thread::sleep(Duration::from_millis(450));
        let r = sampler.finish();
        let ticks = r.gpu_samples.len() / 2;
        assert!(
            (2..=3).contains(&ticks),
            "read {ticks} times in 450 ms at most every 200 ms"
        );
    }

    #[test]
    fn modes_parse() {
        assert_eq!("NVML".parse::<TelemetryMode>(), Ok(TelemetryMode::Nvml));
        assert!("gpu".parse::<TelemetryMode>().is_err());
    }
}
