//! Blocking HTTP for talking to the local server, keeping raw bytes and chunk arrival times.

use std::io::Read;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;

/// A whole response.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    /// HTTP status code.
    pub(crate) status: u16,
    /// The body exactly as received (after transfer decoding).
    pub(crate) body: Vec<u8>,
}

impl Response {
    /// The body as text (lossy).
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> anyhow::Result<Value> {
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "expected a JSON body, got: {}",
                self.text().chars().take(300).collect::<String>()
            )
        })
    }
}

/// One server-sent event's `data:` payload and when its last byte arrived.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    /// Time from sending the request to this event being complete.
    pub(crate) at: Duration,
    /// The payload (`[DONE]` or JSON).
    pub(crate) data: String,
}

/// A streamed response: raw bytes plus the events parsed as they arrived.
#[derive(Debug, Clone)]
pub(crate) struct Stream {
    /// HTTP status code.
    pub(crate) status: u16,
    /// The body exactly as received.
    pub(crate) raw: Vec<u8>,
    /// `data:` events in arrival order.
    pub(crate) events: Vec<Event>,
}

impl Stream {
    /// The JSON events (everything but `[DONE]`); fails on a payload that is not JSON.
    pub(crate) fn json_events(&self) -> anyhow::Result<Vec<Value>> {
        self.events
            .iter()
            .filter(|e| e.data != "[DONE]")
            .map(|e| serde_json::from_str(&e.data).with_context(|| format!("event `{}`", e.data)))
            .collect()
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into()
}

/// `GET url`.
pub(crate) fn get(url: &str) -> anyhow::Result<Response> {
    let resp = agent()
        .get(url)
        .call()
        .with_context(|| format!("GET {url}"))?;
    read_whole(resp).with_context(|| format!("reading GET {url}"))
}

/// `POST url` with a JSON body.
pub(crate) fn post_json(url: &str, body: &Value) -> anyhow::Result<Response> {
    let resp = agent()
        .post(url)
        .header("content-type", "application/json")
        .send(body.to_string())
        .with_context(|| format!("POST {url}"))?;
    read_whole(resp).with_context(|| format!("reading POST {url}"))
}

fn read_whole(resp: http_response::Response) -> anyhow::Result<Response> {
    let status = resp.status().as_u16();
    let mut body = Vec::new();
    resp.into_body().into_reader().read_to_end(&mut body)?;
    Ok(Response { status, body })
}

/// `POST url` with a JSON body, reading the reply as server-sent events as they arrive.
pub(crate) fn post_stream(url: &str, body: &Value) -> anyhow::Result<Stream> {
    let sent = Instant::now();
    let resp = agent()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .send(body.to_string())
        .with_context(|| format!("POST {url}"))?;
    let status = resp.status().as_u16();
    let mut reader = resp.into_body().into_reader();
    let mut raw = Vec::new();
    let mut events = Vec::new();
    let mut parsed_up_to = 0;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = reader
            .read(&mut buf)
            .with_context(|| format!("reading the stream of {url}"))?;
        if n == 0 {
            break;
        }
        let at = sent.elapsed();
        raw.extend_from_slice(&buf[..n]);
        parsed_up_to += take_events(&raw[parsed_up_to..], at, &mut events);
    }
    Ok(Stream {
        status,
        raw,
        events,
    })
}

/// Appends the complete events at the start of `pending`; returns the bytes consumed.
fn take_events(pending: &[u8], at: Duration, events: &mut Vec<Event>) -> usize {
    let mut consumed = 0;
    while let Some(end) = find(&pending[consumed..], b"\n\n") {
        let block = String::from_utf8_lossy(&pending[consumed..consumed + end]);
        let data: Vec<&str> = block
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if !data.is_empty() {
            events.push(Event {
                at,
                data: data.join("\n"),
            });
        }
        consumed += end + 2;
    }
    consumed
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// ureq's response type, named once.
mod http_response {
    pub(crate) type Response = ureq::http::Response<ureq::Body>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_on_blank_lines_and_keep_partial_tails() {
        let mut events = Vec::new();
        let t = Duration::from_millis(5);
        let input = b"data: {\"a\":1}\n\ndata: [DONE]\n\ndata: {\"b\"";
        let used = take_events(input, t, &mut events);
        assert_eq!(used, input.len() - b"data: {\"b\"".len());
        let data: Vec<_> = events.iter().map(|e| e.data.as_str()).collect();
        assert_eq!(data, ["{\"a\":1}", "[DONE]"]);
    }

    #[test]
    fn comments_and_event_names_are_not_data() {
        let mut events = Vec::new();
        take_events(
            b": ping\n\nevent: x\ndata:y\n\n",
            Duration::ZERO,
            &mut events,
        );
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "y");
    }
}
