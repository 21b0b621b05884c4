//! Simulator throughput: the engine alone, and the server with the client on one core.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    missing_docs
)]

use std::time::{Duration, Instant};

use speedmatrix_client::{Client, ClientConfig, CompletionRequest};
use speedmatrix_sim::{Profile, SimServer};
use speedmatrix_units::Tokens;

const STREAMS: usize = 128;

async fn streams(profile: Profile, tokens: u64) -> (Duration, u64) {
    let sim = SimServer::start(profile, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = Client::new(ClientConfig::new(sim.url())).unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..STREAMS)
        .map(|i| {
            let client = client.clone();
            let req = CompletionRequest::new(
                "tiny",
                format!("[{i}] The quiet harbor measured twelve meters."),
            )
            .max_tokens(Tokens::new(tokens))
            .ignore_eos(true)
            .continuous_usage(true);
            tokio::spawn(async move {
                client
                    .stream_completion(&req)
                    .await
                    .unwrap()
                    .collect()
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap().usage.unwrap().completion_tokens.get();
    }
    let elapsed = started.elapsed();
    sim.shutdown().await;
    (elapsed, total)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    let (elapsed, total) = rt.block_on(streams(Profile::builtin("free-running").unwrap(), 2_000));
    println!(
        "free-running, {STREAMS} streams, one thread (server + client): {total} tokens in {:.2} s = {:.0} tok/s",
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );

    let tiny = Profile::builtin("tiny").unwrap();
    let tokens = 1_000u64;
    let modelled = tiny.cost.decode_step(STREAMS as u64, 500) * tokens as u32;
    let (elapsed, total) = rt.block_on(streams(tiny, tokens));
    println!(
        "tiny, {STREAMS} streams × {tokens} tokens, one thread: {:.2} s (cost model {:.2} s, ratio {:.2}), {:.0} tok/s",
        elapsed.as_secs_f64(),
        modelled.as_secs_f64(),
        elapsed.as_secs_f64() / modelled.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64()
    );
}
