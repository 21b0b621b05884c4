//! Bad input on the command line: each mistake gives one error line that
//! says what is wrong and what to do, exit code 2, and leaves nothing
//! behind that it cannot explain.

use std::path::Path;

use speedmatrix_report::CellStatus;

use crate::stage::{Outcome, Stage, Trouble, run_against, run_cmd};
use crate::support::{bin, run_sim_profile, stderr_after, temp_dir, test_profile};

/// Exit 2, exactly one `error:` line naming `needle`, and no output folder.
fn assert_refused(o: &Outcome, needle: &str) {
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    assert_eq!(o.code, Some(2), "stderr: {}", o.stderr);
    let errors: Vec<&str> = o
        .stderr
        .lines()
        .filter(|l| l.starts_with("error"))
        .collect();
    assert_eq!(errors.len(), 1, "one error line expected: {}", o.stderr);
    // Our own errors are one line; clap's add only its `--help` hint and usage.
    let other = o
        .stderr
        .lines()
        .filter(|l| {
            !l.trim().is_empty()
                && !l.starts_with("error")
                && !l.contains("--help")
                && !l.starts_with("Usage:")
        })
        .count();
    assert_eq!(other, 0, "stray lines: {}", o.stderr);
    assert!(
        errors[0].contains(needle),
        "`{needle}` not named: {}",
        errors[0]
    );
    assert!(o.stdout.is_empty(), "stdout: {}", o.stdout);
    assert!(
        !o.out.exists(),
        "a refused run left {} behind",
        o.out.display()
    );
}

/// [`assert_refused`], and the message also says `hint` (else fails with `why`).
fn assert_refused_with(o: &Outcome, needle: &str, hint: &str, why: &str) {
    assert_refused(o, needle);
    assert!(o.stderr.contains(hint), "{why}: {}", o.stderr);
}

fn run_sim(dir: &Path, args: &[&str]) -> Outcome {
    let (_, profile) = test_profile(dir);
    let mut cmd = run_sim_profile(&profile);
    cmd.args(args);
    run_cmd(cmd, dir)
}

#[test]
fn invalid_urls_are_refused_before_anything_is_sent() {
    let dir = temp_dir("bad-url");
    for url in ["notaurl", "ftp://127.0.0.1:8000", "http://[::1"] {
        let o = run_against(url, &dir, &["--prefill-contexts", "none"]);
        assert_refused_with(&o, "--url", "http://", "no example of a good URL");
    }
}

#[test]
fn a_model_the_server_does_not_serve_is_refused_with_the_served_names() {
    let dir = temp_dir("bad-model");
    let (profile, _) = test_profile(&dir);
    let stage = Stage::new(profile.clone(), Trouble::None);
    let o = run_against(&stage.url, &dir, &["--model", "nope"]);
    assert_refused(&o, "`nope`");
    assert!(
        o.stderr.contains(&profile.served_model_name) && o.stderr.contains("--model"),
        "{}",
        o.stderr
    );
}

#[test]
fn a_missing_or_broken_tokenizer_is_refused() {
    let dir = temp_dir("bad-tokenizer");
    let garbage = dir.join("tokenizer.json");
    std::fs::write(&garbage, "this is not a tokenizer").unwrap();
    let missing = dir.join("missing").join("tokenizer.json");
    for path in [&garbage, &missing] {
        let o = run_sim(&dir, &["--tokenizer", path.to_str().unwrap()]);
        assert_refused(&o, "--tokenizer");
    }
    // With --url a tokenizer is required (refused before any connection).
    let mut cmd = bin();
    cmd.args(["run", "--quiet", "--url", "http://127.0.0.1:9"]);
    let no_tokenizer = run_cmd(cmd, &dir);
    assert_refused(&no_tokenizer, "--tokenizer");
}

#[test]
fn a_model_config_that_is_not_a_model_config_is_refused() {
    let dir = temp_dir("bad-config");
    let not_json = dir.join("notes.txt");
    std::fs::write(&not_json, "hello").unwrap();
    let not_model = dir.join("config.json");
    std::fs::write(&not_model, r#"{"name": "my app", "port": 8080}"#).unwrap();
    let missing = dir.join("nope.json");
    for path in [&not_json, &not_model, &missing] {
        let o = run_sim(&dir, &["--model-config", path.to_str().unwrap()]);
        assert_refused_with(
            &o,
            "--model-config",
            "config.json",
            "what to pass is not said",
        );
    }
}

#[test]
fn zero_concurrency_and_zero_duration_are_refused() {
    let dir = temp_dir("zeros");
    assert_refused(&run_sim(&dir, &["--concurrency", "0"]), "--concurrency");
    assert_refused(&run_sim(&dir, &["--duration", "0s"]), "--duration");
    assert_refused(&run_sim(&dir, &["--max-tokens", "0"]), "--max-tokens");
    assert_refused(
        &run_sim(&dir, &["--prefill-repeats", "0"]),
        "--prefill-repeats",
    );
}

#[test]
fn cells_longer_than_max_model_len_are_skipped_and_a_matrix_of_only_those_is_refused() {
    // The test profile's max_model_len is 2,048 tokens.
    let dir = temp_dir("too-long");
    let o = run_sim(
        &dir,
        &[
            "--contexts",
            "0,4k",
            "--concurrency",
            "1",
            "--prefill-contexts",
            "none",
            "--duration",
            "1s",
            "--max-tokens",
            "256",
        ],
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let report = crate::support::read_report(&o.out);
    assert!(report.decode[0].status.is_valid());
    match &report.decode[1].status {
        CellStatus::Skipped { reason } => assert!(reason.contains("max_model_len"), "{reason}"),
        other => panic!("expected Skipped, got {other:?}"),
    }

    let dir = temp_dir("nothing-runs");
    let o = run_sim(
        &dir,
        &[
            "--contexts",
            "4k",
            "--prefill-contexts",
            "8k",
            "--max-tokens",
            "256",
        ],
    );
    assert_refused(&o, "nothing can run");
    assert!(
        o.stderr.contains("max_model_len") && o.stderr.contains("--max-tokens"),
        "{}",
        o.stderr
    );
}

#[test]
fn an_unwritable_out_is_refused() {
    let dir = temp_dir("unwritable");
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let (_, profile) = test_profile(&dir);
    let output = run_sim_profile(&profile)
        .arg("--out")
        .arg(file.join("sub"))
        .output()
        .unwrap();
    let stderr = stderr_after(&output, 2);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("output directory") && stderr.contains("--out"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

#[test]
fn an_existing_out_with_files_is_not_overwritten_without_force_or_resume() {
    let dir = temp_dir("non-empty-out");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("precious.txt"), "keep me").unwrap();
    let o = run_sim(&dir, &["--prefill-contexts", "none"]);
    o.assert_one_line_exit_2();
    assert!(
        o.stderr.contains("--force") && o.stderr.contains("--resume"),
        "{}",
        o.stderr
    );
    let names: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["precious.txt"]);
}

const ONE_CELL: [&str; 10] = [
    "--contexts",
    "0",
    "--concurrency",
    "1,2",
    "--prefill-contexts",
    "none",
    "--duration",
    "1s",
    "--max-tokens",
    "256",
];

/// `run --resume OUT` over [`ONE_CELL`] on the simulator.
fn resume(profile: &Path, out: &Path) -> std::process::Output {
    run_sim_profile(profile)
        .args(ONE_CELL)
        .arg("--resume")
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn a_corrupt_journal_on_resume_keeps_the_valid_prefix_and_reports_the_tail() {
    let dir = temp_dir("corrupt-journal");
    let first = run_sim(&dir, &ONE_CELL);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let before = crate::support::read_report(&first.out);
    let journal = first.out.join("journal.jsonl");
    // A torn last record and some garbage, as a crash mid-write or a bad disk leaves.
    let text = std::fs::read_to_string(&journal).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "start + two cells");
    let damaged = format!(
        "{}\n{}\n{}\u{0}\u{1}garbage",
        lines[0],
        lines[1],
        &lines[2][..lines[2].len() / 2]
    );
    std::fs::write(&journal, &damaged).unwrap();

    let (_, profile) = test_profile(&dir);
    let output = resume(&profile, &first.out);
    let stderr = stderr_after(&output, 0);
    let note: Vec<&str> = stderr.lines().filter(|l| l.contains("damaged")).collect();
    assert_eq!(note.len(), 1, "{stderr}");
    assert!(
        note[0].contains("line 3") && note[0].contains("saved to"),
        "{}",
        note[0]
    );
    // The bytes cut off are kept next to the journal.
    let saved = std::fs::read(first.out.join("journal.jsonl.damaged-tail")).unwrap();
    assert!(damaged.as_bytes().ends_with(&saved));
    let after = crate::support::read_report(&first.out);
    // The first cell came from the journal, unchanged; the second was measured again.
    assert_eq!(after.decode[0].measurements, before.decode[0].measurements);
    assert!(after.decode.iter().all(|c| c.status.is_valid()));
    assert_eq!(crate::support::decode_records(&first.out), 2);
}

#[test]
fn a_file_that_is_not_a_journal_is_refused_on_resume_and_left_alone() {
    let dir = temp_dir("not-a-journal");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let journal = out.join("journal.jsonl");
    std::fs::write(&journal, "<html>not a journal</html>\n").unwrap();
    let (_, profile) = test_profile(&dir);
    let output = resume(&profile, &out);
    let stderr = stderr_after(&output, 2);
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("not a speedmatrix journal") && stderr.contains("--out"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&journal).unwrap(),
        "<html>not a journal</html>\n"
    );
    assert!(!out.join("run.json").exists());

    // --resume of a folder without a journal says so too.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let output = bin()
        .args(["run", "--quiet", "--resume"])
        .arg(&empty)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no journal.jsonl"));
}

#[test]
fn capacity_orders_versions_as_pep_440_and_names_the_rules_it_applied() {
    let config = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../speedmatrix-capacity/tests/fixtures/agents-a1-4b-fp8.config.json"
    );
    let run = |version: &str| {
        bin()
            .args(["capacity", "--config", config, "--gpu", "RTX 3090"])
            .args(["--vllm-version", version])
            .output()
            .unwrap()
    };
    // A nightly before 0.20.1 still has the old "GPU KV cache size" formula.
    let nightly = run("0.20.1rc1.dev16+g1a2b3c4");
    let text = String::from_utf8_lossy(&nightly.stdout);
    assert_eq!(nightly.status.code(), Some(0), "{text}");
    assert!(text.contains("vLLM rules for v0.20.1rc1.dev16:"), "{text}");
    assert!(text.contains("sorts below v0.20.1 (PEP 440)"), "{text}");
    assert!(text.contains("[not yet] since v0.20.1:"), "{text}");
    let release = run("v0.21.0+cu130");
    let text = String::from_utf8_lossy(&release.stdout);
    assert!(text.contains("[applied] since v0.21.0:"), "{text}");
    assert!(!text.contains("note:"), "{text}");
    let bad = run("0.21.0-foo");
    assert!(stderr_after(&bad, 2).contains("PEP 440"));
}

#[test]
fn capacity_from_a_vllm_log_puts_each_logged_figure_beside_the_prediction() {
    let dir = temp_dir("from-log");
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        r#"{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 36,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "torch_dtype": "bfloat16",
        "vocab_size": 151936, "intermediate_size": 12288, "max_position_embeddings": 40960}"#,
    )
    .unwrap();
    // Qwen3-8B on an RTX A5000 with vLLM 0.21.0 (../shared/reference/kv-capacity.md §6):
    // 147,456 B per token, 6.37 GiB, 46,368 tokens, 2.83x at 16,384.
    let log = dir.join("vllm.log");
    std::fs::write(
        &log,
        "INFO [core.py:75] Initializing a V1 LLM engine (v0.21.0) with config: model='Qwen/Qwen3-8B', max_seq_len=16384, tensor_parallel_size=1\n\
         (EngineCore_DP0 pid=1) INFO [gpu_worker.py:300] Available KV cache memory: 6.37 GiB\n\
         (EngineCore_DP0 pid=1) INFO [kv_cache_utils.py:1100] GPU KV cache size: 46,368 tokens\n\
         (EngineCore_DP0 pid=1) INFO [kv_cache_utils.py:1104] Maximum concurrency for 16,384 tokens per request: 2.83x\n",
    )
    .unwrap();
    let output = bin()
        .args([
            "capacity",
            "--gpu",
            "24GiB",
            "--contexts",
            "0",
            "--concurrency",
            "1",
            "--config",
        ])
        .arg(&config)
        .arg("--from-log")
        .arg(&log)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    // The log's version and max_seq_len are the ones modelled.
    assert!(text.contains("vLLM rules for v0.21.0:"), "{text}");
    let given = text
        .split("beside the layout arithmetic from its own available KV memory:")
        .nth(1)
        .expect("the given-memory check is printed");
    // 6.37 GiB / (16 × 147,456 B) = 2,899 blocks: 46,384 tokens, against a
    // logged 46,368 (the log's GiB has two decimals).
    assert!(
        given.contains("predicted     46384.00  logged     46368.00  error +0.03 %"),
        "{given}"
    );
    assert!(given.contains("maximum concurrency"), "{given}");

    let missing = bin()
        .args(["capacity", "--config"])
        .arg(&config)
        .args(["--from-log", "/nonexistent/vllm.log"])
        .output()
        .unwrap();
    assert!(stderr_after(&missing, 2).contains("cannot read --from-log"));
}

#[test]
fn capacity_from_an_sglang_log_checks_bytes_per_token_against_the_logged_pool() {
    let dir = temp_dir("from-sglang-log");
    let config = dir.join("config.json");
    // Qwen2.5-32B's attention: 64 layers, 8 KV heads of 128, bf16.
    std::fs::write(
        &config,
        r#"{"architectures": ["Qwen2ForCausalLM"], "hidden_size": 5120, "num_hidden_layers": 64,
        "num_attention_heads": 40, "num_key_value_heads": 8, "torch_dtype": "bfloat16",
        "vocab_size": 152064, "intermediate_size": 27648, "max_position_embeddings": 32768}"#,
    )
    .unwrap();
    let log = dir.join("sglang.log");
    std::fs::write(
        &log,
        "[2025-03-08 12:29:21 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=6.09 GB, mem usage=15.54 GB.\n\
         [2025-03-08 12:29:21 TP0] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB\n\
         [2025-03-08 12:29:21 TP1] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB\n\
         [2025-03-08 12:29:27 TP0] max_total_num_tokens=46611, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2049, context_len=32768, available_gpu_mem=3.05 GB\n",
    )
    .unwrap();
    let output = bin()
        .args([
            "capacity",
            "--engine",
            "sglang",
            "--gpu",
            "a100-40",
            "--tensor-parallel-size",
            "4",
        ])
        .args(["--contexts", "0", "--concurrency", "1", "--config"])
        .arg(&config)
        .arg("--from-log")
        .arg(&log)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    // 2 KV heads per rank × 128 × 2 (K and V) × 2 B × 64 layers = 65,536 B; the
    // log's 2.84 GB over 46,611 tokens is 65,423 B (its GB have two decimals).
    let line = text
        .lines()
        .find(|l| l.contains("KV bytes per token"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("predicted     65536.00  logged     65422.90  error +0.17 %"),
        "{line}"
    );
    assert!(text.contains("max_total_num_tokens"), "{text}");
}
