//! The raw reader: a minimal hyper loop that keeps its streams busy and only counts what
//! arrives, the floor the whole tool is measured against.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

#[derive(Default)]
struct RawStats {
    tokens: u64,
    failed: u64,
    ttft_us: Vec<u32>,
    itl_us: Vec<u32>,
}

/// `--raw URL STREAMS SECONDS MAX_TOKENS PACE`: keeps STREAMS connections
/// busy for SECONDS and prints what it counted as one JSON line.
pub(crate) fn raw_reader(args: &[String]) {
    raise_fd_limit();
    let addr = args[0].trim_start_matches("http://").to_owned();
    let streams: u32 = args[1].parse().unwrap();
    let window = Duration::from_secs_f64(args[2].parse().unwrap());
    let max_tokens: u64 = args[3].parse().unwrap();
    let latency = args[4] != "0";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stats = runtime.block_on(async move {
        let body = Bytes::from(format!(
            r#"{{"model":"m","prompt":"hi","max_tokens":{max_tokens},"stream":true,"stream_options":{{"include_usage":true,"continuous_usage_stats":true}}}}"#
        ));
        // Connect every stream before the window opens, as a benchmark's warm-up does.
        let mut senders = Vec::new();
        for _ in 0..streams {
            let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let (sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(tcp))
                .await
                .unwrap();
            tokio::spawn(conn);
            senders.push(sender);
        }
        let start = Instant::now();
        let deadline = start + window;
        let tasks: Vec<_> = senders
            .into_iter()
            .map(|sender| tokio::spawn(raw_stream(sender, body.clone(), deadline, latency)))
            .collect();
        let mut all = RawStats::default();
        for t in tasks {
            let s = t.await.unwrap_or_default();
            all.tokens += s.tokens;
            all.failed += s.failed;
            all.ttft_us.extend(s.ttft_us);
            all.itl_us.extend(s.itl_us);
        }
        all
    });
    let median_ms = |mut v: Vec<u32>| {
        if v.is_empty() {
            return serde_json::Value::Null;
        }
        v.sort_unstable();
        serde_json::json!(f64::from(v[v.len() / 2]) / 1e3)
    };
    println!(
        "{}",
        serde_json::json!({
            "tokens": stats.tokens,
            "failed": stats.failed,
            "ttft_p50_ms": median_ms(stats.ttft_us),
            "itl_p50_ms": median_ms(stats.itl_us),
        })
    );
}

async fn raw_stream(
    mut sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    body: Bytes,
    deadline: Instant,
    latency: bool,
) -> RawStats {
    let mut stats = RawStats::default();
    let finder = memchr::memmem::Finder::new(b"\n\n");
    while Instant::now() < deadline {
        let req = hyper::Request::post("/v1/completions")
            .header("host", "bench")
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .unwrap();
        let sent = Instant::now();
        let Ok(resp) = sender.send_request(req).await else {
            stats.failed += 1;
            return stats;
        };
        let mut body = resp.into_body();
        let mut last: Option<Instant> = None;
        loop {
            let frame = tokio::select! {
                f = body.frame() => f,
                () = tokio::time::sleep_until(deadline.into()) => return stats,
            };
            let Some(frame) = frame else { break };
            let Ok(frame) = frame else {
                stats.failed += 1;
                break;
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let now = Instant::now();
            if now > deadline {
                return stats;
            }
            let mut events = finder.find_iter(&data).count() as u64;
            if data.ends_with(b"data: [DONE]\n\n") {
                events = events.saturating_sub(2);
            }
            if events == 0 {
                continue;
            }
            stats.tokens += events;
            if latency {
                match last {
                    None => stats.ttft_us.push(micros(now - sent)),
                    Some(prev) => {
                        let gap = micros(now - prev) / events as u32;
                        stats
                            .itl_us
                            .extend(std::iter::repeat_n(gap, events as usize));
                    }
                }
            }
            last = Some(now);
        }
    }
    stats
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// Raises the soft open-files limit to the hard one (4,096 streams need
/// more than the usual 1,024).
pub(crate) fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}
