//! Values out of range, refused where they are read: durations a clock cannot
//! hold, counts of zero, cells and studies too large to hold in memory, and a
//! rate so low that its cell would send nothing in its time. Each is a usage
//! error (exit 2) naming the flag and its limit, before anything runs.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{bin, temp_dir};

/// Runs `args`, checks exit 2 with no panic and no output folder, and returns stderr.
fn refused(args: &[&str], out: Option<&Path>) -> String {
    let start = Instant::now();
    let o = bin().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{args:?} took {:?}",
        start.elapsed()
    );
    if let Some(out) = out {
        assert!(!out.exists(), "{args:?} left {} behind", out.display());
    }
    stderr
}

#[test]
fn durations_and_counts_out_of_range_are_refused_naming_the_flag_and_its_limit() {
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--quiet", "--dry-run"];
        args.extend_from_slice(extra);
        refused(&args, None)
    };
    // The three panics.
    for (args, says) in [
        (
            vec!["--duration", "10000000000000000000s"],
            "--duration must be at most 1day, not 10000000000000000000s",
        ),
        (
            vec![
                "--mode",
                "rate",
                "--request-rate",
                "1",
                "--drain",
                "18446744073709551615s",
            ],
            "--drain must be at most 1day",
        ),
        (
            vec!["--telemetry-interval", "18446744073709551615s"],
            "--telemetry-interval must be at most 1h",
        ),
        (
            vec!["--tensor-parallel-size", "0"],
            "--tensor-parallel-size must be at least 1, not 0",
        ),
    ] {
        let stderr = run(&args);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // Every other numeric flag of `run` at a value beyond its range.
    for (flag, value) in [
        ("--contexts", "20M"),
        ("--concurrency", "4294967295"),
        ("--prefill-contexts", "0"),
        ("--prefill-repeats", "4294967295"),
        ("--max-tokens", "18446744073709551615"),
        ("--kv-capacity-tokens", "0"),
        ("--metrics-interval", "1ms"),
        ("--requests", "1000000"),
        ("--request-rate", "1000000000"),
        ("--burstiness", "1e-300"),
        ("--search-floor", "0"),
        ("--turns", "0"),
        ("--question-tokens", "1000M"),
        ("--inject", "0"),
        ("--inject-settle", "1000h"),
        ("--search-steps", "0"),
        ("--connect-timeout", "0s"),
        ("--idle-timeout", "0s"),
        ("--gpu-memory-utilization", "0"),
        ("--max-model-len", "0"),
        ("--max-num-seqs", "0"),
        ("--block-size", "0"),
        ("--pipeline-parallel-size", "0"),
        ("--data-parallel-size", "0"),
        ("--num-speculative-tokens", "100000"),
        ("--cpu-kvcache-space-gib", "18446744073709551615"),
        ("--mem-fraction-static", "1.5"),
        ("--page-size", "0"),
        ("--ubatch-size", "0"),
        ("--client-threads", "100000"),
    ] {
        let stderr = run(&[flag, value]);
        assert!(
            stderr.contains(&format!("{flag} must be")),
            "{flag}: {stderr}"
        );
    }
    let predict = refused(&["predict", "--config", "x.json", "--duration", "0s"], None);
    assert!(
        predict.contains("--duration must be at least 1ms"),
        "{predict}"
    );
    let capacity = refused(
        &[
            "capacity",
            "--config",
            "x.json",
            "--tensor-parallel-size",
            "0",
        ],
        None,
    );
    assert!(
        capacity.contains("--tensor-parallel-size must be at least 1"),
        "{capacity}"
    );
}

#[test]
fn cells_and_studies_too_large_to_hold_are_refused_before_anything_runs() {
    let dir = temp_dir("too-large");
    let out = dir.join("out");
    let out_arg = out.to_str().unwrap();
    let rate = ["run", "--quiet", "--mode", "rate", "--request-rate", "1000"];
    // The command: refused by --duration's limit, in no time and no memory.
    let args = [&rate[..], &["--duration", "100000000s", "--out", out_arg]].concat();
    assert!(refused(&args, Some(&out)).contains("--duration must be at most"));
    // Within every flag's limit, but a million requests in one cell.
    let args = [&rate[..], &["--duration", "1h", "--out", out_arg]].concat();
    let stderr = refused(&args, Some(&out));
    assert!(
        stderr.contains("plans 3,600,000 requests, more than the 100,000 a cell may hold"),
        "{stderr}"
    );
    // 4 parameters × 100 values: 100,000,000 points.
    let values: Vec<String> = (0..100).map(|i| i.to_string()).collect();
    let list = values.join(", ");
    let study = dir.join("grid.toml");
    std::fs::write(
        &study,
        format!(
            "name = \"grid\"\n[server]\ncommand = \"serve {{a}} {{b}} {{c}} {{d}} --port {{port}}\"\n\
             [parameters]\na = [{list}]\nb = [{list}]\nc = [{list}]\nd = [{list}]\n\
             [run]\nargs = [\"--contexts\", \"0\"]\n"
        ),
    )
    .unwrap();
    let study = study.to_str().unwrap();
    for args in [
        vec!["study", "run", "--dry-run", "--out", out_arg, study],
        vec!["study", "k8s", study, "-o", out_arg, "--image", "x"],
    ] {
        let stderr = refused(&args, Some(&out));
        assert!(
            stderr.contains("100000000 points") && stderr.contains("more than the 10000"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_rate_too_low_to_send_within_the_duration_is_refused_at_plan_time() {
    for (arrival, first) in [("constant", "at 1000.0 s"), ("poisson", "first arrival at")] {
        let stderr = refused(
            &[
                "run",
                "--quiet",
                "--dry-run",
                "--mode",
                "rate",
                "--request-rate",
                "0.001",
                "--duration",
                "2s",
                "--arrival",
                arrival,
            ],
            None,
        );
        assert!(
            stderr.contains(first) && stderr.contains("it would send nothing"),
            "{arrival}: {stderr}"
        );
    }
}
