//! `cargo xtask fuzz`: a seeded, mutational fuzzer for the parsers that read
//! what servers and files send, on the pinned stable toolchain (cargo-fuzz
//! needs nightly and a fetch, which CI machines may not have).
//!
//! Each target starts from real inputs (the captured vLLM fixtures, a real
//! journal), mutates them (bit flips, interesting bytes, inserts, deletes,
//! duplicated ranges, splices, truncation) for a fixed time budget and calls
//! the parser. A finding is a panic, or a broken property: the SSE decoders
//! must decode the same events whatever the read boundaries are, and the
//! journal reader must account for every byte. Findings are written to
//! `target/fuzz-findings/<target>/` and fail the command; the inputs that
//! found bugs so far live on as regression tests in the owning crates.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;

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
    /// Seed of the mutation sequence (the same seed replays the same inputs).
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
}

/// One fuzz target: a name, seed inputs and a check that panics on a finding.
struct Target {
    name: &'static str,
    seeds: Vec<Vec<u8>>,
    check: fn(&[u8], &mut Rng),
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
    // Panics are findings, reported below; the default hook would print each.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut total_findings = 0;
    println!(
        "{:<14} {:>12} {:>10} {:>9}",
        "target", "executions", "exec/s", "findings"
    );
    for target in &targets {
        let (execs, findings) = fuzz(target, Duration::from_secs(args.seconds), args.seed);
        let rate = execs as f64 / args.seconds.max(1) as f64;
        println!(
            "{:<14} {:>12} {:>10.0} {:>9}",
            target.name,
            execs,
            rate,
            findings.len()
        );
        for (i, (input, message)) in findings.iter().enumerate() {
            let path = save(target.name, i, input)?;
            println!("  finding: {message} (input: {})", path.display());
        }
        total_findings += findings.len();
    }
    std::panic::set_hook(default_hook);
    if total_findings > 0 {
        bail!("{total_findings} findings; inputs are under target/fuzz-findings/");
    }
    Ok(())
}

/// Most distinct findings kept per target (one bug tends to be found many times).
const MAX_FINDINGS: usize = 5;

fn fuzz(target: &Target, budget: Duration, seed: u64) -> (u64, Vec<(Vec<u8>, String)>) {
    let mut rng = Rng(seed ^ target.name.len() as u64 ^ 0x9e37_79b9_7f4a_7c15);
    let mut corpus = target.seeds.clone();
    let mut findings: Vec<(Vec<u8>, String)> = Vec::new();
    let mut execs = 0u64;
    let start = Instant::now();
    while start.elapsed() < budget && findings.len() < MAX_FINDINGS {
        let input = if execs < corpus.len() as u64 {
            corpus[execs as usize].clone()
        } else {
            mutate(&corpus, &mut rng)
        };
        let mut check_rng = Rng(rng.next());
        let result = catch_unwind(AssertUnwindSafe(|| (target.check)(&input, &mut check_rng)));
        execs += 1;
        match result {
            Ok(()) => {
                // Keep a few mutants so mutations compound into deeper inputs.
                if corpus.len() < 256 && rng.below(64) == 0 {
                    corpus.push(input);
                }
            }
            Err(panic) => {
                let message = panic_message(&panic);
                if !findings.iter().any(|(_, m)| *m == message) {
                    findings.push((input, message));
                }
            }
        }
    }
    (execs, findings)
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "panic with a non-string payload".into())
}

fn save(target: &str, i: usize, input: &[u8]) -> anyhow::Result<PathBuf> {
    let dir = project_root()
        .join("target")
        .join("fuzz-findings")
        .join(target);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("finding-{i}.bin"));
    std::fs::write(&path, input)?;
    Ok(path)
}

/// xorshift64*: small, fast and reproducible from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Bytes that tend to matter to these formats.
const INTERESTING: &[&[u8]] = &[
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b":",
    b"data:",
    b"data: ",
    b"[DONE]",
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b"\\",
    b"\\u",
    b",",
    b" ",
    b"0",
    b"-1",
    b"1e309",
    b"18446744073709551616",
    b"NaN",
    b"null",
    b"true",
    b"\xff",
    b"\x00",
    b"\xc3",
    b"\xe2\x82",
    b"#",
    b"# TYPE ",
    b"{le=\"+Inf\"}",
    b"=",
    b"\"usage\":",
    b"\"choices\":[]",
    b"\"error\":",
];

fn mutate(corpus: &[Vec<u8>], rng: &mut Rng) -> Vec<u8> {
    let mut data = corpus[rng.below(corpus.len())].clone();
    for _ in 0..1 + rng.below(4) {
        let len = data.len();
        let at = rng.below(len + 1);
        match rng.below(8) {
            0 if len > 0 => data[at.min(len - 1)] ^= 1 << rng.below(8),
            1 if len > 0 => data[at.min(len - 1)] = rng.next() as u8,
            2 => {
                let token = INTERESTING[rng.below(INTERESTING.len())];
                data.splice(at..at, token.iter().copied());
            }
            3 if len > 0 => {
                let end = (at + 1 + rng.below(16)).min(len);
                data.drain(at.min(end)..end);
            }
            4 if len > 0 => {
                let from = rng.below(len);
                let end = (from + 1 + rng.below(64)).min(len);
                let piece = data[from..end].to_vec();
                data.splice(at..at, piece);
            }
            5 => {
                let other = &corpus[rng.below(corpus.len())];
                let from = rng.below(other.len() + 1);
                data.truncate(at);
                data.extend_from_slice(&other[from..]);
            }
            6 => data.truncate(at),
            _ => {
                let token = INTERESTING[rng.below(INTERESTING.len())];
                let end = (at + token.len()).min(len);
                data.splice(at..end, token.iter().copied());
            }
        }
    }
    data
}

/// Small configs that reach the less common branches of the config reader.
const CONFIG_SEEDS: &[&str] = &[
    r#"{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16"}"#,
    r#"{"architectures": ["X"], "text_config": {"hidden_size": 2560, "num_hidden_layers": 4, "num_attention_heads": 8, "head_dim": 256, "layer_types": ["linear_attention", "full_attention"]}}"#,
    r#"{"hidden_size": 64, "num_hidden_layers": 12, "num_attention_heads": 4, "sliding_window": 1024, "sliding_window_pattern": 6, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}"#,
    r#"{"hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 4, "hybrid_override_pattern": "M-M*-M", "ssm_state_size": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64}"#,
    // At the config reader's limits: products of these must not overflow.
    r#"{"hidden_size": 131072, "num_hidden_layers": 2048, "num_attention_heads": 1024, "num_key_value_heads": 1024, "head_dim": 8192, "intermediate_size": 1048576, "vocab_size": 4194304, "num_experts": 2048, "moe_intermediate_size": 65536, "num_experts_per_tok": 1024, "torch_dtype": "float32"}"#,
];

fn targets() -> Vec<Target> {
    let fixtures = project_root().join("tests").join("fixtures");
    let read = |rel: &str| std::fs::read(fixtures.join(rel)).unwrap_or_default();
    let vllm = |name: &str| read(&format!("vllm-0.32-cpu/{name}"));
    let mut configs: Vec<Vec<u8>> = CONFIG_SEEDS.iter().map(|s| s.as_bytes().to_vec()).collect();
    configs.push(vllm("config.json"));
    let capacity_fixture = project_root()
        .join("crates/speedmatrix-capacity/tests/fixtures/agents-a1-4b-fp8.config.json");
    configs.push(std::fs::read(capacity_fixture).unwrap_or_default());
    let streams = [
        slices(&vllm("chat_stream.sse")),
        slices(&vllm("completions_stream.sse")),
    ]
    .concat();
    vec![
        Target {
            name: "sse",
            seeds: streams.clone(),
            check: check_sse,
        },
        Target {
            name: "stream",
            seeds: streams,
            check: check_stream,
        },
        Target {
            name: "prometheus",
            seeds: [
                slices(&vllm("metrics_before.txt")),
                slices(&vllm("metrics_after.txt")),
            ]
            .concat(),
            check: check_prometheus,
        },
        Target {
            name: "model-config",
            seeds: configs,
            check: check_model_config,
        },
        Target {
            name: "journal",
            seeds: vec![read("journal/seed.jsonl")],
            check: check_journal,
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

/// Splits `data` at random read boundaries.
fn pieces<'a>(data: &'a [u8], rng: &mut Rng) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let n = 1 + rng.below(rest.len().min(64));
        let (head, tail) = rest.split_at(n);
        out.push(head);
        rest = tail;
    }
    out
}

/// Raw SSE framing: no panic, and the same events whatever the read boundaries.
fn check_sse(data: &[u8], rng: &mut Rng) {
    use speedmatrix_client::SseDecoder;
    let max = 64 + rng.below(4096);
    let decode = |parts: &[&[u8]]| {
        let mut d = SseDecoder::with_max_event_bytes(max);
        let mut events = Vec::new();
        for part in parts {
            d.feed(part);
            while let Some(e) = d.next_event() {
                events.push(e.map(|e| e.to_owned_event()).map_err(|e| e.kind()));
            }
        }
        if let Some(e) = d.finish() {
            events.push(e.map(|e| e.to_owned_event()).map_err(|e| e.kind()));
        }
        events
    };
    let whole = decode(&[data]);
    let split = decode(&pieces(data, rng));
    assert!(
        whole == split,
        "SseDecoder: events depend on read boundaries"
    );
}

/// OpenAI stream chunks on top of SSE: no panic, boundary independence.
fn check_stream(data: &[u8], rng: &mut Rng) {
    use speedmatrix_client::StreamDecoder;
    let at = Instant::now();
    let decode = |parts: &[&[u8]]| {
        let mut d = StreamDecoder::new();
        let mut events = Vec::new();
        for part in parts {
            d.feed(part, at);
            while let Some(e) = d.next_event() {
                events.push(e.map_err(|e| e.kind()));
            }
        }
        if let Some(e) = d.finish() {
            events.push(e.map_err(|e| e.kind()));
        }
        events
    };
    let whole = decode(&[data]);
    let split = decode(&pieces(data, rng));
    assert!(
        whole == split,
        "StreamDecoder: events depend on read boundaries"
    );
}

fn check_prometheus(data: &[u8], _rng: &mut Rng) {
    use speedmatrix_engines::{SchedulerState, ServerMetrics, generation_tokens, vllm};
    let text = String::from_utf8_lossy(data);
    let m = ServerMetrics::parse(&text);
    for name in [vllm::RUNNING, vllm::WAITING, vllm::CACHE_CONFIG_INFO] {
        let _ = (m.value(name), m.sum(name), m.metric_type(name));
    }
    let _ = (SchedulerState::from_metrics(&m), generation_tokens(&m));
    if let Some(c) = vllm::cache_config(&m) {
        let _ = c.kv_cache_tokens();
    }
}

fn check_model_config(data: &[u8], rng: &mut Rng) {
    use speedmatrix_capacity::{EngineFlags, Gpu, ModelConfig, VllmFlags, predict};
    let text = String::from_utf8_lossy(data);
    let Ok(model) = ModelConfig::from_json(&text) else {
        return;
    };
    let gpu = ["rtx3090", "h100", "24GiB", "1GiB"][rng.below(4)];
    let Ok(gpu) = Gpu::lookup(gpu) else { return };
    let flags = VllmFlags {
        gpu_memory_utilization: [0.9, 0.5, 1.0, 0.01][rng.below(4)],
        max_num_seqs: [None, Some(1), Some(u32::MAX)][rng.below(3)],
        ..VllmFlags::default()
    };
    let _ = predict(&model, &gpu, &EngineFlags::Vllm(flags));
}

fn check_journal(data: &[u8], _rng: &mut Rng) {
    let c = speedmatrix_runner::journal_steps(data);
    if let Some(t) = &c.corrupt_tail {
        assert!(
            t.offset + t.dropped_bytes == data.len() as u64,
            "journal: kept + dropped != file length"
        );
        assert!(
            t.line >= 1 && t.line <= c.records.len() + 1,
            "journal: damaged line out of range"
        );
    }
}
