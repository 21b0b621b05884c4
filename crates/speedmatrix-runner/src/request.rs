//! One request on the wire, recorded as a metrics timeline: the bridge
//! between the client's events and the metrics crate's inputs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use speedmatrix_client::{
    ChatRequest, Client, CompletionRequest, Generation, Message, ResponseStream, StreamOptions,
};
use speedmatrix_metrics::{Chunk, Outcome, RequestTimeline, Timestamp, Usage};
use speedmatrix_units::Tokens;
use tokio_util::sync::CancellationToken;

use crate::config::Api;

/// What every request of a step sends besides its prompt.
#[derive(Debug, Clone)]
pub(crate) struct RequestShape {
    pub(crate) model: String,
    pub(crate) api: Api,
    pub(crate) max_tokens: Tokens,
    pub(crate) ignore_eos: bool,
    pub(crate) min_tokens: bool,
    /// The API key, so that a server echoing it in an error message does not
    /// carry it into the journal, the report or the logs.
    pub(crate) secret: Option<Arc<str>>,
    /// Engine-specific fields merged into every request body (`--extra-body`).
    pub(crate) extra: Arc<serde_json::Map<String, serde_json::Value>>,
}

/// A request that ended, as the metrics crate sees it, plus what the metrics
/// crate does not judge: the server's prompt count and the error text.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) timeline: RequestTimeline,
    pub(crate) prompt_tokens_reported: Option<Tokens>,
    pub(crate) error: Option<(String, String)>,
    /// How often the server turned the request away (429/503) before it was served.
    pub(crate) retries: u32,
}

/// Most retries of a request the server turns away with 429 or 503.
pub(crate) const MAX_RETRIES: u32 = 3;
/// Longest wait honoured from a `Retry-After` header.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);

/// How long to wait before sending a request again, or `None` when it
/// should not be retried: only 429 (rate limited) and 503 (overloaded) on the
/// initial request are transient by their definition; the server's
/// `Retry-After` is honoured (capped), else 1 s, 2 s, 4 s.
fn retry_delay(e: &speedmatrix_client::Error, retries_so_far: u32) -> Option<Duration> {
    if retries_so_far >= MAX_RETRIES || !matches!(e.status(), Some(429 | 503)) {
        return None;
    }
    if e.kind() != speedmatrix_client::ErrorKind::HttpStatus {
        return None;
    }
    let backoff = Duration::from_secs(1 << retries_so_far);
    Some(e.retry_after().unwrap_or(backoff).min(MAX_RETRY_WAIT))
}

impl RequestShape {
    /// The sampling and streaming fields every request of this shape carries.
    fn generation(&self) -> Generation {
        let mut g = Generation::default();
        g.max_tokens = Some(self.max_tokens);
        g.ignore_eos = Some(self.ignore_eos);
        g.min_tokens = self.min_tokens.then_some(self.max_tokens);
        g.stream_options = Some(StreamOptions {
            include_usage: true,
            continuous_usage_stats: true,
        });
        g.extra = (*self.extra).clone();
        g
    }

    async fn send(
        &self,
        client: &Client,
        prompt: &str,
    ) -> Result<ResponseStream, speedmatrix_client::Error> {
        match self.api {
            Api::Completions => {
                let mut req = CompletionRequest::new(self.model.clone(), prompt.to_owned());
                req.generation = self.generation();
                client.stream_completion(&req).await
            }
            Api::Chat => {
                let mut req = ChatRequest::new(self.model.clone(), vec![Message::user(prompt)]);
                req.generation = self.generation();
                client.stream_chat(&req).await
            }
        }
    }
}

/// Sends one request and records it until it ends or `stop` fires.
/// `first_tokens` is incremented once when the first text chunk arrives.
pub(crate) async fn record_one(
    client: &Client,
    shape: &RequestShape,
    prompt: &str,
    epoch: Instant,
    stop: &CancellationToken,
    first_tokens: Option<&Arc<AtomicUsize>>,
) -> Recorded {
    let at = |i: Instant| Timestamp::from_instant(epoch, i);
    let mut retries = 0;
    let mut stream = loop {
        let sent = Instant::now();
        let cancelled = |retries| Recorded {
            timeline: RequestTimeline::new(at(sent), at(Instant::now()), Outcome::Cancelled),
            prompt_tokens_reported: None,
            error: None,
            retries,
        };
        let result = tokio::select! {
            r = shape.send(client, prompt) => r,
            () = stop.cancelled() => return cancelled(retries),
        };
        match result {
            Ok(s) => break s,
            Err(e) => match retry_delay(&e, retries) {
                Some(wait) => {
                    tracing::debug!(status = ?e.status(), ?wait, "the server turned a request away; retrying");
                    retries += 1;
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = stop.cancelled() => return cancelled(retries),
                    }
                }
                None => {
                    let mut r = failed(at(sent), at(Instant::now()), &e, shape.secret.as_deref());
                    r.retries = retries;
                    if let (Some((_, message)), true) = (&mut r.error, retries > 0) {
                        message.push_str(&format!(" (gave up after {retries} retries)"));
                    }
                    return r;
                }
            },
        }
    };
    let timings = stream.timings();
    let mut timeline =
        RequestTimeline::new(at(timings.sent_at), at(timings.sent_at), Outcome::Cancelled);
    timeline.headers_at = Some(at(timings.headers_at));
    let mut prompt_tokens = None;
    let mut counted_first = false;
    let outcome = loop {
        let next = tokio::select! {
            n = stream.next() => n,
            () = stop.cancelled() => break Outcome::Cancelled,
        };
        match next {
            Ok(Some(ev)) => {
                let mut chunk = if !ev.content.is_empty() {
                    Chunk::content(at(ev.received_at))
                } else if !ev.reasoning_content.is_empty() {
                    Chunk::reasoning(at(ev.received_at))
                } else {
                    Chunk::empty(at(ev.received_at))
                };
                chunk.reasoning = !ev.reasoning_content.is_empty();
                if let Some(u) = ev.usage {
                    prompt_tokens = Some(u.prompt_tokens);
                    let usage = Usage::new(u.prompt_tokens, u.completion_tokens);
                    if ev.has_choices {
                        chunk = chunk.with_usage(usage);
                    } else {
                        timeline.final_usage = Some(usage);
                    }
                }
                if ev.has_choices {
                    if chunk.has_text() && !counted_first {
                        counted_first = true;
                        if let Some(n) = first_tokens {
                            n.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    timeline.chunks.push(chunk);
                }
            }
            Ok(None) => {
                break Outcome::Finished {
                    finish_reason: stream.finish_reason().map(str::to_owned),
                };
            }
            Err(e) => {
                let mut r = failed(
                    timeline.sent_at,
                    at(Instant::now()),
                    &e,
                    shape.secret.as_deref(),
                );
                r.timeline.chunks = std::mem::take(&mut timeline.chunks);
                r.timeline.headers_at = timeline.headers_at;
                r.timeline.first_byte_at = stream.timings().first_byte_at.map(at);
                r.prompt_tokens_reported = prompt_tokens;
                r.retries = retries;
                return r;
            }
        }
    };
    let timings = stream.timings();
    timeline.first_byte_at = timings.first_byte_at.map(at);
    timeline.ended_at = at(Instant::now());
    if timeline.final_usage.is_none()
        && let Some(u) = stream.usage()
    {
        prompt_tokens = prompt_tokens.or(Some(u.prompt_tokens));
        if matches!(outcome, Outcome::Finished { .. }) {
            timeline.final_usage = Some(Usage::new(u.prompt_tokens, u.completion_tokens));
        }
    }
    timeline.outcome = outcome;
    Recorded {
        timeline,
        prompt_tokens_reported: prompt_tokens,
        error: None,
        retries,
    }
}

fn failed(
    sent: Timestamp,
    ended: Timestamp,
    e: &speedmatrix_client::Error,
    secret: Option<&str>,
) -> Recorded {
    let kind = e.kind().as_str().to_owned();
    let message = redact(&e.to_string(), secret);
    Recorded {
        timeline: RequestTimeline::new(sent, ended, Outcome::Failed { kind: kind.clone() }),
        prompt_tokens_reported: None,
        error: Some((kind, message)),
        retries: 0,
    }
}

/// `text` with every occurrence of the secret replaced.
pub(crate) fn redact(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(s) if !s.is_empty() => text.replace(s, "[redacted]"),
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, retry_after: Option<u64>) -> speedmatrix_client::Error {
        speedmatrix_client::Error::HttpStatus {
            url: "http://127.0.0.1/v1/completions".into(),
            status,
            message: "busy".into(),
            retry_after: retry_after.map(Duration::from_secs),
        }
    }

    #[test]
    fn only_429_and_503_are_retried_a_bounded_number_of_times() {
        assert_eq!(
            retry_delay(&status(429, Some(5)), 0),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            retry_delay(&status(503, Some(3600)), 0),
            Some(MAX_RETRY_WAIT)
        );
        let backoff: Vec<_> = (0..3).map(|n| retry_delay(&status(503, None), n)).collect();
        assert_eq!(backoff, [1, 2, 4].map(|s| Some(Duration::from_secs(s))));
        assert_eq!(retry_delay(&status(429, Some(1)), MAX_RETRIES), None);
        for code in [400, 401, 404, 500, 502] {
            assert_eq!(retry_delay(&status(code, Some(1)), 0), None, "{code}");
        }
    }

    #[test]
    fn the_key_is_redacted_from_messages() {
        assert_eq!(
            redact("bad key sk-1 (sk-1)", Some("sk-1")),
            "bad key [redacted] ([redacted])"
        );
        assert_eq!(redact("no key here", None), "no key here");
        assert_eq!(redact("empty", Some("")), "empty");
    }
}
