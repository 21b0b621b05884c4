//! `nvidia-smi`: the fallback when NVML cannot be loaded. One long-running
//! `nvidia-smi --query-gpu=… --format=csv,noheader,nounits -lms N` prints a
//! line per GPU per interval (cheaper than a process per sample); the
//! parsers are pure and take the tool's documented CSV: fields separated by
//! `", "`, missing ones as `[N/A]` or `[Not Supported]`, memory in MiB,
//! power in W, clocks in MHz, the throttle bitmask in hex.

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use speedmatrix_units::ByteSize;

use super::{GpuInfo, GpuSample, Throttle, Timed, missing, tool};
use crate::TelemetryError;

/// The tool's name on PATH.
pub const TOOL: &str = "nvidia-smi";

/// What each sample line holds, in order.
pub const SAMPLE_FIELDS: &str = "index,utilization.gpu,memory.used,memory.total,power.draw,\
    enforced.power.limit,clocks.sm,clocks.mem,temperature.gpu,clocks_throttle_reasons.active";

/// The same without the throttle mask, for drivers that refuse it (one
/// unknown field fails the whole query).
pub const SAMPLE_FIELDS_NO_THROTTLE: &str = "index,utilization.gpu,memory.used,memory.total,\
    power.draw,enforced.power.limit,clocks.sm,clocks.mem,temperature.gpu";

/// The query that tells which GPUs' `power.draw` is a 1 s mean: NVIDIA
/// documents `power.draw.average` for "Ampere (except GA100) or newer
/// devices", the same ones whose `power.draw` "returns average power draw
/// over 1 sec"; elsewhere it is `[N/A]`, or the driver refuses the field.
pub const POWER_AVERAGE_FIELDS: &str = "index,power.draw.average";

/// How long a power reading of those GPUs averages over, seconds.
pub const POWER_AVERAGE_S: f64 = 1.0;

/// What the one static query holds, in order.
pub const INFO_FIELDS: &str = "index,name,uuid,driver_version,memory.total,enforced.power.limit,\
    pcie.link.gen.current,pcie.link.width.current";

fn fields(line: &str) -> Vec<&str> {
    line.split(',').map(str::trim).collect()
}

fn num<T: std::str::FromStr>(field: Option<&&str>) -> Option<T> {
    field.filter(|f| !missing(f)).and_then(|f| f.parse().ok())
}

fn mib(field: Option<&&str>) -> Option<ByteSize> {
    num::<f64>(field).map(|m| ByteSize::new((m * 1_048_576.0) as u64))
}

/// One line of [`SAMPLE_FIELDS`] (or [`SAMPLE_FIELDS_NO_THROTTLE`]) output;
/// `None` for a line that is not one (a header, an error message).
pub fn parse_sample_line(line: &str) -> Option<GpuSample> {
    let f = fields(line);
    if f.len() < 9 {
        return None;
    }
    let index = num::<u32>(f.first())?;
    let throttle = f.get(9).filter(|t| !missing(t)).and_then(|t| {
        let hex = t.trim_start_matches("0x").trim_start_matches("0X");
        u64::from_str_radix(hex, 16)
            .ok()
            .map(Throttle::from_nvml_bits)
    });
    Some(GpuSample {
        index,
        utilization_pct: num(f.get(1)),
        memory_used: mib(f.get(2)),
        memory_total: mib(f.get(3)),
        power_w: num(f.get(4)),
        power_average_s: None,
        power_limit_w: num(f.get(5)),
        energy_mj: None,
        sm_clock_mhz: num(f.get(6)),
        memory_clock_mhz: num(f.get(7)),
        temperature_c: num(f.get(8)),
        throttle,
        pcie_tx_bytes_s: None,
        pcie_rx_bytes_s: None,
    })
}

/// The lines of [`INFO_FIELDS`] output.
pub fn parse_info(text: &str) -> Vec<GpuInfo> {
    text.lines()
        .filter_map(|line| {
            let f = fields(line);
            let index = num::<u32>(f.first())?;
            let name = f.get(1).filter(|n| !missing(n))?.to_string();
            Some(GpuInfo {
                index,
                name,
                uuid: f.get(2).filter(|u| !missing(u)).map(|u| u.to_string()),
                driver_version: f.get(3).filter(|v| !missing(v)).map(|v| v.to_string()),
                memory_total: mib(f.get(4)),
                power_limit_w: num(f.get(5)),
                pcie_generation: num(f.get(6)),
                pcie_width: num(f.get(7)),
                runtime_version: None,
            })
        })
        .collect()
}

/// The GPUs whose `power.draw` is a 1 s mean, from [`POWER_AVERAGE_FIELDS`]
/// output: those that give a number for `power.draw.average`.
pub fn parse_power_average(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|line| {
            let f = fields(line);
            let index = num::<u32>(f.first())?;
            num::<f64>(f.get(1)).map(|_| index)
        })
        .collect()
}

/// The CUDA version from plain `nvidia-smi`'s banner (`CUDA Version: 12.2`);
/// `--query-gpu` has no field for it.
pub fn parse_cuda_version(banner: &str) -> Option<String> {
    let at = banner.find("CUDA Version:")?;
    banner[at + "CUDA Version:".len()..]
        .split_whitespace()
        .next()
        .filter(|v| v.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(str::to_owned)
}

/// The GPUs `nvidia-smi` sees, with the CUDA version of its banner.
///
/// # Errors
/// [`TelemetryError::NoGpuSource`] when the tool is missing,
/// [`TelemetryError::ToolFailed`] when it fails (no driver).
pub fn info() -> Result<Vec<GpuInfo>, TelemetryError> {
    let query = format!("--query-gpu={INFO_FIELDS}");
    let mut gpus = parse_info(&tool::run(
        TOOL,
        &[query.as_str(), "--format=csv,noheader,nounits"],
    )?);
    let cuda = tool::run(TOOL, &[])
        .ok()
        .as_deref()
        .and_then(parse_cuda_version);
    for g in &mut gpus {
        g.runtime_version = cuda.clone();
    }
    Ok(gpus)
}

/// A running `nvidia-smi … -lms N` and the lines it has printed, parsed and
/// stamped when read.
pub struct SmiLoop {
    child: Option<Child>,
    lines: mpsc::Receiver<Timed<GpuSample>>,
}

impl SmiLoop {
    /// Starts the loop at `interval` (at least 100 ms, the tool's floor in
    /// practice), with the throttle mask if this driver accepts it.
    ///
    /// # Errors
    /// As [`info`].
    pub fn start(interval: Duration) -> Result<SmiLoop, TelemetryError> {
        // One unknown field fails the whole query: try it once first.
        let fields = if tool::run(
            TOOL,
            &[
                &format!("--query-gpu={SAMPLE_FIELDS}"),
                "--format=csv,noheader,nounits",
            ],
        )
        .is_ok()
        {
            SAMPLE_FIELDS
        } else {
            SAMPLE_FIELDS_NO_THROTTLE
        };
        // Which GPUs' power.draw is a 1 s mean (an older driver refuses the field: none).
        let averaged = tool::run(
            TOOL,
            &[
                &format!("--query-gpu={POWER_AVERAGE_FIELDS}"),
                "--format=csv,noheader,nounits",
            ],
        )
        .map(|t| parse_power_average(&t))
        .unwrap_or_default();
        let ms = interval.as_millis().max(100).to_string();
        let mut cmd = Command::new(TOOL);
        cmd.args([
            &format!("--query-gpu={fields}"),
            "--format=csv,noheader,nounits",
            "-lms",
            &ms,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd
            .spawn()
            .map_err(|e| TelemetryError::NoGpuSource(format!("{TOOL}: {e}")))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| TelemetryError::ToolFailed {
                tool: TOOL,
                why: "no output pipe".into(),
            })?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("nvidia-smi-reader".into())
            .spawn(move || {
                for line in std::io::BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Some(mut value) = parse_sample_line(&line) {
                        if averaged.contains(&value.index) {
                            value.power_average_s = Some(POWER_AVERAGE_S);
                        }
                        let stamped = Timed {
                            at: Instant::now(),
                            value,
                        };
                        if tx.send(stamped).is_err() {
                            break;
                        }
                    }
                }
            })
            .map_err(|e| TelemetryError::ToolFailed {
                tool: TOOL,
                why: e.to_string(),
            })?;
        Ok(SmiLoop {
            child: Some(child),
            lines: rx,
        })
    }

    /// The samples printed since the last call.
    pub fn drain(&mut self) -> Vec<Timed<GpuSample>> {
        self.lines.try_iter().collect()
    }
}

impl Drop for SmiLoop {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            super::tool::stop(child);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_line_reads_every_field_and_the_throttle_mask() {
        let s = parse_sample_line(
            "0, 97, 70213, 81559, 687.42, 700.00, 1755, 2619, 71, 0x0000000000000004",
        )
        .unwrap();
        assert_eq!(s.index, 0);
        assert_eq!(s.utilization_pct, Some(97.0));
        assert_eq!(s.memory_used, Some(ByteSize::new(70213 * 1_048_576)));
        assert_eq!(s.power_w, Some(687.42));
        assert_eq!(s.power_limit_w, Some(700.0));
        assert_eq!(s.sm_clock_mhz, Some(1755));
        assert_eq!(s.temperature_c, Some(71.0));
        let t = s.throttle.unwrap();
        assert!(t.power_cap && !t.thermal && !t.hw_slowdown);
    }

    #[test]
    fn missing_fields_are_none_and_other_lines_are_skipped() {
        let s = parse_sample_line(
            "1, 0, [N/A], [N/A], [Not Supported], [N/A], 405, 715, 25, [Not Supported]",
        )
        .unwrap();
        assert_eq!(s.index, 1);
        assert_eq!(s.memory_used, None);
        assert_eq!(s.power_w, None);
        assert_eq!(s.throttle, None);
        // Without the throttle field (older drivers).
        assert!(parse_sample_line("0, 5, 412, 81559, 68.21, 700.00, 345, 1593, 34").is_some());
        for other in [
            "index, utilization.gpu [%], memory.used [MiB]",
            "Field \"x\" is not a valid field to query.",
            "",
        ] {
            assert_eq!(parse_sample_line(other), None, "{other}");
        }
    }

    #[test]
    fn power_average_answers_name_the_gpus_that_average() {
        // Driver 580 on an H200 (recorded), then a GA100 and an older card that have none.
        assert_eq!(
            parse_power_average("0, 78.47\n1, [N/A]\n2, [Not Supported]\n"),
            [0]
        );
        assert!(
            parse_power_average("Field \"power.draw.average\" is not a valid field to query.")
                .is_empty()
        );
    }

    #[test]
    fn info_lines_and_the_banners_cuda_version() {
        let gpus = parse_info(
            "0, NVIDIA H100 80GB HBM3, GPU-3a1f9e02-4c11-4b8a-9e2d-7f6b1c0a55e1, 550.90.07, 81559, 700.00, 5, 16\n\
             1, NVIDIA GB10, GPU-aa, 580.95.05, [N/A], [N/A], [N/A], [N/A]\n",
        );
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].name, "NVIDIA H100 80GB HBM3");
        assert_eq!(gpus[0].memory_total, Some(ByteSize::new(81559 * 1_048_576)));
        assert_eq!(
            (gpus[0].pcie_generation, gpus[0].pcie_width),
            (Some(5), Some(16))
        );
        assert_eq!(gpus[1].memory_total, None);
        let banner =
            "| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: 12.4     |";
        assert_eq!(parse_cuda_version(banner).as_deref(), Some("12.4"));
        assert_eq!(parse_cuda_version("no banner"), None);
    }
}
