//! Talking to the local server through the project's own client, blocking.
//!
//! xtask is synchronous; a small Tokio runtime drives [`speedmatrix_client::Client`]. Exchanges
//! are kept verbatim ([`RawResponse`]) so that they can be saved as fixtures.

use std::time::Instant;

use anyhow::Context;
use serde_json::Value;
use speedmatrix_client::{Client, ClientConfig, RawResponse, StreamDecoder, StreamEvent};
use speedmatrix_engines::ServerMetrics;

/// A blocking client of one server.
pub(crate) struct Net {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net").field("client", &self.client).finish()
    }
}

/// A streamed answer read to its end: the raw bytes and the events decoded from them.
#[derive(Debug)]
pub(crate) struct Sse {
    /// The whole body as received.
    pub(crate) body: Vec<u8>,
    /// The chunks, in order (`[DONE]` is not an event).
    pub(crate) events: Vec<StreamEvent>,
    /// Whether the stream ended with `data: [DONE]`.
    pub(crate) done: bool,
}

impl Net {
    /// A client of `base_url` with the client's default timeouts.
    pub(crate) fn new(base_url: &str) -> anyhow::Result<Net> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting a Tokio runtime")?;
        let client = Client::new(ClientConfig::new(base_url))?;
        Ok(Net { runtime, client })
    }

    /// `GET path`, whatever the status.
    pub(crate) fn get(&self, path: &str) -> anyhow::Result<RawResponse> {
        self.runtime
            .block_on(self.client.get_raw(path))
            .with_context(|| format!("GET {path}"))
    }

    /// `GET path`, failing unless it answers 2xx.
    pub(crate) fn get_ok(&self, path: &str) -> anyhow::Result<RawResponse> {
        let resp = self.get(path)?;
        anyhow::ensure!(
            resp.is_success(),
            "GET {path} answered {}: {}",
            resp.status,
            resp.text()
        );
        Ok(resp)
    }

    /// `GET /metrics`, parsed.
    pub(crate) fn metrics(&self) -> anyhow::Result<ServerMetrics> {
        Ok(ServerMetrics::parse(&self.get_ok("/metrics")?.text()))
    }

    /// `POST path` with a JSON body, whatever the status.
    pub(crate) fn post_json(&self, path: &str, body: &Value) -> anyhow::Result<RawResponse> {
        self.runtime
            .block_on(
                self.client
                    .post_json_raw(path, body.to_string().into_bytes()),
            )
            .with_context(|| format!("POST {path}"))
    }

    /// `POST path` with a streaming request, read to its end and decoded.
    pub(crate) fn post_sse(&self, path: &str, body: &Value) -> anyhow::Result<Sse> {
        let raw = self.post_json(path, body)?;
        anyhow::ensure!(
            raw.is_success(),
            "POST {path} answered {}: {}",
            raw.status,
            raw.text()
        );
        let mut decoder = StreamDecoder::new();
        decoder.feed(&raw.body, Instant::now());
        let mut events = Vec::new();
        while let Some(event) = decoder.next_event() {
            events.push(event.with_context(|| format!("decoding the stream of {path}"))?);
        }
        if let Some(last) = decoder.finish() {
            events.push(last.with_context(|| format!("decoding the end of the stream of {path}"))?);
        }
        let done = decoder.is_done();
        Ok(Sse {
            body: raw.body.to_vec(),
            events,
            done,
        })
    }
}

/// The body of `resp` as JSON.
pub(crate) fn json(resp: &RawResponse) -> anyhow::Result<Value> {
    serde_json::from_slice(&resp.body).with_context(|| {
        format!(
            "expected a JSON body, got: {}",
            resp.text().chars().take(300).collect::<String>()
        )
    })
}
