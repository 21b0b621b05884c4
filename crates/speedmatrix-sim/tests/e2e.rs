//! The simulator end to end, through speedmatrix-client, on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use speedmatrix_client::{
    ChatRequest, Client, ClientConfig, ClientError, CollectedResponse, CompletionRequest,
    ErrorKind, Message, Prompt, Timeouts, TokenizeRequest,
};
use speedmatrix_engines::{ServerMetrics, vllm};
use speedmatrix_sim::{Profile, RunningSim, SimServer};
use speedmatrix_units::Tokens;
use speedmatrix_workload::Tokenizer;

const PROMPT: &str = "The quiet harbor measured twelve meters at dawn, and the boats waited.";

async fn start(profile: Profile) -> RunningSim {
    SimServer::start(profile, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

fn tiny() -> Profile {
    Profile::builtin("tiny").unwrap()
}

fn client(sim: &RunningSim) -> Client {
    Client::new(ClientConfig::new(sim.url())).unwrap()
}

fn client_with(sim: &RunningSim, timeouts: Timeouts, max_event_bytes: usize) -> Client {
    Client::new(
        ClientConfig::new(sim.url())
            .timeouts(timeouts)
            .max_event_bytes(max_event_bytes),
    )
    .unwrap()
}

fn completion(max_tokens: u64) -> CompletionRequest {
    completion_of(PROMPT, max_tokens)
}

/// A request for exactly `max_tokens` tokens after `prompt`, with usage on every chunk.
fn completion_of(prompt: impl Into<Prompt>, max_tokens: u64) -> CompletionRequest {
    CompletionRequest::new("tiny", prompt)
        .max_tokens(Tokens::new(max_tokens))
        .ignore_eos(true)
        .continuous_usage(true)
}

/// Streams `req` to the end, expecting success.
async fn collect_ok(c: &Client, req: &CompletionRequest) -> CollectedResponse {
    c.stream_completion(req)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap()
}

/// Streams `req`, expecting the stream to start and then fail.
async fn collect_err(c: &Client, req: &CompletionRequest) -> ClientError {
    c.stream_completion(req)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap_err()
}

/// Runs `n` distinct `[i] prompt` requests for `tokens` tokens at once; each must get them all.
async fn all_complete(c: &Client, n: usize, prompt: &str, tokens: u64) {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let c = c.clone();
            let req = completion_of(format!("[{i}] {prompt}"), tokens);
            tokio::spawn(async move { collect_ok(&c, &req).await })
        })
        .collect();
    for t in tasks {
        assert_eq!(
            t.await.unwrap().usage.unwrap().completion_tokens,
            Tokens::new(tokens)
        );
    }
}

fn faulty(max_tokens: u64, fault: &str) -> CompletionRequest {
    completion(max_tokens).extra("sim_fault", serde_json::Value::String(fault.to_owned()))
}

async fn metrics(client: &Client) -> ServerMetrics {
    client.metrics().await.unwrap().unwrap()
}

/// Polls `/metrics` until `done` holds, for at most 5 s.
async fn wait_for(client: &Client, done: impl Fn(&ServerMetrics) -> bool) -> ServerMetrics {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let m = metrics(client).await;
        if done(&m) || Instant::now() > deadline {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn completion_stream_has_vllm_shape_and_exact_usage() {
    let sim = start(tiny()).await;
    let c = client(&sim);
    let expected_prompt = Tokenizer::bundled().unwrap().encode_count(PROMPT).unwrap() as u64;
    let r = collect_ok(&c, &completion(20)).await;
    let usage = r.usage.unwrap();
    assert_eq!(usage.prompt_tokens, Tokens::new(expected_prompt));
    assert_eq!(usage.completion_tokens, Tokens::new(20));
    assert_eq!(r.finish_reason.as_deref(), Some("length"));
    assert!(!r.content.trim().is_empty());
    // Continuous usage: cumulative and non-decreasing on every chunk; the last is usage-only.
    let counts: Vec<u64> = r
        .events
        .iter()
        .map(|e| e.usage.unwrap().completion_tokens.get())
        .collect();
    assert!(counts.windows(2).all(|w| w[0] <= w[1]), "{counts:?}");
    let last = r.events.last().unwrap();
    assert!(!last.has_choices);
    assert!(r.events.iter().rev().skip(1).all(|e| e.has_choices));
    // Output text re-tokenizes to the reported count.
    let content = Tokenizer::bundled().unwrap().with_add_special_tokens(false);
    assert_eq!(content.encode_count(&r.content).unwrap(), 20);
    sim.shutdown().await;
}

#[tokio::test]
async fn chat_stream_starts_with_a_role_chunk_and_counts_the_template() {
    let sim = start(tiny()).await;
    let c = client(&sim);
    let req = ChatRequest::new("tiny", vec![Message::user(PROMPT)])
        .max_tokens(Tokens::new(5))
        .continuous_usage(true);
    let r = c.stream_chat(&req).await.unwrap().collect().await.unwrap();
    let content = Tokenizer::bundled().unwrap().with_add_special_tokens(false);
    // The documented ChatML overhead of one user message with the bundled tokenizer.
    let expected = content.encode_count(PROMPT).unwrap() as u64 + 11;
    assert_eq!(r.usage.unwrap().prompt_tokens, Tokens::new(expected));
    assert_eq!(r.usage.unwrap().completion_tokens, Tokens::new(5));
    let first = &r.events[0];
    assert!(
        first.has_choices && first.content.is_empty(),
        "role chunk first: {first:?}"
    );
    assert_eq!(first.usage.unwrap().completion_tokens, Tokens::new(0));
    // /tokenize agrees with the chat count.
    let t = c
        .tokenize(&TokenizeRequest::chat("tiny", vec![Message::user(PROMPT)]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.count, Tokens::new(expected));
    assert_eq!(t.max_model_len, Some(Tokens::new(2_048)));
    sim.shutdown().await;
}

#[tokio::test]
async fn without_ignore_eos_the_model_stops_by_itself() {
    let sim = start(tiny()).await;
    let req = CompletionRequest::new("tiny", PROMPT)
        .max_tokens(Tokens::new(500))
        .continuous_usage(false);
    let r = collect_ok(&client(&sim), &req).await;
    assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    assert_eq!(r.usage.unwrap().completion_tokens, Tokens::new(100));
    sim.shutdown().await;
}

#[tokio::test]
async fn models_version_metrics_and_tokenize_look_like_vllm() {
    let sim = start(tiny()).await;
    let c = client(&sim);
    let info = c.probe().await.unwrap();
    let models = info.models.clone().unwrap();
    assert_eq!(models[0].id, "tiny");
    assert_eq!(models[0].max_model_len, Some(Tokens::new(2_048)));
    assert_eq!(models[0].owned_by.as_deref(), Some("vllm"));
    assert!(info.version().unwrap().starts_with("0.32.0"));
    assert_eq!(info.engine(), speedmatrix_engines::Engine::Vllm);
    let cache = vllm::cache_config(info.metrics().unwrap()).unwrap();
    assert_eq!(cache.block_size, Some(16));
    assert_eq!(cache.num_gpu_blocks, Some(4_097));
    assert_eq!(
        cache
            .labels
            .get("enable_prefix_caching")
            .map(String::as_str),
        Some("True")
    );
    let t = c
        .tokenize(&TokenizeRequest::prompt("tiny", PROMPT))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        t.count.get() as usize,
        Tokenizer::bundled().unwrap().encode(PROMPT).unwrap().len()
    );
    assert_eq!(
        t.tokens,
        Tokenizer::bundled().unwrap().encode(PROMPT).unwrap()
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_prompt_over_max_model_len_is_a_400_with_vllm_message() {
    let sim = start(tiny()).await;
    let long = PROMPT.repeat(400);
    let req = CompletionRequest::new("tiny", long).max_tokens(Tokens::new(10));
    let err = client(&sim).stream_completion(&req).await.unwrap_err();
    assert_eq!(err.status(), Some(400));
    assert!(
        err.to_string()
            .contains("maximum context length is 2048 tokens"),
        "{err}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn a_fitting_prompt_with_too_many_max_tokens_stops_at_max_model_len() {
    let sim = start(tiny()).await;
    let prompt_tokens = Tokenizer::bundled().unwrap().encode_count(PROMPT).unwrap() as u64;
    let r = collect_ok(&client(&sim), &completion(5_000)).await;
    assert_eq!(r.finish_reason.as_deref(), Some("length"));
    assert_eq!(
        r.usage.unwrap().completion_tokens,
        Tokens::new(2_048 - prompt_tokens)
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn unknown_model_is_404_and_malformed_json_is_400() {
    let sim = start(tiny()).await;
    let c = client(&sim);
    let req = CompletionRequest::new("no-such-model", PROMPT);
    assert_eq!(
        c.stream_completion(&req).await.unwrap_err().status(),
        Some(404)
    );
    let err = c
        .stream_raw("/v1/completions", b"{\"prompt\": ".to_vec())
        .await
        .unwrap_err();
    assert_eq!(err.status(), Some(400));
    sim.shutdown().await;
}

#[tokio::test]
async fn a_client_disconnect_frees_the_blocks_at_once() {
    let sim = start(tiny()).await;
    let c = client(&sim);
    let mut stream = c.stream_completion(&completion(1_500)).await.unwrap();
    for _ in 0..3 {
        stream.next().await.unwrap().unwrap();
    }
    let busy = metrics(&c).await;
    assert_eq!(busy.value("vllm:num_requests_running"), Some(1.0));
    assert!(busy.value("vllm:kv_cache_usage_perc").unwrap() > 0.0);
    drop(stream);
    let idle = wait_for(&c, |m| m.value("vllm:num_requests_running") == Some(0.0)).await;
    assert_eq!(idle.value("vllm:num_requests_running"), Some(0.0));
    assert_eq!(idle.value("vllm:kv_cache_usage_perc"), Some(0.0));
    let generated = idle.value("vllm:generation_tokens_total").unwrap();
    assert!(
        generated < 1_000.0,
        "the request kept running after the disconnect: {generated}"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn prefix_cache_hits_show_in_metrics() {
    let sim = start(tiny()).await;
    let c = client(&sim);
    let long = PROMPT.repeat(20);
    for _ in 0..2 {
        let req = CompletionRequest::new("tiny", long.as_str()).max_tokens(Tokens::new(2));
        collect_ok(&c, &req).await;
    }
    let m = metrics(&c).await;
    let queries = m.value("vllm:prefix_cache_queries_total").unwrap();
    let hits = m.value("vllm:prefix_cache_hits_total").unwrap();
    assert!(hits > 0.0 && hits < queries, "hits {hits} of {queries}");
    sim.shutdown().await;
}

#[tokio::test]
async fn fault_close_after_breaks_the_stream() {
    let sim = start(tiny()).await;
    let mut stream = client(&sim)
        .stream_completion(&faulty(50, "close-after=5"))
        .await
        .unwrap();
    let mut text = String::new();
    let err = loop {
        match stream.next().await {
            Ok(Some(e)) => text.push_str(&e.content),
            Ok(None) => panic!("the stream ended cleanly"),
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), ErrorKind::Disconnected, "{err}");
    let content = Tokenizer::bundled().unwrap().with_add_special_tokens(false);
    assert_eq!(content.encode_count(&text).unwrap(), 5);
    sim.shutdown().await;
}

#[tokio::test]
async fn fault_stall_trips_the_idle_timeout() {
    let sim = start(tiny()).await;
    let timeouts = Timeouts::new(
        Duration::from_secs(5),
        Duration::from_secs(5),
        Duration::from_millis(300),
    );
    let c = client_with(&sim, timeouts, 1 << 20);
    let err = collect_err(&c, &faulty(20, "stall=3s@2")).await;
    assert_eq!(err.kind(), ErrorKind::TimeoutIdle, "{err}");
    // A stall shorter than the timeout only delays the stream.
    let c = client(&sim);
    let r = collect_ok(&c, &faulty(20, "stall=200ms@2")).await;
    assert_eq!(r.usage.unwrap().completion_tokens, Tokens::new(20));
    sim.shutdown().await;
}

#[tokio::test]
async fn fault_malformed_chunk_is_a_protocol_error() {
    let sim = start(tiny()).await;
    let err = collect_err(&client(&sim), &faulty(20, "malformed-chunk-after=2")).await;
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    sim.shutdown().await;
}

#[tokio::test]
async fn fault_statuses_are_answered_before_any_work() {
    let sim = start(tiny()).await;
    let c = client(&sim);
    for code in [429u16, 500, 503] {
        let err = c
            .stream_completion(&faulty(5, &format!("status={code}")))
            .await
            .unwrap_err();
        assert_eq!(err.status(), Some(code));
    }
    assert_eq!(
        metrics(&c).await.value("vllm:prompt_tokens_total"),
        Some(0.0)
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn fault_slow_headers_trips_the_headers_timeout() {
    let sim = start(tiny()).await;
    let timeouts = Timeouts::new(
        Duration::from_secs(5),
        Duration::from_millis(200),
        Duration::from_secs(5),
    );
    let err = client_with(&sim, timeouts, 1 << 20)
        .stream_completion(&faulty(5, "slow-headers=2s"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimeoutHeaders, "{err}");
    sim.shutdown().await;
}

#[tokio::test]
async fn fault_oversized_line_trips_the_event_size_limit() {
    let sim = start(tiny()).await;
    let timeouts = Timeouts::default();
    let small = client_with(&sim, timeouts, 64 << 10);
    let err = collect_err(&small, &faulty(5, "oversized-line=200000@1")).await;
    assert_eq!(err.kind(), ErrorKind::SseLineTooLong, "{err}");
    // Under a large enough limit the padded chunk is harmless.
    let big = client_with(&sim, timeouts, 1 << 20);
    let r = collect_ok(&big, &faulty(5, "oversized-line=200000@1")).await;
    assert_eq!(r.usage.unwrap().completion_tokens, Tokens::new(5));
    sim.shutdown().await;
}

#[tokio::test]
async fn profile_faults_apply_to_every_request() {
    let mut p = tiny();
    p.faults = Some("status=503".to_owned());
    let sim = start(p).await;
    let c = client(&sim);
    assert_eq!(
        c.stream_completion(&completion(5))
            .await
            .unwrap_err()
            .status(),
        Some(503)
    );
    // The other endpoints stay healthy.
    assert!(c.models().await.unwrap().is_some());
    sim.shutdown().await;
}

/// 128 streams on one thread (client and server share it): the engine keeps its modelled pace.
#[tokio::test(flavor = "current_thread")]
async fn one_core_serves_128_streams_at_the_modelled_rate() {
    let sim = start(tiny()).await;
    let c = client(&sim);
    let tokens = 200u64;
    let started = Instant::now();
    all_complete(&c, 128, PROMPT, tokens).await;
    let elapsed = started.elapsed();
    eprintln!("128 streams x {tokens} tokens on one thread: {elapsed:?}");
    let p = tiny();
    let modelled = p.cost.decode_step(128, 250) * tokens as u32;
    assert!(
        elapsed < modelled * 4,
        "took {elapsed:?}, the cost model says {modelled:?}"
    );
    assert!(
        elapsed * 2 > modelled,
        "took {elapsed:?}, faster than the cost model's {modelled:?}"
    );
    sim.shutdown().await;
}

/// One HTTP/1.1 request on a fresh connection (for what the streaming client does not do:
/// non-streaming answers, request headers, response headers).
async fn raw(
    sim: &RunningSim,
    method: &str,
    path: &str,
    headers: &str,
    body: &str,
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: sim\r\nconnection: close\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n{headers}\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    socket.read_to_end(&mut response).await.unwrap();
    let text = String::from_utf8(response).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test]
async fn non_streaming_answers_have_the_openai_shape() {
    let sim = start(tiny()).await;
    let body =
        format!(r#"{{"model":"tiny","prompt":"{PROMPT}","max_tokens":7,"ignore_eos":true}}"#);
    let (status, _, text) = raw(&sim, "POST", "/v1/completions", "", &body).await;
    assert_eq!(status, 200);
    let v = json(&text);
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 7);
    let content = Tokenizer::bundled().unwrap().with_add_special_tokens(false);
    assert_eq!(
        content
            .encode_count(v["choices"][0]["text"].as_str().unwrap())
            .unwrap(),
        7
    );

    let body = r#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":3}"#;
    let (status, _, text) = raw(&sim, "POST", "/v1/chat/completions", "", body).await;
    assert_eq!(status, 200);
    let v = json(&text);
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    sim.shutdown().await;
}

#[tokio::test]
async fn errors_use_the_vllm_error_object() {
    let sim = start(tiny()).await;
    let (status, _, text) = raw(
        &sim,
        "POST",
        "/v1/completions",
        "",
        r#"{"model":"x","prompt":"a"}"#,
    )
    .await;
    assert_eq!(status, 404);
    let v = json(&text);
    assert_eq!(v["error"]["code"], 404);
    assert_eq!(v["error"]["type"], "NotFoundError");
    assert_eq!(v["error"]["message"], "The model `x` does not exist.");
    let (status, _, text) = raw(&sim, "POST", "/v1/completions", "", "{not json").await;
    assert_eq!(status, 400);
    assert_eq!(json(&text)["error"]["type"], "BadRequestError");
    let (status, _, _) = raw(&sim, "GET", "/v1/completions", "", "").await;
    assert_eq!(status, 405);
    let (status, _, _) = raw(&sim, "GET", "/nowhere", "", "").await;
    assert_eq!(status, 404);
    let (status, _, _) = raw(&sim, "GET", "/health", "", "").await;
    assert_eq!(status, 200);
    sim.shutdown().await;
}

#[tokio::test]
async fn the_fault_header_works_and_429_says_when_to_retry() {
    let sim = start(tiny()).await;
    let (status, head, text) = raw(
        &sim,
        "POST",
        "/v1/completions",
        "x-sim-fault: status=429; retry-after=7\r\n",
        r#"{"prompt":"a"}"#,
    )
    .await;
    assert_eq!(status, 429);
    assert!(head.contains("retry-after: 7"), "{head}");
    assert_eq!(json(&text)["error"]["code"], 429);
    // Header faults also reach the non-generation endpoints.
    let (status, _, _) = raw(&sim, "GET", "/v1/models", "x-sim-fault: status=503\r\n", "").await;
    assert_eq!(status, 503);
    let (status, _, text) = raw(&sim, "GET", "/v1/models", "x-sim-fault: explode\r\n", "").await;
    assert_eq!(status, 400, "{text}");
    // A non-streaming request closed after 3 tokens gets no answer at all.
    let body = r#"{"prompt":"a","max_tokens":10,"ignore_eos":true}"#;
    assert_eq!(
        status_or_nothing(&sim, "x-sim-fault: close-after=3\r\n", body).await,
        None
    );
    sim.shutdown().await;
}

/// The status of a completions request, or `None` when the server hung up without answering.
async fn status_or_nothing(sim: &RunningSim, headers: &str, body: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(sim.addr()).await.unwrap();
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: sim\r\nconnection: close\r\ncontent-length: {}\r\n{headers}\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let _ = socket.read_to_end(&mut response).await;
    let text = String::from_utf8_lossy(&response);
    text.split(' ').nth(1).and_then(|s| s.parse().ok())
}

#[tokio::test]
async fn requests_beyond_the_kv_cache_wait_and_all_finish() {
    // 64 usable blocks of 16 tokens: four 200-token prompts growing to 400 tokens cannot all
    // run at once; the engine preempts and recomputes, and every request still completes.
    let mut p = tiny();
    p.num_gpu_blocks = 65;
    p.max_model_len = 1_024;
    let sim = start(p).await;
    let c = client(&sim);
    let prompt = PROMPT.repeat(12);
    all_complete(&c, 4, &prompt, 200).await;
    let m = metrics(&c).await;
    assert!(m.value("vllm:num_preemptions_total").unwrap() >= 1.0);
    assert_eq!(m.value("vllm:kv_cache_usage_perc"), Some(0.0));
    sim.shutdown().await;
}

#[tokio::test]
async fn a_queued_request_whose_client_left_is_dropped_before_it_runs() {
    let mut p = tiny();
    p.max_num_seqs = 1;
    let sim = start(p).await;
    let c = client(&sim);
    let mut running = c.stream_completion(&completion(1_000)).await.unwrap();
    running.next().await.unwrap().unwrap();
    let queued = c.stream_completion(&completion(10)).await.unwrap();
    let m = wait_for(&c, |m| m.value("vllm:num_requests_waiting") == Some(1.0)).await;
    assert_eq!(m.value("vllm:num_requests_waiting"), Some(1.0));
    drop(queued);
    let m = wait_for(&c, |m| m.value("vllm:num_requests_waiting") == Some(0.0)).await;
    assert_eq!(m.value("vllm:num_requests_waiting"), Some(0.0));
    assert_eq!(
        m.value("vllm:num_requests_running"),
        Some(1.0),
        "the first request is still running"
    );
    drop(running);
    sim.shutdown().await;
}
