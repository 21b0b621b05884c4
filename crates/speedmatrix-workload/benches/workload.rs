//! Prompt-building figures: `cargo xtask perf -p speedmatrix-workload`.
//!
//! Targets (issue 4): one 131,072-token prompt in ≤ 200 ms, 128 distinct
//! 16,384-token prompts in ≤ 1 s, and the peak memory of a 262,144-token
//! prompt (measured in a child process so nothing else counts). Datasets
//! (issue 30): parsing 100,000 JSONL records and 100,000 ShareGPT
//! conversations from memory (records per second, heap bytes kept per
//! record), and 128 corpus prompts of 16,384 tokens.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::process::Command;
use std::time::{Duration, Instant};

use speedmatrix_units::Tokens;
use speedmatrix_workload::{
    CacheKey, Dataset, DatasetFormat, DatasetMessage, DatasetPrompt, DatasetRecord, PromptBuilder,
    ReferenceOutput, TextGenerator, Tokenizer,
};

const PEAK_ENV: &str = "SPEEDMATRIX_BENCH_PEAK_TOKENS";

fn main() {
    if let Ok(n) = std::env::var(PEAK_ENV) {
        peak_child(n.parse().unwrap());
        return;
    }
    let started = Instant::now();
    let tok = Tokenizer::bundled().unwrap();
    println!("load bundled tokenizer          {}", ms(started.elapsed()));

    let builder = PromptBuilder::new(tok.clone());
    let n = Tokens::new(131_072);
    let cpu_before = process_cpu_seconds();
    let (cold, p) = timed(|| builder.prompt(n, 1, &CacheKey::unique(0, 0, 0)).unwrap());
    let cold_cpu = process_cpu_seconds() - cpu_before;
    assert_eq!(tok.encode_count(&p.text).unwrap(), 131_072);
    let (warm, _) = timed(|| builder.prompt(n, 2, &CacheKey::unique(0, 1, 0)).unwrap());
    println!(
        "one 131,072-token prompt        {} cold (pool built; {:.0} ms CPU on all threads), {} warm  [target <= 200 ms]",
        ms(cold),
        cold_cpu * 1e3,
        ms(warm)
    );

    let builder = PromptBuilder::new(tok.clone());
    let n = Tokens::new(16_384);
    let (first, _) = timed(|| builder.prompt(n, 9, &CacheKey::unique(1, 999, 0)).unwrap());
    let (all, prompts) = timed(|| {
        (0..128)
            .map(|s| builder.prompt(n, 9, &CacheKey::unique(1, s, 0)).unwrap())
            .collect::<Vec<_>>()
    });
    let distinct: std::collections::HashSet<&str> =
        prompts.iter().map(|p| p.text.as_str()).collect();
    assert_eq!(distinct.len(), 128);
    println!(
        "128 distinct 16,384-token prompts {} (+ {} for the first, which builds the pool)  [target <= 1 s]",
        ms(all),
        ms(first)
    );

    datasets(&tok);

    for n in [131_072_u64, 262_144] {
        let out = Command::new(std::env::current_exe().unwrap())
            .env(PEAK_ENV, n.to_string())
            .output()
            .unwrap();
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

/// Dataset parsing speed and the memory its records keep, then corpus prompts.
fn datasets(tok: &Tokenizer) {
    const RECORDS: usize = 100_000;
    // Texts of 40 to 1,200 bytes, with newlines and quotes to escape.
    let mut generator = TextGenerator::new(30);
    let texts: Vec<String> = (0..997)
        .map(|i| {
            let mut s = String::new();
            generator.fill(&mut s, 40 + i * 37 % 1_200);
            s
        })
        .collect();
    let pick = |i: usize| texts[i * 7_919 % texts.len()].as_str();

    let mut jsonl = String::new();
    for i in 0..RECORDS {
        let record = if i % 4 == 3 {
            serde_json::json!({"messages": [{"role": "system", "content": pick(i + 1)},
                {"role": "user", "content": pick(i)}], "output_tokens": i % 2_000})
        } else {
            serde_json::json!({"id": i, "prompt": pick(i), "output_tokens": i % 2_000})
        };
        jsonl.push_str(&record.to_string());
        jsonl.push('\n');
    }
    // ShareGPT-like: 2 to 8 turns, only the first two read.
    let entries: Vec<serde_json::Value> = (0..RECORDS)
        .map(|i| {
            let turns: Vec<serde_json::Value> = (0..2 + i % 7)
                .map(|t| {
                    let from = if t % 2 == 0 { "human" } else { "gpt" };
                    serde_json::json!({"from": from, "value": pick(i + t)})
                })
                .collect();
            serde_json::json!({"id": format!("e{i}"), "conversations": turns})
        })
        .collect();
    let sharegpt = serde_json::to_string(&entries).unwrap();
    drop(entries);

    for (format, bytes) in [
        (DatasetFormat::Jsonl, jsonl.as_bytes()),
        (DatasetFormat::ShareGpt, sharegpt.as_bytes()),
    ] {
        let (t, d) = timed(|| Dataset::parse(bytes, format, "bench").unwrap());
        let records = d.records().len();
        assert_eq!(records, RECORDS);
        let text: usize = d.records().iter().map(text_bytes).sum();
        println!(
            "parse {:>9} {} records ({:.1} MB) {} = {:.0} records/s, {:.0} MB/s; heap kept {:.0} bytes/record ({:.0} of them text)",
            format.name(),
            speedmatrix_units::group_thousands(records as u64),
            bytes.len() as f64 / 1e6,
            ms(t),
            records as f64 / t.as_secs_f64(),
            bytes.len() as f64 / 1e6 / t.as_secs_f64(),
            heap_bytes(&d) as f64 / records as f64,
            text as f64 / records as f64,
        );
    }

    let mut corpus = String::new();
    TextGenerator::new(31).fill(&mut corpus, 1 << 20);
    let corpus = Dataset::parse(corpus.as_bytes(), DatasetFormat::Text, "bench").unwrap();
    let lengths = vec![Tokens::new(16_384); 128];
    let (t, prompts) = timed(|| corpus.corpus_prompts(tok, &lengths, 1).unwrap());
    assert_eq!(tok.encode_count(&prompts[0]).unwrap(), 16_384);
    println!(
        "128 corpus prompts of 16,384 tokens {} from a 1 MiB text corpus",
        ms(t)
    );
}

/// Bytes of text a record holds.
fn text_bytes(r: &DatasetRecord) -> usize {
    let prompt = match &r.prompt {
        DatasetPrompt::Text(s) => s.len(),
        DatasetPrompt::Messages(m) => m.iter().map(|m| m.role.len() + m.content.len()).sum(),
    };
    let output = match &r.output {
        ReferenceOutput::Text(s) => s.len(),
        _ => 0,
    };
    prompt + output
}

/// The heap a dataset keeps, estimated from its allocations' capacities and
/// struct sizes (allocator overhead left out).
fn heap_bytes(d: &Dataset) -> usize {
    use std::mem::size_of;
    let records: usize = d
        .records()
        .iter()
        .map(|r| {
            let prompt = match &r.prompt {
                DatasetPrompt::Text(s) => s.capacity(),
                DatasetPrompt::Messages(m) => {
                    m.capacity() * size_of::<DatasetMessage>()
                        + m.iter()
                            .map(|m| m.role.capacity() + m.content.capacity())
                            .sum::<usize>()
                }
            };
            let output = match &r.output {
                ReferenceOutput::Text(s) => s.capacity(),
                _ => 0,
            };
            size_of::<DatasetRecord>() + prompt + output
        })
        .sum();
    size_of::<Dataset>() + records + d.sha256().len() + d.corpus().len()
}

fn peak_child(n: u64) {
    let tok = Tokenizer::bundled().unwrap();
    let before = vm_hwm_kib();
    let builder = PromptBuilder::new(tok.clone());
    let (t, p) = timed(|| {
        builder
            .prompt(Tokens::new(n), 3, &CacheKey::unique(2, 0, 0))
            .unwrap()
    });
    let after = vm_hwm_kib();
    println!(
        "one {}-token prompt           {} (cold), {} bytes of text, peak memory (VmHWM) {} MiB ({} MiB after loading the tokenizer)",
        speedmatrix_units::group_thousands(n),
        ms(t),
        p.text.len(),
        after / 1024,
        before / 1024
    );
}

fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let started = Instant::now();
    let out = f();
    (started.elapsed(), out)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// User + system CPU seconds of this process (all threads), from
/// `/proc/self/stat`: on a shared machine the wall time of a parallel encode
/// depends on free cores, its CPU time much less.
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of proc(5) are utime and stime; `fields[0]` is field 3.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<f64>().ok())
        .sum();
    ticks / clock_ticks_per_second()
}

fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
