//! Servers that lie and servers that never finish: small Python servers on
//! 127.0.0.1 (`tests/fixtures/hostile/server.py`) that report impossible token
//! counts, ignore `max_tokens` or trickle a byte a second. Each run must end
//! in bounded time with the failing cells typed (`impossible_count`,
//! `deadline`) and a report written.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use speedmatrix_report::CellStatus;

use crate::support::{free_port, read_report, run_url, temp_dir};

/// The fixture server, killed on drop (and gone by itself after its lifetime).
pub struct Hostile {
    child: Child,
    pub url: String,
}

impl Hostile {
    pub fn start(mode: &str) -> Hostile {
        Hostile::start_on(mode, 0)
    }

    pub fn start_on(mode: &str, port: u16) -> Hostile {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hostile/server.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args([mode, "--lifetime", "120", "--port", &port.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the hostile server");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the hostile server printed its address");
        let url = line.trim_start_matches("listening on ").trim().to_owned();
        Hostile { child, url }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cmd` to its end, failing the test if it is still running after `limit`.
pub fn output_within(cmd: &mut Command, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            return (child.wait_with_output().unwrap(), start.elapsed());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The matrix `M`: one context, concurrency 1 and 2, 2 s windows
/// (`run_url` adds `--quiet`).
const M: [&str; 12] = [
    "--contexts",
    "0",
    "--concurrency",
    "1,2",
    "--duration",
    "2s",
    "--prefill-contexts",
    "none",
    "--max-tokens",
    "16",
    "--telemetry",
    "off",
];

/// Every decode cell's error kind and message; panics on a cell that is not an error.
fn errors(out: &Path) -> Vec<(String, String)> {
    read_report(out)
        .decode
        .into_iter()
        .map(|c| match c.status {
            CellStatus::Error {
                error_kind,
                message,
                ..
            } => (error_kind, message),
            other => panic!("expected an error, got {other:?}"),
        })
        .collect()
}

#[test]
fn impossible_usage_counts_fail_their_requests_and_the_report_is_still_written() {
    let dir = temp_dir("impossible-counts");
    // 2^64 − 1 output tokens on every request; 1000 × max_tokens on the streams'.
    for (mode, value, bound) in [
        ("usage-max", "18,446,744,073,709,551,615", "257"),
        ("usage-1000x", "16,000", "272"),
        ("prompt-max", "18,446,744,073,709,551,615", "8,"),
    ] {
        let server = Hostile::start(mode);
        let out = dir.join(mode);
        let (o, _) = output_within(
            run_url(&server.url).args(M).arg("--out").arg(&out),
            Duration::from_secs(60),
        );
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{mode}: every cell failed: {stderr}"
        );
        assert!(out.join("run.json").exists(), "{mode}: no report: {stderr}");
        for (kind, message) in errors(&out) {
            assert_eq!(kind, "impossible_count", "{mode}: {message}");
            assert!(
                message.contains(value) && message.contains(bound),
                "{mode}: the message names the value and the bound: {message}"
            );
        }
        let journal = std::fs::read_to_string(out.join("journal.jsonl")).unwrap();
        assert!(
            !journal.contains("18446744073709551615") && !journal.contains("16000"),
            "{mode}: an impossible count was stored: {journal}"
        );
    }
}

#[test]
fn a_journal_holding_an_impossible_window_is_measured_again_on_resume() {
    let dir = temp_dir("impossible-journal");
    let out = dir.join("out");
    let port = free_port();
    let server = Hostile::start_on("honest", port);
    let (o, _) = output_within(
        run_url(&server.url).args(M).arg("--out").arg(&out),
        Duration::from_secs(60),
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // What a release that kept impossible counts journaled for the first cell.
    let journal = out.join("journal.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(|line| {
            let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
            if v["record"] == "decode" && v["outcome"]["concurrency"] == 1 {
                let w = &mut v["outcome"]["window"];
                w["output_tokens"] = serde_json::json!(u64::MAX);
                w["total_tokens_per_s"] = serde_json::json!(4.774_881_318_282_034_5e20);
                w["per_request_tokens_per_s"] = serde_json::json!(5.234_073_052_106_488_5e20);
            }
            v.to_string()
        })
        .collect();
    std::fs::write(&journal, lines.join("\n") + "\n").unwrap();
    let (o, _) = output_within(
        run_url(&server.url).args(M).arg("--resume").arg(&out),
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "the resume completes: {stderr}");
    let report = read_report(&out);
    assert!(
        report.decode.iter().all(|c| c.status.is_valid()),
        "the impossible cell was measured again: {:?}",
        report.decode
    );
    let tokens = report.decode[0]
        .measurements
        .as_ref()
        .unwrap()
        .output_tokens;
    assert!(tokens.get() < 1_000_000, "{tokens}");
}

#[test]
fn requests_that_never_finish_fail_at_their_deadline() {
    let dir = temp_dir("deadlines");
    // Warm-ups (max_tokens 1) with a 2 s headers allowance: a 3 s deadline each.
    for mode in ["ignore-max-tokens", "trickle"] {
        let server = Hostile::start(mode);
        let out = dir.join(mode);
        let (o, took) = output_within(
            run_url(&server.url)
                .args(M)
                .args(["--idle-timeout", "2s", "--out"])
                .arg(&out),
            Duration::from_secs(60),
        );
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{mode}: {stderr}");
        for (kind, message) in errors(&out) {
            assert_eq!(kind, "deadline", "{mode}: {message}");
            assert!(message.contains("deadline of 3.0 s"), "{mode}: {message}");
        }
        eprintln!(
            "[figures] {mode}: two cells failed at their deadline in {:.1} s",
            took.as_secs_f64()
        );
    }
}

#[test]
fn a_hung_gpu_tool_is_stopped_and_recorded_as_unavailable() {
    let dir = temp_dir("hung-tool");
    let tools = dir.join("bin");
    std::fs::create_dir_all(&tools).unwrap();
    // An nvidia-smi that never answers, as on a host whose driver is wedged.
    let fake = tools.join("nvidia-smi");
    std::fs::write(&fake, "#!/bin/sh\nsleep 600\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", tools.display());
    let server = Hostile::start("honest");
    let out = dir.join("out");
    let limit = Duration::from_secs(60);
    let probe = std::thread::spawn({
        let url = server.url.clone();
        let path = path.clone();
        move || {
            output_within(
                crate::support::bin()
                    .args(["probe", "--json", "--telemetry", "smi", "--url", &url])
                    .env("PATH", path),
                limit,
            )
        }
    });
    let (run, took) = output_within(
        run_url(&server.url)
            .args([
                "--contexts",
                "0",
                "--concurrency",
                "1",
                "--duration",
                "1s",
                "--prefill-contexts",
                "none",
                "--max-tokens",
                "16",
                "--telemetry",
                "smi",
            ])
            .arg("--out")
            .arg(&out)
            .env("PATH", &path),
        limit,
    );
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let why = read_report(&out)
        .telemetry
        .and_then(|t| t.gpu_unavailable)
        .expect("the run says why it has no GPU telemetry");
    assert!(
        why.contains("nvidia-smi did not answer within 10s"),
        "{why}"
    );
    let (probe, probe_took) = probe.join().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&probe.stdout).unwrap();
    let why = json["local_gpus"]["unavailable"]
        .as_str()
        .unwrap_or_default();
    assert!(
        why.contains("nvidia-smi did not answer within 10s"),
        "{json}"
    );
    eprintln!(
        "[figures] hung nvidia-smi: probe {:.1} s, run {:.1} s",
        probe_took.as_secs_f64(),
        took.as_secs_f64()
    );
}
