//! AMD: `amd-smi metric --json` per sample and `amd-smi static --json` once
//! (ROCm's CLI). Its JSON changed twice, and both older shapes are read:
//! values are `{"value": N, "unit": "W"}` objects since ROCm 6.1 (plain
//! numbers before), a missing one is the string `"N/A"`, and the GPUs are a
//! top-level list before amd-smi 26 and `{"gpu_data": [...]}` from it.

use serde_json::Value;
use speedmatrix_units::ByteSize;

use super::{GpuInfo, GpuSample, Throttle, tool};
use crate::TelemetryError;

/// The tool's name on PATH.
pub const TOOL: &str = "amd-smi";

/// The per-GPU entries of either top-level shape.
fn gpu_entries(text: &str) -> Result<Vec<Value>, TelemetryError> {
    let bad = |why: String| TelemetryError::Unreadable { what: TOOL, why };
    // Tools print warnings before the JSON on some hosts.
    let start = text
        .find(['[', '{'])
        .ok_or_else(|| bad("no JSON in the output".into()))?;
    let v: Value = serde_json::from_str(&text[start..]).map_err(|e| bad(e.to_string()))?;
    match v {
        Value::Array(list) => Ok(list),
        Value::Object(mut m) => match m.remove("gpu_data") {
            Some(Value::Array(list)) => Ok(list),
            _ => Err(bad("neither a list of GPUs nor gpu_data".into())),
        },
        _ => Err(bad("neither a list of GPUs nor gpu_data".into())),
    }
}

/// A number, from `{"value": N, "unit": …}`, a plain number or a numeric string.
fn number(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        Value::Object(o) => number(o.get("value")),
        _ => None,
    }
}

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

/// `"ACTIVE"` (violation status) or `"THROTTLED"` (power throttle status).
fn active(v: Option<&Value>) -> bool {
    v.and_then(Value::as_str)
        .is_some_and(|s| matches!(s.trim(), "ACTIVE" | "THROTTLED"))
}

/// The GPUs of `amd-smi metric --json`.
///
/// # Errors
/// [`TelemetryError::Unreadable`] when the text is not its JSON.
pub fn parse_metric(text: &str) -> Result<Vec<GpuSample>, TelemetryError> {
    Ok(gpu_entries(text)?
        .iter()
        .filter_map(|g| {
            let index = number(g.get("gpu"))? as u32;
            let mem = |k: &str| {
                number(at(g, &["mem_usage", k])).map(|mb| ByteSize::new((mb * 1_048_576.0) as u64))
            };
            let energy_j = number(at(g, &["energy", "total_energy_consumption"]));
            let throttle = g
                .get("throttle")
                .filter(|t| t.is_object())
                .map(|t| Throttle {
                    power_cap: active(t.get("ppt_violation_status")),
                    thermal: ["socket_thermal", "vr_thermal", "hbm_thermal"]
                        .iter()
                        .any(|k| active(t.get(format!("{k}_violation_status").as_str()))),
                    hw_slowdown: active(t.get("prochot_violation_status")),
                });
            // Before MI300's violation counters, only a power throttle flag.
            let throttle = throttle.or_else(|| {
                at(g, &["power", "throttle_status"])
                    .and_then(Value::as_str)
                    .filter(|s| *s != "N/A")
                    .map(|_| Throttle {
                        power_cap: active(at(g, &["power", "throttle_status"])),
                        ..Throttle::default()
                    })
            });
            Some(GpuSample {
                index,
                utilization_pct: number(at(g, &["usage", "gfx_activity"])),
                memory_used: mem("used_vram"),
                memory_total: mem("total_vram"),
                power_w: number(at(g, &["power", "socket_power"])),
                power_average_s: None,
                power_limit_w: None,
                energy_mj: energy_j.map(|j| (j * 1000.0) as u64),
                sm_clock_mhz: number(at(g, &["clock", "gfx_0", "clk"])).map(|c| c as u32),
                memory_clock_mhz: number(at(g, &["clock", "mem_0", "clk"])).map(|c| c as u32),
                temperature_c: number(at(g, &["temperature", "hotspot"]))
                    .or_else(|| number(at(g, &["temperature", "edge"]))),
                throttle,
                pcie_tx_bytes_s: number(at(g, &["pcie", "current_bandwidth_sent"]))
                    .map(|mbit| (mbit * 125_000.0) as u64),
                pcie_rx_bytes_s: number(at(g, &["pcie", "current_bandwidth_received"]))
                    .map(|mbit| (mbit * 125_000.0) as u64),
            })
        })
        .collect())
}

/// The GPUs of `amd-smi static --json`.
///
/// # Errors
/// [`TelemetryError::Unreadable`] when the text is not its JSON.
pub fn parse_static(text: &str) -> Result<Vec<GpuInfo>, TelemetryError> {
    Ok(gpu_entries(text)?
        .iter()
        .filter_map(|g| {
            let index = number(g.get("gpu"))? as u32;
            let s = |path: &[&str]| {
                at(g, path)
                    .and_then(Value::as_str)
                    .filter(|s| *s != "N/A")
                    .map(str::to_owned)
            };
            Some(GpuInfo {
                index,
                name: s(&["asic", "market_name"])
                    .or_else(|| s(&["board", "product_name"]))
                    .unwrap_or_else(|| format!("AMD GPU {index}")),
                uuid: s(&["asic", "asic_serial"]),
                memory_total: number(at(g, &["vram", "size"]))
                    .map(|mb| ByteSize::new((mb * 1_048_576.0) as u64)),
                driver_version: s(&["driver", "version"]),
                runtime_version: None,
                power_limit_w: number(at(g, &["limit", "socket_power"])),
                pcie_generation: None,
                pcie_width: number(at(g, &["bus", "max_pcie_width"])).map(|w| w as u32),
            })
        })
        .collect())
}

/// The GPUs `amd-smi static` describes.
///
/// # Errors
/// [`TelemetryError::NoGpuSource`] when the tool is missing; others when it fails.
pub fn info() -> Result<Vec<GpuInfo>, TelemetryError> {
    parse_static(&tool::run(TOOL, &["static", "--json"])?)
}

/// One sample of every GPU (one `amd-smi metric` run).
///
/// # Errors
/// As [`info`].
pub fn sample() -> Result<Vec<GpuSample>, TelemetryError> {
    parse_metric(&tool::run(TOOL, &["metric", "--json"])?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `gpu_data` shape of amd-smi 26 (ROCm 7), keys and units as its
    /// CLI writes them.
    const METRIC_V26: &str = r#"{"gpu_data": [{"gpu": 0,
      "usage": {"gfx_activity": {"value": 42, "unit": "%"}, "umc_activity": {"value": 1, "unit": "%"}},
      "power": {"socket_power": {"value": 140, "unit": "W"}, "gfx_voltage": "N/A", "throttle_status": "UNTHROTTLED", "power_management": "ENABLED"},
      "clock": {"gfx_0": {"clk": {"value": 1320, "unit": "MHz"}}, "mem_0": {"clk": {"value": 900, "unit": "MHz"}}},
      "temperature": {"edge": "N/A", "hotspot": {"value": 37, "unit": "C"}, "mem": {"value": 30, "unit": "C"}},
      "pcie": {"width": 16, "speed": {"value": 32, "unit": "GT/s"}, "bandwidth": "N/A"},
      "energy": {"total_energy_consumption": {"value": 14292727.274, "unit": "J"}},
      "mem_usage": {"total_vram": {"value": 196592, "unit": "MB"}, "used_vram": {"value": 283, "unit": "MB"}},
      "throttle": {"accumulation_counter": 3808991, "ppt_violation_status": "ACTIVE", "socket_thermal_violation_status": "NOT ACTIVE"}}]}"#;

    #[test]
    fn metric_json_of_amd_smi_26_reads_every_field() {
        let g = &parse_metric(METRIC_V26).unwrap()[0];
        assert_eq!(g.index, 0);
        assert_eq!(g.utilization_pct, Some(42.0));
        assert_eq!(g.power_w, Some(140.0));
        assert_eq!(g.energy_mj, Some(14_292_727_274));
        assert_eq!(g.sm_clock_mhz, Some(1320));
        assert_eq!(g.temperature_c, Some(37.0));
        assert_eq!(g.memory_total, Some(ByteSize::new(196_592 * 1_048_576)));
        let t = g.throttle.unwrap();
        assert!(t.power_cap && !t.thermal);
    }

    #[test]
    fn the_older_list_shape_and_plain_numbers_also_read() {
        let old = r#"[{"gpu": 1, "usage": {"gfx_activity": 7}, "power": {"socket_power": 10,
            "throttle_status": "THROTTLED"}, "energy": "N/A"}]"#;
        let g = &parse_metric(old).unwrap()[0];
        assert_eq!(
            (g.index, g.utilization_pct, g.power_w),
            (1, Some(7.0), Some(10.0))
        );
        assert_eq!(g.energy_mj, None);
        assert!(g.throttle.unwrap().power_cap);
        assert!(parse_metric("WARNING: x\n[]").unwrap().is_empty());
        assert!(parse_metric("not json").is_err());
        assert!(parse_metric(r#"{"other": 1}"#).is_err());
    }

    #[test]
    fn static_json_gives_name_memory_and_power_cap() {
        let text = r#"{"gpu_data": [{"gpu": 0, "asic": {"market_name": "AMD Instinct MI300X",
            "asic_serial": "0x1234"}, "vram": {"size": {"value": 196592, "unit": "MB"}},
            "driver": {"name": "amdgpu", "version": "6.10.5"},
            "limit": {"socket_power": {"value": 750, "unit": "W"}}, "bus": {"max_pcie_width": 16}}]}"#;
        let g = &parse_static(text).unwrap()[0];
        assert_eq!(g.name, "AMD Instinct MI300X");
        assert_eq!(g.power_limit_w, Some(750.0));
        assert_eq!(g.driver_version.as_deref(), Some("6.10.5"));
        assert_eq!(g.pcie_width, Some(16));
    }
}
