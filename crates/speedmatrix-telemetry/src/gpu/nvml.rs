//! NVIDIA's management library, loaded at run time (`nvml-wrapper` opens
//! `libnvidia-ml.so.1` when asked): no driver, no library, and the binary
//! still runs. A call the GPU or driver does not support leaves that field
//! `None`.
//!
//! Recorded on an H200 (driver 580): every field answers; the calls of a
//! reading take about 5 ms, and the two PCIe throughput counters 20.7 and
//! 22.8 ms more (each measures over 20 ms). Read at every 250 ms tick, the
//! sampling thread used 1.8 % of one core, nearly all of it system time,
//! where `nvidia-smi`'s loop (no PCIe fields) cost 0.1 %. The counters are
//! read at most once every [`PCIE_INTERVAL`] instead (the other ticks leave
//! them `None`), which also keeps a reading's fields within a few ms of its
//! time stamp; the CPU saved was not measured on the GPU.

use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::NVML_FI_DEV_POWER_AVERAGE;
use speedmatrix_units::ByteSize;

use super::{GpuInfo, GpuSample, Throttle};
use crate::TelemetryError;

/// The shortest time between two reads of the PCIe throughput counters.
pub const PCIE_INTERVAL: Duration = Duration::from_secs(1);

/// An open NVML handle.
pub struct NvmlSource {
    nvml: Nvml,
    count: u32,
    /// Per GPU: the seconds its power reading averages over (see
    /// [`GpuSample::power_average_s`]).
    power_average_s: Vec<Option<f64>>,
    last_pcie: Option<Instant>,
}

impl NvmlSource {
    /// Loads the library and counts the GPUs.
    ///
    /// # Errors
    /// [`TelemetryError::NoGpuSource`] with NVML's reason (library missing,
    /// driver not loaded, no permission, no GPU).
    pub fn open() -> Result<NvmlSource, TelemetryError> {
        let nvml = Nvml::init().map_err(|e| TelemetryError::NoGpuSource(format!("NVML: {e}")))?;
        let count = nvml
            .device_count()
            .map_err(|e| TelemetryError::NoGpuSource(format!("NVML: {e}")))?;
        if count == 0 {
            return Err(TelemetryError::NoGpuSource("NVML: no GPU".into()));
        }
        // `nvmlDeviceGetPowerUsage` returns a 1 s mean on Ampere (except
        // GA100) and newer, the GPUs that answer the average-power field
        // (`nvidia-smi`'s `power.draw.average`); elsewhere it is instantaneous.
        let power_average_s = (0..count)
            .map(|i| {
                let d = nvml.device_by_index(i).ok()?;
                let values = d
                    .field_values_for(&[FieldId(NVML_FI_DEV_POWER_AVERAGE)])
                    .ok()?;
                values
                    .first()?
                    .as_ref()
                    .ok()?
                    .value
                    .is_ok()
                    .then_some(super::smi::POWER_AVERAGE_S)
            })
            .collect();
        Ok(NvmlSource {
            nvml,
            count,
            power_average_s,
            last_pcie: None,
        })
    }

    /// Static facts of every GPU.
    pub fn info(&self) -> Vec<GpuInfo> {
        let driver = self.nvml.sys_driver_version().ok();
        let cuda = self.nvml.sys_cuda_driver_version().ok().map(|v| {
            format!(
                "{}.{}",
                nvml_wrapper::cuda_driver_version_major(v),
                nvml_wrapper::cuda_driver_version_minor(v)
            )
        });
        (0..self.count)
            .filter_map(|i| {
                let d = self.nvml.device_by_index(i).ok()?;
                Some(GpuInfo {
                    index: i,
                    name: d.name().unwrap_or_else(|_| format!("NVIDIA GPU {i}")),
                    uuid: d.uuid().ok(),
                    memory_total: d.memory_info().ok().map(|m| ByteSize::new(m.total)),
                    driver_version: driver.clone(),
                    runtime_version: cuda.clone(),
                    power_limit_w: d
                        .enforced_power_limit()
                        .ok()
                        .map(|mw| f64::from(mw) / 1000.0),
                    pcie_generation: d.current_pcie_link_gen().ok(),
                    pcie_width: d.current_pcie_link_width().ok(),
                })
            })
            .collect()
    }

    /// One reading of every GPU (PCIe throughput only when [`PCIE_INTERVAL`]
    /// has passed since it was last read).
    pub fn sample(&mut self) -> Vec<GpuSample> {
        let now = Instant::now();
        let pcie = self
            .last_pcie
            .is_none_or(|t| now.duration_since(t) >= PCIE_INTERVAL);
        if pcie {
            self.last_pcie = Some(now);
        }
        (0..self.count)
            .filter_map(|i| {
                let d = self.nvml.device_by_index(i).ok()?;
                let memory = d.memory_info().ok();
                // KB/s over a 20 ms window.
                let throughput = |counter| {
                    pcie.then(|| d.pcie_throughput(counter).ok())
                        .flatten()
                        .map(|kb| u64::from(kb) * 1024)
                };
                Some(GpuSample {
                    index: i,
                    utilization_pct: d.utilization_rates().ok().map(|u| f64::from(u.gpu)),
                    memory_used: memory.as_ref().map(|m| ByteSize::new(m.used)),
                    memory_total: memory.as_ref().map(|m| ByteSize::new(m.total)),
                    power_w: d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                    power_average_s: self.power_average_s.get(i as usize).copied().flatten(),
                    power_limit_w: d
                        .enforced_power_limit()
                        .ok()
                        .map(|mw| f64::from(mw) / 1000.0),
                    energy_mj: d.total_energy_consumption().ok(),
                    sm_clock_mhz: d.clock_info(Clock::SM).ok(),
                    memory_clock_mhz: d.clock_info(Clock::Memory).ok(),
                    temperature_c: d.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
                    throttle: d
                        .current_throttle_reasons()
                        .ok()
                        .map(|r| Throttle::from_nvml_bits(r.bits())),
                    pcie_tx_bytes_s: throughput(PcieUtilCounter::Send),
                    pcie_rx_bytes_s: throughput(PcieUtilCounter::Receive),
                })
            })
            .collect()
    }
}
