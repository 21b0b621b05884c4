//! Workloads the user brings (`--dataset`, `--input-tokens`) in burst and rate modes, checked
//! against the simulator's request log: what was sent, how long each prompt was as the server
//! counted it, and what the run record says of the workload.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::{bin, read_report, run_sim_profile, stderr_after, temp_dir, test_profile};

/// The test profile, logging every generation request to `requests.jsonl` in `dir`.
fn logging_profile(dir: &Path) -> (PathBuf, PathBuf) {
    let (mut profile, _) = test_profile(dir);
    let log = dir.join("requests.jsonl");
    profile.request_log = Some(log.clone());
    let path = dir.join("logging.json");
    std::fs::write(&path, serde_json::to_string(&profile).unwrap()).unwrap();
    (path, log)
}

fn logged(log: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Twelve prompts of different lengths, each with its own answer length.
fn jsonl_dataset(dir: &Path) -> (PathBuf, Vec<(String, u64)>) {
    let records: Vec<(String, u64)> = (0..12u64)
        .map(|i| {
            let words =
                "the harbor measured twelve meters of quiet water ".repeat(1 + i as usize * 3);
            (format!("[{i}] {words}"), 8 + i * 3)
        })
        .collect();
    let mut text = String::new();
    for (prompt, out) in &records {
        text.push_str(
            &serde_json::json!({"prompt": prompt, "output_tokens": out, "id": "ignored"})
                .to_string(),
        );
        text.push('\n');
    }
    let path = dir.join("prompts.jsonl");
    std::fs::write(&path, text).unwrap();
    (path, records)
}

#[test]
fn a_jsonl_dataset_is_sent_exactly_as_given_and_recorded_by_its_hash() {
    let dir = temp_dir("workload-jsonl");
    let (profile, log) = logging_profile(&dir);
    let (dataset, records) = jsonl_dataset(&dir);
    let out = dir.join("out");
    let o = run_sim_profile(&profile)
        .args(["--mode", "burst", "--requests", "4,8", "--dataset"])
        .arg(&dataset)
        .args(["--prefill-contexts", "none", "--max-tokens", "64", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&o, 0);
    // Every record once, in the two cells (4 then 8), each with its own max_tokens.
    let wanted: BTreeMap<&str, u64> = records.iter().map(|(p, n)| (p.as_str(), *n)).collect();
    let mut seen = BTreeMap::new();
    for line in logged(&log) {
        let Some(prompt) = line["prompt"].as_str() else {
            continue;
        };
        if let Some(&n) = wanted.get(prompt) {
            assert_eq!(line["max_tokens"].as_u64(), Some(n), "{prompt}");
            *seen.entry(prompt.to_owned()).or_insert(0) += 1;
        }
    }
    assert_eq!(seen.len(), 12, "every record sent: {seen:?}");
    assert!(seen.values().all(|&n| n == 1), "none sent twice: {seen:?}");
    let report = read_report(&out);
    let load = report.load.unwrap();
    let w = load.workload.clone().unwrap();
    let read = speedmatrix_workload::Dataset::read(&dataset, None).unwrap();
    assert_eq!(w.sha256.as_deref(), Some(read.sha256()));
    assert_eq!(w.sha256.as_ref().map(String::len), Some(64));
    assert_eq!(
        (w.dataset.as_deref(), w.records, w.format.as_deref()),
        (Some("prompts.jsonl"), Some(12), Some("jsonl"))
    );
    assert!(w.output_tokens_from_dataset);
    // The prompts' lengths as the server counted them equal the run's own count of each.
    let tokenizer = speedmatrix_workload::Tokenizer::bundled().unwrap();
    let counts: Vec<f64> = records
        .iter()
        .map(|(p, _)| tokenizer.encode_count(p).unwrap() as f64)
        .collect();
    let first = load.cells[0].measurements.clone().unwrap();
    let inputs = first.input_tokens_per_request.unwrap();
    assert_eq!(
        inputs.min,
        counts[..4].iter().copied().fold(f64::MAX, f64::min)
    );
    assert_eq!(inputs.max, counts[..4].iter().copied().fold(0.0, f64::max));
    assert_eq!(inputs.histogram.iter().map(|b| b.requests).sum::<u64>(), 4);
    let answers = first.output_tokens_per_request.unwrap();
    assert_eq!(
        (answers.min, answers.max),
        (8.0, 17.0),
        "each answer its own length"
    );
    assert!(
        !report
            .notes
            .iter()
            .any(|n| n.contains("prompt length other")),
        "{:?}",
        report.notes
    );
    let page = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(page.contains("Prompt tokens p50"), "{page}");
    assert!(page.contains("prompts.jsonl (jsonl, sha256"), "{page}");
}

#[test]
fn input_tokens_from_a_distribution_give_each_prompt_its_exact_length() {
    let dir = temp_dir("workload-lengths");
    let (profile, log) = logging_profile(&dir);
    let out = dir.join("out");
    let o = run_sim_profile(&profile)
        .args(["--mode", "burst", "--requests", "16"])
        .args(["--input-tokens", "uniform:40..400", "--seed", "5"])
        .args(["--prefill-contexts", "none", "--max-tokens", "8", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&o, 0);
    let report = read_report(&out);
    let load = report.load.unwrap();
    let m = load.cells[0].measurements.clone().unwrap();
    let inputs = m.input_tokens_per_request.unwrap();
    assert!(inputs.min >= 40.0 && inputs.max <= 400.0 && inputs.max > inputs.min);
    let expected = "uniform:40..400"
        .parse::<speedmatrix_workload::LengthDistribution>()
        .unwrap()
        .draw(16, 5);
    let mut wanted: Vec<f64> = expected.iter().map(|t| t.get() as f64).collect();
    wanted.sort_by(f64::total_cmp);
    assert_eq!(inputs.min, wanted[0]);
    assert_eq!(inputs.max, wanted[15]);
    assert!(
        !report
            .notes
            .iter()
            .any(|n| n.contains("prompt length other"))
    );
    assert_eq!(
        load.workload.unwrap().input_tokens.as_deref(),
        Some("uniform:40..400")
    );
    let sent = logged(&log)
        .iter()
        .filter(|l| l["max_tokens"].as_u64() == Some(8))
        .count();
    assert_eq!(sent, 16);
}

#[test]
fn workload_flags_are_refused_where_they_cannot_apply_and_bad_files_name_their_line() {
    let dir = temp_dir("workload-refused");
    let (profile, _) = logging_profile(&dir);
    let (dataset, _) = jsonl_dataset(&dir);
    let refused = |args: &[&str], dataset: &Path, want: &str| {
        let o = run_sim_profile(&profile)
            .args(args)
            .arg("--dataset")
            .arg(dataset)
            .arg("--dry-run")
            .output()
            .unwrap();
        let e = stderr_after(&o, 2);
        assert!(e.contains(want), "{args:?}: {e}");
    };
    refused(&["--contexts", "0"], &dataset, "--mode burst");
    refused(
        &["--mode", "burst", "--requests", "2", "--contexts", "1k"],
        &dataset,
        "drop --contexts",
    );
    refused(
        &[
            "--mode",
            "burst",
            "--requests",
            "2",
            "--dataset-sample",
            "13",
        ],
        &dataset,
        "at most 12",
    );
    let broken = dir.join("broken.jsonl");
    std::fs::write(
        &broken,
        "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n{\"promt\": 3}\n",
    )
    .unwrap();
    refused(&["--mode", "burst", "--requests", "2"], &broken, "line 3");
    refused(
        &["--mode", "burst", "--requests", "2"],
        &dir.join("missing.jsonl"),
        "missing.jsonl",
    );
    let unknown = dir.join("prompts.csv");
    std::fs::write(&unknown, "a,b\n").unwrap();
    refused(
        &["--mode", "burst", "--requests", "2"],
        &unknown,
        "--dataset-format",
    );
}

#[test]
fn compare_refuses_runs_that_sent_other_prompts_unless_asked() {
    let dir = temp_dir("workload-compare");
    let (profile, _) = logging_profile(&dir);
    let out = dir.join("a");
    let o = run_sim_profile(&profile)
        .args(["--mode", "burst", "--requests", "2", "--input-tokens", "64"])
        .args(["--prefill-contexts", "none", "--max-tokens", "4", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&o, 0);
    let a = out.join("run.json");
    let mut other: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    other["load"]["workload"]["input_tokens"] = "128".into();
    let b = dir.join("b.json");
    std::fs::write(&b, other.to_string()).unwrap();
    let o = bin().arg("compare").arg(&a).arg(&b).output().unwrap();
    let e = stderr_after(&o, 2);
    assert!(e.contains("--allow-different-workloads"), "{e}");
    let o = bin()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .arg("--allow-different-workloads")
        .output()
        .unwrap();
    stderr_after(&o, 0);
    let o = bin().arg("compare").arg(&a).arg(&a).output().unwrap();
    stderr_after(&o, 0);
}

/// One trace request: timestamp (ms), input and output lengths, its block ids.
type TraceRow = (u64, u64, u64, Vec<u64>);

/// A Mooncake-style trace: six requests over two seconds, sharing prefix blocks of 64 tokens.
fn mooncake_trace(dir: &Path) -> (PathBuf, Vec<TraceRow>) {
    let rows: Vec<TraceRow> = vec![
        (1_000, 150, 8, vec![1, 2, 3]),
        (1_400, 140, 6, vec![1, 2, 4]),
        (1_800, 64, 5, vec![1]),
        (2_200, 130, 7, vec![5, 6, 7]),
        (2_600, 150, 4, vec![1, 2, 3]),
        (3_000, 40, 3, vec![9]),
    ];
    let text: String = rows
        .iter()
        .map(|(t, i, o, ids)| {
            serde_json::json!({"timestamp": t, "input_length": i, "output_length": o, "hash_ids": ids})
                .to_string()
                + "\n"
        })
        .collect();
    let path = dir.join("trace.jsonl");
    std::fs::write(&path, text).unwrap();
    (path, rows)
}

#[test]
fn a_mooncake_trace_replays_at_its_times_sharing_the_blocks_its_ids_share() {
    let dir = temp_dir("workload-trace");
    let (profile, log) = logging_profile(&dir);
    let (trace, rows) = mooncake_trace(&dir);
    let out = dir.join("out");
    let o = run_sim_profile(&profile)
        .args(["--mode", "rate", "--trace"])
        .arg(&trace)
        .args(["--trace-speed", "2", "--trace-block-tokens", "64"])
        .args(["--prefill-contexts", "none", "--max-tokens", "64", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    stderr_after(&o, 0);
    let report = read_report(&out);
    let load = report.load.unwrap();
    assert_eq!(load.cells.len(), 1, "one cell replays the trace");
    let cell = &load.cells[0];
    // Five gaps in one second once replayed twice as fast.
    assert_eq!(cell.rate_per_s, Some(5.0));
    let m = cell.measurements.clone().unwrap();
    assert_eq!((m.sent, m.completed), (6, 6));
    let lag = m.send_lag_ms.unwrap();
    assert!(lag.p99 < 100.0, "send lag p99 {} ms", lag.p99);
    let inputs = m.input_tokens_per_request.unwrap();
    assert_eq!((inputs.min, inputs.max), (40.0, 150.0));
    assert!(
        !report
            .notes
            .iter()
            .any(|n| n.contains("prompt length other")),
        "{:?}",
        report.notes
    );
    let w = load.workload.unwrap();
    assert_eq!(w.format.as_deref(), Some("mooncake"));
    assert_eq!(
        (w.trace_speed, w.block_tokens, w.records),
        (Some(2.0), Some(64), Some(6))
    );
    assert_eq!(w.sha256.map(|h| h.len()), Some(64));

    // What the server got: the trace's requests in order, each of its length and answer.
    let sent = logged(&log);
    let sent = &sent[sent.len() - 6..];
    let tok = speedmatrix_workload::Tokenizer::bundled().unwrap();
    let ids: Vec<Vec<u32>> = sent
        .iter()
        .map(|l| tok.encode(l["prompt"].as_str().unwrap()).unwrap())
        .collect();
    for ((row, l), p) in rows.iter().zip(sent).zip(&ids) {
        assert_eq!(l["max_tokens"].as_u64(), Some(row.2));
        assert_eq!(p.len() as u64, row.1);
    }
    let common = |a: usize, b: usize| {
        ids[a]
            .iter()
            .zip(&ids[b])
            .take_while(|(x, y)| x == y)
            .count()
    };
    assert!(
        (128..160).contains(&common(0, 1)),
        "two blocks: {}",
        common(0, 1)
    );
    assert_eq!(common(0, 2), 64, "one block, all of the third prompt");
    assert_eq!(ids[0], ids[4], "the same chain is the same prompt");
    assert!(common(0, 3) < 32 && common(0, 5) < 32);

    // What cannot apply is refused before anything is sent, naming what to do.
    let bad_line = dir.join("bad.jsonl");
    std::fs::write(
        &bad_line,
        "{\"timestamp\": 0, \"input_length\": 10}\n{\"input_length\": 5}\n",
    )
    .unwrap();
    for (args, says) in [
        (vec!["--mode", "burst", "--requests", "2"], "--mode rate"),
        (
            vec!["--mode", "rate", "--request-rate", "2"],
            "drop --request-rate",
        ),
        (
            vec!["--mode", "rate", "--trace-block-tokens", "100"],
            "hash_ids",
        ),
    ] {
        let o = run_sim_profile(&profile)
            .args(&args)
            .arg("--trace")
            .arg(&trace)
            .arg("--dry-run")
            .output()
            .unwrap();
        let stderr = stderr_after(&o, 2);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // Chat messages in a trace need the chat API.
    let messages = dir.join("messages.jsonl");
    std::fs::write(
        &messages,
        "{\"timestamp\": 0, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n",
    )
    .unwrap();
    let o = run_sim_profile(&profile)
        .args(["--mode", "rate", "--dry-run", "--trace"])
        .arg(&messages)
        .output()
        .unwrap();
    let stderr = stderr_after(&o, 2);
    assert!(
        stderr.contains("--api chat") && stderr.contains("line 1"),
        "{stderr}"
    );
    let o = run_sim_profile(&profile)
        .args(["--mode", "rate", "--dry-run", "--trace"])
        .arg(&bad_line)
        .output()
        .unwrap();
    let stderr = stderr_after(&o, 2);
    assert!(
        stderr.contains("line 2") && stderr.contains("timestamp"),
        "{stderr}"
    );
}
