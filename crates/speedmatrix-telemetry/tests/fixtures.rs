//! Every capture under `tests/fixtures/` (written from the tools'
//! documentation, or recorded on a GPU by `cargo xtask gpu-check`) parses
//! completely: each sample line is a sample of a GPU the static query
//! listed, and the figures are in range.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use serde_json::Value;
use speedmatrix_telemetry::gpu::{amd, rocm, smi};
use speedmatrix_telemetry::{EnergySource, GpuSample, Throttle, Timed, summarize_gpus};
use speedmatrix_units::ByteSize;

fn captures(tool: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(tool);
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    found.sort();
    found
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
}

#[test]
fn every_nvidia_smi_capture_parses() {
    let dirs = captures("nvidia-smi");
    assert!(dirs.len() >= 2, "the documented captures are there");
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let gpus = smi::parse_info(&read(&dir, "info.csv"));
        assert!(!gpus.is_empty(), "{name}: no GPU in info.csv");
        assert!(gpus.iter().all(|g| !g.name.is_empty()), "{name}");
        assert!(
            smi::parse_cuda_version(&read(&dir, "banner.txt")).is_some(),
            "{name}: no CUDA version in the banner"
        );
        if dir.join("power-average.csv").exists() {
            let averaged = smi::parse_power_average(&read(&dir, "power-average.csv"));
            assert!(
                averaged.iter().all(|i| gpus.iter().any(|g| g.index == *i)),
                "{name}: power-average.csv names a GPU info.csv does not"
            );
        }
        let text = read(&dir, "samples.csv");
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let s = smi::parse_sample_line(line)
                .unwrap_or_else(|| panic!("{name}: a sample line did not parse: {line}"));
            assert!(gpus.iter().any(|g| g.index == s.index), "{name}: {line}");
            assert!(s.utilization_pct.is_none_or(|u| (0.0..=100.0).contains(&u)));
            assert!(
                s.power_w.is_none_or(|p| (0.0..5_000.0).contains(&p)),
                "{name}: {line}"
            );
            if let (Some(used), Some(total)) = (s.memory_used, s.memory_total) {
                assert!(used <= total, "{name}: {line}");
            }
        }
    }
}

#[test]
fn the_documented_nvidia_captures_read_as_documented() {
    let dir = captures("nvidia-smi")
        .into_iter()
        .find(|d| d.ends_with("h100-driver550-doc"))
        .unwrap();
    let samples: Vec<_> = read(&dir, "samples.csv")
        .lines()
        .filter_map(smi::parse_sample_line)
        .collect();
    assert_eq!(samples.len(), 6);
    // Idle (0x1) is not a throttle; the power cap (0x4) is.
    assert!(!samples[0].throttle.unwrap().any());
    assert!(samples[2].throttle.unwrap().power_cap);
    let t4 = captures("nvidia-smi")
        .into_iter()
        .find(|d| d.ends_with("t4-gaps-doc"))
        .unwrap();
    let gaps: Vec<_> = read(&t4, "samples.csv")
        .lines()
        .filter_map(smi::parse_sample_line)
        .collect();
    assert_eq!((gaps[0].power_w, gaps[0].throttle), (None, None));
    assert_eq!(
        gaps[1].throttle, None,
        "the older query has no throttle field"
    );
    assert_eq!(gaps[1].power_w, Some(69.5));
}

#[test]
fn every_amd_smi_capture_parses() {
    let dirs = captures("amd-smi");
    assert!(dirs.len() >= 2, "the documented captures are there");
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let gpus = amd::parse_static(&read(&dir, "static.json"))
            .unwrap_or_else(|e| panic!("{name}: static.json: {e}"));
        assert!(!gpus.is_empty(), "{name}");
        let samples = amd::parse_metric(&read(&dir, "metric.json"))
            .unwrap_or_else(|e| panic!("{name}: metric.json: {e}"));
        assert!(!samples.is_empty(), "{name}");
        for s in &samples {
            assert!(gpus.iter().any(|g| g.index == s.index), "{name}");
            assert!(
                s.power_w.is_some(),
                "{name}: every amd-smi shape has socket power"
            );
        }
    }
}

#[test]
fn every_rocm_smi_capture_parses() {
    let dirs = captures("rocm-smi");
    assert!(!dirs.is_empty(), "the documented capture is there");
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let text = read(&dir, "sample.json");
        let gpus = rocm::parse_info(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let samples = rocm::parse_sample(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(gpus.len(), samples.len(), "{name}");
        for s in &samples {
            assert!(
                s.power_w.is_some() && s.memory_total.is_some(),
                "{name}: {s:?}"
            );
        }
    }
}

#[test]
fn the_recorded_h200_reads_as_documented() {
    let dir = captures("nvidia-smi")
        .into_iter()
        .find(|d| d.ends_with("recorded-nvidia-h200-580.159.04"))
        .unwrap();
    let gpus = smi::parse_info(&read(&dir, "info.csv"));
    assert_eq!(gpus[0].name, "NVIDIA H200");
    assert_eq!(
        gpus[0].memory_total,
        Some(ByteSize::new(143_771 * 1_048_576))
    );
    assert_eq!(
        (gpus[0].pcie_generation, gpus[0].pcie_width),
        (Some(5), Some(16))
    );
    assert_eq!(
        smi::parse_cuda_version(&read(&dir, "banner.txt")).as_deref(),
        Some("13.0")
    );
    // Idle: 0x1 (GPU idle) is no throttle; under the matrix-product load the power cap (0x4) shows.
    let idle = smi::parse_sample_line(read(&dir, "sample-idle.csv").trim()).unwrap();
    assert_eq!(idle.throttle, Some(Throttle::default()));
    let samples: Vec<GpuSample> = read(&dir, "samples.csv")
        .lines()
        .filter_map(smi::parse_sample_line)
        .collect();
    assert!(
        samples
            .iter()
            .any(|s| s.throttle.is_some_and(|t| t.power_cap))
    );
    assert!(
        samples
            .iter()
            .all(|s| s.power_w.is_some() && s.temperature_c.is_some())
    );
    // Driver 580 prints the renamed clocks_event_reasons header and a number for
    // power.draw.average: its power.draw is a 1 s mean.
    let extra = read(&dir, "extra-idle.csv");
    assert!(
        extra.contains("power.draw.average [W]") && extra.contains("clocks_event_reasons.active")
    );
}

/// The GPU lines of a recorded `telemetry.jsonl`, on a clock of their own.
fn recorded_nvml(dir: &Path) -> Vec<Timed<GpuSample>> {
    let t0 = Instant::now();
    read(dir, "telemetry.jsonl")
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.get("gpu").is_some())
        .map(|v| {
            let f = |k: &str| v.get(k).and_then(Value::as_f64);
            let throttle = v.get("throttle").and_then(Value::as_array).map(|r| {
                let on = |name: &str| r.iter().any(|x| x == name);
                Throttle {
                    power_cap: on("power_cap"),
                    thermal: on("thermal"),
                    hw_slowdown: on("hw_slowdown"),
                }
            });
            Timed {
                at: t0 + Duration::from_secs_f64(f("t").unwrap()),
                value: GpuSample {
                    index: f("gpu").unwrap() as u32,
                    utilization_pct: f("util_pct"),
                    memory_used: f("mem_used_bytes").map(|b| ByteSize::new(b as u64)),
                    power_w: f("power_w"),
                    power_average_s: f("power_avg_s"),
                    energy_mj: f("energy_mj").map(|e| e as u64),
                    sm_clock_mhz: f("sm_mhz").map(|c| c as u32),
                    memory_clock_mhz: f("mem_mhz").map(|c| c as u32),
                    temperature_c: f("temp_c"),
                    throttle,
                    pcie_tx_bytes_s: f("pcie_tx_bytes_s").map(|b| b as u64),
                    pcie_rx_bytes_s: f("pcie_rx_bytes_s").map(|b| b as u64),
                    ..GpuSample::default()
                },
            }
        })
        .collect()
}

/// Over every window of `window` sliding by 50 ms inside the samples: the
/// largest relative gap between the driver's energy counter and power
/// integrated (the counter left out) with the samples' own
/// `power_average_s` as given, and with power read as instantaneous.
fn worst_energy_gaps(samples: &[Timed<GpuSample>], window: Duration) -> (f64, f64, usize) {
    let without = |average: Option<Option<f64>>| -> Vec<Timed<GpuSample>> {
        samples
            .iter()
            .map(|s| Timed {
                at: s.at,
                value: GpuSample {
                    power_average_s: average.unwrap_or(s.value.power_average_s),
                    energy_mj: None,
                    ..s.value.clone()
                },
            })
            .collect()
    };
    let (averaged, instantaneous) = (without(None), without(Some(None)));
    let (first, last) = (samples[0].at, samples[samples.len() - 1].at);
    let (mut worst_averaged, mut worst_instantaneous, mut windows) = (0.0f64, 0.0f64, 0);
    let mut start = first + Duration::from_millis(1500);
    while start + window + Duration::from_secs(1) < last {
        let end = start + window;
        let truth = summarize_gpus(samples, start, end)[0].clone();
        assert_eq!(truth.energy_source, Some(EnergySource::Counter));
        let truth = truth.energy_j.unwrap();
        let a = summarize_gpus(&averaged, start, end)[0].clone();
        assert_eq!(a.energy_source, Some(EnergySource::IntegratedPower));
        // The mean power says the same as the energy.
        let mean = a.power_mean_w.unwrap() * window.as_secs_f64();
        assert!((mean / a.energy_j.unwrap() - 1.0).abs() < 1e-9);
        let i = summarize_gpus(&instantaneous, start, end)[0]
            .energy_j
            .unwrap();
        worst_averaged = worst_averaged.max((a.energy_j.unwrap() / truth - 1.0).abs());
        worst_instantaneous = worst_instantaneous.max((i / truth - 1.0).abs());
        windows += 1;
        start += Duration::from_millis(50);
    }
    (worst_averaged, worst_instantaneous, windows)
}

fn nvml_capture(name: &str) -> PathBuf {
    captures("nvml")
        .into_iter()
        .find(|d| d.ends_with(name))
        .unwrap()
}

/// NVML on a real H200 under a serving load with steps (prefill bursts):
/// every field the report uses was read at every tick, and power integrated
/// as the 1 s trailing mean the driver gives agrees with the driver's
/// energy counter within 5 % on every 10 s window, where reading it as
/// instantaneous misses by more than 10 %.
#[test]
fn recorded_nvml_power_integrates_to_the_energy_counter() {
    let dir = nvml_capture("recorded-nvidia-h200-580.159.04");
    let static_dump: Value = serde_json::from_str(&read(&dir, "nvml-static.json")).unwrap();
    let gpu = &static_dump["gpus"][0];
    assert_eq!(gpu["name"]["value"], "NVIDIA H200");
    // The PCIe counters take 20 ms each; the rest of a reading a few ms.
    assert!(gpu["pcie_tx_kb_s"]["us"].as_f64().unwrap() > 15_000.0);
    let mut samples = recorded_nvml(&dir);
    assert!(samples.len() > 300);
    for s in &samples {
        let v = &s.value;
        assert!(
            v.utilization_pct.is_some()
                && v.memory_used.is_some()
                && v.power_w.is_some()
                && v.energy_mj.is_some()
                && v.sm_clock_mhz.is_some()
                && v.memory_clock_mhz.is_some()
                && v.temperature_c.is_some()
                && v.throttle.is_some()
                && v.pcie_tx_bytes_s.is_some()
                && v.pcie_rx_bytes_s.is_some(),
            "{v:?}"
        );
    }
    // Recorded before the reader said so: this H200 answers the average-power
    // field (see recorded-nvidia-h200-square-wave).
    for s in &mut samples {
        s.value.power_average_s = Some(1.0);
    }
    let (averaged, instantaneous, windows) = worst_energy_gaps(&samples, Duration::from_secs(10));
    assert!(windows > 1_000, "{windows}");
    assert!(averaged < 0.05, "averaged: {averaged}");
    assert!(instantaneous > 0.10, "instantaneous: {instantaneous}");
}

/// The fixed reader on a real H200 under a square wave of bf16 matrix
/// products (0.6 s of every 2 s, the power cap reached in each burst): it
/// marks every reading as a 1 s mean (NVML's average-power field answers,
/// as `nvidia-smi`'s `power.draw.average` does), reads PCIe about once a
/// second, and its power integrates to the counter within 5 % on 8 s windows.
#[test]
fn recorded_nvml_square_wave_marks_averaged_power() {
    let dir = nvml_capture("recorded-nvidia-h200-square-wave");
    assert_eq!(
        smi::parse_power_average(&read(&dir, "power-average.csv")),
        [0]
    );
    let fields: Value = serde_json::from_str(&read(&dir, "field-values.json")).unwrap();
    assert_eq!(fields["POWER_AVERAGE"]["nvmlReturn"], 0);
    let samples = recorded_nvml(&dir);
    assert!(samples.len() > 100);
    assert!(samples.iter().all(|s| s.value.power_average_s == Some(1.0)));
    let pcie = samples
        .iter()
        .filter(|s| s.value.pcie_tx_bytes_s.is_some())
        .count();
    let span = (samples[samples.len() - 1].at - samples[0].at).as_secs_f64();
    assert!(
        (pcie as f64) <= span + 2.0 && (pcie as f64) >= span / 2.0,
        "{pcie} PCIe readings in {span} s"
    );
    assert!(
        samples
            .iter()
            .any(|s| s.value.throttle.is_some_and(|t| t.power_cap))
    );
    let (averaged, instantaneous, windows) = worst_energy_gaps(&samples, Duration::from_secs(8));
    assert!(windows > 200, "{windows}");
    assert!(averaged < 0.05, "averaged: {averaged}");
    assert!(instantaneous > 0.10, "instantaneous: {instantaneous}");
}
