//! GPU catalog: memory as the runtime sees it, bandwidth and peak dense
//! throughput per dtype, each entry with its sources (`data/gpus.json`), and a
//! user catalog of the same shape that extends or overrides it.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use speedmatrix_units::ByteSize;

use crate::CapacityError;

/// One accelerator as the predictors need it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpu {
    /// Catalog key (`rtx3090`, `h100-sxm`) or `custom`.
    pub key: String,
    /// The name the runtime prints (`NVIDIA GeForce RTX 3090`), or a description.
    pub name: String,
    /// `nvidia`, `amd`, `intel` or `custom`.
    pub vendor: String,
    /// Total device memory as `torch.cuda.mem_get_info()` reports it (what vLLM
    /// multiplies by `gpu_memory_utilization`), not the marketing size.
    pub memory: ByteSize,
    /// Whether `memory` is derived (e.g. from `nvidia-smi`'s total) rather than
    /// read off a runtime.
    pub memory_estimated: bool,
    /// Where the memory figure comes from.
    pub memory_source: String,
    /// CPU and GPU share one memory (GB10, Jetson Thor, MI300A, Strix Halo).
    pub unified_memory: bool,
    /// The usual server links these GPUs by NVLink, Infinity Fabric or an
    /// equivalent (SXM/OAM parts): tensor parallelism then sets up larger
    /// communication buffers than over PCIe.
    pub fast_interconnect: bool,
    /// Peak memory bandwidth, GB/s (vendor figure), when known.
    pub bandwidth_gb_s: Option<f64>,
    /// Peak dense tensor throughput per dtype.
    pub dense_tflops: DenseTflops,
    /// Streaming multiprocessors (NVIDIA), when known: how many independent units issue
    /// memory reads, which bounds what a kernel with little work per unit can keep in flight.
    pub multiprocessors: Option<u32>,
    /// The vendor's maximum board (or module, or SoC package) power, watts, when known: a
    /// long run of matrix products draws it and the clocks drop to stay under it.
    pub board_power_w: Option<f64>,
    /// Where the board power figure comes from (empty without one).
    pub board_power_source: String,
    /// The generation, when known: which tensor-core instructions and number formats kernels
    /// can use.
    pub architecture: Option<Architecture>,
    /// Where the bandwidth and throughput figures come from.
    pub spec_source: String,
    /// Whether vLLM's batch defaults treat it as an A100 (`"a100"` in the
    /// device name: never the "big GPU" defaults).
    pub is_a100: bool,
}

/// A GPU generation. Kernels written for one generation's tensor-core instructions
/// reach less of a later one's peak: Ampere-style `mma.sync` kernels on Hopper, whose peak
/// needs the asynchronous `wgmma` (FlashAttention-2 reaches 35 % of an H100's, FlashAttention-3
/// 75 %: Shah et al., 2024).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// V100.
    Volta,
    /// T4, RTX 20.
    Turing,
    /// A100, A10, A40, RTX A, RTX 30.
    Ampere,
    /// L4, L40, RTX Ada, RTX 40.
    Ada,
    /// H100, H200, H20, H800, GH200.
    Hopper,
    /// B200, B300, GB10, RTX PRO, RTX 50.
    Blackwell,
    /// AMD MI210, MI250X.
    Cdna2,
    /// AMD MI300X, MI300A, MI325X: their FP8 is the FNUZ variant (e4m3fnuz), not OCP FP8.
    Cdna3,
    /// AMD MI350X, MI355X: OCP FP8, FP6 and FP4.
    Cdna4,
    /// AMD Radeon RX 7900, Radeon PRO W7000, and RDNA 3.5 integrated parts (Ryzen AI Max).
    Rdna3,
    /// AMD Radeon RX 9070, Radeon AI PRO R9700: OCP FP8.
    Rdna4,
}

/// Peak dense (not sparse) tensor throughput, TFLOPS (TOPS for int8); `None`
/// where the dtype has no tensor path or no published figure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DenseTflops {
    /// bf16 with fp32 accumulate.
    #[serde(default)]
    pub bf16: Option<f64>,
    /// fp16 with fp32 accumulate (GeForce halves it against fp16 accumulate).
    #[serde(default)]
    pub fp16: Option<f64>,
    /// fp8.
    #[serde(default)]
    pub fp8: Option<f64>,
    /// fp4 (NVFP4 / MXFP4).
    #[serde(default)]
    pub fp4: Option<f64>,
    /// int8, TOPS.
    #[serde(default)]
    pub int8: Option<f64>,
}

/// A catalog entry as `data/gpus.json` and a user catalog file write it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Entry {
    key: String,
    #[serde(default)]
    aliases: Vec<String>,
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    vendor: String,
    #[serde(default)]
    unified_memory: bool,
    #[serde(default)]
    fast_interconnect: bool,
    memory: Memory,
    #[serde(default)]
    bandwidth_gb_s: Option<f64>,
    #[serde(default)]
    dense_tflops: DenseTflops,
    #[serde(default)]
    multiprocessors: Option<u32>,
    #[serde(default)]
    board_power: Option<BoardPower>,
    #[serde(default)]
    architecture: Option<Architecture>,
    #[serde(default)]
    spec_source: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
struct Memory {
    gib: Option<f64>,
    #[serde(default)]
    estimated: bool,
    #[serde(default)]
    source: String,
}

/// A board power figure and where it was read.
#[derive(Debug, Clone, PartialEq, Deserialize)]
struct BoardPower {
    watts: f64,
    source: String,
}

#[derive(Debug, Deserialize)]
struct CatalogFile {
    gpus: Vec<Entry>,
}

/// A set of GPUs to look names up in: the built-in catalog, optionally
/// extended by a user file of the same JSON shape
/// (`{"gpus": [{"key": …, "names": […], "memory": {"gib": …}, …}]}`).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuCatalog {
    entries: Vec<Entry>,
}

const BUILTIN: &str = include_str!("../data/gpus.json");

impl GpuCatalog {
    /// The catalog shipped with the crate (79 GPUs: NVIDIA datacenter,
    /// workstation and consumer cards of the last three generations, AMD
    /// Instinct and Radeon, Intel Arc and Data Center GPU Max, Gaudi).
    pub fn builtin() -> Result<&'static GpuCatalog, CapacityError> {
        static CATALOG: OnceLock<Result<GpuCatalog, CapacityError>> = OnceLock::new();
        CATALOG
            .get_or_init(|| GpuCatalog::from_json(BUILTIN))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Parses a catalog file's text.
    ///
    /// # Errors
    /// [`CapacityError::BadCatalog`] when the text is not such a catalog, an
    /// entry has no memory, or two entries share a key.
    pub fn from_json(text: &str) -> Result<GpuCatalog, CapacityError> {
        let file: CatalogFile = serde_json::from_str(text)
            .map_err(|e| CapacityError::BadCatalog(format!("not a GPU catalog: {e}")))?;
        for (i, e) in file.gpus.iter().enumerate() {
            match e.memory.gib {
                Some(g) if g > 0.0 && g.is_finite() => {}
                _ => {
                    return Err(CapacityError::BadCatalog(format!(
                        "entry `{}` needs memory.gib, the total the runtime reports, in GiB",
                        e.key
                    )));
                }
            }
            if e.multiprocessors == Some(0) {
                return Err(CapacityError::BadCatalog(format!(
                    "entry `{}` has 0 multiprocessors: give the GPU's count or leave it out",
                    e.key
                )));
            }
            if let Some(p) = &e.board_power
                && !(p.watts > 0.0 && p.watts.is_finite())
            {
                return Err(CapacityError::BadCatalog(format!(
                    "entry `{}` has board_power.watts {}: give the vendor's maximum board \
                     power in watts or leave board_power out",
                    e.key, p.watts
                )));
            }
            if file.gpus[..i].iter().any(|o| o.key == e.key) {
                return Err(CapacityError::BadCatalog(format!(
                    "key `{}` appears twice",
                    e.key
                )));
            }
        }
        Ok(GpuCatalog { entries: file.gpus })
    }

    /// This catalog with `user`'s entries in front: a user entry with a
    /// built-in key replaces it, new keys are added.
    pub fn extended_by(&self, user: &GpuCatalog) -> GpuCatalog {
        let mut entries = user.entries.clone();
        entries.extend(
            self.entries
                .iter()
                .filter(|e| !user.entries.iter().any(|u| u.key == e.key))
                .cloned(),
        );
        GpuCatalog { entries }
    }

    /// Every entry.
    pub fn gpus(&self) -> Vec<Gpu> {
        self.entries.iter().map(Gpu::from_entry).collect()
    }

    /// Looks a GPU up by key or alias, or by the name `nvidia-smi`,
    /// `rocm-smi`/`amd-smi`, `xpu-smi` or an engine's log prints (`NVIDIA
    /// GeForce RTX 3090`, `NVIDIA A100-SXM4-80GB`, `AMD Instinct MI300X`,
    /// `Intel(R) Arc(TM) Pro B60 Graphics`), case-insensitively; or parses a
    /// custom size such as `24GiB`, `24` (GiB) or `23.58GiB`. Names match
    /// word for word, never by a part of a word (`H20` is not `H200`).
    ///
    /// # Errors
    /// [`CapacityError::UnknownGpu`] for a name no entry has;
    /// [`CapacityError::AmbiguousGpu`] for a name several entries print (the
    /// 10 GB and 12 GB RTX 3080 are both `NVIDIA GeForce RTX 3080`).
    pub fn lookup(&self, text: &str) -> Result<Gpu, CapacityError> {
        let wanted = name_forms(text);
        let hits: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| {
                std::iter::once(&e.key)
                    .chain(&e.aliases)
                    .chain(&e.names)
                    .flat_map(|n| name_forms(n))
                    .any(|form| wanted.contains(&form))
            })
            .collect();
        match hits.as_slice() {
            [one] => return Ok(Gpu::from_entry(one)),
            [] => {}
            many => {
                // An exact key or alias decides among entries that share a printed name.
                let exact = normalize(text);
                if let Some(e) = many.iter().find(|e| {
                    normalize(&e.key) == exact || e.aliases.iter().any(|a| normalize(a) == exact)
                }) {
                    return Ok(Gpu::from_entry(e));
                }
                return Err(CapacityError::AmbiguousGpu {
                    name: text.to_owned(),
                    keys: many.iter().map(|e| e.key.clone()).collect(),
                });
            }
        }
        let lower = text.trim().to_ascii_lowercase();
        let number = lower
            .trim_end_matches("gib")
            .trim_end_matches("gb")
            .trim_start_matches("custom:")
            .trim();
        match number.parse::<f64>() {
            Ok(gib) if gib > 0.0 && gib < 1.0e6 => Ok(Gpu::custom_gib(gib)),
            _ => Err(CapacityError::UnknownGpu(text.to_owned())),
        }
    }
}

impl Gpu {
    /// Looks a GPU up in the built-in catalog (see [`GpuCatalog::lookup`]).
    pub fn lookup(text: &str) -> Result<Gpu, CapacityError> {
        GpuCatalog::builtin()?.lookup(text)
    }

    /// A GPU with `gib` GiB visible to the runtime and nothing else known.
    pub fn custom_gib(gib: f64) -> Gpu {
        Gpu {
            key: "custom".into(),
            name: format!("custom {gib} GiB"),
            vendor: "custom".into(),
            memory: gib_bytes(gib),
            memory_estimated: false,
            memory_source: "given by the user".into(),
            unified_memory: false,
            fast_interconnect: false,
            bandwidth_gb_s: None,
            dense_tflops: DenseTflops::default(),
            multiprocessors: None,
            board_power_w: None,
            board_power_source: String::new(),
            architecture: None,
            spec_source: String::new(),
            is_a100: false,
        }
    }

    /// Every entry of the built-in catalog.
    pub fn catalog() -> Vec<Gpu> {
        GpuCatalog::builtin()
            .map(GpuCatalog::gpus)
            .unwrap_or_default()
    }

    fn from_entry(e: &Entry) -> Gpu {
        let name = e.names.first().cloned().unwrap_or_else(|| e.key.clone());
        Gpu {
            key: e.key.clone(),
            is_a100: e
                .names
                .iter()
                .chain(std::iter::once(&e.key))
                .any(|n| n.to_ascii_lowercase().contains("a100")),
            name,
            vendor: e.vendor.clone(),
            memory: gib_bytes(e.memory.gib.unwrap_or(0.0)),
            memory_estimated: e.memory.estimated,
            memory_source: e.memory.source.clone(),
            unified_memory: e.unified_memory,
            fast_interconnect: e.fast_interconnect,
            bandwidth_gb_s: e.bandwidth_gb_s,
            dense_tflops: e.dense_tflops,
            multiprocessors: e.multiprocessors,
            board_power_w: e.board_power.as_ref().map(|p| p.watts),
            board_power_source: e
                .board_power
                .as_ref()
                .map(|p| p.source.clone())
                .unwrap_or_default(),
            architecture: e.architecture,
            spec_source: e.spec_source.clone(),
        }
    }
}

/// Words of a runtime's GPU name that name the maker, brand, memory kind or
/// "Graphics", not the model: they may be left out when a name is given.
const NOT_THE_MODEL: &[&str] = &[
    "nvidia", "geforce", "tesla", "amd", "instinct", "radeon", "intel", "graphics", "hbm2",
    "hbm2e", "hbm3", "hbm3e",
];

/// A name in lowercase words joined by `-`, trademark marks dropped.
fn normalize(text: &str) -> String {
    let lower = text
        .trim()
        .to_ascii_lowercase()
        .replace("(r)", " ")
        .replace("(tm)", " ");
    lower
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

/// The forms a name may be written in: its words as printed, without the
/// maker/brand words, and each of those with the separators removed
/// (`rtx-3090` = `rtx3090`). Matching whole forms never matches part of a word.
fn name_forms(text: &str) -> Vec<String> {
    let full = normalize(text);
    let model: Vec<&str> = full
        .split('-')
        .filter(|w| !NOT_THE_MODEL.contains(w))
        .collect();
    let mut forms = vec![full.clone(), full.replace('-', "")];
    if !model.is_empty() {
        let m = model.join("-");
        forms.push(m.replace('-', ""));
        forms.push(m);
    }
    forms.sort();
    forms.dedup();
    forms
}

/// GiB (possibly fractional) to bytes, rounded to the nearest byte.
pub(crate) fn gib_bytes(gib: f64) -> ByteSize {
    ByteSize::new((gib * (1u64 << 30) as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_catalog_parses_and_every_entry_has_memory_and_a_source() {
        let catalog = GpuCatalog::builtin().unwrap();
        let gpus = catalog.gpus();
        assert!(gpus.len() >= 70, "{}", gpus.len());
        for g in &gpus {
            assert!(g.memory.get() > 1 << 30, "{}", g.key);
            assert!(!g.memory_source.is_empty(), "{}", g.key);
            assert_eq!(
                g.board_power_w.is_some(),
                !g.board_power_source.is_empty(),
                "{}: a board power needs its source",
                g.key
            );
        }
        assert!(gpus.iter().filter(|g| g.board_power_w.is_some()).count() >= 60);
    }

    #[test]
    fn runtime_names_find_their_catalog_entry() {
        for (name, key) in [
            ("NVIDIA GeForce RTX 3090", "rtx3090"),
            ("nvidia geforce rtx 4090", "rtx4090"),
            ("NVIDIA GeForce RTX 4090 D", "rtx4090d"),
            ("NVIDIA L4", "l4"),
            ("NVIDIA L40S", "l40s"),
            ("NVIDIA A10G", "a10g"),
            ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
            ("NVIDIA A100-SXM4-40GB", "a100-40gb-sxm"),
            ("NVIDIA A100 80GB PCIe", "a100-80gb-pcie"),
            ("NVIDIA H100 80GB HBM3", "h100-sxm"),
            ("NVIDIA H100 PCIe", "h100-pcie"),
            ("NVIDIA H20", "h20"),
            ("NVIDIA H200", "h200-sxm"),
            ("NVIDIA B200", "b200"),
            ("NVIDIA GB10", "gb10"),
            ("NVIDIA RTX A5000", "rtx-a5000"),
            (
                "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                "rtx-pro-6000-ws",
            ),
            ("AMD Instinct MI300X", "mi300x"),
            ("Intel(R) Arc(TM) Pro B60 Graphics", "arc-pro-b60"),
            ("Tesla T4", "t4"),
            ("rtx3090", "rtx3090"),
            ("h100", "h100-sxm"),
            ("a100-80", "a100-80gb-sxm"),
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
        // "H2" is no GPU, though H20 and H200 start with it; "RTX 309" is not the 3090.
        for name in ["NVIDIA H2", "RTX 309", "NVIDIA GB1", "Arc Pro"] {
            assert!(
                matches!(Gpu::lookup(name), Err(CapacityError::UnknownGpu(_))),
                "{name}: {:?}",
                Gpu::lookup(name).map(|g| g.key)
            );
        }
        assert_eq!(Gpu::lookup("NVIDIA H20").unwrap().key, "h20");
        assert_eq!(Gpu::lookup("NVIDIA H200").unwrap().key, "h200-sxm");
    }

    #[test]
    fn a_name_two_cards_print_is_ambiguous_until_a_key_decides() {
        let err = Gpu::lookup("NVIDIA GeForce RTX 3080").unwrap_err();
        assert!(
            matches!(&err, CapacityError::AmbiguousGpu { keys, .. } if keys.len() == 2),
            "{err:?}"
        );
        assert!(err.to_string().contains("rtx3080-12gb"), "{err}");
        assert_eq!(Gpu::lookup("rtx3080-12gb").unwrap().key, "rtx3080-12gb");
    }

    #[test]
    fn a_user_catalog_adds_and_overrides_entries() {
        let user = GpuCatalog::from_json(
            r#"{"gpus": [
                {"key": "my-card", "names": ["ACME Tensor 9000"], "memory": {"gib": 47.5}},
                {"key": "rtx3090", "names": ["NVIDIA GeForce RTX 3090"], "memory": {"gib": 23.0, "source": "our driver"}}
            ]}"#,
        )
        .unwrap();
        let catalog = GpuCatalog::builtin().unwrap().extended_by(&user);
        let mine = catalog.lookup("ACME Tensor 9000").unwrap();
        assert_eq!(mine.memory, gib_bytes(47.5));
        assert_eq!(mine.bandwidth_gb_s, None);
        let ours = catalog.lookup("NVIDIA GeForce RTX 3090").unwrap();
        assert_eq!(ours.memory, gib_bytes(23.0));
        assert_eq!(catalog.lookup("h100").unwrap().key, "h100-sxm");
    }

    #[test]
    fn a_bad_user_catalog_is_refused_with_the_reason() {
        for (text, says) in [
            ("[]", "not a GPU catalog"),
            (r#"{"gpus": [{"key": "x", "memory": {}}]}"#, "memory.gib"),
            (
                r#"{"gpus": [{"key": "x", "memory": {"gib": 1}}, {"key": "x", "memory": {"gib": 2}}]}"#,
                "twice",
            ),
            (
                r#"{"gpus": [{"key": "x", "memory": {"gib": 1}, "multiprocessors": 0}]}"#,
                "0 multiprocessors",
            ),
            (
                r#"{"gpus": [{"key": "x", "memory": {"gib": 1}, "board_power": {"watts": 0, "source": "s"}}]}"#,
                "board_power.watts 0",
            ),
            (
                r#"{"gpus": [{"key": "x", "memory": {"gib": 1}, "architecture": "kepler"}]}"#,
                "unknown variant",
            ),
        ] {
            let err = GpuCatalog::from_json(text).unwrap_err();
            assert!(err.to_string().contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn custom_sizes_parse() {
        assert_eq!(Gpu::lookup("23.5GiB").unwrap().memory, gib_bytes(23.5));
        assert_eq!(Gpu::lookup("24").unwrap().memory, gib_bytes(24.0));
    }
}
