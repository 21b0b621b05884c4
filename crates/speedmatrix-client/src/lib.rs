//! OpenAI-compatible streaming client for benchmarking: exact timestamps,
//! typed errors, server probing.
//!
//! The client speaks `POST /v1/completions` and `POST /v1/chat/completions`
//! with `stream: true` and hands back each server-sent chunk as a
//! [`StreamEvent`] stamped with the [`Instant`](std::time::Instant) its bytes
//! arrived, before any parsing. Answer and reasoning text are kept apart;
//! usage (per chunk with `continuous_usage_stats`, and the final totals) is
//! typed. [`RequestTimings`] records when the request was sent, when headers
//! and the first body byte arrived, and when `[DONE]` came.
//!
//! Everything that can fail returns [`ClientError`], whose [`ClientError::kind`] is a
//! stable key ([`ErrorKind::as_str`]) for grouping failures in reports.
//!
//! # Streaming
//!
//! ```no_run
//! use speedmatrix_client::{Client, ClientConfig, CompletionRequest};
//! use speedmatrix_units::Tokens;
//!
//! # async fn demo() -> Result<(), speedmatrix_client::ClientError> {
//! let client = Client::new(ClientConfig::from_env("http://127.0.0.1:8000"))?;
//! let request = CompletionRequest::new("my-model", "Once upon a time")
//!     .max_tokens(Tokens::new(128))
//!     .ignore_eos(true)
//!     .continuous_usage(true);
//! let mut stream = client.stream_completion(&request).await?;
//! while let Some(event) = stream.next().await? {
//!     let tokens_so_far = event.usage.map(|u| u.completion_tokens);
//!     println!("{:?} {:?} {tokens_so_far:?}", event.received_at, event.content);
//! }
//! println!("total: {:?}, timings: {:?}", stream.usage(), stream.timings());
//! # Ok(()) }
//! ```
//!
//! # Sans-IO decoding
//!
//! The decoders need no network; they are what the client runs on each read:
//!
//! ```
//! use std::time::Instant;
//! use speedmatrix_client::{ErrorKind, StreamDecoder};
//!
//! let mut decoder = StreamDecoder::new();
//! let arrived = Instant::now();
//! // A chat chunk split mid-line, then an error object mid-stream.
//! decoder.feed(b"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\r\n\r\ndata: {\"cho", arrived);
//! let event = decoder.next_event().unwrap().unwrap();
//! assert_eq!(event.reasoning_content, "hm");
//! assert_eq!(event.received_at, arrived);
//! assert!(decoder.next_event().is_none());
//! decoder.feed(b"ices\":[]}\n\ndata: {\"error\":{\"message\":\"overloaded\",\"code\":503}}\n\n", Instant::now());
//! assert!(!decoder.next_event().unwrap().unwrap().has_choices);
//! let err = decoder.next_event().unwrap().unwrap_err();
//! assert_eq!(err.kind(), ErrorKind::ServerErrorEvent);
//! assert_eq!(err.kind().as_str(), "server_error_event");
//! ```
//!
//! # Probing
//!
//! [`Client::probe`] asks `GET /v1/models` and every engine's own endpoints
//! (`/version`, `/metrics`, `/props`, `/get_server_info`, `/info`,
//! `/api/version`) at once; `speedmatrix-engines` reads the answers and tells
//! which engine answered and what that changes about its streams;
//! [`Client::tokenize`] calls vLLM's `/tokenize`. Endpoints a server lacks
//! come back as `None`. [`Client::metrics`] scrapes `/metrics` into the
//! engines crate's `ServerMetrics`.

mod client;
mod error;
mod event;
mod probe;
pub mod redact;
mod request;
mod sse;
mod stream;
mod think;
mod tls;
mod wire;

pub use client::{ApiKey, Client, ClientConfig, RawResponse, Timeouts};
pub use error::{ClientError, ErrorKind};
pub use event::{StreamDecoder, StreamEvent, Usage};
pub use probe::{ModelInfo, ServerInfo, TokenizeRequest, Tokenized};
pub use request::{ChatRequest, CompletionRequest, Generation, Message, Prompt, StreamOptions};
pub use sse::{DEFAULT_MAX_EVENT_BYTES, OwnedSseEvent, SseDecoder, SseEvent};
pub use stream::{CollectedResponse, RequestTimings, ResponseStream};
pub use think::ThinkSplitter;
