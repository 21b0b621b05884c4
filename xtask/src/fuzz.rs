//! `cargo xtask fuzz`: coverage-guided fuzzing of the parsers that read what
//! servers and files send, on the pinned stable toolchain.
//!
//! The targets live beside their crates as `bolero::check!` tests (so they
//! can reach private code): under `cargo test` they run a short random pass
//! and replay their corpus, as regression tests; here `cargo bolero` builds
//! them with libFuzzer's coverage instrumentation (`-Cpasses=sancov-module`,
//! stable flags; no sanitizer, which would need nightly) and runs each for a
//! fixed budget, starting from real inputs (the captured vLLM fixtures, a
//! real journal). A finding is a panic or a broken property (the SSE
//! decoders must decode the same events whatever the read boundaries, the
//! journal reader must account for every byte); its input is kept under
//! `target/fuzz/crashes/<target>/` and fails the command.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use crate::util::project_root;

/// Flags of `cargo xtask fuzz`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Time budget per target, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Only this target (sse, stream, prometheus, model-config, journal); all when omitted.
    #[arg(long)]
    target: Option<String>,
}

/// One fuzz target: where its test lives and what it starts from.
struct Target {
    name: &'static str,
    package: &'static str,
    test: &'static str,
    seeds: Vec<Vec<u8>>,
}

/// Runs every target for its budget and prints executions and findings.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let targets: Vec<Target> = targets()
        .into_iter()
        .filter(|t| args.target.as_deref().is_none_or(|n| n == t.name))
        .collect();
    if targets.is_empty() {
        bail!(
            "no fuzz target named {:?}; known: sse, stream, prometheus, model-config, journal",
            args.target
        );
    }
    ensure_cargo_bolero()?;
    let root = project_root();
    let mut total_findings = 0;
    let mut rows = Vec::new();
    for target in &targets {
        let corpus = root.join("target/fuzz/corpus").join(target.name);
        let crashes = root.join("target/fuzz/crashes").join(target.name);
        write_seeds(&corpus, &target.seeds)?;
        std::fs::create_dir_all(&crashes)?;
        let before = count_files(&crashes);
        eprintln!("xtask fuzz: {} ({} s) …", target.name, args.seconds);
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&root)
            .args(["bolero", "test", "--package", target.package])
            .args(["--sanitizer", "NONE", "-T"])
            .arg(format!("{}s", args.seconds))
            .arg("--corpus-dir")
            .arg(&corpus)
            .arg("--crashes-dir")
            .arg(&crashes)
            .arg(target.test)
            .output()
            .with_context(|| format!("running cargo bolero for {}", target.name))?;
        let log = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        let findings = count_files(&crashes).saturating_sub(before);
        let executions = runs(&log);
        if !out.status.success() && findings == 0 {
            // A failure that left no input behind is a build or tool problem.
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            bail!(
                "cargo bolero failed for {}:\n{}",
                target.name,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        total_findings += findings;
        rows.push((target.name, executions, findings, crashes));
    }
    println!(
        "{:<14} {:>12} {:>10} {:>9}",
        "target", "executions", "exec/s", "findings"
    );
    for (name, executions, findings, crashes) in &rows {
        let rate = executions.map_or(0.0, |e| e as f64 / args.seconds.max(1) as f64);
        let executions = executions.map_or_else(|| "?".to_owned(), |e| e.to_string());
        println!("{name:<14} {executions:>12} {rate:>10.0} {findings:>9}");
        if *findings > 0 {
            println!("  inputs: {}", crashes.display());
        }
    }
    if total_findings > 0 {
        bail!("{total_findings} findings; inputs are under target/fuzz/crashes/");
    }
    Ok(())
}

/// `cargo bolero` is a cargo subcommand from crates.io; say how to get it.
fn ensure_cargo_bolero() -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let ok = Command::new(cargo)
        .args(["bolero", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        bail!(
            "cargo-bolero is not installed; install it with `cargo install cargo-bolero --locked` \
             (the fuzz targets also run as plain tests under `cargo test`)"
        );
    }
    Ok(())
}

/// libFuzzer's closing line: `Done N runs in S second(s)`.
fn runs(log: &str) -> Option<u64> {
    log.lines().rev().find_map(|l| {
        l.trim()
            .strip_prefix("Done ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.filter_map(Result::ok).count())
}

/// Writes the seed inputs into the corpus, keeping what earlier runs found.
fn write_seeds(corpus: &Path, seeds: &[Vec<u8>]) -> anyhow::Result<()> {
    std::fs::create_dir_all(corpus)?;
    for (i, seed) in seeds.iter().enumerate() {
        std::fs::write(corpus.join(format!("seed-{i:03}")), seed)?;
    }
    Ok(())
}

/// Small configs that reach each of the config reader's branches.
const CONFIG_SEEDS: &[&str] = &[
    r#"{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16"}"#,
    r#"{"architectures": ["X"], "text_config": {"hidden_size": 2560, "num_hidden_layers": 4, "num_attention_heads": 8, "head_dim": 256, "layer_types": ["linear_attention", "full_attention"]}}"#,
    r#"{"hidden_size": 64, "num_hidden_layers": 12, "num_attention_heads": 4, "sliding_window": 1024, "sliding_window_pattern": 6, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}"#,
    r#"{"hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4, "hybrid_override_pattern": "M-M*-M", "ssm_state_size": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64}"#,
    // At the config reader's limits: products of these must not overflow.
    r#"{"hidden_size": 131072, "num_hidden_layers": 2048, "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 8192, "intermediate_size": 1048576, "vocab_size": 4194304, "num_experts": 2048, "moe_intermediate_size": 65536, "num_experts_per_tok": 1024, "torch_dtype": "float32"}"#,
];

fn targets() -> Vec<Target> {
    let root = project_root();
    let fixtures = root.join("tests").join("fixtures");
    let read = |rel: &str| std::fs::read(fixtures.join(rel)).unwrap_or_default();
    let vllm = |name: &str| read(&format!("vllm-0.32-cpu/{name}"));
    // The model-config target reads its first byte as the GPU and flags.
    let mut configs: Vec<Vec<u8>> = CONFIG_SEEDS
        .iter()
        .map(|s| [&[0u8][..], s.as_bytes()].concat())
        .collect();
    configs.push([&[5u8][..], &vllm("config.json")].concat());
    let capacity_fixture: PathBuf =
        root.join("crates/speedmatrix-capacity/tests/fixtures/agents-a1-4b-fp8.config.json");
    configs.push(
        [
            &[9u8][..],
            &std::fs::read(capacity_fixture).unwrap_or_default(),
        ]
        .concat(),
    );
    // The stream targets read their first 8 bytes as the read-boundary seed.
    let streams: Vec<Vec<u8>> = [
        slices(&vllm("chat_stream.sse")),
        slices(&vllm("completions_stream.sse")),
    ]
    .concat()
    .into_iter()
    .map(|s| [&7u64.to_le_bytes()[..], &s].concat())
    .collect();
    vec![
        Target {
            name: "sse",
            package: "speedmatrix-client",
            test: "sse::tests::fuzz_sse",
            seeds: streams.clone(),
        },
        Target {
            name: "stream",
            package: "speedmatrix-client",
            test: "event::tests::fuzz_stream",
            seeds: streams,
        },
        Target {
            name: "prometheus",
            package: "speedmatrix-engines",
            test: "prometheus::tests::fuzz_prometheus",
            seeds: [
                slices(&vllm("metrics_before.txt")),
                slices(&vllm("metrics_after.txt")),
            ]
            .concat(),
        },
        Target {
            name: "model-config",
            package: "speedmatrix-capacity",
            test: "config::tests::fuzz_model_config",
            seeds: configs,
        },
        Target {
            name: "journal",
            package: "speedmatrix-runner",
            test: "resume::tests::fuzz_journal",
            seeds: vec![read("journal/seed.jsonl")],
        },
        Target {
            name: "dataset-sharegpt",
            package: "speedmatrix-workload",
            test: "dataset::tests::fuzz_dataset_sharegpt",
            seeds: vec![
                br#"[{"id": "a", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello"}]}]"#.to_vec(),
            ],
        },
        Target {
            name: "dataset-jsonl",
            package: "speedmatrix-workload",
            test: "dataset::tests::fuzz_dataset_jsonl",
            seeds: vec![
                b"{\"prompt\": \"Hi\", \"output_tokens\": 8}\n{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n".to_vec(),
            ],
        },
        Target {
            name: "trace",
            package: "speedmatrix-workload",
            test: "dataset::trace::tests::fuzz_trace",
            seeds: vec![
                b"{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 8, \"hash_ids\": [0, 1]}\n{\"timestamp\": 5.5, \"input_tokens\": 7, \"output_tokens\": 2}\n{\"timestamp\": 9, \"prompt\": \"Hi\"}\n".to_vec(),
            ],
        },
        Target {
            name: "dataset-text",
            package: "speedmatrix-workload",
            test: "dataset::tests::fuzz_dataset_text",
            seeds: vec![
                b"The quiet harbor measured twelve meters.\nA second line, with \xc3\xa9 and a tab\t.\n"
                    .to_vec(),
            ],
        },
    ]
}

/// A large fixture cut into pieces of about 2 KiB at line ends: small inputs
/// run faster and let each mutation matter more. The whole file is kept too.
fn slices(data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = vec![data.to_vec()];
    let mut start = 0;
    while start < data.len() {
        let mut end = (start + 2048).min(data.len());
        while end < data.len() && data[end - 1] != b'\n' {
            end += 1;
        }
        out.push(data[start..end].to_vec());
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_has_seeds_from_the_fixtures() {
        for t in targets() {
            assert!(
                t.seeds.iter().any(|s| s.len() > 64),
                "{}: no real seed",
                t.name
            );
        }
        assert_eq!(
            runs("x\nDone 1169518 runs in 11 second(s)\n"),
            Some(1_169_518)
        );
        assert_eq!(runs("nothing"), None);
    }
}
