//! `speedmatrix capacity` inputs beside config.json: the GPU catalog (listing
//! it, extending it with a user file, ambiguous names), and a checkpoint's
//! safetensors headers for exact weights.

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
    assert!(h100.contains(" 132  hopper          700  "), "{h100}");
    let json = bin()
        .args(["capacity", "--list-gpus", "--json"])
        .output()
        .unwrap();
    let gpus: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(gpus.as_array().unwrap().len(), rows.len());
    let h100 = gpus
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["key"] == "h100-sxm")
        .unwrap();
    assert_eq!(h100["multiprocessors"], 132);
    assert_eq!(h100["architecture"], "hopper");
    assert_eq!(h100["board_power_w"], 700.0);
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

/// A `.safetensors` file with the given tensors (their data a sparse hole).
fn write_shard(path: &std::path::Path, tensors: &[(&str, u64)]) {
    let mut at = 0;
    let fields: Vec<String> = tensors
        .iter()
        .map(|(name, bytes)| {
            let f = format!(
                r#""{name}": {{"dtype": "BF16", "shape": [{}], "data_offsets": [{at}, {}]}}"#,
                bytes / 2,
                at + bytes
            );
            at += bytes;
            f
        })
        .collect();
    let header = format!("{{{}}}", fields.join(", "));
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    std::fs::write(path, &bytes).unwrap();
    // The data as a hole: only the header is ever read.
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_len(bytes.len() as u64 + at).unwrap();
}

#[test]
fn a_checkpoint_folder_gives_the_weights_from_its_safetensors_headers() {
    let dir = temp_dir("checkpoint");
    let gib = 1u64 << 30;
    // 3 GiB of embeddings and 2 GiB of layers (the fixture's model has 32 layers).
    write_shard(
        &dir.join("model-00001-of-00002.safetensors"),
        &[("model.embed_tokens.weight", 3 * gib)],
    );
    write_shard(
        &dir.join("model-00002-of-00002.safetensors"),
        &[
            ("model.layers.0.self_attn.q_proj.weight", gib),
            ("model.layers.31.mlp.down_proj.weight", gib),
            ("model.visual.blocks.0.attn.qkv.weight", gib),
        ],
    );
    let out = bin()
        .args(["capacity", "--config", CONFIG, "--gpu", "rtx3090"])
        .args(["--language-model-only", "--json", "--checkpoint"])
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let weights = &json["prediction"]["budget"]["weights"];
    assert_eq!(weights["bytes"].as_u64(), Some(5 * gib), "{weights}");
    assert_eq!(weights["estimated"].as_bool(), Some(false));
    assert!(
        weights["basis"]
            .as_str()
            .unwrap()
            .contains("safetensors headers"),
        "{weights}"
    );
    let empty = temp_dir("checkpoint-empty");
    let out = bin()
        .args(["capacity", "--config", CONFIG, "--checkpoint"])
        .arg(&empty)
        .output()
        .unwrap();
    assert!(stderr_after(&out, 2).contains("no *.safetensors files"));
}
