//! Secrets and untrusted strings: the API key never leaves the process in
//! any output, server- and user-provided strings are escaped in the HTML
//! report, and a key over plain http:// to another host is warned about.

use std::path::Path;

use crate::stage::{
    LONG_BODY, Outcome, Stage, TWO_CELLS, Trouble, profile_with, run_against, run_cmd, run_staged,
};
use crate::support::{bin, free_port, run_sim_profile, stderr_after, temp_dir, test_profile};

const SENTINEL: &str = "sk-SENTINEL-9f27c1d0e4b3a6";

/// Every byte the run produced: stdout, stderr and every file under `out`.
fn assert_secret_absent(o: &Outcome) {
    assert!(!o.stdout.contains(SENTINEL), "the key is on stdout");
    assert!(!o.stderr.contains(SENTINEL), "the key is on stderr");
    // Not even a telling piece of it.
    assert!(
        !o.stderr.contains("9f27c1d0e4b3a6"),
        "part of the key is on stderr"
    );
    let mut files = 0;
    visit(&o.out, &mut |path| {
        files += 1;
        let bytes = std::fs::read(path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(SENTINEL), "the key is in {}", path.display());
    });
    assert!(files >= 5, "expected the run's files, found {files}");
}

/// `-VERBOSITY run` with the key as a flag against `url`, over [`TWO_CELLS`]
/// and one prefill row.
fn keyed_run(verbosity: &str, url: &str) -> std::process::Command {
    let mut cmd = bin();
    cmd.args([
        verbosity,
        "run",
        "--tokenizer",
        "bundled",
        "--url",
        url,
        "--api-key",
        SENTINEL,
    ])
    .args(TWO_CELLS)
    .args(["--prefill-contexts", "64"]);
    cmd
}

fn visit(dir: &Path, f: &mut impl FnMut(&Path)) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            visit(&path, f);
        } else {
            f(&path);
        }
    }
}

#[test]
fn the_api_key_appears_in_no_output_even_at_trace_level_or_when_the_server_echoes_it() {
    let dir = temp_dir("secret");
    let (profile, _) = test_profile(&dir);
    // The long row's requests are refused with a 401 that echoes the
    // Authorization header; the short row is measured normally.
    let stage = Stage::new(
        profile,
        Trouble::EchoAuth {
            min_body: LONG_BODY,
        },
    );
    let o = run_cmd(keyed_run("-vvv", &stage.url), &dir);
    assert_eq!(
        o.code,
        Some(0),
        "{}",
        o.stderr
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The run really did log at trace level and really met the echoing server.
    assert!(o.stderr.contains("TRACE"), "no trace logs");
    let (kind, message) = o.error_of(256);
    assert_eq!(kind, "http_status");
    assert!(
        message.contains("HTTP 401") && message.contains("[redacted]"),
        "{message}"
    );
    assert!(
        !o.stderr.contains("warning: sending an API key"),
        "loopback must not warn"
    );
    assert_secret_absent(&o);

    // The key from the environment, and an error at the probe.
    let port = free_port();
    let mut cmd = bin();
    cmd.env("OPENAI_API_KEY", SENTINEL).args([
        "-vvv",
        "run",
        "--tokenizer",
        "bundled",
        "--url",
        &format!("http://127.0.0.1:{port}"),
    ]);
    let o = run_cmd(cmd, &temp_dir("secret-probe"));
    assert_eq!(o.code, Some(2));
    assert!(!o.stderr.contains(SENTINEL));
}

#[test]
fn the_api_key_is_nowhere_when_every_request_is_refused_with_it_echoed() {
    let dir = temp_dir("secret-all-401");
    let (profile, _) = test_profile(&dir);
    let stage = Stage::new(profile, Trouble::EchoAuth { min_body: 0 });
    let o = run_cmd(keyed_run("-vv", &stage.url), &dir);
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    assert_eq!(o.code, Some(1), "nothing measured: {}", o.stderr);
    assert!(
        o.stderr.contains("HTTP 401") && o.stderr.contains("[redacted]"),
        "{}",
        o.stderr
    );
    assert_secret_absent(&o);
}

#[test]
fn the_html_report_escapes_server_and_user_strings() {
    let dir = temp_dir("escape");
    let evil_model = "<script>alert('model')</script>";
    let (_, profile) = profile_with(&dir, |p| p.served_model_name = evil_model.into());
    let mut cmd = run_sim_profile(&profile);
    cmd.args(TWO_CELLS)
        .args([
            "--launch-command",
            "vllm serve <script>alert('launch')</script> --port 8000",
        ])
        .args(["--quantization", "<img src=x onerror=alert('q')>"]);
    let o = run_cmd(cmd, &dir);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let html = std::fs::read_to_string(o.out.join("report.html")).unwrap();
    for raw in [
        "<script>alert('model')",
        "<script>alert('launch')",
        "<img src=x",
    ] {
        assert!(!html.contains(raw), "unescaped `{raw}` in report.html");
    }
    assert!(
        html.contains("&lt;script&gt;alert("),
        "the strings are missing instead of escaped"
    );
    let report = o.report();
    assert_eq!(
        report.run.served_model, evil_model,
        "run.json keeps the exact string"
    );
}

#[test]
fn server_error_messages_are_escaped_in_the_html_report() {
    let trouble = Trouble::EchoAuth {
        min_body: LONG_BODY,
    };
    let o = run_staged("escape-error", trouble, &TWO_CELLS);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(
        o.error_of(256).1.contains("<script>"),
        "the message should carry the server's text"
    );
    let html = std::fs::read_to_string(o.out.join("report.html")).unwrap();
    assert!(
        !html.contains("<script>alert('err')"),
        "unescaped server message in report.html"
    );
}

#[test]
fn an_api_key_over_plain_http_to_another_host_is_warned_about_before_any_connection() {
    let dir = temp_dir("plain-http");
    // The run is refused (non-empty --out) right after the flag checks, before
    // any connection: the documentation address 192.0.2.10 is never contacted.
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("keep"), "x").unwrap();
    let output = bin()
        .args([
            "run",
            "--tokenizer",
            "bundled",
            "--url",
            "http://192.0.2.10:8000",
            "--api-key",
            SENTINEL,
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = stderr_after(&output, 2);
    assert!(
        stderr.contains("already holds files"),
        "the run got further than the flag checks: {stderr}"
    );
    let warning: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("warning"))
        .collect();
    assert_eq!(warning.len(), 1, "{stderr}");
    assert!(
        warning[0].contains("plain http://") && warning[0].contains("192.0.2.10"),
        "{}",
        warning[0]
    );
    assert!(!stderr.contains(SENTINEL));

    // https:// and no key give no warning.
    for args in [
        ["--url", "https://192.0.2.10:8000", "--api-key", SENTINEL],
        ["--url", "http://192.0.2.10:8000", "--seed", "1"],
    ] {
        let output = bin()
            .args(["run", "--tokenizer", "bundled"])
            .args(args)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        let stderr = stderr_after(&output, 2);
        assert!(!stderr.contains("warning"), "{stderr}");
    }
}

#[test]
fn insecure_is_named_in_the_report() {
    let dir = temp_dir("insecure");
    let (_, profile) = test_profile(&dir);
    let mut cmd = run_sim_profile(&profile);
    cmd.arg("--insecure").args(TWO_CELLS);
    let o = run_cmd(cmd, &dir);
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let md = std::fs::read_to_string(o.out.join("report.md")).unwrap();
    assert!(
        md.contains("--insecure"),
        "report.md does not say verification was off"
    );
    assert!(o.report().notes.iter().any(|n| n.contains("--insecure")));
}

#[test]
fn https_certificates_are_verified_by_default_and_insecure_opts_out() {
    let dir = temp_dir("tls");
    let (profile, _) = test_profile(&dir);
    let stage = Stage::new(profile, Trouble::None);
    let port = crate::stage::start_tls(&stage, &stage.url);
    let url = format!("https://127.0.0.1:{port}");

    // The test certificate is self-signed: the run must refuse it.
    let o = run_against(&url, &dir, &TWO_CELLS);
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    o.assert_one_line_exit_2();
    assert!(
        o.stderr.to_lowercase().contains("certificate"),
        "the reason is not named: {}",
        o.stderr
    );
    assert!(!o.out.exists());

    // --insecure connects, measures, and says so in the report.
    let o = run_against(
        &url,
        &temp_dir("tls-insecure"),
        &[&TWO_CELLS[..], &["--insecure"]].concat(),
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(o.report().decode.iter().all(|c| c.status.is_valid()));
    let md = std::fs::read_to_string(o.out.join("report.md")).unwrap();
    assert!(md.contains("--insecure"));
}
