//! The catalog against what a real GPU reported (`tests/fixtures/recorded-*-memory.json`):
//! the name `nvidia-smi` prints finds the entry, and the entry's memory is
//! the total CUDA reports, not the driver's.

use serde_json::Value;
use speedmatrix_capacity::Gpu;

const GIB: f64 = 1_073_741_824.0;

#[test]
fn the_recorded_h200_is_the_catalog_entry_with_cudas_total() {
    let text = include_str!("../fixtures/recorded-h200-memory.json");
    let rec: Value = serde_json::from_str(text).unwrap();
    let gpu = Gpu::lookup(rec["nvidia_smi_name"].as_str().unwrap()).unwrap();
    assert_eq!(gpu.key, "h200-sxm");
    assert!(!gpu.memory_estimated);
    let cuda = rec["torch_mem_get_info_total"].as_u64().unwrap();
    let nvml_total = rec["nvml_memory_v2"]["total"].as_u64().unwrap();
    let reserved = rec["nvml_memory_v2"]["reserved"].as_u64().unwrap();
    // CUDA's total is the driver's less what the driver reserves, to the byte.
    assert_eq!(cuda, nvml_total - reserved);
    assert_eq!(
        nvml_total,
        rec["nvidia_smi_memory_total_mib"].as_u64().unwrap() * 1_048_576
    );
    // The catalog's 139.80 GiB is CUDA's total (to its two decimals)...
    let catalog = gpu.memory.get() as f64;
    assert!(
        (catalog - cuda as f64).abs() < 0.005 * GIB,
        "{catalog} vs {cuda}"
    );
    // ...and 0.60 GiB below the total the driver (NVML, nvidia-smi, `speedmatrix probe`) prints.
    let gap = (nvml_total as f64 - catalog) / GIB;
    assert!((gap - 0.60).abs() < 0.01, "{gap}");
}
