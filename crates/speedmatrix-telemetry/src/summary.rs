//! What the GPUs and the host did during one window, from the samples
//! around it. Pure: samples in, numbers out.
//!
//! Sampled series are read as continuous: power and utilization are linear
//! between samples and held flat before the first and after the last; an
//! energy counter is interpolated at the window's edges; a throttle reason
//! holds from the sample that saw it to the next sample. Every integral is
//! therefore additive: splitting a window in two splits its energy and its
//! throttled seconds exactly.
//!
//! A power reading that is a trailing mean over `w` seconds
//! ([`GpuSample::power_average_s`]: NVML and `nvidia-smi` on Ampere and
//! newer, `w` = 1 s) describes the half second before it on average, so a
//! window's power is integrated over the window moved `w / 2` later. On a
//! recorded H200 run, power integrated without that shift missed the
//! driver's energy counter by up to 14 % on 10 s windows that began or
//! ended at a load step; with it, by at most 3.7 %
//! (`tests/fixtures/nvml/recorded-nvidia-h200-580.159.04`).

use std::time::Instant;

use serde::{Deserialize, Serialize};
use speedmatrix_units::ByteSize;

use crate::gpu::{GpuSample, Throttle, Timed};
use crate::host::{HostReading, core_utilization};

/// How a window's energy was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EnergySource {
    /// The driver's energy counter, read at the window's edges.
    Counter,
    /// Power samples integrated over the window (trapezoids).
    IntegratedPower,
}

/// Seconds of a window each throttle reason held the clocks down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ThrottleSeconds {
    /// Software power cap.
    pub power_cap_s: f64,
    /// Thermal slowdown.
    pub thermal_s: f64,
    /// Hardware slowdown or power brake.
    pub hw_slowdown_s: f64,
    /// Any of them.
    pub any_s: f64,
}

/// One GPU during one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuWindow {
    /// Which GPU.
    pub index: u32,
    /// Samples inside the window.
    pub samples: u32,
    /// Time-weighted mean utilization, percent.
    pub utilization_mean_pct: Option<f64>,
    /// Highest sampled utilization, percent.
    pub utilization_max_pct: Option<f64>,
    /// Time-weighted mean power, watts.
    pub power_mean_w: Option<f64>,
    /// Highest sampled power, watts.
    pub power_max_w: Option<f64>,
    /// Energy over the window, joules.
    pub energy_j: Option<f64>,
    /// Where the energy figure comes from.
    pub energy_source: Option<EnergySource>,
    /// Most memory in use at a sample.
    pub memory_peak: Option<ByteSize>,
    /// Lowest sampled SM clock, MHz.
    pub sm_clock_min_mhz: Option<u32>,
    /// Seconds throttled per reason; `None` when the source gives no reasons.
    pub throttled: Option<ThrottleSeconds>,
}

/// The host during one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostWindow {
    /// Mean busy share of all cores, percent.
    pub cpu_mean_pct: f64,
    /// Busy share of the busiest core, percent.
    pub cpu_busiest_core_pct: f64,
    /// Most memory in use at a reading.
    pub memory_used_peak: ByteSize,
}

/// Seconds from `origin` (negative before it).
fn secs(at: Instant, origin: Instant) -> f64 {
    if at >= origin {
        (at - origin).as_secs_f64()
    } else {
        -(origin - at).as_secs_f64()
    }
}

/// The value of a piecewise-linear series at `t`, held flat outside it.
fn value_at(points: &[(f64, f64)], t: f64) -> Option<f64> {
    let (first, last) = (points.first()?, points.last()?);
    if t <= first.0 {
        return Some(first.1);
    }
    if t >= last.0 {
        return Some(last.1);
    }
    let i = points.partition_point(|p| p.0 <= t);
    let (a, b) = (points[i - 1], points[i]);
    if b.0 <= a.0 {
        return Some(b.1);
    }
    Some(a.1 + (b.1 - a.1) * (t - a.0) / (b.0 - a.0))
}

/// ∫ of a piecewise-linear series (held flat outside it) over `[a, b]`.
pub fn integrate(points: &[(f64, f64)], a: f64, b: f64) -> Option<f64> {
    if points.is_empty() || b <= a {
        return if points.is_empty() { None } else { Some(0.0) };
    }
    // The window's edges and every sample strictly inside it.
    let mut knots: Vec<(f64, f64)> = Vec::with_capacity(points.len() + 2);
    knots.push((a, value_at(points, a)?));
    knots.extend(points.iter().copied().filter(|p| p.0 > a && p.0 < b));
    knots.push((b, value_at(points, b)?));
    Some(
        knots
            .windows(2)
            .map(|w| (w[1].0 - w[0].0) * (w[0].1 + w[1].1) / 2.0)
            .sum(),
    )
}

/// ∫ of a step series (each value holds until the next point; the first
/// holds before it) over `[a, b]`.
pub fn integrate_steps(points: &[(f64, f64)], a: f64, b: f64) -> f64 {
    if points.is_empty() || b <= a {
        return 0.0;
    }
    let mut total = 0.0;
    for (i, p) in points.iter().enumerate() {
        let from = if i == 0 { f64::NEG_INFINITY } else { p.0 };
        let to = points.get(i + 1).map_or(f64::INFINITY, |n| n.0);
        let (lo, hi) = (from.max(a), to.min(b));
        if hi > lo {
            total += (hi - lo) * p.1;
        }
    }
    total
}

/// A counter made monotone: a decrease is a reset (driver reload, wrap),
/// after which counting goes on from the last value.
fn unwrap_counter(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut offset = 0.0;
    let mut previous: Option<f64> = None;
    points
        .iter()
        .map(|&(t, v)| {
            if let Some(p) = previous
                && v < p
            {
                offset += p;
            }
            previous = Some(v);
            (t, v + offset)
        })
        .collect()
}

/// Each GPU's summary over `[start, end]`, from the samples around it.
pub fn summarize_gpus(
    samples: &[Timed<GpuSample>],
    start: Instant,
    end: Instant,
) -> Vec<GpuWindow> {
    let mut indices: Vec<u32> = samples.iter().map(|s| s.value.index).collect();
    indices.sort_unstable();
    indices.dedup();
    let b = secs(end, start);
    indices
        .into_iter()
        .map(|index| {
            let mine: Vec<&Timed<GpuSample>> =
                samples.iter().filter(|s| s.value.index == index).collect();
            let series = |f: &dyn Fn(&GpuSample) -> Option<f64>| -> Vec<(f64, f64)> {
                mine.iter()
                    .filter_map(|s| Some((secs(s.at, start), f(&s.value)?)))
                    .collect()
            };
            let inside: Vec<&GpuSample> = mine
                .iter()
                .filter(|s| s.at >= start && s.at <= end)
                .map(|s| &s.value)
                .collect();
            let max = |f: &dyn Fn(&GpuSample) -> Option<f64>| {
                inside.iter().filter_map(|s| f(s)).reduce(f64::max)
            };
            let mean = |points: &[(f64, f64)]| integrate(points, 0.0, b).map(|i| i / b.max(1e-9));
            let util = series(&|s| s.utilization_pct);
            let power = series(&|s| s.power_w);
            // A trailing mean over w seconds stands for the time w / 2 before it was read.
            let lag = mine
                .iter()
                .find_map(|s| s.value.power_average_s)
                .unwrap_or(0.0)
                / 2.0;
            let power_energy = integrate(&power, lag, b + lag);
            let energy_counter = unwrap_counter(&series(&|s| s.energy_mj.map(|e| e as f64)));
            let (energy_j, energy_source) = if energy_counter.len() >= 2 {
                let at = |t| value_at(&energy_counter, t);
                match (at(0.0), at(b)) {
                    (Some(x), Some(y)) => (Some((y - x) / 1000.0), Some(EnergySource::Counter)),
                    _ => (None, None),
                }
            } else {
                match power_energy {
                    Some(e) => (Some(e), Some(EnergySource::IntegratedPower)),
                    None => (None, None),
                }
            };
            let throttle: Vec<(f64, Throttle)> = mine
                .iter()
                .filter_map(|s| Some((secs(s.at, start), s.value.throttle?)))
                .collect();
            let throttled = (!throttle.is_empty()).then(|| {
                let seconds = |f: &dyn Fn(Throttle) -> bool| {
                    let steps: Vec<(f64, f64)> = throttle
                        .iter()
                        .map(|&(t, r)| (t, if f(r) { 1.0 } else { 0.0 }))
                        .collect();
                    integrate_steps(&steps, 0.0, b)
                };
                ThrottleSeconds {
                    power_cap_s: seconds(&|r| r.power_cap),
                    thermal_s: seconds(&|r| r.thermal),
                    hw_slowdown_s: seconds(&|r| r.hw_slowdown),
                    any_s: seconds(&|r| r.any()),
                }
            });
            GpuWindow {
                index,
                samples: inside.len() as u32,
                utilization_mean_pct: mean(&util),
                utilization_max_pct: max(&|s| s.utilization_pct),
                power_mean_w: power_energy.map(|e| e / b.max(1e-9)),
                power_max_w: max(&|s| s.power_w),
                energy_j,
                energy_source,
                memory_peak: inside.iter().filter_map(|s| s.memory_used).max(),
                sm_clock_min_mhz: inside.iter().filter_map(|s| s.sm_clock_mhz).min(),
                throttled,
            }
        })
        .collect()
}

/// The host over `[start, end]`: CPU from the readings nearest the edges,
/// memory's peak from the readings inside.
pub fn summarize_host(
    readings: &[Timed<HostReading>],
    start: Instant,
    end: Instant,
) -> Option<HostWindow> {
    let first = readings
        .iter()
        .rev()
        .find(|r| r.at <= start)
        .or_else(|| readings.first())?;
    let last = readings
        .iter()
        .find(|r| r.at >= end)
        .or_else(|| readings.last())?;
    if last.at <= first.at {
        return None;
    }
    let cores = core_utilization(&first.value.cores, &last.value.cores);
    if cores.is_empty() {
        return None;
    }
    let mean = cores.iter().sum::<f64>() / cores.len() as f64;
    let busiest = cores.iter().copied().fold(0.0, f64::max);
    let peak = readings
        .iter()
        .filter(|r| r.at >= first.at && r.at <= last.at)
        .map(|r| r.value.memory_used())
        .max()?;
    Some(HostWindow {
        cpu_mean_pct: mean * 100.0,
        cpu_busiest_core_pct: busiest * 100.0,
        memory_used_peak: peak,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;

    fn gpu(
        index: u32,
        power: f64,
        energy_mj: Option<u64>,
        throttle: Option<Throttle>,
    ) -> GpuSample {
        GpuSample {
            index,
            utilization_pct: Some(power / 10.0),
            power_w: Some(power),
            energy_mj,
            throttle,
            memory_used: Some(ByteSize::new(power as u64)),
            sm_clock_mhz: Some(2000 - power as u32),
            ..GpuSample::default()
        }
    }

    #[test]
    fn integrated_power_and_counter_energy_agree_on_a_steady_draw() {
        let t0 = Instant::now();
        let s = |ms: u64, w: f64, mj: u64| Timed {
            at: t0 + Duration::from_millis(ms),
            value: gpu(0, w, Some(mj), None),
        };
        // 300 W for 2 s: 600 J; the counter says the same.
        let samples = [
            s(0, 300.0, 1_000_000),
            s(1000, 300.0, 1_300_000),
            s(2000, 300.0, 1_600_000),
        ];
        let w = &summarize_gpus(&samples, t0, t0 + Duration::from_secs(2))[0];
        assert_eq!(w.energy_source, Some(EnergySource::Counter));
        assert!((w.energy_j.unwrap() - 600.0).abs() < 1e-6);
        assert!((w.power_mean_w.unwrap() - 300.0).abs() < 1e-9);
        let no_counter: Vec<_> = samples
            .iter()
            .map(|s| Timed {
                at: s.at,
                value: GpuSample {
                    energy_mj: None,
                    ..s.value.clone()
                },
            })
            .collect();
        let w = &summarize_gpus(&no_counter, t0, t0 + Duration::from_secs(2))[0];
        assert_eq!(w.energy_source, Some(EnergySource::IntegratedPower));
        assert!((w.energy_j.unwrap() - 600.0).abs() < 1e-6);
        assert_eq!(w.samples, 3);
        assert_eq!(w.memory_peak, Some(ByteSize::new(300)));
    }

    #[test]
    fn a_counter_reset_is_not_negative_energy() {
        let pts = unwrap_counter(&[(0.0, 500.0), (1.0, 600.0), (2.0, 50.0), (3.0, 150.0)]);
        assert_eq!(pts.last().unwrap().1, 750.0);
    }

    #[test]
    fn throttle_reasons_hold_until_the_next_sample() {
        let t0 = Instant::now();
        let cap = Throttle {
            power_cap: true,
            ..Throttle::default()
        };
        let s = |ms: u64, r: Throttle| Timed {
            at: t0 + Duration::from_millis(ms),
            value: gpu(0, 100.0, None, Some(r)),
        };
        let samples = [
            s(0, Throttle::default()),
            s(500, cap),
            s(1500, Throttle::default()),
        ];
        let w = &summarize_gpus(&samples, t0, t0 + Duration::from_secs(2))[0];
        let t = w.throttled.unwrap();
        assert!((t.power_cap_s - 1.0).abs() < 1e-9);
        assert_eq!(t.thermal_s, 0.0);
        assert!((t.any_s - 1.0).abs() < 1e-9);
    }

    #[test]
    fn gpus_are_summarized_each_on_its_own() {
        let t0 = Instant::now();
        let at = t0 + Duration::from_millis(500);
        let samples = [
            Timed {
                at,
                value: gpu(0, 100.0, None, None),
            },
            Timed {
                at,
                value: gpu(1, 200.0, None, None),
            },
        ];
        let ws = summarize_gpus(&samples, t0, t0 + Duration::from_secs(1));
        assert_eq!(ws.len(), 2);
        assert_eq!(ws[1].power_max_w, Some(200.0));
        assert_eq!(ws[0].sm_clock_min_mhz, Some(1900));
    }

    fn series() -> impl Strategy<Value = Vec<(f64, f64)>> {
        prop::collection::vec((0.0f64..100.0, 0.0f64..1000.0), 1..20).prop_map(|mut v| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            v
        })
    }

    proptest! {
        #[test]
        fn energy_is_additive_over_split_windows(
            points in series(), a in -10.0f64..110.0, len in 0.0f64..50.0, cut in 0.0f64..1.0,
        ) {
            let b = a + len;
            let m = a + len * cut;
            let whole = integrate(&points, a, b).unwrap();
            let parts = integrate(&points, a, m).unwrap() + integrate(&points, m, b).unwrap();
            prop_assert!((whole - parts).abs() <= 1e-6 * whole.abs().max(1.0));
            let s_whole = integrate_steps(&points, a, b);
            let s_parts = integrate_steps(&points, a, m) + integrate_steps(&points, m, b);
            prop_assert!((s_whole - s_parts).abs() <= 1e-6 * s_whole.abs().max(1.0));
        }

        #[test]
        fn a_steady_series_integrates_to_value_times_time(v in 0.0f64..1000.0, a in 0.0f64..10.0, len in 0.0f64..10.0) {
            let points = [(0.0, v), (5.0, v), (20.0, v)];
            let got = integrate(&points, a, a + len).unwrap();
            prop_assert!((got - v * len).abs() <= 1e-9 * (v * len).max(1.0));
        }
    }
}
