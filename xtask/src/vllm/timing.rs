//! Client-side TTFT and inter-chunk gaps for 1 and 8 concurrent streams.
//!
//! A sanity figure for the engine's setup (pinned or not), not the benchmark: the matrix
//! measures properly once `speedmatrix run` exists.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use super::http;
use super::server::{SERVED_MODEL, Server};

/// Tokens each timed stream generates.
const TOKENS: u64 = 128;

/// Measures and prints the figures for 1 and 8 streams.
pub(crate) fn report(server: &Server, setup: &str) -> anyhow::Result<()> {
    for streams in [1, 8] {
        let figures = measure(server.url(), streams)?;
        eprintln!(
            "vllm-e2e: timing ({setup}; {streams} stream{}): {figures}",
            if streams == 1 { "" } else { "s" }
        );
    }
    Ok(())
}

/// Times every EngineCore placement on two cores in turn, twice, so that they share the load
/// the machine has at the time.
pub(crate) fn compare_pinning(server: &Server) -> anyhow::Result<()> {
    for round in 1..=2 {
        for (cpus, setup) in [
            ("0-1", "EngineCore unpinned"),
            ("0", "EngineCore on core 0"),
            ("1", "EngineCore on core 1"),
        ] {
            server.pin_engine_core(cpus)?;
            report(server, &format!("round {round}, {setup}"))?;
        }
    }
    Ok(())
}

/// What the streams of one run saw.
#[derive(Debug)]
struct Figures {
    ttft: Vec<Duration>,
    gaps: Vec<Duration>,
    chunks: usize,
    tokens: u64,
    wall: Duration,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
        write!(
            f,
            "TTFT p50 {:.1} ms, max {:.1} ms; gaps p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; \
             {} chunks for {} tokens in {:.2} s ({:.0} tok/s)",
            ms(quantile(&self.ttft, 0.5)),
            ms(quantile(&self.ttft, 1.0)),
            ms(quantile(&self.gaps, 0.5)),
            ms(quantile(&self.gaps, 0.99)),
            ms(quantile(&self.gaps, 1.0)),
            self.chunks,
            self.tokens,
            self.wall.as_secs_f64(),
            self.tokens as f64 / self.wall.as_secs_f64().max(1e-9),
        )
    }
}

fn measure(base: &str, streams: usize) -> anyhow::Result<Figures> {
    let url = format!("{base}/v1/completions");
    let started = Instant::now();
    let results: Vec<anyhow::Result<http::Stream>> = thread::scope(|s| {
        let handles: Vec<_> = (0..streams)
            .map(|i| {
                let url = &url;
                s.spawn(move || http::post_stream(url, &request(i)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a stream thread panicked")))
            })
            .collect()
    });
    let wall = started.elapsed();
    let mut figures = Figures {
        ttft: Vec::new(),
        gaps: Vec::new(),
        chunks: 0,
        tokens: 0,
        wall,
    };
    for result in results {
        add_stream(&mut figures, &result?)?;
    }
    Ok(figures)
}

fn request(i: usize) -> Value {
    json!({
        "model": SERVED_MODEL,
        "prompt": format!("Stream {i}: the quick brown fox jumps over the lazy dog."),
        "max_tokens": TOKENS,
        "temperature": 0,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
}

fn add_stream(figures: &mut Figures, stream: &http::Stream) -> anyhow::Result<()> {
    anyhow::ensure!(
        stream.status == 200,
        "a timed stream answered {}",
        stream.status
    );
    let mut last: Option<Duration> = None;
    for (event, value) in stream
        .events
        .iter()
        .filter(|e| e.data != "[DONE]")
        .zip(stream.json_events()?)
    {
        if let Some(n) = value
            .pointer("/usage/completion_tokens")
            .and_then(Value::as_u64)
        {
            figures.tokens += n;
        }
        let has_text = value
            .pointer("/choices/0/text")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty());
        if !has_text {
            continue;
        }
        figures.chunks += 1;
        match last {
            None => figures.ttft.push(event.at),
            Some(prev) => figures.gaps.push(event.at.saturating_sub(prev)),
        }
        last = Some(event.at);
    }
    last.context("a timed stream carried no text")?;
    Ok(())
}

/// The `q` quantile (nearest rank) of `values`; `None` when empty.
fn quantile(values: &[Duration], q: f64) -> Option<Duration> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&v, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(quantile(&v, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(quantile(&v, 1.0), Some(Duration::from_millis(100)));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn ttft_is_the_first_text_chunk_and_gaps_follow() {
        let ev = |ms, data: &str| http::Event {
            at: Duration::from_millis(ms),
            data: data.to_owned(),
        };
        let stream = http::Stream {
            status: 200,
            raw: Vec::new(),
            events: vec![
                ev(10, r#"{"choices":[{"text":""}]}"#),
                ev(20, r#"{"choices":[{"text":"a"}]}"#),
                ev(25, r#"{"choices":[{"text":"b"}]}"#),
                ev(26, r#"{"choices":[],"usage":{"completion_tokens":2}}"#),
                ev(26, "[DONE]"),
            ],
        };
        let mut f = Figures {
            ttft: Vec::new(),
            gaps: Vec::new(),
            chunks: 0,
            tokens: 0,
            wall: Duration::ZERO,
        };
        add_stream(&mut f, &stream).unwrap();
        assert_eq!(f.ttft, [Duration::from_millis(20)]);
        assert_eq!(f.gaps, [Duration::from_millis(5)]);
        assert_eq!((f.chunks, f.tokens), (2, 2));
    }
}
