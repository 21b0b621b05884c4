//! Servers that crash, stall, throttle and misbehave: for each, the run ends
//! or goes on as a user would expect, the failing cell records a typed error
//! kind and message, every finished cell stays in the journal and the report,
//! nothing panics or hangs past the configured timeouts, and the exit code
//! says whether the run was complete (0 complete, 1 stopped early or nothing
//! measured, 2 bad input).
//!
//! Most faults are injected by a proxy (see `stage.rs`) into the long-context
//! row only, so one run shows a healthy cell next to the broken one.

use std::time::Duration;

use speedmatrix_report::{CellStatus, TokenCountSource};

use crate::stage::{
    LONG_BODY, Outcome, Stage, TWO_CELLS, Trouble, one_cell, profile_with, run_against, run_cmd,
    run_staged,
};
use crate::support::{
    SimProcess, decode_records, free_port, run_sim_profile, run_url, temp_dir, test_profile,
    wait_for,
};

/// Generous upper bound for a two-cell run with 1 s windows, failures included.
const RUN_LIMIT: Duration = Duration::from_secs(30);

fn faulty_long_row(name: &str, spec: &str, decode_only: bool, extra: &[&str]) -> Outcome {
    let trouble = Trouble::Fault {
        spec: spec.into(),
        min_body: LONG_BODY,
        decode_only,
    };
    // A flag in `extra` replaces the same flag of the two-cell plan.
    let mut args: Vec<&str> = Vec::new();
    let mut base = TWO_CELLS.chunks(2);
    for pair in base.by_ref() {
        if !extra.contains(&pair[0]) {
            args.extend_from_slice(pair);
        }
    }
    args.extend_from_slice(extra);
    let outcome = run_staged(name, trouble, &args);
    outcome.assert_no_panic();
    outcome
}

/// The run completes (exit 0), the short row is measured, the long row is an
/// error of `kind`, and both are in the journal.
fn assert_long_row_fails(o: &Outcome, kind: &str) -> String {
    assert_eq!(
        o.code,
        Some(0),
        "a run with a failing cell still completes; stderr: {}",
        o.stderr
    );
    assert!(o.cell(0).status.is_valid(), "{:?}", o.cell(0).status);
    let (got, message) = o.error_of(256);
    assert_eq!(got, kind, "{message}");
    assert!(!message.is_empty());
    o.assert_nothing_lost();
    assert_eq!(o.journal_cells().len(), 2);
    assert!(o.stderr.contains("1 errors"), "{}", o.stderr);
    assert!(o.elapsed < RUN_LIMIT, "took {:?}", o.elapsed);
    eprintln!(
        "[figures] {kind}: gave up and finished the run in {:.1} s",
        o.elapsed.as_secs_f64()
    );
    message
}

#[test]
fn connection_reset_mid_stream_fails_the_cell_and_the_run_goes_on() {
    let o = faulty_long_row("reset", "close-after=5", true, &[]);
    let message = assert_long_row_fails(&o, "disconnected");
    assert!(message.contains("ended early"), "{message}");
}

#[test]
fn a_stall_longer_than_the_idle_timeout_fails_the_cell_after_the_timeout() {
    let o = faulty_long_row("stall", "stall=30s@5", true, &["--idle-timeout", "1s"]);
    let message = assert_long_row_fails(&o, "timeout_idle");
    assert!(message.contains("1s"), "{message}");
}

#[test]
fn slow_headers_past_the_timeout_fail_and_below_it_only_raise_ttft() {
    let o = faulty_long_row(
        "slow-headers",
        "slow-headers=30s",
        false,
        &["--idle-timeout", "1s"],
    );
    let message = assert_long_row_fails(&o, "timeout_headers");
    assert!(message.contains("no response headers"), "{message}");

    let o = faulty_long_row("slow-headers-ok", "slow-headers=400ms", true, &[]);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let cell = o.cell(256);
    assert!(cell.status.is_valid(), "{:?}", cell.status);
    let ttft = cell.measurements.unwrap().ttft_ms.p50;
    assert!(
        ttft >= 400.0,
        "the 400 ms header delay is part of TTFT, got {ttft} ms"
    );
}

#[test]
fn http_400_404_and_500_fail_their_cell_with_the_status_and_the_servers_message() {
    for status in [400, 404, 500] {
        let o = faulty_long_row(
            &format!("http-{status}"),
            &format!("status={status}"),
            false,
            &[],
        );
        let message = assert_long_row_fails(&o, "http_status");
        assert!(message.contains(&format!("HTTP {status}")), "{message}");
        assert!(
            !message.contains("retries"),
            "{status} must not be retried: {message}"
        );
    }
}

#[test]
fn persistent_429_and_503_are_retried_a_bounded_number_of_times_then_fail_the_cell() {
    for status in [429, 503] {
        let o = faulty_long_row(
            &format!("http-{status}"),
            &format!("status={status}; retry-after=1"),
            false,
            &[],
        );
        let message = assert_long_row_fails(&o, "http_status");
        assert!(message.contains(&format!("HTTP {status}")), "{message}");
        assert!(message.contains("gave up after 3 retries"), "{message}");
        // Three waits of the server's Retry-After (1 s) before giving up.
        assert!(
            o.elapsed >= Duration::from_secs(3),
            "Retry-After not honoured: {:?}",
            o.elapsed
        );
    }
}

#[test]
fn a_transient_429_with_retry_after_is_retried_and_the_cell_is_measured() {
    let o = run_staged("throttle", Trouble::Throttle(2), &TWO_CELLS);
    o.assert_no_panic();
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let report = o.report();
    assert!(
        report.decode.iter().all(|c| c.status.is_valid()),
        "{:?}",
        report.decode
    );
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("429/503") && n.contains("Retry-After")),
        "the retries are not reported: {:?}",
        report.notes
    );
    o.assert_nothing_lost();
}

#[test]
fn malformed_json_in_one_chunk_is_a_protocol_error() {
    let o = faulty_long_row("malformed", "malformed-chunk-after=5", true, &[]);
    let message = assert_long_row_fails(&o, "protocol");
    assert!(message.contains("protocol error"), "{message}");
}

#[test]
fn an_sse_line_over_the_cap_is_refused_without_exhausting_memory() {
    // The client's cap is 64 MiB; the server sends one line a little over it.
    // Reading 64 MiB through the proxy can take over a second on a loaded
    // 2-core machine; a longer window keeps the refusal inside it (else the
    // request is still reading when the window closes and the cell only
    // shows "no tokens").
    let o = faulty_long_row(
        "oversized",
        "oversized-line=68000000@3",
        true,
        &["--duration", "5s"],
    );
    let message = assert_long_row_fails(&o, "sse_line_too_long");
    assert!(message.contains("limit"), "{message}");
}

#[test]
fn an_html_page_instead_of_an_event_stream_is_a_content_type_error() {
    let o = run_staged("html", Trouble::Html, &TWO_CELLS);
    o.assert_no_panic();
    // Every generation request gets the page: nothing is measured, so the
    // complete run still exits 1 and says why.
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("every step that ran failed"),
        "{}",
        o.stderr
    );
    for context in [0, 256] {
        let (kind, message) = o.error_of(context);
        assert_eq!(kind, "content_type");
        assert!(
            message.contains("text/html") && message.contains("Please log in"),
            "{message}"
        );
    }
    o.assert_nothing_lost();
}

#[test]
fn a_server_that_ignores_ignore_eos_is_reported_by_finish_reason() {
    let dir = temp_dir("eos");
    let (profile, _) = profile_with(&dir, |p| p.eos_after_tokens = Some(20));
    // The proxy drops ignore_eos, as some servers do.
    let stage = Stage::new(profile, Trouble::Strip(&["ignore_eos", "min_tokens"]));
    let o = run_against(&stage.url, &dir, &TWO_CELLS);
    o.assert_no_panic();
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let m = o.cell(0).measurements.unwrap();
    assert!(
        m.finish_reasons.get("stop").copied().unwrap_or(0) >= 1,
        "{:?}",
        m.finish_reasons
    );
    let notes = o.report().notes;
    assert!(
        notes
            .iter()
            .any(|n| n.contains("finish_reason \"stop\"") && n.contains("--min-tokens")),
        "{notes:?}"
    );
    o.assert_nothing_lost();
}

#[test]
fn a_server_that_sends_no_usage_gets_an_uncalibrated_estimate_marked_as_such() {
    let o = run_staged("no-usage", Trouble::Strip(&["stream_options"]), &TWO_CELLS);
    o.assert_no_panic();
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    for c in o.report().decode {
        let m = c.measurements.as_ref().expect("measured");
        assert_eq!(m.token_count_source, TokenCountSource::Tokenizer);
        assert!(m.output_tokens.get() > 0);
        let t = m.token_count.as_ref().expect("token count detail");
        // No request, not even a calibration request, reported usage.
        assert!(t.estimated && t.calibration_requests == 0 && t.uncertainty_pct.is_none());
        assert_eq!(c.status_label(), "Estimated (uncalibrated)");
    }
    let md = std::fs::read_to_string(o.out.join("report.md")).unwrap();
    assert!(
        md.contains(TokenCountSource::Tokenizer.describe()),
        "report.md does not name the token source"
    );
    assert!(md.contains("| Estimated (uncalibrated) |"), "{md}");
    assert!(md.contains("≈"), "matrix cells of estimates are not marked");
    let csv = std::fs::read_to_string(o.out.join("measurements.csv")).unwrap();
    assert!(csv.contains(",tokenizer,true,,"), "{csv}");
}

#[test]
fn connection_refused_at_start_is_one_line_exit_2_and_leaves_nothing_behind() {
    let dir = temp_dir("refused");
    // A port that was free a moment ago: nothing listens there.
    let port = free_port();
    let o = run_against(&format!("http://127.0.0.1:{port}"), &dir, &TWO_CELLS);
    o.assert_no_panic();
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert_eq!(o.stderr.trim().lines().count(), 1, "one line: {}", o.stderr);
    assert!(
        o.stderr.contains("cannot reach the server") && o.stderr.contains("--url"),
        "{}",
        o.stderr
    );
    assert!(
        !o.out.exists(),
        "a run that never started left {} behind",
        o.out.display()
    );
    assert!(o.elapsed < Duration::from_secs(10));
    eprintln!(
        "[figures] connection refused: exit 2 after {:.2} s",
        o.elapsed.as_secs_f64()
    );
}

#[test]
fn a_server_that_accepts_but_never_answers_gives_up_after_the_timeout() {
    let dir = temp_dir("silent");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // Accept connections and hold them open without a word.
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        listener.set_nonblocking(true).unwrap();
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok((c, _)) = listener.accept() {
                conns.push(c);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let o = run_against(
        &url,
        &dir,
        &[&TWO_CELLS[..], &["--idle-timeout", "1s"]].concat(),
    );
    o.assert_no_panic();
    o.assert_one_line_exit_2();
    assert!(o.stderr.contains("no response headers"), "{}", o.stderr);
    assert!(
        o.elapsed < Duration::from_secs(10),
        "gave up only after {:?}",
        o.elapsed
    );
    assert!(!o.out.exists());
    eprintln!(
        "[figures] silent server: exit 2 after {:.2} s",
        o.elapsed.as_secs_f64()
    );
    drop(held);
}

#[test]
fn a_server_that_dies_mid_cell_stops_the_run_with_every_finished_cell_kept() {
    let dir = temp_dir("dies");
    let (_, profile) = test_profile(&dir);
    let mut sim = SimProcess::start(&profile);
    let out = dir.join("out");
    let child = run_url(&sim.url)
        .args([
            "--contexts",
            "0",
            "--concurrency",
            "1,2",
            "--prefill-contexts",
            "none",
        ])
        .args(["--duration", "2s", "--max-tokens", "256", "--out"])
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(30), "the first cell", || {
        decode_records(&out) >= 1
    });
    // The second cell is warming up or measuring now.
    std::thread::sleep(Duration::from_millis(700));
    sim.kill();
    let killed = std::time::Instant::now();
    let output = child.wait_with_output().unwrap();
    let gave_up = killed.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("stopped early") && stderr.contains("--resume"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("ServerGone"),
        "debug formatting leaked into the message: {stderr}"
    );
    let o = Outcome {
        code: output.status.code(),
        stderr: stderr.into(),
        stdout: String::new(),
        out,
        elapsed: gave_up,
    };
    o.assert_nothing_lost();
    let first = o.report().decode[0].clone();
    assert!(first.status.is_valid(), "{:?}", first.status);
    assert!(matches!(
        o.report().decode[1].status,
        CellStatus::Skipped { .. }
    ));
    assert!(
        gave_up < Duration::from_secs(15),
        "took {gave_up:?} to give up"
    );
    eprintln!(
        "[figures] server killed mid-cell: exit 1 after {:.2} s",
        gave_up.as_secs_f64()
    );
}

#[test]
fn profile_wide_500s_fail_every_step_and_the_run_says_nothing_was_measured() {
    let dir = temp_dir("profile-500");
    let (_, path) = profile_with(&dir, |p| p.faults = Some("status=500".into()));
    let mut cmd = run_sim_profile(&path);
    cmd.args(TWO_CELLS);
    cmd.args(["--prefill-contexts", "128"]);
    let o = run_cmd(cmd, &dir);
    o.assert_no_panic();
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stderr.contains("every step that ran failed") && o.stderr.contains("HTTP 500"),
        "{}",
        o.stderr
    );
    assert!(matches!(
        o.report().prefill[0].status,
        CellStatus::Error { .. }
    ));
    for c in [0, 256] {
        assert_eq!(o.error_of(c).0, "http_status");
    }
    o.assert_nothing_lost();
}

#[test]
fn a_cell_where_one_request_fails_keeps_its_measurements_as_partial() {
    // The second stream's first request is cut after 30 tokens; it is
    // replaced, and the other two streams run the whole window.
    let dir = temp_dir("partial");
    let (profile, _) = test_profile(&dir);
    let trouble = Trouble::FaultNth {
        spec: "close-after=30".into(),
        nth: &[1],
    };
    let stage = Stage::new(profile, trouble);
    let args = one_cell(3, "2s", 1024);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run_against(&stage.url, &dir, &args);
    o.assert_no_panic();
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let cell = o.cell(0);
    match &cell.status {
        CellStatus::Partial {
            failed_requests,
            good_requests,
            error_kinds,
            message,
        } => {
            assert_eq!(*failed_requests, 1);
            assert!(*good_requests >= 3, "{good_requests}");
            assert_eq!(error_kinds.get("disconnected"), Some(&1), "{error_kinds:?}");
            assert!(!message.is_empty());
        }
        other => panic!("expected a partial cell, got {other:?}; {}", o.stderr),
    }
    let m = cell
        .measurements
        .as_ref()
        .expect("a partial cell keeps its numbers");
    assert!(m.total_tokens_per_s > 0.0 && m.ttft_ms.p50 > 0.0);
    let md = std::fs::read_to_string(o.out.join("report.md")).unwrap();
    assert!(md.contains("| Partial |"), "{md}");
    assert!(md.contains("‡"), "{md}");
    let csv = std::fs::read_to_string(o.out.join("measurements.csv")).unwrap();
    assert!(csv.contains("decode,0,3,partial,"), "{csv}");
    o.assert_nothing_lost();
}
