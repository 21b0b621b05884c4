//! The client against an in-process hyper server on 127.0.0.1.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use speedmatrix_client::{
    ApiKey, ChatRequest, Client, ClientConfig, ClientError, CollectedResponse, CompletionRequest,
    ErrorKind, Message, ResponseStream, Timeouts, TokenizeRequest,
};
use speedmatrix_units::Tokens;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

type Body = BoxBody<Bytes, std::io::Error>;
type Handler = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> + Send + Sync,
>;

/// A test server; counts accepted connections.
struct Server {
    url: String,
    connections: Arc<AtomicUsize>,
}

async fn serve<F, Fut>(handler: F) -> Server
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let handler: Handler = Arc::new(move |req| Box::pin(handler(req)));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            let handler = handler.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let handler = handler.clone();
                    async move { Ok::<_, Infallible>(handler(req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(socket), service)
                    .await;
            });
        }
    });
    Server { url, connections }
}

fn full(status: u16, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(
            Full::new(body.into())
                .map_err(|never| match never {})
                .boxed(),
        )
        .unwrap()
}

/// A streaming SSE response fed through a channel; an `Err` item aborts the connection.
fn channel_sse() -> (mpsc::Sender<Result<Bytes, std::io::Error>>, Response<Body>) {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item.map(Frame::data), rx))
    });
    let response = Response::builder()
        .header("content-type", "text/event-stream; charset=utf-8")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap();
    (tx, response)
}

fn sse(events: Vec<String>) -> Response<Body> {
    let body: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    full(200, "text/event-stream", body)
}

fn text_chunk(text: &str, finish: Option<&str>, usage: Option<(u64, u64)>) -> String {
    serde_json::json!({
        "id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": finish}],
        "usage": usage.map(|(p, c)| serde_json::json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c})),
    })
    .to_string()
}

fn client(url: &str) -> Client {
    Client::new(ClientConfig::new(url)).unwrap()
}

fn client_with(url: &str, timeouts: Timeouts) -> Client {
    Client::new(ClientConfig::new(url).timeouts(timeouts)).unwrap()
}

fn request() -> CompletionRequest {
    CompletionRequest::new("m", "hello").max_tokens(Tokens::new(3))
}

/// Opens a completion stream, expecting the response head to arrive.
async fn open(client: &Client, req: &CompletionRequest) -> ResponseStream {
    client.stream_completion(req).await.unwrap()
}

/// Streams `req` to the end, expecting success.
async fn collect_ok(client: &Client, req: &CompletionRequest) -> CollectedResponse {
    open(client, req).await.collect().await.unwrap()
}

/// Streams `req`, expecting the stream to start and then fail.
async fn collect_err(client: &Client, req: &CompletionRequest) -> ClientError {
    open(client, req).await.collect().await.unwrap_err()
}

/// Sends one SSE `data:` line carrying a text chunk.
async fn send_text(tx: &mpsc::Sender<Result<Bytes, std::io::Error>>, text: &str) {
    let chunk = format!("data: {}\n\n", text_chunk(text, None, None));
    tx.send(Ok(Bytes::from(chunk))).await.unwrap();
}

#[tokio::test]
async fn streams_text_then_usage_chunk_then_done() {
    let server = serve(|req: Request<Incoming>| async move {
        assert_eq!(req.uri().path(), "/v1/completions");
        let body: serde_json::Value =
            serde_json::from_slice(&req.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(body["stream"], true);
        assert_eq!(body["max_tokens"], 3);
        let mut events: Vec<String> = ["a", "b", "c"]
            .iter()
            .map(|t| text_chunk(t, (*t == "c").then_some("length"), None))
            .collect();
        events.push(r#"{"id":"cmpl-1","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}"#.to_owned());
        events.push("[DONE]".to_owned());
        sse(events)
    })
    .await;
    let mut stream = open(&client(&server.url), &request()).await;
    let mut texts = Vec::new();
    while let Some(event) = stream.next().await.unwrap() {
        assert!(event.received_at >= stream.timings().headers_at);
        texts.push(event.content.clone());
    }
    assert_eq!(texts, ["a", "b", "c", ""]);
    let usage = stream.usage().unwrap();
    assert_eq!(
        (usage.prompt_tokens.get(), usage.completion_tokens.get()),
        (2, 3)
    );
    assert_eq!(stream.finish_reason(), Some("length"));
    let t = stream.timings();
    assert!(t.sent_at <= t.headers_at);
    assert!(t.headers_at <= t.first_byte_at.unwrap());
    assert!(t.first_byte_at.unwrap() <= t.done_at.unwrap());
    assert!(stream.next().await.unwrap().is_none());
}

#[tokio::test]
async fn continuous_usage_is_cumulative_per_chunk() {
    let server = serve(|_req| async move {
        let events = (1..=5u64)
            .map(|n| text_chunk("x", (n == 5).then_some("length"), Some((7, n))))
            .chain(std::iter::once("[DONE]".to_owned()))
            .collect();
        sse(events)
    })
    .await;
    let collected = collect_ok(&client(&server.url), &request().continuous_usage(true)).await;
    let counts: Vec<u64> = collected
        .events
        .iter()
        .map(|e| e.usage.unwrap().completion_tokens.get())
        .collect();
    assert_eq!(counts, [1, 2, 3, 4, 5]);
    assert_eq!(collected.content, "xxxxx");
}

#[tokio::test]
async fn chat_reasoning_and_content_are_split() {
    let server = serve(|req: Request<Incoming>| async move {
        assert_eq!(req.uri().path(), "/v1/chat/completions");
        sse(vec![
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#.to_owned(),
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"let me think"}}]}"#.to_owned(),
            r#"{"choices":[{"index":0,"delta":{"reasoning":" hard"}}]}"#.to_owned(),
            r#"{"choices":[{"index":0,"delta":{"content":"42"},"finish_reason":"stop"}]}"#
                .to_owned(),
            "[DONE]".to_owned(),
        ])
    })
    .await;
    let request = ChatRequest::new("m", vec![Message::user("q")]);
    let collected = client(&server.url)
        .stream_chat(&request)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(collected.reasoning_content, "let me think hard");
    assert_eq!(collected.content, "42");
    assert_eq!(collected.finish_reason.as_deref(), Some("stop"));
}

#[tokio::test]
async fn connection_cut_mid_stream_is_disconnected() {
    let server = serve(|_req| async move {
        let (tx, response) = channel_sse();
        tokio::spawn(async move {
            send_text(&tx, "a").await;
            // Let the chunk reach the socket before the crash aborts the connection.
            tokio::time::sleep(Duration::from_millis(200)).await;
            tx.send(Err(std::io::Error::other("server crashed")))
                .await
                .unwrap();
        });
        response
    })
    .await;
    let mut stream = open(&client(&server.url), &request()).await;
    assert_eq!(stream.next().await.unwrap().unwrap().content, "a");
    let err = stream.next().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Disconnected, "{err}");
    assert!(stream.next().await.unwrap().is_none());
}

#[tokio::test]
async fn clean_close_without_done_or_finish_is_disconnected() {
    let server = serve(|_req| async move { sse(vec![text_chunk("a", None, None)]) }).await;
    let err = collect_err(&client(&server.url), &request()).await;
    assert_eq!(err.kind(), ErrorKind::Disconnected);
}

#[tokio::test]
async fn http_errors_carry_status_and_server_message() {
    let server = serve(|req: Request<Incoming>| async move {
        match req.uri().path() {
            "/v1/completions" => full(
                400,
                "application/json",
                r#"{"error":{"message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError","param":null,"code":400}}"#,
            ),
            _ => {
                let mut response = full(
                    503,
                    "application/json",
                    r#"{"object":"error","message":"engine overloaded","type":"ServiceUnavailable","code":503}"#,
                );
                response
                    .headers_mut()
                    .insert("retry-after", http::HeaderValue::from_static("7"));
                response
            }
        }
    })
    .await;
    let client = client(&server.url);
    match client.stream_completion(&request()).await.unwrap_err() {
        ClientError::HttpStatus {
            status,
            message,
            url,
            retry_after,
            ..
        } => {
            assert_eq!(retry_after, None);
            assert_eq!(status, 400);
            assert!(message.contains("maximum context length"), "{message}");
            assert!(url.ends_with("/v1/completions"));
        }
        other => panic!("unexpected {other:?}"),
    }
    let err = client
        .stream_chat(&ChatRequest::new("m", vec![Message::user("q")]))
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(503));
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
    assert!(err.to_string().contains("engine overloaded"), "{err}");
}

#[tokio::test]
async fn plain_text_error_keeps_a_snippet_and_wrong_type_is_typed() {
    let server = serve(|req: Request<Incoming>| async move {
        match req.uri().path() {
            "/v1/completions" => full(502, "text/html", "<html>Bad Gateway</html>"),
            _ => full(200, "application/json", r#"{"choices":[]}"#),
        }
    })
    .await;
    let client = client(&server.url);
    let err = client.stream_completion(&request()).await.unwrap_err();
    assert!(err.to_string().contains("Bad Gateway"), "{err}");
    let err = client
        .stream_chat(&ChatRequest::new("m", vec![Message::user("q")]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ContentType);
    assert!(err.to_string().contains("choices"), "{err}");
}

#[tokio::test]
async fn stalled_stream_hits_the_idle_timeout() {
    let server = serve(|_req| async move {
        let (tx, response) = channel_sse();
        tokio::spawn(async move {
            send_text(&tx, "a").await;
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(tx);
        });
        response
    })
    .await;
    let timeouts = Timeouts::new(
        Duration::from_secs(5),
        Duration::from_secs(5),
        Duration::from_millis(200),
    );
    let mut stream = open(&client_with(&server.url, timeouts), &request()).await;
    assert_eq!(stream.next().await.unwrap().unwrap().content, "a");
    let err = stream.next().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimeoutIdle);
    assert_eq!(err.kind().as_str(), "timeout_idle");
}

#[tokio::test]
async fn slow_response_head_hits_the_headers_timeout() {
    let server = serve(|_req| async move {
        tokio::time::sleep(Duration::from_secs(30)).await;
        sse(vec!["[DONE]".to_owned()])
    })
    .await;
    let timeouts = Timeouts::new(
        Duration::from_secs(5),
        Duration::from_millis(200),
        Duration::from_secs(5),
    );
    let err = client_with(&server.url, timeouts)
        .stream_completion(&request())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimeoutHeaders);
    assert!(err.is_timeout());
}

#[tokio::test]
async fn refused_connection_is_a_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = client(&url).models().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connect, "{err}");
}

#[tokio::test]
async fn one_mebibyte_line_arrives_whole() {
    let big = "x".repeat(1 << 20);
    let expected = big.clone();
    let server = serve(move |_req| {
        let big = big.clone();
        async move {
            sse(vec![
                text_chunk(&big, Some("length"), None),
                "[DONE]".to_owned(),
            ])
        }
    })
    .await;
    let collected = collect_ok(&client(&server.url), &request()).await;
    assert_eq!(collected.events.len(), 1);
    assert_eq!(collected.content, expected);
}

#[tokio::test]
async fn event_over_the_cap_is_a_typed_error() {
    let server = serve(|_req| async move {
        sse(vec![
            text_chunk(&"y".repeat(100_000), None, None),
            "[DONE]".to_owned(),
        ])
    })
    .await;
    let client = Client::new(ClientConfig::new(&server.url).max_event_bytes(10_000)).unwrap();
    let err = collect_err(&client, &request()).await;
    assert_eq!(err.kind(), ErrorKind::SseLineTooLong);
}

#[tokio::test]
async fn error_object_mid_stream_is_a_server_error_event() {
    let server = serve(|_req| async move {
        sse(vec![
            text_chunk("a", None, None),
            r#"{"error":{"message":"KV cache exhausted","type":"InternalServerError","code":500}}"#
                .to_owned(),
            "[DONE]".to_owned(),
        ])
    })
    .await;
    let mut stream = open(&client(&server.url), &request()).await;
    assert!(stream.next().await.unwrap().is_some());
    match stream.next().await.unwrap_err() {
        ClientError::ServerErrorEvent { message, code } => {
            assert_eq!(message, "KV cache exhausted");
            assert_eq!(code.as_deref(), Some("500"));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let (closed_tx, mut closed_rx) = mpsc::channel::<()>(1);
    let server = serve(move |_req| {
        let closed_tx = closed_tx.clone();
        async move {
            let (tx, response) = channel_sse();
            tokio::spawn(async move {
                let chunk = Bytes::from(format!("data: {}\n\n", text_chunk("a", None, None)));
                // Stream until the client goes away; the failed send proves it did.
                while tx.send(Ok(chunk.clone())).await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                let _ = closed_tx.send(()).await;
            });
            response
        }
    })
    .await;
    let mut stream = open(&client(&server.url), &request()).await;
    stream.next().await.unwrap().unwrap();
    stream.next().await.unwrap().unwrap();
    drop(stream);
    tokio::time::timeout(Duration::from_secs(20), closed_rx.recv())
        .await
        .expect("the server never saw the client leave")
        .unwrap();
}

#[tokio::test]
async fn sequential_streams_reuse_one_connection() {
    let server = serve(|_req| async move {
        sse(vec![
            text_chunk("a", Some("stop"), None),
            "[DONE]".to_owned(),
        ])
    })
    .await;
    let client = client(&server.url);
    for _ in 0..5 {
        collect_ok(&client, &request()).await;
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_streams_all_complete() {
    const STREAMS: usize = 128;
    // Every response waits until all requests are in, so they must be concurrent.
    let barrier = Arc::new(tokio::sync::Barrier::new(STREAMS));
    let server = serve(move |_req| {
        let barrier = barrier.clone();
        async move {
            barrier.wait().await;
            let mut events: Vec<String> = (1..=20u64)
                .map(|n| text_chunk("t", (n == 20).then_some("length"), Some((1, n))))
                .collect();
            events.push("[DONE]".to_owned());
            sse(events)
        }
    })
    .await;
    let timeouts = Timeouts::new(
        Duration::from_secs(10),
        Duration::from_secs(60),
        Duration::from_secs(60),
    );
    let client = client_with(&server.url, timeouts);
    let tasks: Vec<_> = (0..STREAMS)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.stream_completion(&request()).await?.collect().await })
        })
        .collect();
    for task in tasks {
        let collected = task.await.unwrap().unwrap();
        assert_eq!(collected.events.len(), 20);
        assert_eq!(collected.usage.unwrap().completion_tokens.get(), 20);
    }
    assert_eq!(server.connections.load(Ordering::SeqCst), STREAMS);
}

#[tokio::test]
async fn api_key_is_sent_as_bearer() {
    let server = serve(|req: Request<Incoming>| async move {
        let auth = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if auth == Some("Bearer sk-test") {
            full(200, "application/json", r#"{"object":"list","data":[]}"#)
        } else {
            full(401, "application/json", r#"{"error":"Unauthorized"}"#)
        }
    })
    .await;
    let anonymous = client(&server.url).models().await.unwrap_err();
    assert_eq!(anonymous.status(), Some(401));
    assert!(anonymous.to_string().contains("Unauthorized"));
    let keyed =
        Client::new(ClientConfig::new(&server.url).api_key(Some(ApiKey::new("sk-test")))).unwrap();
    assert_eq!(keyed.models().await.unwrap(), Some(vec![]));
}

#[tokio::test]
async fn probe_reads_models_version_metrics_and_tokenize() {
    let server = serve(|req: Request<Incoming>| async move {
        match req.uri().path() {
            "/v1/models" => full(
                200,
                "application/json",
                r#"{"object":"list","data":[{"id":"llama","object":"model","created":1,"owned_by":"vllm","root":"/m/llama","parent":null,"max_model_len":8192,"permission":[]}]}"#,
            ),
            "/version" => full(200, "application/json", r#"{"version":"0.11.0"}"#),
            "/metrics" => full(
                200,
                "text/plain; version=0.0.4",
                "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",num_gpu_blocks=\"1000\"} 1.0\n",
            ),
            "/tokenize" => {
                let body: serde_json::Value = serde_json::from_slice(
                    &req.into_body().collect().await.unwrap().to_bytes(),
                )
                .unwrap();
                let n = body["prompt"].as_str().unwrap().split(' ').count();
                let tokens: Vec<u32> = (0..n as u32).collect();
                full(
                    200,
                    "application/json",
                    serde_json::json!({"count": n, "max_model_len": 8192, "tokens": tokens}).to_string(),
                )
            }
            _ => full(404, "application/json", r#"{"detail":"Not Found"}"#),
        }
    })
    .await;
    let client = client(&format!("{}/v1", server.url));
    let info = client.probe().await.unwrap();
    let models = info.models.clone().unwrap();
    assert_eq!(models[0].id, "llama");
    assert_eq!(models[0].max_model_len, Some(Tokens::new(8192)));
    assert_eq!(info.version(), Some("0.11.0"));
    let cache = speedmatrix_engines::vllm::cache_config(info.metrics().unwrap()).unwrap();
    assert_eq!(cache.kv_cache_tokens(), Some(Tokens::new(16_000)));
    assert!(info.warnings.is_empty());
    let tokenized = client
        .tokenize(&TokenizeRequest::prompt("llama", "a b c"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tokenized.count, Tokens::new(3));
    assert_eq!(tokenized.tokens, [0, 1, 2]);
}

#[tokio::test]
async fn missing_endpoints_are_none() {
    let server =
        serve(|_req| async move { full(404, "application/json", r#"{"detail":"Not Found"}"#) })
            .await;
    let client = client(&server.url);
    let info = client.probe().await.unwrap();
    assert_eq!(
        (info.models.clone(), info.version(), info.metrics()),
        (None, None, None)
    );
    assert!(
        client
            .tokenize(&TokenizeRequest::prompt("m", "x"))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn full_accept_queue_hits_the_connect_timeout() {
    // A listener that never accepts, with its tiny backlog filled: further
    // SYNs are dropped, so connecting hangs until the client gives up.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..8 {
        let connect = tokio::net::TcpStream::connect(addr);
        match tokio::time::timeout(Duration::from_millis(100), connect).await {
            Ok(Ok(stream)) => fillers.push(stream),
            _ => break,
        }
    }
    let timeouts = Timeouts::new(
        Duration::from_millis(300),
        Duration::from_secs(5),
        Duration::from_secs(5),
    );
    let err = client_with(&format!("http://{addr}"), timeouts)
        .models()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimeoutConnect, "{err}");
    drop(listener);
}

#[tokio::test]
async fn raw_exchanges_keep_status_and_bytes() {
    let server = serve(|req: Request<Incoming>| async move {
        match req.uri().path() {
            "/props" => full(
                200,
                "application/json",
                r#"{"default_generation_settings":{"n_ctx":4096},"total_slots":4}"#,
            ),
            "/get_server_info" => full(200, "application/json", r#"{"max_total_num_tokens":9000}"#),
            "/v1/completions" => {
                let body = req.into_body().collect().await.unwrap().to_bytes();
                full(400, "application/json", body)
            }
            _ => full(404, "application/json", r#"{"detail":"Not Found"}"#),
        }
    })
    .await;
    let c = client(&server.url);
    let missing = c.get_raw("/nowhere").await.unwrap();
    assert_eq!(missing.status, 404);
    assert!(!missing.is_success());
    assert_eq!(missing.text(), r#"{"detail":"Not Found"}"#);
    let echoed = c
        .post_json_raw("/v1/completions", br#"{"prompt":"x"}"#.to_vec())
        .await
        .unwrap();
    assert_eq!(
        (echoed.status, echoed.content_type.as_str()),
        (400, "application/json")
    );
    assert_eq!(&echoed.body[..], br#"{"prompt":"x"}"#);

    let info = c.probe().await.unwrap();
    assert_eq!(info.models, None);
    let props = info.endpoints.llamacpp.unwrap();
    assert_eq!(
        (props.slot_n_ctx, props.total_slots),
        (Tokens::new(4_096), 4)
    );
    let sglang = info.endpoints.sglang.unwrap();
    assert_eq!(sglang.max_total_num_tokens, Tokens::new(9_000));
    // Both answered; the engine-specific SGLang endpoint decides.
    assert_eq!(info.engine(), speedmatrix_engines::Engine::Sglang);
    assert!(info.warnings.is_empty(), "{:?}", info.warnings);
}

#[tokio::test]
async fn a_body_held_open_after_done_ends_the_stream_at_done() {
    let (tx, response) = channel_sse();
    let slot = Arc::new(std::sync::Mutex::new(Some(response)));
    let server = serve(move |_req| {
        let slot = slot.clone();
        async move { slot.lock().unwrap().take().unwrap() }
    })
    .await;
    let c = client(&server.url);
    let mut stream = open(&c, &request()).await;
    send_text(&tx, " a").await;
    let done = format!(
        "data: {}\n\ndata: [DONE]\n\n",
        text_chunk("", Some("length"), Some((2, 1)))
    );
    tx.send(Ok(Bytes::from(done))).await.unwrap();
    // The server keeps the body open: the stream must still be over at [DONE].
    let started = std::time::Instant::now();
    while stream.next().await.unwrap().is_some() {}
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    let t = stream.timings();
    let done_at = t.done_at.expect("done");
    assert!(done_at <= std::time::Instant::now());
    assert_eq!(stream.finish_reason(), Some("length"));
    drop(tx);
}

#[tokio::test]
async fn an_event_stream_without_its_content_type_is_read_and_noted() {
    for content_type in [None, Some("application/octet-stream"), Some("text/plain")] {
        let server = serve(move |_req| async move {
            let body = format!(
                "\n: hello\n\ndata: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
                text_chunk(" a", None, None),
                text_chunk(" b", Some("length"), Some((3, 2)))
            );
            let mut b = Response::builder().status(200);
            if let Some(ct) = content_type {
                b = b.header("content-type", ct);
            }
            b.body(
                Full::new(Bytes::from(body))
                    .map_err(|never| match never {})
                    .boxed(),
            )
            .unwrap()
        })
        .await;
        let c = client(&server.url);
        let stream = open(&c, &request()).await;
        assert_eq!(
            stream.unexpected_content_type(),
            Some(content_type.unwrap_or(""))
        );
        let got = stream.collect().await.unwrap();
        assert_eq!(got.content, " a b", "{content_type:?}");
    }
    // An HTML or JSON body keeps its typed error.
    for (ct, body) in [
        ("", "<html>login</html>"),
        ("application/json", "{\"ok\":true}"),
    ] {
        let server = serve(move |_req| async move { full(200, ct, body) }).await;
        let err = client(&server.url)
            .stream_completion(&request())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::ContentType, "{body}");
    }
}

#[tokio::test]
async fn tgi_style_empty_finish_reasons_do_not_end_a_stream() {
    let server = serve(|_req| async move {
        let mut events: Vec<String> = (0..3)
            .map(|i| {
                serde_json::json!({"id": "", "object": "text_completion", "choices": [{"index": 0,
                    "text": format!(" t{i}"), "logprobs": null, "finish_reason": ""}],
                    "model": "m", "system_fingerprint": "3.3.6-native"})
                .to_string()
            })
            .collect();
        events.push(text_chunk(" end", Some("length"), Some((2, 4))));
        events.push("[DONE]".into());
        sse(events)
    })
    .await;
    let got = collect_ok(&client(&server.url), &request()).await;
    let finishes: Vec<Option<String>> =
        got.events.iter().map(|e| e.finish_reason.clone()).collect();
    assert_eq!(finishes, vec![None, None, None, Some("length".into())]);
    assert_eq!(got.finish_reason.as_deref(), Some("length"));
}

/// A raw server: the first connection reads one request and closes without a word (a pooled
/// connection the server closed as the client sent on it); later ones answer with a stream.
#[tokio::test]
async fn a_request_on_a_connection_closed_before_any_answer_is_sent_again() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = requests.clone();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 64 * 1024];
            let mut got = Vec::new();
            // Read the whole request (head and its JSON body) before deciding.
            while !got.windows(1).any(|w| w == b"}") {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            seen.fetch_add(1, Ordering::SeqCst);
            if std::mem::take(&mut first) {
                drop(socket);
                continue;
            }
            let body = format!(
                "data: {}\n\ndata: [DONE]\n\n",
                text_chunk(" hi", Some("length"), Some((3, 1)))
            );
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
        }
    });
    let collected = collect_ok(&client(&url), &request()).await;
    assert_eq!(collected.content, " hi");
    assert_eq!(requests.load(Ordering::SeqCst), 2, "sent again once");
}

/// As above, but the server resets the connection (SO_LINGER 0) instead of closing it.
#[tokio::test]
async fn a_request_on_a_connection_reset_before_any_answer_is_sent_again() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = requests.clone();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 64 * 1024];
            let mut got = Vec::new();
            while !got.contains(&b'}') {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            seen.fetch_add(1, Ordering::SeqCst);
            if std::mem::take(&mut first) {
                // A zero linger resets at once (it never blocks the drop).
                #[allow(deprecated)]
                let _ = socket.set_linger(Some(Duration::ZERO));
                drop(socket);
                continue;
            }
            let body = format!(
                "data: {}\n\ndata: [DONE]\n\n",
                text_chunk(" hi", Some("length"), Some((3, 1)))
            );
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(body.as_bytes()).await;
        }
    });
    let collected = collect_ok(&client(&url), &request()).await;
    assert_eq!(collected.content, " hi");
    assert_eq!(requests.load(Ordering::SeqCst), 2, "sent again once");
}
