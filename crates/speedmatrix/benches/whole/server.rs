//! The loopback server the clients read: vLLM-shaped chunks, in bulk or paced, with usage
//! on every chunk or only at the end.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;

use crate::{EVENTS_PER_FRAME, raise_fd_limit};

struct ServerState {
    sent: AtomicU64,
    pace: u32,
    usage_at_end: bool,
    bulk: Mutex<HashMap<u64, Arc<Frames>>>,
}

type Body = BoxBody<Bytes, Infallible>;
/// A prebuilt response: each frame with the tokens it carries.
type Frames = Vec<(Bytes, u64)>;

pub(crate) fn serve(pace: u32, usage_at_end: bool) {
    raise_fd_limit();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap());
        let state = Arc::new(ServerState {
            sent: AtomicU64::new(0),
            pace,
            usage_at_end,
            bulk: Mutex::new(HashMap::new()),
        });
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let _ = socket.set_nodelay(true);
            let state = state.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| handle(req, state.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    });
}

async fn handle(
    req: hyper::Request<hyper::body::Incoming>,
    state: Arc<ServerState>,
) -> Result<hyper::Response<Body>, Infallible> {
    let path = req.uri().path().to_owned();
    let full = |status: u16, body: String| {
        hyper::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)).boxed())
            .unwrap()
    };
    Ok(match (req.method().as_str(), path.as_str()) {
        ("GET", "/v1/models") => full(
            200,
            r#"{"object":"list","data":[{"id":"m","object":"model","owned_by":"bench","max_model_len":1048576}]}"#.to_owned(),
        ),
        ("GET", "/stats") => full(200, state.sent.load(Ordering::Relaxed).to_string()),
        ("POST", "/v1/completions") => {
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let max_tokens = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["max_tokens"].as_u64())
                .unwrap_or(16)
                .max(1);
            let body = if state.pace == 0 {
                bulk_body(&state, max_tokens)
            } else {
                paced_body(&state, max_tokens)
            };
            hyper::Response::builder()
                .header("content-type", "text/event-stream")
                .body(body)
                .unwrap()
        }
        _ => full(404, r#"{"error":"not found"}"#.to_owned()),
    })
}

/// Token `i` of `max`; with `usage_at_end`, without the running usage (a
/// proxy that drops `continuous_usage_stats`).
fn token_event(out: &mut String, i: u64, max: u64, usage_at_end: bool) {
    use std::fmt::Write as _;
    let finish = if i + 1 == max { "\"length\"" } else { "null" };
    let _ = write!(
        out,
        "data: {{\"id\":\"cmpl-bench\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"text\":\" tok\",\"logprobs\":null,\"finish_reason\":{finish},\"stop_reason\":null}}]"
    );
    if usage_at_end {
        out.push_str("}\n\n");
    } else {
        let _ = write!(
            out,
            ",\"usage\":{{\"prompt_tokens\":8,\"total_tokens\":{},\"completion_tokens\":{}}}}}\n\n",
            8 + i + 1,
            i + 1
        );
    }
}

fn tail(out: &mut String, max: u64) {
    use std::fmt::Write as _;
    let _ = write!(
        out,
        "data: {{\"id\":\"cmpl-bench\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{{\"prompt_tokens\":8,\"total_tokens\":{},\"completion_tokens\":{max}}}}}\n\ndata: [DONE]\n\n",
        8 + max
    );
}

/// The whole response, prebuilt once per length, in frames of 16 events.
fn bulk_body(state: &Arc<ServerState>, max: u64) -> Body {
    let frames = state
        .bulk
        .lock()
        .unwrap()
        .entry(max)
        .or_insert_with(|| {
            let mut frames = Vec::new();
            let mut frame = String::new();
            let mut in_frame = 0;
            for i in 0..max {
                token_event(&mut frame, i, max, state.usage_at_end);
                in_frame += 1;
                if in_frame == EVENTS_PER_FRAME && i + 1 < max {
                    frames.push((Bytes::from(std::mem::take(&mut frame)), in_frame));
                    in_frame = 0;
                }
            }
            tail(&mut frame, max);
            frames.push((Bytes::from(frame), in_frame));
            Arc::new(frames)
        })
        .clone();
    let state = state.clone();
    let items = (0..frames.len()).map(move |i| {
        let (bytes, tokens) = &frames[i];
        state.sent.fetch_add(*tokens, Ordering::Relaxed);
        Ok::<_, Infallible>(Frame::data(bytes.clone()))
    });
    StreamBody::new(futures_util::stream::iter(items)).boxed()
}

/// One event per frame, `pace` per second, the first at once.
fn paced_body(state: &Arc<ServerState>, max: u64) -> Body {
    let period = Duration::from_secs_f64(1.0 / f64::from(state.pace));
    let start = tokio::time::Instant::now();
    let state = state.clone();
    let stream = futures_util::stream::unfold(0u64, move |i| {
        let state = state.clone();
        async move {
            if i > max {
                return None;
            }
            let u32_i = u32::try_from(i).unwrap_or(u32::MAX);
            tokio::time::sleep_until(start + period * u32_i).await;
            let mut text = String::new();
            if i == max {
                tail(&mut text, max);
            } else {
                token_event(&mut text, i, max, state.usage_at_end);
                state.sent.fetch_add(1, Ordering::Relaxed);
            }
            Some((Ok::<_, Infallible>(Frame::data(Bytes::from(text))), i + 1))
        }
    });
    StreamBody::new(stream).boxed()
}
