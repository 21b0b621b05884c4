//! `study run --parallel N --gpus LIST`: points at once, each server seeing GPUs no other
//! running point holds, told in the study's lines and kept in the records; the flags checked
//! before anything starts; a stopped study stops every running server; resume.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use speedmatrix_study::{PointOutcome, PointRecord};

use crate::support::{bin, decode_records, stderr_after, temp_dir, test_profile, wait_for};

/// A study of `names`, whose servers write the GPUs they see to `POINT.gpus` and their pid to
/// `POINT.pid` in the folder they start in, then become `speedmatrix sim --profile PROFILE`.
fn study_file(dir: &Path, names: &[&str], profile: &str, run: &str) -> std::path::PathBuf {
    let points: String = names
        .iter()
        .map(|n| format!("[[points]]\nname = \"{n}\"\n"))
        .collect();
    let text = format!(
        r#"name = "parallel"
[server]
command = "echo \"$CUDA_VISIBLE_DEVICES $HIP_VISIBLE_DEVICES\" > {{point}}.gpus && echo $$ > {{point}}.pid && exec speedmatrix sim --profile {profile} --port {{port}}"
shell = true
ready_timeout = "30s"
grace = "5s"
{points}
[run]
tokenizer = "bundled"
prefill-contexts = "none"
telemetry = "off"
{run}
"#
    );
    let path = dir.join("study.toml");
    std::fs::write(&path, text).unwrap();
    path
}

const SHORT_RUN: &str =
    "contexts = \"0\"\nconcurrency = \"1,2\"\nmax-tokens = 16\nduration = \"1s\"\n";

/// Replays the study's lines: each start's GPU is free, each end frees it. Returns the most
/// points seen running at once.
fn check_gpu_holds(stderr: &str) -> usize {
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    let mut most = 0;
    for line in stderr.lines().filter(|l| l.starts_with('[')) {
        let Some((_, rest)) = line.split_once("] ") else {
            continue;
        };
        let Some((name, what)) = rest.split_once(": ") else {
            continue;
        };
        if what.starts_with("starting its server") {
            let gpu = what
                .split(" on GPU ")
                .nth(1)
                .and_then(|g| g.split_whitespace().next())
                .unwrap_or_else(|| panic!("no GPU in {line}"))
                .to_owned();
            assert!(
                !held.values().any(|g| *g == gpu),
                "GPU {gpu} handed to {name} while held: {held:?}\n{stderr}"
            );
            held.insert(name.to_owned(), gpu);
            most = most.max(held.len());
        } else if what.starts_with("measured in") || what.starts_with("failed after") {
            assert!(held.remove(name).is_some(), "{name} ended unstarted");
        }
    }
    assert!(held.is_empty(), "points never ended: {held:?}");
    most
}

#[test]
fn points_at_once_each_see_gpus_of_their_own_and_the_journal_keeps_them() {
    let dir = temp_dir("study-parallel");
    let names = ["a", "b", "c"];
    let study = study_file(&dir, &names, "tiny", SHORT_RUN);
    let out = dir.join("out");
    let run = |extra: &[&str]| {
        bin()
            .args(["study", "run"])
            .arg(&study)
            .arg("--out")
            .arg(&out)
            .args(["--parallel", "2", "--gpus", "0,1"])
            .args(extra)
            .current_dir(&dir)
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
    };
    let stderr = stderr_after(&run(&[]), 0);
    assert_eq!(
        check_gpu_holds(&stderr),
        2,
        "two points ran at once:\n{stderr}"
    );
    assert!(
        stderr.contains("[1/3] a: starting its server ("),
        "{stderr}"
    );
    assert!(stderr.contains("study: about"), "{stderr}");
    assert!(stderr.contains("total tok/s at 0 × "), "{stderr}");
    assert!(stderr.contains("2 cells measured, 0 failed"), "{stderr}");
    let journal = std::fs::read_to_string(out.join("study.jsonl")).unwrap();
    let records = PointRecord::parse_all(&journal).records;
    let mut seen: Vec<&str> = records.iter().map(|r| r.point.as_str()).collect();
    seen.sort_unstable();
    assert_eq!(seen, names, "every point once, in the order they ended");
    for r in &records {
        assert_eq!(r.outcome, PointOutcome::Measured { exit_code: 0 }, "{r:?}");
        let [gpu] = r.gpus.as_slice() else {
            panic!("one GPU each: {r:?}");
        };
        assert!(gpu == "0" || gpu == "1", "{r:?}");
        // The server saw the record's GPU, in CUDA's and HIP's variables alike.
        let seen = std::fs::read_to_string(dir.join(format!("{}.gpus", r.point))).unwrap();
        assert_eq!(seen.trim(), format!("{gpu} {gpu}"), "{}", r.point);
    }
    // Resumed with the same flags, nothing runs again.
    let stderr = stderr_after(&run(&["--resume"]), 0);
    assert_eq!(stderr.matches("done before").count(), 3, "{stderr}");
    let journal = std::fs::read_to_string(out.join("study.jsonl")).unwrap();
    assert_eq!(journal.lines().count(), 3);
}

#[test]
fn parallel_flags_are_checked_before_anything_starts() {
    let dir = temp_dir("study-parallel-flags");
    let study = study_file(&dir, &["a", "b"], "tiny", SHORT_RUN);
    let out = dir.join("out");
    let refused = |flags: &[&str], says: &str| {
        let output = bin()
            .args(["study", "run"])
            .arg(&study)
            .arg("--out")
            .arg(&out)
            .args(flags)
            .output()
            .unwrap();
        let stderr = stderr_after(&output, 2);
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
        assert!(!out.exists(), "{flags:?} wrote {}", out.display());
    };
    refused(
        &["--parallel", "2"],
        "give each point GPUs of its own with --gpus",
    );
    refused(
        &["--parallel", "3", "--gpus", "0,1"],
        "--parallel 3 needs 3 × 1 GPUs, and --gpus lists 2 (0,1)",
    );
    refused(
        &[
            "--parallel",
            "2",
            "--gpus",
            "0,1,2",
            "--gpus-per-point",
            "2",
        ],
        "at most --parallel 1",
    );
    refused(&["--gpus", "0,0"], "names GPU 0 twice");
    refused(&["--gpus-per-point", "2"], "--gpus");
    refused(&["--parallel", "0", "--gpus", "0"], "--parallel");
    let dry = bin()
        .args(["study", "run"])
        .arg(&study)
        .arg("--out")
        .arg(&out)
        .args([
            "--dry-run",
            "--parallel",
            "2",
            "--gpus",
            "0,1,2,3",
            "--gpus-per-point",
            "2",
        ])
        .output()
        .unwrap();
    stderr_after(&dry, 0);
    let plan = String::from_utf8_lossy(&dry.stdout);
    assert!(
        plan.contains("2 point(s) at once, each on 2 of GPUs 0,1,2,3"),
        "{plan}"
    );
}

#[test]
fn a_stopped_parallel_study_stops_every_running_server() {
    let dir = temp_dir("study-parallel-stop");
    let (_, profile) = test_profile(&dir);
    let run = "contexts = [0, 256]\nconcurrency = [1]\nmax-tokens = 512\nduration = \"2s\"\n";
    let study = study_file(&dir, &["a", "b"], &profile.display().to_string(), run);
    let out = dir.join("out");
    let mut child = bin()
        .args(["study", "run"])
        .arg(&study)
        .arg("--out")
        .arg(&out)
        .args(["--parallel", "2", "--gpus", "0,1"])
        .current_dir(&dir)
        .env("PATH", "/usr/bin:/bin")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(60), "a cell of each point", || {
        decode_records(&out.join("a/run")) >= 1 && decode_records(&out.join("b/run")) >= 1
    });
    let pids: Vec<u32> = ["a", "b"]
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(dir.join(format!("{p}.pid"))).unwrap();
            text.trim().parse().unwrap()
        })
        .collect();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert_eq!(child.wait().unwrap().code(), Some(1));
    for pid in pids {
        wait_for(Duration::from_secs(10), "every server to be gone", || {
            !Path::new(&format!("/proc/{pid}")).exists()
        });
    }
    let journal = std::fs::read_to_string(out.join("study.jsonl")).unwrap_or_default();
    assert!(journal.trim().is_empty(), "interrupted points: {journal}");
}
