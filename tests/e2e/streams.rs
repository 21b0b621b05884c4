//! Exact numbers on servers that stream like other engines: the simulator
//! speaks each engine's documented format (TGI, Ollama, llama.cpp, SGLang, a
//! proxy that drops continuous usage, speculative decoding, UTF-8 holdback,
//! a body held open after `[DONE]`, no Content-Type) at a known rate with a
//! known number of tokens per chunk. With 8,192-token requests and windows
//! in which no request finishes, total and per-request tok/s must be within
//! 1 % of the truth and the recorded count source must be the right one.

use std::sync::Mutex;

use speedmatrix_report::{CellStatus, DecodeMeasurements, TokenCountSource};
use speedmatrix_sim::{Dialect, Profile, TextStyle};

use crate::stage::{Outcome, Stage, Trouble, one_cell, run_against};
use crate::support::temp_dir;

/// Streams per cell: three, so that one round of calibration requests runs
/// them all at once.
const STREAMS: u32 = 3;
/// Fixed step time: every request decodes one step per `STEP_MS`.
const STEP_MS: f64 = 10.0;
/// The largest error allowed against the truth.
const TOLERANCE: f64 = 0.01;

/// These tests compare against a clock; running two at once on a small
/// machine would only add noise.
static SERIAL: Mutex<()> = Mutex::new(());

/// A profile whose every step takes exactly `STEP_MS`, whatever the batch.
fn profile(change: impl FnOnce(&mut Profile)) -> Profile {
    let mut p = Profile::builtin("tiny").unwrap();
    p.name = "streams".into();
    p.max_model_len = 9_000;
    p.num_gpu_blocks = 4 * 9_000 / 16 + 2;
    p.eos_after_tokens = None;
    p.cost.step_base_us = STEP_MS * 1e3;
    p.cost.decode_per_seq_us = 0.0;
    p.cost.decode_per_context_token_ns = 0.0;
    p.cost.prefill_per_token_us = 0.0;
    p.cost.prefill_per_token_context_ns = 0.0;
    change(&mut p);
    p.validate().unwrap();
    p
}

/// Runs one cell (context 0 × `STREAMS`, 2 s, 8,192 tokens) against `profile`.
fn run(name: &str, profile: Profile, extra: &[&str]) -> (Outcome, Profile) {
    let o = run_cell(name, &profile, "2s", 8_192, extra);
    (o, profile)
}

/// Runs one cell of `STREAMS` streams against `profile`, one test at a time.
fn run_cell(
    name: &str,
    profile: &Profile,
    window: &str,
    max_tokens: u32,
    extra: &[&str],
) -> Outcome {
    run_streams(name, profile, STREAMS, window, max_tokens, extra)
}

/// Runs one cell of `streams` streams against `profile`, one test at a time.
fn run_streams(
    name: &str,
    profile: &Profile,
    streams: u32,
    window: &str,
    max_tokens: u32,
    extra: &[&str],
) -> Outcome {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = temp_dir(name);
    let stage = Stage::new(profile.clone(), Trouble::None);
    let mut args = one_cell(streams, window, max_tokens);
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run_against(&stage.url, &dir, &args);
    o.assert_no_panic();
    assert_eq!(o.code, Some(0), "{name}: {}", o.stderr);
    o
}

/// Checks the cell against the truth: every step gives each stream the
/// profile's mean tokens per step.
fn check(name: &str, o: &Outcome, p: &Profile, source: TokenCountSource) -> DecodeMeasurements {
    let cell = o.cell(0);
    let m = cell.measurements.clone().expect("measured");
    let per_request = p.mean_tokens_per_step() * 1e3 / STEP_MS;
    let total = per_request * f64::from(STREAMS);
    let err_total = m.total_tokens_per_s / total - 1.0;
    let err_per = m.per_request_tokens_per_s / per_request - 1.0;
    eprintln!(
        "[streams] {name}: total {:.1} tok/s vs true {total:.1} ({:+.2} %), per request {:.1} vs {per_request:.1} ({:+.2} %), source {:?}, {}",
        m.total_tokens_per_s,
        err_total * 100.0,
        m.per_request_tokens_per_s,
        err_per * 100.0,
        m.token_count_source,
        cell.status_label(),
    );
    assert!(
        err_total.abs() <= TOLERANCE,
        "{name}: total {} vs {total}",
        m.total_tokens_per_s
    );
    assert!(
        err_per.abs() <= TOLERANCE,
        "{name}: per request {} vs {per_request}",
        m.per_request_tokens_per_s
    );
    assert_eq!(m.token_count_source, source, "{name}");
    assert_eq!(m.completed_requests, 0, "{name}: a request finished");
    assert_eq!(cell.status, CellStatus::Valid, "{name}");
    m
}

/// An estimated cell: calibrated on finished requests, within 1 %, shown as
/// valid with its estimate mark.
fn check_calibrated_estimate(name: &str, o: &Outcome, m: &DecodeMeasurements) {
    let t = m.token_count.as_ref().expect("detail");
    assert!(t.estimated, "{name}");
    assert!(t.calibration_requests >= 2, "{name}: {t:?}");
    let u = t.uncertainty_pct.expect("calibrated");
    assert!(u <= 1.0, "{name}: uncertainty {u} %");
    let label = o.cell(0).status_label();
    assert!(label.starts_with("Valid (est. ±"), "{name}: {label}");
    let csv = std::fs::read_to_string(o.out.join("measurements.csv")).unwrap();
    assert!(
        csv.contains(",true,"),
        "{name}: CSV does not mark the estimate"
    );
    let md = std::fs::read_to_string(o.out.join("report.md")).unwrap();
    assert!(
        md.contains("≈"),
        "{name}: Markdown does not mark the estimate"
    );
}

fn check_exact(name: &str, m: &DecodeMeasurements) {
    let t = m.token_count.as_ref().expect("detail");
    assert!(!t.estimated, "{name}: {t:?}");
    assert_eq!(t.uncertainty_pct, Some(0.0), "{name}");
}

#[test]
fn tgi_one_event_per_token_is_an_exact_count() {
    // Half the events carry no text (the first byte of a two-byte character).
    let p = profile(|p| {
        p.dialect = Dialect::Tgi;
        p.text_style = TextStyle::TwoByteChars;
    });
    let (o, p) = run("streams-tgi", p, &[]);
    let m = check("tgi", &o, &p, TokenCountSource::EngineCount);
    check_exact("tgi", &m);
}

#[test]
fn llamacpp_timings_give_an_exact_count_through_utf8_holdback() {
    let p = profile(|p| {
        p.dialect = Dialect::Llamacpp;
        p.text_style = TextStyle::TwoByteChars;
    });
    let (o, p) = run("streams-llamacpp", p, &["--api", "chat"]);
    let m = check("llama.cpp", &o, &p, TokenCountSource::EngineCount);
    check_exact("llama.cpp", &m);
    let notes = o.report().notes.join("\n");
    assert!(notes.contains("timings_per_token"), "{notes}");
}

#[test]
fn utf8_holdback_ollama_style_is_estimated_from_the_text() {
    // Two tokens per chunk, no running count, an all-zero usage on every chunk.
    let p = profile(|p| {
        p.dialect = Dialect::Ollama;
        p.text_style = TextStyle::TwoByteChars;
    });
    let (o, p) = run("streams-ollama", p, &[]);
    let m = check(
        "ollama (UTF-8 holdback)",
        &o,
        &p,
        TokenCountSource::Tokenizer,
    );
    check_calibrated_estimate("ollama", &o, &m);
}

#[test]
fn sglang_speculative_chat_with_continuous_usage_is_exact() {
    let p = profile(|p| {
        p.dialect = Dialect::Sglang;
        p.tokens_per_step = vec![3, 4];
    });
    let (o, p) = run("streams-sglang", p, &["--api", "chat"]);
    let m = check(
        "sglang (EAGLE 3–4)",
        &o,
        &p,
        TokenCountSource::UsagePerChunk,
    );
    check_exact("sglang", &m);
}

#[test]
fn a_proxy_without_continuous_usage_is_estimated_and_calibrated() {
    let p = profile(|p| p.dialect = Dialect::OpenaiProxy);
    let (o, p) = run("streams-proxy", p, &[]);
    let m = check("proxy", &o, &p, TokenCountSource::Tokenizer);
    check_calibrated_estimate("proxy", &o, &m);
}

#[test]
fn speculative_decoding_with_usage_at_the_end_only() {
    let p = profile(|p| {
        p.dialect = Dialect::OpenaiProxy;
        p.tokens_per_step = vec![3, 4];
    });
    let (o, p) = run("streams-spec-final", p, &[]);
    let m = check("spec 3–4, final usage", &o, &p, TokenCountSource::Tokenizer);
    check_calibrated_estimate("spec final", &o, &m);
}

#[test]
fn speculative_decoding_with_usage_on_every_chunk() {
    let p = profile(|p| p.tokens_per_step = vec![3, 4]);
    let (o, p) = run("streams-spec-continuous", p, &[]);
    let m = check(
        "spec 3–4, usage per chunk",
        &o,
        &p,
        TokenCountSource::UsagePerChunk,
    );
    check_exact("spec continuous", &m);
}

#[test]
fn an_event_stream_without_a_content_type_is_measured_and_noted() {
    let p = profile(|p| p.stream_content_type = Some(String::new()));
    let (o, p) = run("streams-no-content-type", p, &[]);
    let m = check("no Content-Type", &o, &p, TokenCountSource::UsagePerChunk);
    check_exact("no Content-Type", &m);
    let notes = o.report().notes;
    let said = notes
        .iter()
        .filter(|n| n.contains("no Content-Type"))
        .count();
    assert_eq!(said, 1, "{notes:?}");
}

#[test]
fn a_body_held_open_after_done_does_not_delay_the_next_request() {
    // 64-token requests finish every 0.64 s; the server keeps each body open 3 s.
    let p = profile(|p| p.hold_open_after_done_ms = Some(3_000));
    let o = run_cell("streams-held-open", &p, "3s", 64, &[]);
    let m = o.cell(0).measurements.expect("measured");
    // Each request is 64 steps plus a replacement's first (prefill) step.
    let ideal = f64::from(STREAMS) * 64.0 / (65.0 * STEP_MS / 1e3);
    eprintln!(
        "[streams] held open after [DONE]: total {:.1} tok/s vs at most {ideal:.1}, {} completed, {:.2} active",
        m.total_tokens_per_s, m.completed_requests, m.average_active_requests
    );
    assert!(
        m.total_tokens_per_s >= 0.95 * ideal,
        "{} tok/s: replacements waited for the socket",
        m.total_tokens_per_s
    );
    // About 3 s / 0.65 s × 3 streams ≈ 13 requests end inside the window.
    assert!(m.completed_requests >= 11, "{}", m.completed_requests);
    assert!(m.average_active_requests <= f64::from(STREAMS) + 0.05);
    assert_eq!(m.token_count_source, TokenCountSource::UsagePerChunk);
}

#[test]
fn many_finished_requests_calibrate_on_a_bounded_sample_within_the_stated_interval() {
    // Two-byte characters, a byte a step, behind a proxy that drops the
    // running usage: every chunk with text carries two tokens, which the
    // run's tokenizer sees as one or two. 64-token requests end every
    // 0.65 s, so about ninety of 24 streams' finish in the cell, more than
    // the sample whose text calibrates the estimate of the streams cancelled
    // at the end (each sent before the window closed: a request outlasts
    // the streams' grace after it).
    let p = profile(|p| {
        p.dialect = Dialect::OpenaiProxy;
        p.text_style = TextStyle::TwoByteChars;
    });
    let o = run_streams("streams-sampled", &p, 24, "2s", 64, &[]);
    let cell = o.cell(0);
    let m = cell.measurements.clone().expect("measured");
    let t = m.token_count.clone().expect("detail");
    let notes = o.report().notes.join("\n");
    assert!(t.estimated, "{t:?}");
    assert_eq!(t.calibration_requests, 64, "{t:?}\n{notes}");
    assert!(notes.contains("random sample of 64 of the"), "{notes}");
    // The estimate stays within its stated interval (and the clock's 1 %)
    // of the truth.
    let u = t.uncertainty_pct.expect("calibrated") / 100.0;
    let per_request = p.mean_tokens_per_step() * 1e3 / STEP_MS;
    let err = m.per_request_tokens_per_s / per_request - 1.0;
    eprintln!(
        "[streams] sampled calibration: per request {:.1} vs {per_request:.1} ({:+.2} %), estimated {:.2} % ±{:.3} %, {}",
        m.per_request_tokens_per_s,
        err * 100.0,
        t.estimated_share_pct,
        u * 100.0,
        cell.status_label(),
    );
    assert!(
        err.abs() <= TOLERANCE + u,
        "per request {}",
        m.per_request_tokens_per_s
    );
}
