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
