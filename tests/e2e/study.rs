//! `speedmatrix study run` with `speedmatrix sim` as the server command: two
//! points measured, one whose server does not start recorded with its log,
//! the journal resumed, the dry run.

use speedmatrix_study::{PointOutcome, PointRecord};

use crate::support::{bin, read_report, stderr_after, temp_dir};

fn study_file(dir: &std::path::Path) -> std::path::PathBuf {
    let bin = env!("CARGO_BIN_EXE_speedmatrix");
    let text = format!(
        r#"name = "e2e"
[server]
command = "{bin} sim --profile {{profile}} --port {{port}}"
ready_timeout = "30s"
grace = "5s"
[[points]]
name = "tiny"
profile = "tiny"
[[points]]
name = "free"
profile = "free-running"
[[points]]
name = "broken"
profile = "no-such-profile"
[run]
args = ["--tokenizer", "bundled", "--contexts", "0", "--concurrency", "1,2",
        "--max-tokens", "16", "--duration", "1s", "--prefill-contexts", "none",
        "--telemetry", "off"]
"#
    );
    let path = dir.join("study.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_study_runs_each_point_records_a_failing_one_and_resumes() {
    let dir = temp_dir("study");
    let study = study_file(&dir);
    let out = dir.join("out");
    let output = bin()
        .args(["study", "run"])
        .arg(&study)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    // A failed point: the study ends with 1, having run the others.
    stderr_after(&output, 1);
    let journal = std::fs::read_to_string(out.join("study.jsonl")).unwrap();
    let records = PointRecord::parse_all(&journal).unwrap();
    let names: Vec<&str> = records.iter().map(|r| r.point.as_str()).collect();
    assert_eq!(names, ["tiny", "free", "broken"]);
    for r in &records[..2] {
        assert_eq!(r.outcome, PointOutcome::Measured { exit_code: 0 }, "{r:?}");
        let report = read_report(&out.join(&r.point).join("run"));
        assert_eq!(report.decode.len(), 2);
    }
    match &records[2].outcome {
        PointOutcome::Failed { reason, log_tail } => {
            assert!(reason.contains("before it was ready"), "{reason}");
            assert!(
                log_tail.iter().any(|l| l.contains("no-such-profile")),
                "{log_tail:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Every server is gone: its port no longer answers.
    assert!(out.join("study.toml").exists());

    // Resumed: nothing runs again.
    let again = bin()
        .args(["study", "run"])
        .arg(&study)
        .arg("--out")
        .arg(&out)
        .arg("--resume")
        .output()
        .unwrap();
    let stderr = stderr_after(&again, 1);
    assert!(stderr.contains("done before"), "{stderr}");
    let journal = std::fs::read_to_string(out.join("study.jsonl")).unwrap();
    assert_eq!(journal.lines().count(), 3, "no point ran twice");
    // Without --resume, the folder is refused.
    let refused = bin()
        .args(["study", "run"])
        .arg(&study)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(stderr_after(&refused, 2).contains("--resume"));
}

#[test]
fn the_dry_run_lists_the_points_and_bad_studies_are_usage_errors() {
    let dir = temp_dir("study-dry");
    let study = study_file(&dir);
    let output = bin()
        .args(["study", "run", "--dry-run", "--out"])
        .arg(dir.join("out"))
        .arg(&study)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("3 points"), "{text}");
    assert!(text.contains("--profile tiny --port {port}"), "{text}");
    assert!(!dir.join("out").exists(), "a dry run starts nothing");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"x\"\n[server]\ncommand = \"serve {missing}\"\n[parameters]\na = [1]\n[run]\nargs = []\n",
    )
    .unwrap();
    let output = bin()
        .args(["study", "run", "--out"])
        .arg(dir.join("o2"))
        .arg(&bad)
        .output()
        .unwrap();
    assert!(stderr_after(&output, 2).contains("{missing}"));
    let schema = bin().args(["study", "schema"]).output().unwrap();
    stderr_after(&schema, 0);
    let v: serde_json::Value = serde_json::from_slice(&schema.stdout).unwrap();
    assert!(v["properties"]["server"].is_object(), "{v}");
}

#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let output = bin().arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let inside = text
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(c, _)| c.split(',').next().unwrap_or("").to_owned())
        .unwrap_or_default();
    assert!(
        inside == "unknown commit"
            || (inside.len() == 12 && inside.chars().all(|c| c.is_ascii_hexdigit())),
        "{text}"
    );
}
