//! Prompt-building figures: `cargo xtask perf -p speedmatrix-workload`.
//!
//! Targets (issue 4): one 131,072-token prompt in ≤ 200 ms, 128 distinct
//! 16,384-token prompts in ≤ 1 s, and the peak memory of a 262,144-token
//! prompt (measured in a child process so nothing else counts).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::process::Command;
use std::time::{Duration, Instant};

use speedmatrix_units::Tokens;
use speedmatrix_workload::{CacheKey, PromptBuilder, Tokenizer};

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
    let (cold, p) = timed(|| builder.prompt(n, 1, &CacheKey::unique(0, 0, 0)).unwrap());
    assert_eq!(tok.encode_count(&p.text).unwrap(), 131_072);
    let (warm, _) = timed(|| builder.prompt(n, 2, &CacheKey::unique(0, 1, 0)).unwrap());
    println!(
        "one 131,072-token prompt        {} cold (pool built), {} warm  [target <= 200 ms]",
        ms(cold),
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

    for n in [131_072_u64, 262_144] {
        let out = Command::new(std::env::current_exe().unwrap())
            .env(PEAK_ENV, n.to_string())
            .output()
            .unwrap();
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
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

fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}
