//! NVIDIA's management library, loaded at run time (`nvml-wrapper` opens
//! `libnvidia-ml.so.1` when asked): no driver, no library, and the binary
//! still runs. A call the GPU or driver does not support leaves that field
//! `None`.

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter, TemperatureSensor};
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::NVML_FI_DEV_POWER_AVERAGE;
use speedmatrix_units::ByteSize;

use super::{GpuInfo, GpuSample, Throttle};
use crate::TelemetryError;

/// An open NVML handle.
pub struct NvmlSource {
    nvml: Nvml,
    count: u32,
    /// Per GPU: the seconds its power reading averages over (see
    /// [`GpuSample::power_average_s`]).
    power_average_s: Vec<Option<f64>>,
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

    /// One reading of every GPU.
    pub fn sample(&self) -> Vec<GpuSample> {
        (0..self.count)
            .filter_map(|i| {
                let d = self.nvml.device_by_index(i).ok()?;
                let memory = d.memory_info().ok();
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
                    // KB/s over a 20 ms window.
                    pcie_tx_bytes_s: d
                        .pcie_throughput(PcieUtilCounter::Send)
                        .ok()
                        .map(|kb| u64::from(kb) * 1024),
                    pcie_rx_bytes_s: d
                        .pcie_throughput(PcieUtilCounter::Receive)
                        .ok()
                        .map(|kb| u64::from(kb) * 1024),
                })
            })
            .collect()
    }
}
