//! A simulated continuous-batching inference server (vLLM-like): the embedded default target of
//! speedmatrix and the ground truth of its tests.
//!
//! [`SimServer::start`] serves a [`Profile`] on a local port with vLLM's OpenAI-compatible API.
//! The answers are made-up words, but the *timing* follows an explicit engine model, so a client
//! measuring it should find the numbers the profile predicts.
//!
//! ```
//! use speedmatrix_sim::{Profile, SimServer};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
//! let sim = SimServer::start(Profile::builtin("tiny").unwrap(), "127.0.0.1:0".parse()?).await?;
//! assert!(sim.url().starts_with("http://127.0.0.1:"));
//! assert_eq!(sim.profile().max_model_len, 2_048);
//! sim.shutdown().await;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`VirtualRun`] runs a sustained-decode cell on the same engine in virtual time, with no
//! real waiting and optional seeded noise on each step's duration ([`StepNoise`]), and returns
//! each request's send, token and finish times as plain data: many long runs in seconds.
//!
//! # The engine model
//!
//! One engine task runs *steps*, as vLLM v1's scheduler does:
//!
//! 1. Running requests are served first, in arrival order: each gets its next prefill chunk or one
//!    decode token, within the step's token budget (`max_num_batched_tokens`; long prompts are
//!    prefilled in chunks). A request that needs a new KV block when none is free preempts the
//!    most recently admitted running request (its blocks are freed; it is recomputed later).
//! 2. If nobody was preempted, waiting requests are admitted in order while there is a seat
//!    (`max_num_seqs`), budget and enough free blocks. On admission the prompt's full blocks are
//!    looked up in the prefix cache (chained hashes of the token ids of each full block); hits
//!    skip prefill. At least one token is always computed.
//! 3. The step's duration comes from the [`StepCost`] (see there for the formula). When it has
//!    elapsed (scaled by `time_scale`, or not at all when `free_running`), every request whose
//!    computed tokens reached its end emits one token.
//!
//! KV blocks hold `block_size` tokens; a request holds `ceil(tokens / block_size)` blocks. The
//! pool has `num_gpu_blocks - 1` usable blocks (vLLM reserves a null block). Freed blocks keep their
//! cached prefix until reused; reuse takes the least recently freed block first, and a finished
//! request's last block is freed first. A request finishes at `max_tokens`, at `max_model_len`
//! (finish reason `length`), or — unless `ignore_eos` — after the profile's `eos_after_tokens`
//! (but not before `min_tokens`; finish reason `stop`).
//!
//! # The server
//!
//! - `GET /v1/models`, `GET /health`, `GET /version` (`{"version": "0.32.0-speedmatrix-sim"}`).
//! - `POST /v1/completions` and `POST /v1/chat/completions`, streaming (SSE) or not, with
//!   `max_tokens`/`max_completion_tokens`, `min_tokens`, `ignore_eos`, and
//!   `stream_options.include_usage` / `continuous_usage_stats` in vLLM's shapes. Several tokens
//!   may share a chunk when the client reads slower than the engine writes, as with vLLM.
//! - `POST /tokenize` with `prompt` or `messages` → `{"count", "max_model_len", "tokens"}`.
//! - `GET /metrics`: vLLM's Prometheus names (`vllm:num_requests_running`,
//!   `vllm:kv_cache_usage_perc`, `vllm:prefix_cache_hits_total`, `vllm:cache_config_info`, …),
//!   and `vllm:spec_decode_num_drafts_total` with its draft and accepted token counters when
//!   [`Profile::num_speculative_tokens`] is set (one draft per decode step, the step's tokens
//!   less one accepted), so the report's acceptance rate has a known truth.
//! - With [`Profile::capacity_api`] set to `llamacpp` or `sglang`, `/metrics` drops
//!   `vllm:cache_config_info` and the capacity is told in that engine's shape instead:
//!   `GET /props` (`default_generation_settings.n_ctx`, `total_slots`) or
//!   `GET /get_server_info` (`max_total_num_tokens`, `max_running_requests`).
//! - Errors as vLLM 0.32 sends them (`{"error": {"message", "type", "param", "code"}}`): a prompt
//!   over `max_model_len` is a 400; a prompt that fits with too large a `max_tokens` is served and
//!   stops at `max_model_len`; an unknown model is a 404; malformed JSON is a 400.
//! - A client that disconnects aborts its request, freeing its blocks at once.
//! - Faults on demand, per request (`x-sim-fault` header) or per profile: see [`fault`].
//!
//! Prompts are counted with the bundled tokenizer of `speedmatrix-workload` (the one the client
//! uses by default). Chat prompts use ChatML rendered token by token, so the overhead is fixed:
//! each message costs its content's tokens (no special tokens) plus `<|im_start|>`, the role, a
//! newline, `<|im_end|>` and a newline, and the generation prompt `<|im_start|>assistant\n` is
//! added at the end. With the bundled tokenizer one user message costs its content + 11 tokens.

mod api;
mod blocks;
mod body;
mod driver;
mod engine;
mod error;
pub mod fault;
pub mod fit;
mod metrics;
mod profile;
mod server;
mod text;
mod virtual_run;
mod wire;

pub use error::SimError;
pub use fault::Fault;
pub use profile::{
    CapacityApi, Dialect, FREE_RUNNING, OriginKind, Profile, ProfileModel, ProfileOrigin,
    RTX3090_QWEN35_4B_FP8, StepCost, TINY, TextStyle,
};
pub use server::{RunningSim, SimServer, VERSION};
pub use virtual_run::{Emission, StepNoise, VirtualOutcome, VirtualRequest, VirtualRun};

#[cfg(test)]
mod calibration;
