//! One request on the wire, recorded as a metrics timeline: the bridge
//! between the client's events and the metrics crate's inputs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use speedmatrix_client::{
    ChatRequest, Client, CompletionRequest, Generation, Message, ResponseStream, StreamOptions,
};
use speedmatrix_metrics::{Chunks, Outcome, RequestTimeline, Timestamp};
use speedmatrix_units::Tokens;

mod limits;
mod recorder;

use self::limits::impossible_failure;
pub(crate) use self::recorder::Recorder;
use crate::config::Api;
use crate::outcome::{Failure, FailureKind};
use crate::stop::Stop;

/// What every request of a step sends besides its prompt.
#[derive(Debug, Clone)]
pub(crate) struct RequestShape {
    pub(crate) model: String,
    pub(crate) api: Api,
    pub(crate) max_tokens: Tokens,
    pub(crate) ignore_eos: bool,
    pub(crate) min_tokens: bool,
    /// Whether requests carry `stream_options` (a server that refuses the field gets none,
    /// and reports usage at the end only, if at all).
    pub(crate) stream_options: bool,
    /// The API key, so that a server echoing it in an error message does not
    /// carry it into the journal, the report or the logs.
    pub(crate) secret: Option<Arc<str>>,
    /// Fields merged into every request body: the engine's own (that make it
    /// count tokens on every chunk), then the user's `--extra-body`, which win.
    pub(crate) extra: Arc<serde_json::Map<String, serde_json::Value>>,
    /// The engine sends one event per generated token (TGI), so counting
    /// events counts tokens.
    pub(crate) one_event_per_token: bool,
    /// How `<think>` tags in the answer text are read.
    pub(crate) reasoning_parser: speedmatrix_units::ReasoningParser,
    /// Keep every request's streamed text even when the server counts its
    /// tokens (a conversation's next turn quotes the answer).
    pub(crate) keep_text: bool,
    /// How long the server may take to start answering before any prefill
    /// is counted: the run's headers timeout. Part of every request's
    /// deadline ([`RequestShape::deadline`]).
    pub(crate) first_token_allowance: Duration,
    /// Requests of this shape sent at the same time as this one, whose
    /// prefills may all come before its own (at least 1).
    pub(crate) sent_together: u32,
}

/// A request that ended, as the metrics crate sees it, plus what the metrics
/// crate does not judge: the server's prompt count and the error text.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) timeline: RequestTimeline,
    pub(crate) prompt_tokens_reported: Option<Tokens>,
    pub(crate) error: Option<Failure>,
    /// How often the server turned the request away (429/503) before it was served.
    pub(crate) retries: u32,
    /// The streamed text, kept when the server's own counts do not cover
    /// every chunk with text: what the tokenizer estimate counts.
    pub(crate) text: Option<OutputText>,
    /// The Content-Type the server sent when it was not `text/event-stream`
    /// but the body was an event stream anyway.
    pub(crate) unexpected_content_type: Option<String>,
}

impl AsRef<RequestTimeline> for Recorded {
    fn as_ref(&self) -> &RequestTimeline {
        &self.timeline
    }
}

/// A request's whole output text and where each chunk with text ends in it.
#[derive(Debug, Clone, Default)]
pub(crate) struct OutputText {
    pub(crate) text: String,
    /// `(index in the timeline's chunks, byte offset where its text ends)`.
    pub(crate) ends: Vec<(usize, usize)>,
}

impl OutputText {
    /// Bytes it holds on the heap: the text and the chunks' offsets into it.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.text.capacity() + self.ends.capacity() * std::mem::size_of::<(usize, usize)>()
    }

    /// Sets each chunk's `text_tokens` from `token_ends`, the byte offsets
    /// where the tokens of the whole text end: a token belongs to the chunk
    /// in which its last byte arrived.
    pub(crate) fn assign(&self, token_ends: &[usize], chunks: &mut Chunks) {
        let mut next = 0;
        for &(index, end) in &self.ends {
            let start = next;
            while next < token_ends.len() && token_ends[next] <= end {
                next += 1;
            }
            // In index order, so each lands at the end of the side table.
            chunks.set_text_tokens(index, Some(u32::try_from(next - start).unwrap_or(u32::MAX)));
        }
    }
}

/// What a request asks: one text (a completions prompt, or a chat request's one user
/// message) or chat messages sent as given (a dataset's `messages` records).
#[derive(Debug, Clone, Copy)]
pub(crate) enum PromptRef<'a> {
    Text(&'a str),
    Messages(&'a [Message]),
}

impl PromptRef<'_> {
    /// Bytes of text it carries: what the deadline and the count bounds are sized by.
    pub(crate) fn len(&self) -> usize {
        match self {
            PromptRef::Text(t) => t.len(),
            PromptRef::Messages(m) => m.iter().map(|m| m.content.len() + m.role.len()).sum(),
        }
    }
}

impl<'a> From<&'a str> for PromptRef<'a> {
    fn from(t: &'a str) -> Self {
        PromptRef::Text(t)
    }
}

impl<'a> From<&'a String> for PromptRef<'a> {
    fn from(t: &'a String) -> Self {
        PromptRef::Text(t)
    }
}

impl<'a> From<&'a Arc<str>> for PromptRef<'a> {
    fn from(t: &'a Arc<str>) -> Self {
        PromptRef::Text(t)
    }
}

/// Most retries of a request the server turns away with 429 or 503.
pub(crate) const MAX_RETRIES: u32 = 3;
/// Longest wait honoured from a `Retry-After` header.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);

/// How long to wait before sending a request again, or `None` when it
/// should not be retried: only 429 (rate limited) and 503 (overloaded) on the
/// initial request are transient by their definition; the server's
/// `Retry-After` is honoured (capped), else 1 s, 2 s, 4 s.
fn retry_delay(e: &speedmatrix_client::ClientError, retries_so_far: u32) -> Option<Duration> {
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
    /// The same requests with `max_tokens` 1 and no `ignore_eos`: cache
    /// warm-ups and prefill measurements.
    pub(crate) fn for_one_token(&self) -> RequestShape {
        RequestShape {
            max_tokens: Tokens::new(1),
            ignore_eos: false,
            min_tokens: false,
            ..self.clone()
        }
    }

    /// The same requests, `n` of them sent at once.
    pub(crate) fn together(&self, n: usize) -> RequestShape {
        RequestShape {
            sent_together: u32::try_from(n).unwrap_or(u32::MAX).max(1),
            ..self.clone()
        }
    }

    /// The `max_tokens` the server is sent: the run's, unless `--extra-body`
    /// sets its own (`max_tokens` or `max_completion_tokens`, the larger);
    /// `None` when it sets one that is not a count (the server's default).
    pub(crate) fn max_tokens_sent(&self) -> Option<Tokens> {
        let mut most = None;
        for key in ["max_tokens", "max_completion_tokens"] {
            match self.extra.get(key) {
                None => {}
                Some(v) => most = most.max(Some(Tokens::new(v.as_u64()?))),
            }
        }
        Some(most.unwrap_or(self.max_tokens))
    }

    /// The sampling and streaming fields every request of this shape carries.
    fn generation(&self) -> Generation {
        let mut g = Generation::default();
        g.max_tokens = Some(self.max_tokens);
        // Left out rather than sent false: a strict server refuses fields it does not know.
        g.ignore_eos = self.ignore_eos.then_some(true);
        g.min_tokens = self.min_tokens.then_some(self.max_tokens);
        g.stream_options = self.stream_options.then_some(StreamOptions {
            include_usage: true,
            continuous_usage_stats: true,
        });
        g.extra = (*self.extra).clone();
        g
    }

    async fn send(
        &self,
        client: &Client,
        prompt: PromptRef<'_>,
    ) -> Result<ResponseStream, speedmatrix_client::ClientError> {
        match (self.api, prompt) {
            (Api::Completions, PromptRef::Text(prompt)) => {
                let mut req = CompletionRequest::new(self.model.clone(), prompt.to_owned());
                req.generation = self.generation();
                client.stream_completion(&req).await
            }
            (Api::Chat, PromptRef::Text(prompt)) => {
                let mut req = ChatRequest::new(self.model.clone(), vec![Message::user(prompt)]);
                req.generation = self.generation();
                client.stream_chat(&req).await
            }
            // Options refuse messages with --api completions; were they ever sent there,
            // they go as chat, never flattened into a different prompt.
            (_, PromptRef::Messages(messages)) => {
                let mut req = ChatRequest::new(self.model.clone(), messages.to_vec());
                req.generation = self.generation();
                client.stream_chat(&req).await
            }
        }
    }
}

/// Sends one request and records it until it ends or `stop` fires.
/// `first_tokens` is incremented once when the first text chunk arrives.
pub(crate) async fn record_one<'s, 'p>(
    client: &Client,
    shape: &RequestShape,
    prompt: impl Into<PromptRef<'p>>,
    epoch: Instant,
    stop: impl Into<Stop<'s>>,
    first_tokens: Option<&Arc<AtomicUsize>>,
) -> Recorded {
    let stop = stop.into();
    let prompt = prompt.into();
    let at = |i: Instant| Timestamp::from_instant(epoch, i);
    let mut retries = 0;
    let mut stream = loop {
        let sent = Instant::now();
        let cancelled = |retries| Recorded {
            timeline: RequestTimeline::new(at(sent), at(Instant::now()), Outcome::Cancelled),
            prompt_tokens_reported: None,
            error: None,
            retries,
            text: None,
            unexpected_content_type: None,
        };
        let result = tokio::select! {
            r = shape.send(client, prompt) => r,
            () = stop.stopped() => return cancelled(retries),
        };
        match result {
            Ok(s) => break s,
            Err(e) => match retry_delay(&e, retries) {
                Some(wait) => {
                    tracing::debug!(status = ?e.status(), ?wait, "the server turned a request away; retrying");
                    retries += 1;
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = stop.stopped() => return cancelled(retries),
                    }
                }
                None => {
                    let mut r = failed(at(sent), at(Instant::now()), &e, shape.secret.as_deref());
                    r.retries = retries;
                    if let (Some(f), true) = (&mut r.error, retries > 0) {
                        f.message
                            .push_str(&format!(" (gave up after {retries} retries)"));
                    }
                    return r;
                }
            },
        }
    };
    let timings = stream.timings();
    let mut recorder = Recorder::new(
        at(timings.sent_at),
        at(timings.headers_at),
        shape.one_event_per_token,
    );
    recorder.always_keep_text = shape.keep_text;
    recorder.think = speedmatrix_client::ThinkSplitter::for_parser(shape.reasoning_parser);
    let deadline = shape
        .deadline(prompt.len())
        .and_then(|d| Some((timings.sent_at.checked_add(d.limit)?, d)));
    let mut cancelled = stop.stopped();
    let outcome = loop {
        // Events already received are taken without looking at the stop
        // signal: it is checked once per read, not once per event.
        let failure = match stream.next_buffered() {
            Some(Ok(Some(ev))) => {
                if recorder.event(ev, at(ev.received_at))
                    && let Some(n) = first_tokens
                {
                    n.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            Some(Ok(None)) => {
                break Outcome::Finished {
                    finish_reason: stream.finish_reason().map(str::to_owned),
                };
            }
            Some(Err(e)) => e,
            // The flag is one load; the stop future is polled (its waker
            // registered) only when the read must wait.
            None if stop.is_stopped() => break Outcome::Cancelled,
            // The deadline is looked at once per read: a server that keeps
            // sending passes it on a read, a silent one is the idle timeout's.
            None if deadline.is_some_and(|(due, _)| Instant::now() >= due) => {
                let now = Instant::now();
                let ran = now.saturating_duration_since(timings.sent_at);
                let failure =
                    match recorder.check_counts(&shape.count_bounds(prompt.len()), at(now)) {
                        Err(impossible) => Some(impossible_failure(&impossible)),
                        Ok(()) => deadline.map(|(_, limit)| limit.failure(ran)),
                    };
                let first_byte = stream.timings().first_byte_at.map(at);
                let mut r = recorder.into_failed(at(now), failure, first_byte);
                r.retries = retries;
                return r;
            }
            None => match tokio::select! {
                biased;
                r = stream.read_more() => r,
                () = &mut cancelled => break Outcome::Cancelled,
            } {
                Ok(()) => continue,
                Err(e) => e,
            },
        };
        let ended = at(Instant::now());
        let bounds = shape.count_bounds(prompt.len());
        if let Err(impossible) = recorder.check_counts(&bounds, ended) {
            let mut r = recorder.into_failed(
                ended,
                Some(impossible_failure(&impossible)),
                stream.timings().first_byte_at.map(at),
            );
            r.retries = retries;
            return r;
        }
        let mut r = failed(
            recorder.timeline.sent_at,
            ended,
            &failure,
            shape.secret.as_deref(),
        );
        r.timeline.chunks = std::mem::take(&mut recorder.timeline.chunks);
        r.timeline.headers_at = recorder.timeline.headers_at;
        r.timeline.first_byte_at = stream.timings().first_byte_at.map(at);
        r.prompt_tokens_reported = recorder.prompt_tokens;
        r.retries = retries;
        return r;
    };
    let timings = stream.timings();
    let finished = matches!(outcome, Outcome::Finished { .. });
    // A finished stream ends with its last event, not when the server gets
    // round to closing the socket.
    let ended_at = match timings.done_at.filter(|_| finished) {
        Some(done) => at(done),
        None => at(Instant::now()),
    };
    // Counts no server can have produced are not kept: the request fails.
    if let Err(impossible) = recorder.check_counts(&shape.count_bounds(prompt.len()), ended_at) {
        let mut r = recorder.into_failed(
            ended_at,
            Some(impossible_failure(&impossible)),
            timings.first_byte_at.map(at),
        );
        r.retries = retries;
        r.unexpected_content_type = stream.unexpected_content_type().map(str::to_owned);
        return r;
    }
    let (timeline, prompt_tokens_reported, text) =
        recorder.finish(outcome, ended_at, timings.first_byte_at.map(at));
    Recorded {
        timeline,
        prompt_tokens_reported,
        error: None,
        retries,
        text,
        unexpected_content_type: stream.unexpected_content_type().map(str::to_owned),
    }
}

fn failed(
    sent: Timestamp,
    ended: Timestamp,
    e: &speedmatrix_client::ClientError,
    secret: Option<&str>,
) -> Recorded {
    let kind = e.kind();
    let message = redact(&e.to_string(), secret);
    Recorded {
        timeline: RequestTimeline::new(
            sent,
            ended,
            Outcome::Failed {
                kind: kind.as_str().to_owned(),
            },
        ),
        prompt_tokens_reported: None,
        error: Some(Failure {
            kind: FailureKind::Request(kind),
            message,
        }),
        retries: 0,
        text: None,
        unexpected_content_type: None,
    }
}

/// `text` through the one cleaning path (`speedmatrix_client::redact`), `secret` among the
/// secrets it removes (an `ApiKey` registers itself; this covers a key given as text).
pub(crate) fn redact(text: &str, secret: Option<&str>) -> String {
    if let Some(s) = secret {
        speedmatrix_client::redact::register(s);
    }
    speedmatrix_client::redact::clean(text).into_owned()
}

#[cfg(test)]
mod tests;
