//! Every sample of a run as JSON Lines: the file beside a run's `run.json`
//! that keeps what the per-cell summaries were computed from.
//!
//! The first line describes the file (`schema`, the source, the GPUs and
//! the fields with their units); each further line is one GPU sample
//! (`"gpu": index`) or one host reading (`"host": {...}`), with `t`, the
//! seconds since the first sample. Host CPU is each core's busy percent
//! since the previous reading.

use std::time::Instant;

use serde_json::{Value, json};

use crate::host::core_utilization;
use crate::sampler::Recorded;

/// The schema name the first line carries.
pub const SAMPLES_SCHEMA: &str = "speedmatrix-telemetry-samples/1";

impl Recorded {
    /// The samples as JSON Lines (see the module docs).
    pub fn to_jsonl(&self) -> String {
        let origin: Option<Instant> = [
            self.gpu_samples.first().map(|s| s.at),
            self.host.first().map(|s| s.at),
        ]
        .into_iter()
        .flatten()
        .min();
        let t = |at: Instant| origin.map_or(0.0, |o| (at - o).as_secs_f64());
        let mut out = String::new();
        let header = json!({
            "schema": SAMPLES_SCHEMA,
            "gpu_source": self.source.map(|s| s.name()),
            "gpu_unavailable": self.unavailable,
            "gpus": self.gpus,
            "fields": {
                "t": "seconds since the first sample",
                "gpu": "GPU index",
                "util_pct": "GPU busy share of the last sample period, percent",
                "mem_used_bytes": "GPU memory in use, bytes",
                "power_w": "board power, watts",
                "power_avg_s": "seconds power_w is a trailing mean over (absent: instantaneous or not known)",
                "energy_mj": "the driver's energy counter, millijoules",
                "sm_mhz": "SM clock, MHz",
                "mem_mhz": "memory clock, MHz",
                "temp_c": "temperature, degrees Celsius",
                "throttle": "throttle reasons active: power_cap, thermal, hw_slowdown",
                "pcie_tx_bytes_s": "PCIe bytes per second to the host",
                "pcie_rx_bytes_s": "PCIe bytes per second from the host",
                "host.cpu_pct": "each core's busy percent since the previous host reading",
                "host.mem_used_bytes": "host memory in use (total less available), bytes"
            }
        });
        out.push_str(&header.to_string());
        out.push('\n');
        for s in &self.gpu_samples {
            let v = &s.value;
            let throttle: Option<Vec<&str>> = v.throttle.map(|r| {
                [
                    (r.power_cap, "power_cap"),
                    (r.thermal, "thermal"),
                    (r.hw_slowdown, "hw_slowdown"),
                ]
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, name)| *name)
                .collect()
            });
            let line = json!({
                "t": round_ms(t(s.at)),
                "gpu": v.index,
                "util_pct": v.utilization_pct,
                "mem_used_bytes": v.memory_used.map(|b| b.get()),
                "power_w": v.power_w,
                "power_avg_s": v.power_average_s,
                "energy_mj": v.energy_mj,
                "sm_mhz": v.sm_clock_mhz,
                "mem_mhz": v.memory_clock_mhz,
                "temp_c": v.temperature_c,
                "throttle": throttle,
                "pcie_tx_bytes_s": v.pcie_tx_bytes_s,
                "pcie_rx_bytes_s": v.pcie_rx_bytes_s,
            });
            push_compact(&mut out, line);
        }
        for pair in self.host.windows(2) {
            let cpu: Vec<f64> = core_utilization(&pair[0].value.cores, &pair[1].value.cores)
                .into_iter()
                .map(|u| (u * 1000.0).round() / 10.0)
                .collect();
            let line = json!({
                "t": round_ms(t(pair[1].at)),
                "host": {"cpu_pct": cpu, "mem_used_bytes": pair[1].value.memory_used().get()},
            });
            push_compact(&mut out, line);
        }
        out
    }
}

fn round_ms(s: f64) -> f64 {
    (s * 1000.0).round() / 1000.0
}

/// One line without the fields a source left out.
fn push_compact(out: &mut String, mut line: Value) {
    if let Value::Object(m) = &mut line {
        m.retain(|_, v| !v.is_null());
    }
    out.push_str(&line.to_string());
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use speedmatrix_units::ByteSize;

    use super::*;
    use crate::gpu::{GpuSample, Throttle, Timed};
    use crate::host::{CpuTimes, HostReading};

    #[test]
    fn every_sample_is_one_line_after_the_header() {
        let t0 = Instant::now();
        let host = |ms: u64, busy: u64, idle: u64| Timed {
            at: t0 + Duration::from_millis(ms),
            value: HostReading {
                cores: vec![CpuTimes {
                    busy,
                    total: busy + idle,
                }],
                memory_total: ByteSize::new(1000),
                memory_available: ByteSize::new(400),
            },
        };
        let r = Recorded {
            gpu_samples: vec![Timed {
                at: t0 + Duration::from_millis(250),
                value: GpuSample {
                    index: 0,
                    power_w: Some(300.5),
                    throttle: Some(Throttle {
                        power_cap: true,
                        ..Throttle::default()
                    }),
                    ..GpuSample::default()
                },
            }],
            host: vec![host(0, 0, 0), host(500, 100, 100)],
            ..Recorded::default()
        };
        let text = r.to_jsonl();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["schema"], SAMPLES_SCHEMA);
        assert_eq!(lines[1]["t"], 0.25);
        assert_eq!(lines[1]["throttle"][0], "power_cap");
        assert!(
            lines[1].get("util_pct").is_none(),
            "missing fields are left out"
        );
        assert_eq!(lines[2]["host"]["cpu_pct"][0], 50.0);
        assert_eq!(lines[2]["host"]["mem_used_bytes"], 600);
    }
}
