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
    let stderr = stderr_after(&output, 1);
    // A line per point as it starts and as it ends, with the study's time left; the failed
    // point's is followed by the lines of its log that say why.
    assert!(
        stderr.contains("[1/3] tiny: starting its server (") && stderr.contains("study: about"),
        "{stderr}"
    );
    assert!(stderr.contains("[2/3] free: measured in "), "{stderr}");
    assert!(stderr.contains("total tok/s at 0 × "), "{stderr}");
    assert!(stderr.contains("[3/3] broken: failed after "), "{stderr}");
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("    | ") && l.contains("no-such-profile")),
        "{stderr}"
    );
    let journal = std::fs::read_to_string(out.join("study.jsonl")).unwrap();
    let records = PointRecord::parse_all(&journal).records;
    let names: Vec<&str> = records.iter().map(|r| r.point.as_str()).collect();
    assert_eq!(names, ["tiny", "free", "broken"]);
    for r in &records[..2] {
        assert_eq!(r.outcome, PointOutcome::Measured { exit_code: 0 }, "{r:?}");
        let report = read_report(&out.join(&r.point).join("run"));
        assert_eq!(report.decode.len(), 2);
    }
    match &records[2].outcome {
        PointOutcome::Failed {
            reason,
            log_tail,
            error_lines,
        } => {
            assert!(reason.contains("before it was ready"), "{reason}");
            assert!(
                error_lines.iter().any(|l| l.contains("no-such-profile")),
                "{error_lines:?}"
            );
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
    // With the model's config in the run flags, each point's capacity grid is predicted.
    let config = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../crates/speedmatrix-capacity/tests/fixtures/agents-a1-4b-fp8.config.json");
    let kv = dir.join("kv.toml");
    std::fs::write(
        &kv,
        format!(
            r#"name = "memory"
[server]
command = "vllm serve m --gpu-memory-utilization {{gmu}} --port {{port}}"
[parameters]
gmu = [0.5, 0.94]
[run]
args = ["--model-config", "{}", "--gpu", "rtx3090", "--gpu-memory-utilization", "{{gmu}}",
        "--max-model-len", "262144", "--language-model-only", "--enable-prefix-caching",
        "--contexts", "0,248k", "--concurrency", "1,32"]
"#,
            config.display()
        ),
    )
    .unwrap();
    let output = bin()
        .args(["study", "run", "--dry-run", "--out"])
        .arg(dir.join("o3"))
        .arg(&kv)
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let text = String::from_utf8_lossy(&output.stdout);
    let grids: Vec<&str> = text
        .split("capacity (predicted")
        .skip(1)
        .map(|g| g.split("\n\n").next().unwrap_or(""))
        .collect();
    assert_eq!(grids.len(), 2, "{text}");
    assert_ne!(grids[0], grids[1], "more memory, more cells: {text}");
    assert!(grids[1].contains("32✓"), "{text}");
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

#[test]
fn completions_and_man_pages_come_from_the_flag_definitions() {
    let dir = temp_dir("assets");
    let output = bin().args(["assets", "--out"]).arg(&dir).output().unwrap();
    stderr_after(&output, 0);
    let bash = std::fs::read_to_string(dir.join("completions/speedmatrix.bash")).unwrap();
    assert!(
        bash.contains("calibrate") && bash.contains("--search-floor"),
        "every flag"
    );
    assert!(dir.join("completions/_speedmatrix").exists());
    assert!(dir.join("completions/speedmatrix.fish").exists());
    let man = std::fs::read_to_string(dir.join("man/speedmatrix-predict.1")).unwrap();
    assert!(
        man.contains(".TH speedmatrix-predict 1") && man.contains("gguf"),
        "{man}"
    );
    assert!(dir.join("man/speedmatrix.1").exists());
}

#[test]
fn points_run_as_separate_processes_are_collected_into_one_study() {
    let dir = temp_dir("study-collect");
    let study = study_file(&dir);
    let out = dir.join("results");
    // As the pods of an Indexed Job would: one process per point, the same folder.
    let children: Vec<std::process::Child> = (0..3)
        .map(|i| {
            bin()
                .args(["study", "run"])
                .arg(&study)
                .arg("--out")
                .arg(&out)
                .args(["--point-index", &i.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let codes: Vec<Option<i32>> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code())
        .collect();
    assert_eq!(
        codes,
        [Some(0), Some(0), Some(1)],
        "the broken point fails alone"
    );
    let collected = bin().args(["study", "collect"]).arg(&out).output().unwrap();
    stderr_after(&collected, 1);
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("study.json")).unwrap()).unwrap();
    let points = doc["points"].as_array().unwrap();
    assert_eq!(points.len(), 3);
    for p in &points[..2] {
        assert!(p["run"].is_string(), "{p}");
        assert!(p["best_total_tokens_per_s"].as_f64().unwrap() > 0.0, "{p}");
    }
    assert_eq!(points[2]["outcome"]["status"], "failed");
    assert!(points[2]["run"].is_null());
    // The site: an index and a page per measured point.
    let site = dir.join("site");
    let output = bin()
        .arg("site")
        .arg(&out)
        .arg("-o")
        .arg(&site)
        .args(["--baseline", "tiny"])
        .output()
        .unwrap();
    stderr_after(&output, 0);
    let index = std::fs::read_to_string(site.join("index.html")).unwrap();
    assert!(index.contains("<h3>free / tiny</h3>"), "{index}");
    assert!(site.join("points/tiny.html").exists() && site.join("points/free.html").exists());
    assert!(!site.join("points/broken.html").exists());
    let bad = bin()
        .arg("site")
        .arg(&out)
        .arg("-o")
        .arg(&site)
        .args(["--baseline", "nope"])
        .output()
        .unwrap();
    assert!(stderr_after(&bad, 2).contains("tiny, free, broken"));
    // Out of range, and the manifests.
    let bad = bin()
        .args(["study", "run"])
        .arg(&study)
        .arg("--out")
        .arg(dir.join("x"))
        .args(["--point-index", "7"])
        .output()
        .unwrap();
    assert!(stderr_after(&bad, 2).contains("3 points"));
    let k8s = bin()
        .args(["study", "k8s"])
        .arg(&study)
        .arg("-o")
        .arg(dir.join("k8s"))
        .args(["--image", "speedmatrix:test", "--parallelism", "2"])
        .output()
        .unwrap();
    stderr_after(&k8s, 0);
    let job = std::fs::read_to_string(dir.join("k8s/job.yaml")).unwrap();
    assert!(
        job.contains("completionMode: Indexed") && job.contains("$(JOB_COMPLETION_INDEX)"),
        "{job}"
    );
}

/// A parameter value is one argument of the server command, never shell text: `x; touch
/// FILE`, `$(touch FILE)` and a value with spaces reach the program whole, and no FILE appears.
#[test]
fn parameter_values_reach_the_server_as_single_arguments_and_never_run() {
    let dir = temp_dir("study-injection");
    let program = env!("CARGO_BIN_EXE_speedmatrix");
    let pwned = dir.join("pwned");
    let values = [
        format!("x; touch {}", pwned.display()),
        format!("$(touch {})", pwned.display()),
        format!("`touch {}`", pwned.display()),
    ];
    let list: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    let text = format!(
        r#"name = "inert"
[server]
command = "{program} sim --profile {{profile}} --port {{port}}"
ready_timeout = "10s"
grace = "2s"
[parameters]
profile = [{}]
[run]
tokenizer = "bundled"
contexts = "0"
concurrency = "1"
duration = "1s"
"#,
        list.join(", ")
    );
    let study = dir.join("study.toml");
    std::fs::write(&study, text).unwrap();
    let out = dir.join("out");
    let output = bin()
        .args(["study", "run"])
        .arg(&study)
        .arg("--out")
        .arg(&out)
        .current_dir(&dir)
        .output()
        .unwrap();
    stderr_after(&output, 1);
    assert!(!pwned.exists(), "a value ran as a command");
    let journal = std::fs::read_to_string(out.join("study.jsonl")).unwrap();
    let records = PointRecord::parse_all(&journal).records;
    assert_eq!(records.len(), 3);
    for (r, value) in records.iter().zip(&values) {
        let PointOutcome::Failed { log_tail, .. } = &r.outcome else {
            panic!("{r:?}");
        };
        // The simulator names the profile it was given: the whole value, one argument.
        let log = log_tail.join("\n");
        assert!(log.contains(value.as_str()), "{value}: {log}");
    }
}

/// `study k8s` packs every file the study names into the ConfigMap and refuses what a pod
/// could not read; `--check-locally` runs each pod's exact command from the ConfigMap's files
/// and collects them: a failing point fails only its index, the others are measured.
#[test]
fn the_manifests_carry_every_file_and_their_pods_run_here() {
    let dir = temp_dir("study-k8s");
    let (_, profile) = crate::support::test_profile(&dir);
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::copy(&profile, dir.join("profiles/p.json")).unwrap();
    let study = |command: &str| {
        format!(
            r#"name = "pods"
[server]
command = "{command}"
ready_timeout = "30s"
grace = "5s"
[[points]]
name = "packed"
profile = "profiles/p.json"
[[points]]
name = "broken"
profile = "no-such-profile"
[run]
tokenizer = "bundled"
contexts = "0"
concurrency = "1"
max-tokens = 32
duration = "1s"
prefill-contexts = "none"
telemetry = "off"
"#
        )
    };
    std::fs::write(
        dir.join("study.toml"),
        study("speedmatrix sim --profile {profile} --port {port}"),
    )
    .unwrap();
    let out = bin()
        .args([
            "study",
            "k8s",
            "study.toml",
            "-o",
            "k8s",
            "--image",
            "speedmatrix:test",
        ])
        .args(["--gpus-per-point", "0", "--check-locally"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stderr = stderr_after(&out, 1);
    assert!(stderr.contains("1 of 2 indexes failed"), "{stderr}");
    let config = std::fs::read_to_string(dir.join("k8s/configmap.yaml")).unwrap();
    assert!(config.contains("p.json"), "{config}");
    let job = std::fs::read_to_string(dir.join("k8s/job.yaml")).unwrap();
    assert!(
        job.contains("backoffLimitPerIndex: 0") && job.contains("FailIndex"),
        "{job}"
    );
    let results = dir.join("k8s/local-check/results");
    let report = read_report(&results.join("packed/run"));
    assert_eq!(report.decode.len(), 1);
    let outcome = std::fs::read_to_string(results.join("broken/outcome.json")).unwrap();
    assert!(outcome.contains("failed"), "{outcome}");
    assert!(results.join("study.json").is_file());

    // A file a pod cannot read is refused before anything is written.
    let absolute = format!("gpu-catalog = \"{}\"\n", profile.display());
    std::fs::write(
        dir.join("abs.toml"),
        study("speedmatrix sim --profile {profile} --port {port}")
            .replace("[run]\n", &format!("[run]\n{absolute}")),
    )
    .unwrap();
    let out = bin()
        .args(["study", "k8s", "abs.toml", "-o", "k8s-abs", "--image", "x"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stderr = stderr_after(&out, 2);
    assert!(
        stderr.contains("absolute") && stderr.contains("/models"),
        "{stderr}"
    );
    assert!(!dir.join("k8s-abs").exists());
}
