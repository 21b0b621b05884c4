//! One request on the wire, recorded as a metrics timeline: the bridge
//! between the client's events and the metrics crate's inputs.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use speedmatrix_client::{
    ChatRequest, Client, CompletionRequest, Generation, Message, ResponseStream, StreamOptions,
};
use speedmatrix_metrics::{
    Chunk, Chunks, CountBounds, ImpossibleCount, Outcome, ReportedCounts, RequestTimeline,
    Streamed, Timestamp, Usage, check_counts,
};
use speedmatrix_units::{Tokens, group_thousands};

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
    /// The API key, so that a server echoing it in an error message does not
    /// carry it into the journal, the report or the logs.
    pub(crate) secret: Option<Arc<str>>,
    /// Fields merged into every request body: the engine's own (that make it
    /// count tokens on every chunk), then the user's `--extra-body`, which win.
    pub(crate) extra: Arc<serde_json::Map<String, serde_json::Value>>,
    /// The engine sends one event per generated token (TGI), so counting
    /// events counts tokens.
    pub(crate) one_event_per_token: bool,
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

/// The slowest prefill a request's deadline allows for, counting every byte of
/// the prompt as a token (an upper bound on its tokens).
pub(crate) const DEADLINE_PREFILL_BYTES_PER_S: u64 = 1_000;

/// The slowest output a request's deadline allows for.
pub(crate) const DEADLINE_DECODE_TOKENS_PER_S: u64 = 1;

/// How long one request may run, from its send to its last byte, and what
/// that is made of (see [`RequestShape::deadline`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    pub(crate) limit: Duration,
    first_token: Duration,
    prompt_bytes: u64,
    together: u32,
    max_tokens: Tokens,
}

impl Deadline {
    /// The failure of a request that ran `ran` past it.
    fn failure(&self, ran: Duration) -> Failure {
        Failure {
            kind: FailureKind::Deadline,
            message: format!(
                "the request was still running after {:.1} s, past its deadline of {:.1} s \
                 ({:.1} s to start answering, {} prompt bytes × {} sent together at {} a second, \
                 max_tokens {} at {DEADLINE_DECODE_TOKENS_PER_S} tok/s): the server ignores \
                 max_tokens or streams slower than any engine",
                ran.as_secs_f64(),
                self.limit.as_secs_f64(),
                self.first_token.as_secs_f64(),
                group_thousands(self.prompt_bytes),
                self.together,
                group_thousands(DEADLINE_PREFILL_BYTES_PER_S),
                group_thousands(self.max_tokens.get()),
            ),
        }
    }
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

    /// The longest a request of this shape may run (docs/metrics.md, "Request
    /// deadlines"): the time to start answering, its prompt and those sent with
    /// it prefilled at [`DEADLINE_PREFILL_BYTES_PER_S`], and `max_tokens` at
    /// [`DEADLINE_DECODE_TOKENS_PER_S`]. `None` when the server is sent no
    /// `max_tokens` the client can read.
    pub(crate) fn deadline(&self, prompt_bytes: usize) -> Option<Deadline> {
        let max_tokens = self.max_tokens_sent()?;
        let prompt_bytes = prompt_bytes as u64;
        let prefill_s = prompt_bytes.saturating_mul(u64::from(self.sent_together.max(1)))
            / DEADLINE_PREFILL_BYTES_PER_S;
        let decode_s = max_tokens.get() / DEADLINE_DECODE_TOKENS_PER_S;
        let limit = self
            .first_token_allowance
            .saturating_add(Duration::from_secs(prefill_s.saturating_add(decode_s)));
        Some(Deadline {
            limit,
            first_token: self.first_token_allowance,
            prompt_bytes,
            together: self.sent_together.max(1),
            max_tokens,
        })
    }

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
    ) -> Result<ResponseStream, speedmatrix_client::ClientError> {
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
pub(crate) async fn record_one<'s>(
    client: &Client,
    shape: &RequestShape,
    prompt: &str,
    epoch: Instant,
    stop: impl Into<Stop<'s>>,
    first_tokens: Option<&Arc<AtomicUsize>>,
) -> Recorded {
    let stop = stop.into();
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
                let failure = match recorder.check_counts(&shape.count_bounds(prompt), at(now)) {
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
        let bounds = shape.count_bounds(prompt);
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
    if let Err(impossible) = recorder.check_counts(&shape.count_bounds(prompt), ended_at) {
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

/// Turns one stream's events into its metrics timeline: sans-IO, so what
/// counts as a token can be tested on bytes.
#[derive(Debug)]
pub(crate) struct Recorder {
    timeline: RequestTimeline,
    prompt_tokens: Option<Tokens>,
    one_event_per_token: bool,
    events_with_choices: u64,
    text: OutputText,
    /// The text is kept until the first chunk with text shows the server's
    /// own count; a later chunk without one then means the text is lost.
    keep_text: bool,
    /// Keep the text whatever the server counts.
    pub(crate) always_keep_text: bool,
    text_lost: bool,
    /// Index of the last chunk with text, and the last usage with its index.
    last_text: Option<usize>,
    last_usage: Option<(usize, Usage)>,
    /// Bytes of text streamed, and the largest counts the server reported:
    /// what [`check_counts`] judges.
    text_bytes: u64,
    most: ReportedCounts,
}

impl Recorder {
    pub(crate) fn new(
        sent_at: Timestamp,
        headers_at: Timestamp,
        one_event_per_token: bool,
    ) -> Self {
        let mut timeline = RequestTimeline::new(sent_at, sent_at, Outcome::Cancelled);
        timeline.headers_at = Some(headers_at);
        Recorder {
            timeline,
            prompt_tokens: None,
            one_event_per_token,
            events_with_choices: 0,
            text: OutputText::default(),
            keep_text: true,
            always_keep_text: false,
            text_lost: false,
            last_text: None,
            last_usage: None,
            text_bytes: 0,
            most: ReportedCounts::default(),
        }
    }

    /// Checks the counts the server reported so far against the request's
    /// bounds, its text and its time up to `ended`.
    pub(crate) fn check_counts(
        &self,
        bounds: &CountBounds,
        ended: Timestamp,
    ) -> Result<(), ImpossibleCount> {
        let streamed = Streamed {
            text_bytes: self.text_bytes,
            events: self.events_with_choices,
            elapsed: ended.saturating_since(self.timeline.sent_at),
        };
        check_counts(bounds, &streamed, &self.most)
    }

    /// A failed request with the times recorded so far and none of the
    /// server's counts: they are not to be trusted, so its chunks go too.
    fn into_failed(
        self,
        ended: Timestamp,
        failure: Option<Failure>,
        first_byte_at: Option<Timestamp>,
    ) -> Recorded {
        let kind = failure.as_ref().map_or("failed", |f| f.kind.as_str());
        let keep_chunks = failure
            .as_ref()
            .is_some_and(|f| f.kind != FailureKind::ImpossibleCount);
        let last_chunk = self.timeline.chunks.last().map(|c| c.at);
        let mut timeline = RequestTimeline::new(
            self.timeline.sent_at,
            last_chunk.map_or(ended, |c| c.max(ended)),
            Outcome::Failed {
                kind: kind.to_owned(),
            },
        );
        timeline.headers_at = self.timeline.headers_at;
        timeline.first_byte_at = first_byte_at;
        if keep_chunks {
            timeline.chunks = self.timeline.chunks;
            timeline.chunks.shrink_to_fit();
        }
        Recorded {
            timeline,
            prompt_tokens_reported: if keep_chunks {
                self.prompt_tokens
            } else {
                None
            },
            error: failure,
            retries: 0,
            text: None,
            unexpected_content_type: None,
        }
    }

    /// Records one event that arrived at `at`; true when it is the first
    /// with text.
    pub(crate) fn event(&mut self, ev: &speedmatrix_client::StreamEvent, at: Timestamp) -> bool {
        if ev.has_choices {
            self.events_with_choices += 1;
        }
        let Some(chunk) = self.chunk_of(ev, at) else {
            return false;
        };
        let index = self.timeline.chunks.len();
        if let Some(u) = chunk.usage {
            self.prompt_tokens = Some(u.prompt_tokens);
            self.last_usage = Some((index, u));
            let most = &mut self.most;
            most.usage_completion = most.usage_completion.max(Some(u.completion_tokens.get()));
            most.prompt = most.prompt.max(Some(u.prompt_tokens.get()));
        }
        if let Some(n) = ev.engine_tokens {
            self.most.engine_completion = self.most.engine_completion.max(Some(n.get()));
        }
        let first = chunk.has_text() && self.last_text.is_none();
        if chunk.has_text() {
            self.text_bytes += (ev.content.len() + ev.reasoning_content.len()) as u64;
            self.last_text = Some(index);
            let counted = chunk.usage.is_some_and(|u| u.completion_tokens.get() > 0)
                || chunk.engine_count.is_some_and(|n| n.get() > 0);
            if first && counted && !self.always_keep_text {
                // The server counts on its chunks: no estimate needs the text.
                self.keep_text = false;
            } else if !self.keep_text && !counted {
                self.text_lost = true;
            }
            if self.keep_text {
                self.text.text.push_str(&ev.reasoning_content);
                self.text.text.push_str(&ev.content);
                self.text.ends.push((index, self.text.text.len()));
            }
        }
        self.timeline.chunks.push(chunk);
        first
    }

    /// The metrics chunk of one event: its text flags and the server's
    /// counts; `None` for an event with neither choices nor counts.
    fn chunk_of(&self, ev: &speedmatrix_client::StreamEvent, at: Timestamp) -> Option<Chunk> {
        let engine_count = match ev.engine_tokens {
            Some(n) => Some(n),
            None if self.one_event_per_token && ev.has_choices => {
                Some(Tokens::new(self.events_with_choices))
            }
            None => None,
        };
        if !ev.has_choices && ev.usage.is_none() && engine_count.is_none() {
            return None;
        }
        let mut chunk = Chunk::empty(at);
        chunk.content = !ev.content.is_empty();
        chunk.reasoning = !ev.reasoning_content.is_empty();
        chunk.usage = ev
            .usage
            .map(|u| Usage::new(u.prompt_tokens, u.completion_tokens));
        chunk.engine_count = engine_count;
        Some(chunk)
    }

    /// The timeline of a stream that ended with `outcome` at `ended_at`, the
    /// server's prompt count, and the text an estimate needs (if it does).
    ///
    /// Only a finished stream has a final usage, and only when its last usage
    /// came after its last text: a usage-only event in the middle of a
    /// stream is a report of the tokens so far, not the total.
    pub(crate) fn finish(
        mut self,
        outcome: Outcome,
        ended_at: Timestamp,
        first_byte_at: Option<Timestamp>,
    ) -> (RequestTimeline, Option<Tokens>, Option<OutputText>) {
        let finished = matches!(outcome, Outcome::Finished { .. });
        if let Some((index, usage)) = self.last_usage
            && finished
            && self.last_text.is_none_or(|t| index >= t)
        {
            self.timeline.final_usage = Some(usage);
        }
        // A timeline's chunks never come after its end.
        let last_chunk = self.timeline.chunks.last().map(|c| c.at);
        self.timeline.ended_at = last_chunk.map_or(ended_at, |c| c.max(ended_at));
        self.timeline.first_byte_at = first_byte_at;
        self.timeline.outcome = outcome;
        // A cell holds every request until it is summarized.
        self.timeline.chunks.shrink_to_fit();
        let text =
            (self.keep_text && !self.text_lost && self.last_text.is_some()).then_some(self.text);
        (self.timeline, self.prompt_tokens, text)
    }
}

impl RequestShape {
    /// What bounds the counts a request of this shape with `prompt` can have.
    fn count_bounds(&self, prompt: &str) -> CountBounds {
        CountBounds {
            max_tokens: self.max_tokens_sent(),
            prompt_bytes: prompt.len() as u64,
        }
    }
}

/// The failure of a request whose server reported an impossible count.
fn impossible_failure(e: &ImpossibleCount) -> Failure {
    Failure {
        kind: FailureKind::ImpossibleCount,
        message: e.to_string(),
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

/// `text` with every occurrence of the secret replaced.
pub(crate) fn redact(text: &str, secret: Option<&str>) -> String {
    match secret {
        Some(s) if !s.is_empty() => text.replace(s, "[redacted]"),
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;
