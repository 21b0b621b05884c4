//! GPUs: what each one is ([`GpuInfo`], read once) and what it is doing
//! ([`GpuSample`], read at every tick), from NVML, `nvidia-smi`, `amd-smi`
//! or `rocm-smi`.

use serde::{Deserialize, Serialize};
use speedmatrix_units::ByteSize;

pub mod amd;
pub mod nvml;
mod reader;
pub mod rocm;
pub mod smi;
mod tool;

pub use tool::TOOL_TIMEOUT;

pub use reader::{AmdSmi, GpuReader, Replay, RocmSmi};

/// Static facts about one GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// Index as the tool numbers it.
    pub index: u32,
    /// Name as the tool prints it (`NVIDIA H100 80GB HBM3`).
    pub name: String,
    /// UUID, when the tool gives one.
    pub uuid: Option<String>,
    /// Total memory.
    pub memory_total: Option<ByteSize>,
    /// Driver version.
    pub driver_version: Option<String>,
    /// CUDA (or ROCm) version the driver supports.
    pub runtime_version: Option<String>,
    /// Enforced power limit, watts.
    pub power_limit_w: Option<f64>,
    /// Current PCIe link generation.
    pub pcie_generation: Option<u32>,
    /// Current PCIe link width (lanes).
    pub pcie_width: Option<u32>,
}

/// Why the clocks are held down, as the driver reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Throttle {
    /// Software power cap (`SW_POWER_CAP`; AMD: package power tracking).
    pub power_cap: bool,
    /// Thermal slowdown, software or hardware.
    pub thermal: bool,
    /// Hardware slowdown or power brake.
    pub hw_slowdown: bool,
}

impl Throttle {
    /// From NVML's clocks-event (throttle) reason bits: 0x4 software power
    /// cap, 0x8 hardware slowdown, 0x20/0x40 software/hardware thermal,
    /// 0x80 hardware power brake (`nvmlClocksEventReasons`).
    pub fn from_nvml_bits(bits: u64) -> Throttle {
        Throttle {
            power_cap: bits & 0x4 != 0,
            thermal: bits & (0x20 | 0x40) != 0,
            hw_slowdown: bits & (0x8 | 0x80) != 0,
        }
    }

    /// Whether any reason holds the clocks down.
    pub fn any(self) -> bool {
        self.power_cap || self.thermal || self.hw_slowdown
    }
}

/// One reading of one GPU; a figure the source does not give is `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// Which GPU.
    pub index: u32,
    /// Busy share of the last sample period, percent.
    pub utilization_pct: Option<f64>,
    /// Memory in use.
    pub memory_used: Option<ByteSize>,
    /// Memory in all.
    pub memory_total: Option<ByteSize>,
    /// Board power, watts.
    pub power_w: Option<f64>,
    /// Seconds over which `power_w` is a mean, ending at the reading: NVML
    /// and `nvidia-smi`'s `power.draw` give a 1 s trailing mean on Ampere
    /// (except GA100) and newer, seen on an H200 (the power read equals the
    /// energy counter's mean over the second before it). `None`: an
    /// instantaneous reading, or not known.
    #[serde(default)]
    pub power_average_s: Option<f64>,
    /// Enforced power limit, watts.
    pub power_limit_w: Option<f64>,
    /// The driver's energy counter, millijoules since it started counting.
    pub energy_mj: Option<u64>,
    /// SM (graphics) clock, MHz.
    pub sm_clock_mhz: Option<u32>,
    /// Memory clock, MHz.
    pub memory_clock_mhz: Option<u32>,
    /// Temperature, °C.
    pub temperature_c: Option<f64>,
    /// Throttle reasons; `None` when the source does not say.
    pub throttle: Option<Throttle>,
    /// PCIe bytes sent to the host, per second.
    pub pcie_tx_bytes_s: Option<u64>,
    /// PCIe bytes received from the host, per second.
    pub pcie_rx_bytes_s: Option<u64>,
}

/// A value and when it was read, on the clock the sampler and the runner share.
#[derive(Debug, Clone, PartialEq)]
pub struct Timed<T> {
    /// When.
    pub at: std::time::Instant,
    /// What.
    pub value: T,
}

/// A missing or unsupported field in a tool's text output: `[N/A]`,
/// `[Not Supported]`, `N/A` and any other bracketed word.
pub(crate) fn missing(field: &str) -> bool {
    let f = field.trim();
    f.is_empty() || f == "N/A" || (f.starts_with('[') && f.ends_with(']'))
}
