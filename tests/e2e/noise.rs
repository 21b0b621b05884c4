//! Comparisons that know noise (issue 26): identical simulator runs never
//! regress, a slowed simulator does on every cell, repeats state their spread.

use std::path::Path;

use crate::support::{SimProcess, bin, read_report, run_url, stderr_after, temp_dir, test_profile};

/// A sustained run of the simulator at `url` into `dir/name`: one context,
/// one and four streams, 2 s windows.
fn run(url: &str, dir: &Path, name: &str, extra: &[&str]) {
    let out = run_url(url)
        .args([
            "--contexts",
            "0",
            "--concurrency",
            "1,4",
            "--prefill-contexts",
            "none",
        ])
        .args(["--duration", "2s", "--max-tokens", "512", "--out"])
        .arg(dir.join(name))
        .args(extra)
        .output()
        .unwrap();
    stderr_after(&out, 0);
}

#[test]
fn identical_runs_never_regress_and_a_slower_server_regresses_on_every_cell() {
    let dir = temp_dir("noise-compare");
    let (mut profile, path) = test_profile(&dir);
    profile.time_scale = 0.9;
    let slow_path = dir.join("slow.json");
    std::fs::write(&slow_path, serde_json::to_string(&profile).unwrap()).unwrap();
    let (mut fast, mut slow) = (SimProcess::start(&path), SimProcess::start(&slow_path));
    run(&fast.url, &dir, "a", &[]);
    run(&fast.url, &dir, "b", &[]);
    run(&slow.url, &dir, "slow", &[]);
    fast.kill();
    slow.kill();
    let (a, b, s) = (
        dir.join("a/run.json"),
        dir.join("b/run.json"),
        dir.join("slow/run.json"),
    );

    // Every cell states the interval of its throughput.
    for cell in &read_report(&dir.join("a")).decode {
        let m = cell.measurements.as_ref().unwrap();
        let i = m.intervals.unwrap().total_tokens_per_s.unwrap();
        assert!(i.contains(m.total_tokens_per_s), "{i:?}");
    }
    for threshold in ["1%", "2.5%", "10%"] {
        let out = bin()
            .args(["compare", "--fail-on-regression", threshold])
            .args([&a, &b])
            .output()
            .unwrap();
        stderr_after(&out, 0);
    }
    let json = dir.join("same.json");
    let out = bin()
        .args(["compare", "--json", "--threshold", "1%", "-o"])
        .arg(&json)
        .args([&a, &b])
        .output()
        .unwrap();
    stderr_after(&out, 0);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let cells = doc["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2);
    for c in cells {
        assert_ne!(c["verdict"]["kind"], "regressed", "{c}");
        assert!(c["metrics"][0]["ratio_interval"]["low"].is_f64(), "{c}");
    }

    let out = bin()
        .args(["compare", "--fail-on-regression", "5%"])
        .args([&a, &s])
        .output()
        .unwrap();
    // The table says which cell was not flagged, and why.
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = stderr_after(&out, 1);
    assert!(stderr.contains("2 cell(s) regressed"), "{stderr}");
    assert!(
        stderr.contains("Decode 0 × 1") && stderr.contains("Decode 0 × 4"),
        "{stderr}"
    );
    // Judged on latency alone, the slowdown shows as a longer time between tokens (ITL
    // +11 %) and never as an improvement. Whether it is beyond the noise depends on the
    // host: a loaded one widens ITL intervals to ±5 % (measured with two test runs beside
    // this one on 2 cores), and the noise model then rightly calls +9 % within noise.
    let itl = dir.join("itl.json");
    let out = bin()
        .args([
            "compare",
            "--metric",
            "itl",
            "--json",
            "--fail-on-regression",
            "5%",
            "-o",
        ])
        .arg(&itl)
        .args([&a, &s])
        .output()
        .unwrap();
    assert!(matches!(out.status.code(), Some(0 | 1)), "{out:?}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&itl).unwrap()).unwrap();
    for c in doc["cells"].as_array().unwrap() {
        let m = &c["metrics"][0];
        assert_eq!(m["metric"], "itl", "{c}");
        assert!(m["ratio"].as_f64().unwrap() > 1.0, "{c}");
        assert_ne!(m["judgement"], "better", "{c}");
    }
    let out = bin()
        .args(["compare", "--metric", "latency"])
        .args([&a, &s])
        .output()
        .unwrap();
    let stderr = stderr_after(&out, 2);
    assert!(stderr.contains("tok/s, ttft, itl or all"), "{stderr}");
}

#[test]
fn repeats_state_their_mean_interval_and_spread() {
    let dir = temp_dir("noise-repeats");
    let (_, path) = test_profile(&dir);
    let mut sim = SimProcess::start(&path);
    let out = run_url(&sim.url)
        .args([
            "--contexts",
            "0",
            "--concurrency",
            "2",
            "--prefill-contexts",
            "none",
        ])
        .args([
            "--duration",
            "1s",
            "--max-tokens",
            "512",
            "--repeats",
            "3",
            "--out",
        ])
        .arg(dir.join("r"))
        .output()
        .unwrap();
    stderr_after(&out, 0);
    sim.kill();
    let report = read_report(&dir.join("r"));
    let m = report.decode[0].measurements.as_ref().unwrap();
    let r = m.repeats.as_ref().unwrap();
    assert_eq!(r.count, 3);
    let tps = &r.total_tokens_per_s;
    assert_eq!(tps.values.len(), 3);
    assert!((tps.mean - m.total_tokens_per_s).abs() < 1e-9);
    assert!(tps.interval.unwrap().contains(tps.mean));
    assert!(tps.cv.unwrap() < 0.05, "{tps:?}");
    // Three windows of 1 s.
    assert!((m.measured_s - 3.0).abs() < 1e-6, "{}", m.measured_s);
    let journal = std::fs::read_to_string(dir.join("r/journal.jsonl")).unwrap();
    assert_eq!(
        journal.matches("\"record\":\"decode\"").count(),
        1,
        "{journal}"
    );
    let csv = std::fs::read_to_string(dir.join("r/measurements.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let col = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(col("repeats"), "3");
    assert!(col("total_tokens_per_s_cv").parse::<f64>().is_ok());
    let md = std::fs::read_to_string(dir.join("r/report.md")).unwrap();
    assert!(md.contains("3 repeats, CV"), "{md}");
}

#[test]
fn burst_cells_repeat_with_prompts_of_their_own_and_conversations_refuse_repeats() {
    let dir = temp_dir("noise-load-repeats");
    let (_, path) = test_profile(&dir);
    let mut sim = SimProcess::start(&path);
    let out = run_url(&sim.url)
        .args(["--mode", "burst", "--requests", "1,4", "--contexts", "1k"])
        .args([
            "--prefill-contexts",
            "none",
            "--max-tokens",
            "64",
            "--repeats",
            "2",
        ])
        .arg("--out")
        .arg(dir.join("b"))
        .output()
        .unwrap();
    stderr_after(&out, 0);
    sim.kill();
    let report = read_report(&dir.join("b"));
    let cells = &report.load.as_ref().unwrap().cells;
    assert_eq!(cells.len(), 2);
    for cell in cells {
        let m = cell.measurements.as_ref().unwrap();
        let r = m.repeats.as_ref().unwrap();
        assert_eq!(r.count, 2);
        assert_eq!(r.total_tokens_per_s.values.len(), 2);
        assert!((r.total_tokens_per_s.mean - m.output_tokens_per_s).abs() < 1e-9);
        // Both repeats' requests are counted, each with a cold prompt of its own (a repeat
        // that found the first's prompts cached would start far sooner).
        assert_eq!(m.completed, 2 * cell.requests.unwrap());
        let ttft = r.ttft_p50_ms.as_ref().unwrap();
        assert!(ttft.values[1] > 0.5 * ttft.values[0], "{ttft:?}");
    }
    let csv = std::fs::read_to_string(dir.join("b/measurements.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let col = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(col("repeats"), "2");
    assert!(col("total_tokens_per_s_ci_low").parse::<f64>().is_ok());

    let out = bin()
        .args([
            "run",
            "--quiet",
            "--mode",
            "conversation",
            "--concurrency",
            "2",
        ])
        .args(["--repeats", "2", "--dry-run"])
        .output()
        .unwrap();
    let stderr = stderr_after(&out, 2);
    assert!(stderr.contains("--repeats"), "{stderr}");
}
