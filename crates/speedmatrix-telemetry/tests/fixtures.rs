//! Every capture under `tests/fixtures/` (written from the tools'
//! documentation, or recorded on a GPU by `cargo xtask gpu-check`) parses
//! completely: each sample line is a sample of a GPU the static query
//! listed, and the figures are in range.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::{Path, PathBuf};

use speedmatrix_telemetry::gpu::{amd, rocm, smi};

fn captures(tool: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(tool);
    let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    found.sort();
    found
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
}

#[test]
fn every_nvidia_smi_capture_parses() {
    let dirs = captures("nvidia-smi");
    assert!(dirs.len() >= 2, "the documented captures are there");
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let gpus = smi::parse_info(&read(&dir, "info.csv"));
        assert!(!gpus.is_empty(), "{name}: no GPU in info.csv");
        assert!(gpus.iter().all(|g| !g.name.is_empty()), "{name}");
        assert!(
            smi::parse_cuda_version(&read(&dir, "banner.txt")).is_some(),
            "{name}: no CUDA version in the banner"
        );
        let text = read(&dir, "samples.csv");
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let s = smi::parse_sample_line(line)
                .unwrap_or_else(|| panic!("{name}: a sample line did not parse: {line}"));
            assert!(gpus.iter().any(|g| g.index == s.index), "{name}: {line}");
            assert!(s.utilization_pct.is_none_or(|u| (0.0..=100.0).contains(&u)));
            assert!(
                s.power_w.is_none_or(|p| (0.0..5_000.0).contains(&p)),
                "{name}: {line}"
            );
            if let (Some(used), Some(total)) = (s.memory_used, s.memory_total) {
                assert!(used <= total, "{name}: {line}");
            }
        }
    }
}

#[test]
fn the_documented_nvidia_captures_read_as_documented() {
    let dir = captures("nvidia-smi")
        .into_iter()
        .find(|d| d.ends_with("h100-driver550-doc"))
        .unwrap();
    let samples: Vec<_> = read(&dir, "samples.csv")
        .lines()
        .filter_map(smi::parse_sample_line)
        .collect();
    assert_eq!(samples.len(), 6);
    // Idle (0x1) is not a throttle; the power cap (0x4) is.
    assert!(!samples[0].throttle.unwrap().any());
    assert!(samples[2].throttle.unwrap().power_cap);
    let t4 = captures("nvidia-smi")
        .into_iter()
        .find(|d| d.ends_with("t4-gaps-doc"))
        .unwrap();
    let gaps: Vec<_> = read(&t4, "samples.csv")
        .lines()
        .filter_map(smi::parse_sample_line)
        .collect();
    assert_eq!((gaps[0].power_w, gaps[0].throttle), (None, None));
    assert_eq!(
        gaps[1].throttle, None,
        "the older query has no throttle field"
    );
    assert_eq!(gaps[1].power_w, Some(69.5));
}

#[test]
fn every_amd_smi_capture_parses() {
    let dirs = captures("amd-smi");
    assert!(dirs.len() >= 2, "the documented captures are there");
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let gpus = amd::parse_static(&read(&dir, "static.json"))
            .unwrap_or_else(|e| panic!("{name}: static.json: {e}"));
        assert!(!gpus.is_empty(), "{name}");
        let samples = amd::parse_metric(&read(&dir, "metric.json"))
            .unwrap_or_else(|e| panic!("{name}: metric.json: {e}"));
        assert!(!samples.is_empty(), "{name}");
        for s in &samples {
            assert!(gpus.iter().any(|g| g.index == s.index), "{name}");
            assert!(
                s.power_w.is_some(),
                "{name}: every amd-smi shape has socket power"
            );
        }
    }
}

#[test]
fn every_rocm_smi_capture_parses() {
    let dirs = captures("rocm-smi");
    assert!(!dirs.is_empty(), "the documented capture is there");
    for dir in dirs {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let text = read(&dir, "sample.json");
        let gpus = rocm::parse_info(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let samples = rocm::parse_sample(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(gpus.len(), samples.len(), "{name}");
        for s in &samples {
            assert!(
                s.power_w.is_some() && s.memory_total.is_some(),
                "{name}: {s:?}"
            );
        }
    }
}
