//! GPU catalog: memory as the runtime sees it, and memory bandwidth.

use serde::Serialize;
use speedmatrix_units::ByteSize;

use crate::CapacityError;

/// One accelerator as the capacity predictor needs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpu {
    /// Catalog key (`rtx3090`) or `custom`.
    pub key: String,
    /// Display name.
    pub name: String,
    /// Total device memory as `torch.cuda.mem_get_info()` reports it (what vLLM
    /// multiplies by `gpu_memory_utilization`), not the marketing size.
    pub memory: ByteSize,
    /// Peak memory bandwidth, GB/s (vendor figure).
    pub bandwidth_gb_s: f64,
    /// Where the memory figure comes from.
    pub memory_source: String,
    /// Whether vLLM's batch defaults treat it as an A100 (never the "big GPU" defaults).
    pub is_a100: bool,
}

/// (key, aliases, name, runtime GiB, GB/s, source).
type Row = (
    &'static str,
    &'static [&'static str],
    &'static str,
    f64,
    f64,
    &'static str,
);

const CATALOG: &[Row] = &[
    (
        "rtx3090",
        &["3090", "rtx-3090", "geforce-rtx-3090"],
        "RTX 3090 24GB",
        23.58,
        936.0,
        "observed: vLLM log total_gpu_memory=23.58GiB (vllm-project/vllm#10517)",
    ),
    (
        "rtx4090",
        &["4090", "rtx-4090"],
        "RTX 4090 24GB",
        23.99,
        1008.0,
        "approximate: PyTorch 'total capacity' commonly printed for a 24 GiB card",
    ),
    (
        "rtx5090",
        &["5090", "rtx-5090"],
        "RTX 5090 32GB",
        31.4,
        1792.0,
        "observed: vLLM 'Free memory on device (30.27/31.4 GiB)' (club-3090#1087)",
    ),
    (
        "a10g",
        &["a10", "a10-24gb"],
        "A10G 24GB",
        22.06,
        600.0,
        "approximate: 24 GB card less ECC/driver reservation (nvidia-smi ~22.5 GiB)",
    ),
    (
        "l4",
        &["l4-24gb"],
        "L4 24GB",
        22.06,
        300.0,
        "approximate: 24 GB card less ECC/driver reservation (nvidia-smi ~22.5 GiB)",
    ),
    (
        "l40s",
        &["l40", "l40s-48gb"],
        "L40S 48GB",
        44.39,
        864.0,
        "approximate: 48 GB card less ECC/driver reservation (nvidia-smi ~45 GiB)",
    ),
    (
        "a100-40",
        &["a100-40gb", "a100_40", "a100-sxm4-40gb"],
        "A100 40GB",
        39.39,
        1555.0,
        "observed: PyTorch OOM messages 'GPU 0; 39.39 GiB total capacity'",
    ),
    (
        "a100-80",
        &["a100", "a100-80gb", "a100_80", "a100-sxm4-80gb"],
        "A100 80GB",
        79.15,
        2039.0,
        "observed: PyTorch OOM messages 'GPU 0; 79.15 GiB total capacity'",
    ),
    (
        "h100",
        &["h100-80", "h100-80gb", "h100-sxm", "h100_80"],
        "H100 80GB",
        79.11,
        3350.0,
        "observed: PyTorch OOM messages 'total capacity of 79.11 GiB' (SXM)",
    ),
    (
        "h200",
        &["h200-141gb"],
        "H200 141GB",
        139.81,
        4800.0,
        "approximate: 143,771 MiB visible less driver reservation",
    ),
    (
        "b200",
        &["b200-180gb"],
        "B200 180GB",
        178.35,
        8000.0,
        "approximate: 183 GB visible (nvidia-smi ~179 GiB) less driver reservation",
    ),
    (
        "mi300x",
        &["mi300", "mi300x-192gb"],
        "MI300X 192GB",
        191.98,
        5300.0,
        "approximate: 192 GiB HBM3 as ROCm reports it",
    ),
];

impl Gpu {
    /// Looks a GPU up by catalog key or alias, or by the name `nvidia-smi`,
    /// `rocm-smi` or an engine's log prints (`NVIDIA GeForce RTX 3090`,
    /// `NVIDIA A100-SXM4-80GB`, `NVIDIA H100 80GB HBM3`, `AMD Instinct
    /// MI300X`), case-insensitively; or parses a custom size such as `24GiB`,
    /// `24` (GiB) or `23.58GiB`. A name is matched word for word, never by a
    /// part of a word (`H20` is not `H200`).
    pub fn lookup(text: &str) -> Result<Gpu, CapacityError> {
        let key = text.trim().to_ascii_lowercase().replace([' ', '_'], "-");
        for name in runtime_name_keys(&key) {
            let compact = name.replace('-', "");
            for row in CATALOG {
                let hit = row.0 == name
                    || row.0.replace('-', "") == compact
                    || row
                        .1
                        .iter()
                        .any(|a| *a == name || a.replace('-', "") == compact);
                if hit {
                    return Ok(Gpu::from_row(row));
                }
            }
        }
        let number = key
            .trim_end_matches("gib")
            .trim_end_matches("gb")
            .trim_start_matches("custom:")
            .trim();
        match number.parse::<f64>() {
            Ok(gib) if gib > 0.0 && gib < 1.0e6 => Ok(Gpu::custom_gib(gib)),
            _ => Err(CapacityError::UnknownGpu(text.to_owned())),
        }
    }

    /// A GPU with `gib` GiB visible to the runtime and unknown bandwidth.
    pub fn custom_gib(gib: f64) -> Gpu {
        Gpu {
            key: "custom".into(),
            name: format!("custom {gib} GiB"),
            memory: gib_bytes(gib),
            bandwidth_gb_s: 0.0,
            memory_source: "given by the user".into(),
            is_a100: false,
        }
    }

    /// Every catalog entry.
    pub fn catalog() -> Vec<Gpu> {
        CATALOG.iter().map(Gpu::from_row).collect()
    }

    fn from_row(row: &Row) -> Gpu {
        Gpu {
            key: row.0.into(),
            name: row.2.into(),
            memory: gib_bytes(row.3),
            bandwidth_gb_s: row.4,
            memory_source: row.5.into(),
            is_a100: row.0.starts_with("a100"),
        }
    }
}

/// Words of a runtime's GPU name that name the maker, brand or memory
/// kind, not the model: a catalog entry is one model with one memory size.
const NOT_THE_MODEL: &[&str] = &[
    "nvidia", "geforce", "tesla", "amd", "instinct", "radeon", "intel", "hbm2", "hbm2e", "hbm3",
    "hbm3e",
];

/// The keys to try for `key` (lowercase, words joined by `-`): as given,
/// then without trademark marks and the words of [`NOT_THE_MODEL`].
fn runtime_name_keys(key: &str) -> Vec<String> {
    let plain = key.replace("(r)", "").replace("(tm)", "");
    let words: Vec<&str> = plain.split('-').filter(|w| !w.is_empty()).collect();
    let model: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| !NOT_THE_MODEL.contains(w))
        .collect();
    let mut keys = vec![key.to_owned(), words.join("-")];
    if !model.is_empty() {
        keys.push(model.join("-"));
    }
    keys.dedup();
    keys
}

/// GiB (possibly fractional) to bytes, rounded to the nearest byte.
pub(crate) fn gib_bytes(gib: f64) -> ByteSize {
    ByteSize::new((gib * (1u64 << 30) as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_names_find_their_catalog_entry() {
        for (name, key) in [
            ("NVIDIA GeForce RTX 3090", "rtx3090"),
            ("nvidia geforce rtx 4090", "rtx4090"),
            ("NVIDIA L4", "l4"),
            ("NVIDIA L40S", "l40s"),
            ("NVIDIA A10G", "a10g"),
            ("NVIDIA A100-SXM4-80GB", "a100-80"),
            ("NVIDIA A100-SXM4-40GB", "a100-40"),
            ("NVIDIA H100 80GB HBM3", "h100"),
            ("NVIDIA H200", "h200"),
            ("NVIDIA B200", "b200"),
            ("AMD Instinct MI300X", "mi300x"),
            ("rtx3090", "rtx3090"),
        ] {
            assert_eq!(
                Gpu::lookup(name).map(|g| g.key),
                Ok(key.to_owned()),
                "{name}"
            );
        }
    }

    #[test]
    fn a_name_is_never_matched_by_part_of_a_word() {
        // The H20 (96 GB) is not the H200; the PCIe H100 is not the SXM one.
        for name in [
            "NVIDIA H20",
            "NVIDIA H100 PCIe",
            "NVIDIA GB10",
            "Intel(R) Arc(TM) Pro B60",
        ] {
            assert!(
                matches!(Gpu::lookup(name), Err(CapacityError::UnknownGpu(_))),
                "{name}"
            );
        }
    }
}
