//! A run says how it was made (issue 26): the tool's version, commit and build, the command
//! line with its secrets removed, every flag and the host, in run.json and on the page; and
//! `--resume DIR` alone continues with the flags the journal recorded.

use std::path::Path;

use crate::support::{
    SimProcess, bin, decode_records, read_report, run_url, stderr_after, temp_dir, test_profile,
};

const API_KEY: &str = "sk-e2e-provenance-key-1";
const BODY_SECRET: &str = "sk-e2e-body-secret-2";
const LAUNCH_SECRET: &str = "hf-e2e-launch-token-3";
const HEADER_SECRET: &str = "tok-e2e-header-4";

fn extra_body() -> String {
    format!(
        r#"{{"api_key": "{BODY_SECRET}", "headers": {{"Authorization": "Bearer {HEADER_SECRET}"}}}}"#
    )
}

/// Every file under `dir` and the command's output are free of the secrets.
fn assert_no_secret(dir: &Path, output: &str) {
    for secret in [API_KEY, BODY_SECRET, LAUNCH_SECRET, HEADER_SECRET] {
        assert!(!output.contains(secret), "{secret} printed: {output}");
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            assert!(!text.contains(secret), "{secret} in {}", path.display());
        }
    }
}

#[test]
fn a_run_records_how_it_was_made_without_its_secrets_and_resumes_from_its_journal() {
    let dir = temp_dir("provenance");
    let (_, path) = test_profile(&dir);
    let mut sim = SimProcess::start(&path);
    let out_dir = dir.join("run");
    let launch = format!("HF_TOKEN={LAUNCH_SECRET} vllm serve m --port 8000");
    let first = run_url(&sim.url)
        .args([
            "--contexts",
            "0",
            "--concurrency",
            "1,2",
            "--prefill-contexts",
            "none",
        ])
        .args([
            "--duration",
            "1s",
            "--max-tokens",
            "256",
            "--api-key",
            API_KEY,
        ])
        .args([
            "--extra-body",
            &extra_body(),
            "--launch-command",
            &launch,
            "--json",
            "--out",
        ])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stderr = stderr_after(&first, 0);
    assert_no_secret(
        &out_dir,
        &format!("{stderr}{}", String::from_utf8_lossy(&first.stdout)),
    );

    // --json: one line on stdout that a script can read, the files as always.
    let stdout = String::from_utf8_lossy(&first.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let line: serde_json::Value = serde_json::from_str(&stdout).expect("a JSON line");
    assert_eq!(line["cells"], 2, "{line}");
    assert_eq!(line["cells_measured"], 2, "{line}");
    assert_eq!(line["exit_code"], 0, "{line}");
    assert_eq!(line["stopped"], serde_json::Value::Null, "{line}");
    assert!(
        line["run_json"]
            .as_str()
            .is_some_and(|p| Path::new(p) == out_dir.join("run.json")),
        "{line}"
    );
    let best = &line["best"];
    assert!(
        best["total_tokens_per_s"].as_f64().is_some_and(|t| t > 0.0),
        "{line}"
    );
    assert!(best["total_tokens_per_s_ci95"].is_array(), "{line}");

    let report = read_report(&out_dir);
    let as_json = bin()
        .args(["report", "-f", "json"])
        .arg(out_dir.join("run.json"))
        .output()
        .unwrap();
    stderr_after(&as_json, 0);
    let again = speedmatrix_report::Report::from_json(&String::from_utf8_lossy(&as_json.stdout))
        .expect("report -f json writes the document");
    assert_eq!(again, report, "the document, as run.json holds it");
    let tool = &report.run.tool;
    assert!(
        tool.commit.as_deref().is_some_and(|c| !c.is_empty()),
        "{tool:?}"
    );
    assert!(
        matches!(tool.build_profile.as_deref(), Some("debug" | "release")),
        "{tool:?}"
    );
    let p = report.provenance.as_ref().expect("provenance");
    assert_eq!(p.invocations.len(), 1);
    let line = &p.invocations[0];
    assert!(
        line.contains("--duration 1s") && line.contains("--concurrency 1,2"),
        "{line}"
    );
    assert_eq!(line.matches("[redacted]").count(), 4, "{line}");
    assert_eq!(p.options["duration"], "1s");
    assert_eq!(p.options["telemetry"], "auto", "defaults are recorded too");
    assert!(!p.options.contains_key("api-key"));
    assert!(p.given.contains(&"contexts".to_owned()) && !p.given.contains(&"seed".to_owned()));
    assert!(
        p.host.as_ref().and_then(|h| h.cpus).is_some_and(|n| n > 0),
        "{p:?}"
    );
    let page = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        page.contains("## Benchmark command") && page.contains("Client host"),
        "{page}"
    );
    let measured = decode_records(&out_dir);
    assert_eq!(measured, 2);

    // Alone, --resume continues with the journal's flags; a secret the journal could not keep
    // must be given again, by name.
    let alone = bin()
        .args(["run", "--quiet", "--resume"])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stderr = stderr_after(&alone, 2);
    assert!(stderr.contains("--extra-body"), "{stderr}");
    let resumed = bin()
        .args([
            "run",
            "--quiet",
            "--api-key",
            API_KEY,
            "--extra-body",
            &extra_body(),
            "--resume",
        ])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stderr = stderr_after(&resumed, 0);
    assert_no_secret(&out_dir, &stderr);
    assert_eq!(
        decode_records(&out_dir),
        measured,
        "nothing was measured again"
    );
    let report = read_report(&out_dir);
    let p = report.provenance.as_ref().unwrap();
    assert_eq!(p.invocations.len(), 2, "{p:?}");
    assert!(p.invocations[1].contains("--resume"), "{p:?}");
    assert_eq!(p.options["duration"], "1s", "the journal's window");

    // A flag given with it that changes a measurement must agree with the journal.
    let other = bin()
        .args([
            "run",
            "--quiet",
            "--extra-body",
            &extra_body(),
            "--duration",
            "2s",
            "--resume",
        ])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stderr = stderr_after(&other, 2);
    assert!(stderr.contains("window_ns"), "{stderr}");

    // compare shows how each run was made.
    let run = out_dir.join("run.json");
    let cmp = bin().args(["compare"]).args([&run, &run]).output().unwrap();
    stderr_after(&cmp, 0);
    let text = String::from_utf8_lossy(&cmp.stdout);
    assert!(
        text.contains("A: `") && text.contains("--duration 1s"),
        "{text}"
    );
    sim.kill();
}
