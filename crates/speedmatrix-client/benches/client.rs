//! Client performance: decoder throughput on one core, and end-to-end tokens/s
//! from a loopback server (a child process, so client CPU is measured alone).
//!
//! Run with `cargo bench -p speedmatrix-client` (or `cargo xtask perf -p speedmatrix-client`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use speedmatrix_client::{Client, ClientConfig, CompletionRequest, SseDecoder, StreamDecoder};
use speedmatrix_units::Tokens;

/// Tokens (one chunk each) per streamed response.
const TOKENS_PER_RESPONSE: u64 = 2_000;
/// Events per body frame the server writes (vLLM flushes per step; this is a busy server).
const EVENTS_PER_FRAME: usize = 16;
const SERVE_FLAG: &str = "--serve-loopback";

fn main() {
    if std::env::args().any(|a| a == SERVE_FLAG) {
        serve_forever();
        return;
    }
    println!("speedmatrix-client benchmarks (release build, one client thread)");
    for reads in [Reads::Split16K, Reads::PerEvent] {
        decoder_bench("completions", &completion_chunk, reads);
        decoder_bench("chat", &chat_chunk, reads);
    }
    sse_framing_bench();
    derive_bench("completions", &completion_chunk);
    derive_bench("chat", &chat_chunk);
    end_to_end_bench();
}

fn completion_chunk(i: u64) -> String {
    format!(
        "data: {{\"id\":\"cmpl-8f1c2e4d9a7b4c3e\",\"object\":\"text_completion\",\"created\":1732000000,\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[{{\"index\":0,\"text\":\" tok{}\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}}],\"usage\":{{\"prompt_tokens\":1024,\"total_tokens\":{},\"completion_tokens\":{}}}}}\n\n",
        i % 100,
        1024 + i + 1,
        i + 1
    )
}

fn chat_chunk(i: u64) -> String {
    format!(
        "data: {{\"id\":\"chatcmpl-8f1c2e4d9a7b4c3e\",\"object\":\"chat.completion.chunk\",\"created\":1732000000,\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" tok{}\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n",
        i % 100
    )
}

/// Bytes of `n` events as one buffer.
fn corpus(n: u64, chunk: &dyn Fn(u64) -> String) -> Vec<u8> {
    (0..n).flat_map(|i| chunk(i).into_bytes()).collect()
}

/// How the decoder bench hands bytes to the decoder.
#[derive(Clone, Copy)]
enum Reads {
    /// 16 KiB slices copied in with `feed`: events split at arbitrary bytes.
    Split16K,
    /// One shared `Bytes` per event with `feed_bytes`, as a server's writes arrive.
    PerEvent,
}

fn decoder_bench(name: &str, chunk: &dyn Fn(u64) -> String, reads: Reads) {
    let events = 200_000u64;
    let per_event: Vec<Bytes> = (0..events).map(|i| Bytes::from(chunk(i))).collect();
    let bytes: Vec<u8> = per_event.iter().flat_map(|b| b.iter().copied()).collect();
    let (mut best, mut best_cpu) = (f64::MAX, f64::MAX);
    for _ in 0..10 {
        let start = Instant::now();
        let cpu_start = thread_cpu_seconds();
        let mut decoder = StreamDecoder::new();
        let mut seen = 0u64;
        let mut drain = |decoder: &mut StreamDecoder| {
            while let Some(event) = decoder.next_event() {
                seen += u64::from(!event.unwrap().content.is_empty());
            }
        };
        match reads {
            Reads::Split16K => {
                for read in bytes.chunks(16 * 1024) {
                    decoder.feed(read, Instant::now());
                    drain(&mut decoder);
                }
            }
            Reads::PerEvent => {
                for read in &per_event {
                    decoder.feed_bytes(read.clone(), Instant::now());
                    drain(&mut decoder);
                }
            }
        }
        assert_eq!(seen, events);
        best = best.min(start.elapsed().as_secs_f64());
        best_cpu = best_cpu.min(thread_cpu_seconds() - cpu_start);
    }
    let how = match reads {
        Reads::Split16K => "16 KiB reads",
        Reads::PerEvent => "one read per event",
    };
    println!(
        "decoder  {name:<11} {how:<18}: {:>5.2} M events/s per CPU-second ({:>5.2} M/s wall)  {:>4.0} MB/s  {} B/event",
        events as f64 / best_cpu / 1e6,
        events as f64 / best / 1e6,
        bytes.len() as f64 / best_cpu / 1e6,
        bytes.len() as u64 / events
    );
}

fn sse_framing_bench() {
    let events = 200_000u64;
    let bytes = corpus(events, &completion_chunk);
    let mut best = f64::MAX;
    for _ in 0..10 {
        let start = thread_cpu_seconds();
        let mut decoder = SseDecoder::new();
        let mut seen = 0u64;
        for read in bytes.chunks(16 * 1024) {
            decoder.feed(read);
            while let Some(event) = decoder.next_event() {
                seen += u64::from(!event.unwrap().data.is_empty());
            }
        }
        assert_eq!(seen, events);
        best = best.min(thread_cpu_seconds() - start);
    }
    println!(
        "decoder  SSE framing only, 16 KiB reads: {:>5.2} M events/s per CPU-second  {:>4.0} MB/s",
        events as f64 / best / 1e6,
        bytes.len() as f64 / best / 1e6
    );
}

/// The chunk as `#[derive(Deserialize)]` reads it: borrowed strings, every
/// other field skipped by serde as `IgnoredAny`. The alternative to the
/// client's hand-written fast path, measured on the same bytes.
mod derived {
    use std::borrow::Cow;

    use serde::Deserialize;
    use serde::de::IgnoredAny;

    #[derive(Deserialize)]
    pub(crate) struct Chunk<'a> {
        #[serde(borrow, default)]
        pub(crate) choices: Option<Vec<Choice<'a>>>,
        #[serde(default)]
        pub(crate) usage: Option<Usage>,
        #[serde(default)]
        pub(crate) error: Option<IgnoredAny>,
    }

    #[derive(Deserialize)]
    pub(crate) struct Choice<'a> {
        #[serde(borrow, default)]
        pub(crate) text: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub(crate) delta: Option<Delta<'a>>,
        #[serde(borrow, default)]
        pub(crate) finish_reason: Option<Cow<'a, str>>,
    }

    #[derive(Deserialize)]
    pub(crate) struct Delta<'a> {
        #[serde(borrow, default)]
        pub(crate) content: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub(crate) reasoning_content: Option<Cow<'a, str>>,
    }

    #[derive(Deserialize)]
    pub(crate) struct Usage {
        #[serde(default)]
        pub(crate) prompt_tokens: u64,
        #[serde(default)]
        pub(crate) completion_tokens: u64,
    }
}

/// SSE framing plus the derive decode, each event's text copied into an
/// owned `String` as the client's events hold it.
fn derive_bench(name: &str, chunk: &dyn Fn(u64) -> String) {
    let events = 200_000u64;
    let bytes = corpus(events, chunk);
    let mut best = f64::MAX;
    for _ in 0..10 {
        let start = thread_cpu_seconds();
        let mut decoder = SseDecoder::new();
        let mut seen = 0u64;
        for read in bytes.chunks(16 * 1024) {
            decoder.feed(read);
            while let Some(event) = decoder.next_event() {
                let data = std::str::from_utf8(event.unwrap().data).unwrap();
                let c: derived::Chunk<'_> = serde_json::from_str(data).unwrap();
                let choice = c.choices.and_then(|v| v.into_iter().next());
                let finished = choice
                    .as_ref()
                    .and_then(|ch| ch.finish_reason.as_deref())
                    .is_some_and(|r| !r.is_empty());
                let text: String = choice
                    .map(|ch| {
                        ch.text
                            .or_else(|| ch.delta.and_then(|d| d.content.or(d.reasoning_content)))
                            .unwrap_or_default()
                            .into_owned()
                    })
                    .unwrap_or_default();
                seen += u64::from(!text.is_empty());
                std::hint::black_box((
                    c.usage.map(|u| u.completion_tokens + u.prompt_tokens),
                    c.error.is_some(),
                    finished,
                ));
            }
        }
        assert_eq!(seen, events);
        best = best.min(thread_cpu_seconds() - start);
    }
    println!(
        "decoder  {name:<11} derive + IgnoredAny, 16 KiB reads: {:>5.2} M events/s per CPU-second  {:>4.0} MB/s",
        events as f64 / best / 1e6,
        bytes.len() as f64 / best / 1e6
    );
}

/// The response body every request gets, pre-rendered into frames.
fn response_frames() -> Arc<Vec<Bytes>> {
    let mut frames = Vec::new();
    let mut frame = String::new();
    for i in 0..TOKENS_PER_RESPONSE {
        frame.push_str(&completion_chunk(i));
        if (i as usize + 1).is_multiple_of(EVENTS_PER_FRAME) {
            frames.push(Bytes::from(std::mem::take(&mut frame)));
        }
    }
    frame.push_str("data: {\"id\":\"cmpl-8f1c2e4d9a7b4c3e\",\"choices\":[],\"usage\":{\"prompt_tokens\":1024,\"completion_tokens\":2000,\"total_tokens\":3024}}\n\ndata: [DONE]\n\n");
    frames.push(Bytes::from(frame));
    Arc::new(frames)
}

/// Child process: a loopback server that streams as fast as the socket takes it.
fn serve_forever() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap());
        let frames = response_frames();
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            socket.set_nodelay(true).unwrap();
            let frames = frames.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let frames = frames.clone();
                        async move {
                            let _ = req.into_body().collect().await;
                            let items = (0..frames.len())
                                .map(move |i| Ok::<_, Infallible>(Frame::data(frames[i].clone())));
                            let body = StreamBody::new(futures_util::stream::iter(items));
                            Ok::<_, Infallible>(
                                hyper::Response::builder()
                                    .header("content-type", "text/event-stream")
                                    .body(body)
                                    .unwrap(),
                            )
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    });
}

fn end_to_end_bench() {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .arg(SERVE_FLAG)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = format!("http://{}", line.trim());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for streams in [1usize, 128] {
        runtime.block_on(end_to_end(&url, streams, Duration::from_secs(4)));
    }
    let _ = child.kill();
    let _ = child.wait();
}

async fn end_to_end(url: &str, streams: usize, duration: Duration) {
    let client = Client::new(ClientConfig::new(url)).unwrap();
    let request = CompletionRequest::new("m", "hi")
        .max_tokens(Tokens::new(TOKENS_PER_RESPONSE))
        .continuous_usage(true);
    let tokens = Arc::new(AtomicU64::new(0));
    // Warm the pool so connection setup is not in the measurement.
    run_streams(
        &client,
        &request,
        streams,
        Instant::now() + Duration::from_millis(300),
        &tokens,
    )
    .await;
    tokens.store(0, Ordering::Relaxed);
    let cpu_before = process_cpu_seconds();
    let start = Instant::now();
    run_streams(&client, &request, streams, start + duration, &tokens).await;
    let wall = start.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - cpu_before;
    let n = tokens.load(Ordering::Relaxed) as f64;
    println!(
        "e2e      {streams:>3} stream(s): {:>8.0} tokens/s  client CPU {:>5.2} µs/token ({:.0}% of one core)  [{:.0} tokens in {wall:.1} s]",
        n / wall,
        cpu / n * 1e6,
        cpu / wall * 100.0,
        n
    );
}

async fn run_streams(
    client: &Client,
    request: &CompletionRequest,
    streams: usize,
    until: Instant,
    tokens: &Arc<AtomicU64>,
) {
    let tasks: Vec<_> = (0..streams)
        .map(|_| {
            let client = client.clone();
            let request = request.clone();
            let tokens = tokens.clone();
            tokio::spawn(async move {
                while Instant::now() < until {
                    let mut stream = client.stream_completion(&request).await.unwrap();
                    let mut seen = 0;
                    while let Some(event) = stream.next().await.unwrap() {
                        seen += u64::from(!event.content.is_empty());
                    }
                    tokens.fetch_add(seen, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// CPU seconds this thread has run, from `/proc/thread-self/schedstat` (ns
/// resolution), so other processes on a busy machine do not skew decoder figures.
fn thread_cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |ns| ns / 1e9)
}

/// User + system CPU seconds of this process, from `/proc/self/stat`.
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
