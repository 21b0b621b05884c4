//! The main job end to end: a whole matrix on the simulator, checked against
//! the simulator's own capacity and cost model.

use speedmatrix_report::CellStatus;
use speedmatrix_runner::prompt_len;
use speedmatrix_units::Tokens;

use crate::support::{bin, journal_lines, read_report, temp_dir, test_profile};

const MAX_TOKENS: u64 = 512;

#[test]
fn a_matrix_matches_the_simulators_capacity_and_cost_model() {
    let dir = temp_dir("matrix");
    let (profile, profile_path) = test_profile(&dir);
    let out = dir.join("out");
    let status = bin()
        .args(["run", "--quiet", "--sim-profile"])
        .arg(&profile_path)
        .args([
            "--contexts",
            "0,256,1k",
            "--concurrency",
            "1,8,64",
            "--prefill-contexts",
            "512,1k",
            "--duration",
            "2s",
            "--max-tokens",
            "512",
            "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success(), "run failed: {status}");

    for file in [
        "run.json",
        "report.md",
        "report.html",
        "measurements.csv",
        "journal.jsonl",
    ] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let report = read_report(&out);
    report.validate().unwrap();
    assert_eq!(report.decode.len(), 9);
    // One start line, then every prefill point and every cell.
    assert_eq!(journal_lines(&out).len(), 1 + 2 + 9);

    for row in &report.prefill {
        assert!(
            row.status.is_valid(),
            "prefill {}: {:?}",
            row.context,
            row.status
        );
        assert_eq!(
            row.prompt_tokens_reported,
            Some(row.context),
            "server counted other prompt tokens"
        );
    }
    let mut valid = 0;
    for cell in &report.decode {
        let n = u64::from(cell.concurrency.get());
        let len = prompt_len(cell.context).get() + MAX_TOKENS;
        let fits = profile.fits(n, len);
        match &cell.status {
            CellStatus::OverCapacity { .. } => assert!(
                !fits,
                "{} × {n} planned over capacity but fits",
                cell.context
            ),
            CellStatus::Valid => {
                assert!(fits, "{} × {n} ran but does not fit", cell.context);
                valid += 1;
                let m = cell.measurements.as_ref().unwrap();
                assert_eq!(m.prompt_token_mismatches, 0);
                let expected = model_rate(&profile, n, prompt_len(cell.context), m.output_tokens);
                let ratio = m.total_tokens_per_s / expected;
                assert!(
                    (0.9..=1.1).contains(&ratio),
                    "{} × {n}: measured {:.1} tok/s, cost model {expected:.1} (ratio {ratio:.3})",
                    cell.context,
                    m.total_tokens_per_s
                );
                assert!((m.average_active_requests - n as f64).abs() < 0.5);
            }
            other => panic!("{} × {n}: unexpected status {other:?}", cell.context),
        }
    }
    assert!(valid >= 6, "only {valid} valid cells");
    assert!(
        report
            .decode
            .iter()
            .any(|c| matches!(c.status, CellStatus::OverCapacity { .. }))
    );
}

/// Steady-state output rate of N streams by the simulator's cost model: one
/// token per stream per decode step, at the step time for the batch's
/// context midway through the window.
fn model_rate(profile: &speedmatrix_sim::Profile, n: u64, prompt: Tokens, out: Tokens) -> f64 {
    // Each stream is about this many tokens into its answer in mid-window.
    let per_stream = out.get() as f64 / n as f64;
    let generated_mid = (per_stream / 2.0).min(MAX_TOKENS as f64);
    let context_per_stream = prompt.get() + generated_mid as u64;
    let step = profile
        .cost
        .decode_step(n, context_per_stream)
        .as_secs_f64()
        / profile.time_scale;
    n as f64 / step
}

#[test]
fn chat_prompts_carry_the_exact_token_count_the_server_reports() {
    let dir = temp_dir("chat");
    let (_, profile_path) = test_profile(&dir);
    let out = dir.join("out");
    let status = bin()
        .args(["run", "--quiet", "--api", "chat", "--sim-profile"])
        .arg(&profile_path)
        .args([
            "--contexts",
            "300",
            "--concurrency",
            "2",
            "--prefill-contexts",
            "777",
            "--duration",
            "1s",
            "--max-tokens",
            "256",
            "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let report = read_report(&out);
    assert_eq!(
        report.prefill[0].prompt_tokens_reported,
        Some(Tokens::new(777))
    );
    let cell = &report.decode[0];
    assert!(cell.status.is_valid(), "{:?}", cell.status);
    assert_eq!(
        cell.measurements.as_ref().unwrap().prompt_token_mismatches,
        0
    );
}

#[test]
fn extra_body_fields_reach_the_server_and_the_report() {
    let dir = temp_dir("extra-body");
    let (_, profile_path) = test_profile(&dir);
    let out = dir.join("out");
    // The simulator reads a `sim_fault` body field: a 418 on every request
    // proves the field was sent.
    let output = crate::support::run_sim_profile(&profile_path)
        .args([
            "--contexts",
            "0",
            "--concurrency",
            "1",
            "--prefill-contexts",
            "none",
        ])
        .args(["--duration", "1s", "--max-tokens", "64"])
        .args(["--extra-body", r#"{"sim_fault": "status=418"}"#, "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "every step failed");
    let report = read_report(&out);
    match &report.decode[0].status {
        CellStatus::Error { message, .. } => assert!(message.contains("418"), "{message}"),
        other => panic!("the extra field did not reach the server: {other:?}"),
    }
    assert!(report.notes.iter().any(|n| n.contains("sim_fault")));

    let bad = bin()
        .args(["run", "--quiet", "--extra-body", "[1, 2]", "--out"])
        .arg(dir.join("bad"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("JSON object"));
}

#[test]
fn prefill_measured_during_decode_warm_up_is_cold_and_said_so() {
    let dir = temp_dir("prefill-warmup");
    let (mut profile, profile_path) = test_profile(&dir);
    // Prefill slow enough that a cached prompt would show: 1K tokens ≈ 50 ms.
    profile.cost.prefill_per_token_us = 50.0;
    std::fs::write(&profile_path, serde_json::to_string(&profile).unwrap()).unwrap();
    let out = dir.join("out");
    let status = bin()
        .args(["run", "--quiet", "--sim-profile"])
        .arg(&profile_path)
        .args(["--contexts", "0,1k", "--concurrency", "2,4"])
        .args(["--prefill-contexts", "512,1k", "--prefill-mode", "warmup"])
        .args(["--duration", "1s", "--max-tokens", "128", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success(), "run failed: {status}");
    let report = read_report(&out);
    assert_eq!(
        report.run.prefill_mode,
        speedmatrix_report::PrefillMode::Warmup
    );
    let cold = |tokens: u64| {
        profile
            .cost
            .prefill(tokens, u64::from(profile.max_num_batched_tokens))
            .as_secs_f64()
            * 1e3
    };
    for row in &report.prefill {
        assert!(row.status.is_valid(), "{:?}", row.status);
        assert_eq!(row.prompt_tokens_reported, Some(row.context));
        let ttft = row.ttft_ms.unwrap();
        let model = cold(row.context.get());
        // A cold prompt costs its whole prefill: a cached one would be a step or so
        // (8 ms here). Only the lower bound tells the two apart; the upper one is
        // loose because a loaded 2-core CI host delays a first token by tens of ms.
        assert!(
            ttft > 0.65 * model && ttft < 3.0 * model + 50.0,
            "prefill {}: {ttft} ms vs {model} ms cold",
            row.context
        );
    }
    // The 1K row came from the first warm-up of the 1K × 2 cell, journaled
    // before it; 512 has no decode row and was measured cold before the cells.
    let records: Vec<(String, u64)> = journal_lines(&out)
        .iter()
        .filter(|l| l["record"] != "start")
        .map(|l| {
            let r = l["record"].as_str().unwrap().to_owned();
            let ctx = l["outcome"]["context"].as_u64().unwrap();
            (r, ctx)
        })
        .collect();
    let at = |r: &str, c: u64| records.iter().position(|x| x.0 == r && x.1 == c).unwrap();
    assert_eq!(at("prefill", 512), 0, "{records:?}");
    assert!(at("decode", 0) < at("prefill", 1024), "{records:?}");
    assert_eq!(at("prefill", 1024) + 1, at("decode", 1024), "{records:?}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("**Prefill mode:** Measured during decode warm-up"),
        "{md}"
    );
}

#[test]
fn plain_progress_lines_count_the_steps_and_the_time_left() {
    let dir = temp_dir("progress");
    let (_, profile_path) = test_profile(&dir);
    // Not a terminal: one line per event; the 1K prefill point ends during
    // the 1K × 1 cell's warm-up, out of the plan's order.
    let run = bin()
        .args(["run", "--sim-profile"])
        .arg(&profile_path)
        .args(["--contexts", "0,1k", "--concurrency", "1,2"])
        .args(["--prefill-contexts", "512,1k", "--prefill-mode", "warmup"])
        .args(["--duration", "1s", "--max-tokens", "128", "--out"])
        .arg(dir.join("out"))
        .output()
        .unwrap();
    let stderr = crate::support::stderr_after(&run, 0);
    assert!(stderr.contains("6 steps planned, about "), "{stderr}");
    let counts: Vec<(usize, bool)> = stderr
        .lines()
        .filter_map(|l| {
            let (_, tail) = l.rsplit_once(" (")?;
            let (done, rest) = tail.split_once("/6 steps")?;
            Some((done.parse().ok()?, rest.starts_with(", about ")))
        })
        .collect();
    // Every step ends once, with the time left until the last one: never 0 s.
    let expect: Vec<(usize, bool)> = (1..=6).map(|k| (k, k < 6)).collect();
    assert_eq!(counts, expect, "{stderr}");
    assert!(!stderr.contains("about 0s left"), "{stderr}");
    assert!(stderr.contains("(6/6 steps)\n"), "{stderr}");
}
