//! The GPU catalog from the command line: listing it, extending it with a
//! user file, and the errors a bad name or file gets.

use crate::support::{bin, stderr_after, temp_dir};

const CONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../speedmatrix-capacity/tests/fixtures/agents-a1-4b-fp8.config.json"
);

#[test]
fn list_gpus_prints_every_entry_with_its_memory_and_whether_it_was_seen() {
    let out = bin().args(["capacity", "--list-gpus"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.contains(" GiB ")).collect();
    assert!(rows.len() >= 79, "{} rows", rows.len());
    let h100 = rows.iter().find(|l| l.starts_with("h100-sxm ")).unwrap();
    assert!(h100.contains("79.19 GiB (seen)"), "{h100}");
    assert!(h100.contains("NVIDIA H100 80GB HBM3"), "{h100}");
    let json = bin()
        .args(["capacity", "--list-gpus", "--json"])
        .output()
        .unwrap();
    let gpus: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(gpus.as_array().unwrap().len(), rows.len());
}

#[test]
fn a_user_catalog_adds_a_gpu_that_capacity_then_uses() {
    let dir = temp_dir("gpu-catalog");
    let catalog = dir.join("gpus.json");
    std::fs::write(
        &catalog,
        r#"{"gpus": [{"key": "acme-t9", "names": ["ACME Tensor 9000"],
            "memory": {"gib": 47.5, "source": "torch.cuda.mem_get_info on our driver"}}]}"#,
    )
    .unwrap();
    let out = bin()
        .args(["capacity", "--config", CONFIG, "--gpu", "ACME Tensor 9000"])
        .arg("--gpu-catalog")
        .arg(&catalog)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("GPU: ACME Tensor 9000 — 47.50 GiB"), "{text}");
    // Without the file the name is unknown, and the error says how to add it.
    let unknown = bin()
        .args(["capacity", "--config", CONFIG, "--gpu", "ACME Tensor 9000"])
        .output()
        .unwrap();
    let err = stderr_after(&unknown, 2);
    assert!(err.contains("--gpu-catalog"), "{err}");
    std::fs::write(&catalog, r#"{"gpus": [{"key": "x", "memory": {}}]}"#).unwrap();
    let broken = bin()
        .args(["capacity", "--config", CONFIG, "--gpu", "h100"])
        .arg("--gpu-catalog")
        .arg(&catalog)
        .output()
        .unwrap();
    let err = stderr_after(&broken, 2);
    assert!(
        err.contains("gpus.json") && err.contains("memory.gib"),
        "{err}"
    );
}

#[test]
fn a_name_two_cards_print_is_refused_with_both_keys() {
    let out = bin()
        .args([
            "capacity",
            "--config",
            CONFIG,
            "--gpu",
            "NVIDIA GeForce RTX 3080",
        ])
        .output()
        .unwrap();
    let err = stderr_after(&out, 2);
    assert!(
        err.contains("rtx3080-10gb") && err.contains("rtx3080-12gb"),
        "{err}"
    );
}
