//! A streaming response: events with arrival instants, and request timings.

use std::pin::Pin;
use std::time::{Duration, Instant};

use futures_util::Stream;
use http_body_util::BodyExt;
use hyper::body::{Body as _, Incoming};

use crate::ClientError;
use crate::event::{StreamDecoder, StreamEvent, Usage};

/// Instants of one request's milestones (monotonic clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestTimings {
    /// When the connection began writing the request to the kernel (see
    /// the crate docs); just before it was handed to the connection pool
    /// when the connection could not say.
    pub sent_at: Instant,
    /// When the response head had arrived.
    pub headers_at: Instant,
    /// When the first body bytes arrived.
    pub first_byte_at: Option<Instant>,
    /// When the stream's last bytes that mattered arrived: those of
    /// `data: [DONE]`, else the last event of a body that ended after a
    /// finish reason. Never the socket's close, which a server may delay.
    pub done_at: Option<Instant>,
}

impl RequestTimings {
    pub(crate) fn new(sent_at: Instant, headers_at: Instant) -> Self {
        RequestTimings {
            sent_at,
            headers_at,
            first_byte_at: None,
            done_at: None,
        }
    }
}

/// After `[DONE]`, how long a background task keeps reading so the
/// connection can be reused (the stream itself is over at once).
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// How much of a body without an event-stream Content-Type is read to see
/// whether it is an event stream anyway.
const SNIFF_LIMIT: usize = 4096;

/// The events of one streaming response, read on demand.
///
/// Call [`next`](Self::next) until it returns `Ok(None)` (the server sent
/// `data: [DONE]`) or an error. Dropping it early closes the connection, which
/// makes vLLM abort the request. `next` is cancel-safe: when a `select!`
/// drops it mid-wait, no event is lost.
#[derive(Debug)]
pub struct ResponseStream {
    /// `None` once the stream is over and the rest of the body was handed
    /// to a background task to drain.
    body: Option<Incoming>,
    decoder: StreamDecoder,
    url: String,
    idle: Option<Duration>,
    /// One timer for the whole stream, re-armed only when it fires: a timer
    /// per read would cost more than the read.
    idle_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// When the last body frame arrived.
    last_frame_at: Instant,
    timings: RequestTimings,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    body_ended: bool,
    finished: bool,
    last_event_at: Option<Instant>,
    sniffed_content_type: Option<String>,
    /// The last event decoded, lent out by [`Self::next_buffered`]: one
    /// event reused for the whole stream.
    current: StreamEvent,
}

/// Everything a finished stream delivered, from [`ResponseStream::collect`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CollectedResponse {
    /// Every event in arrival order.
    pub events: Vec<StreamEvent>,
    /// All answer text joined.
    pub content: String,
    /// All reasoning text joined.
    pub reasoning_content: String,
    /// The last usage the server sent.
    pub usage: Option<Usage>,
    /// The last finish reason the server sent.
    pub finish_reason: Option<String>,
    /// Request milestones.
    pub timings: RequestTimings,
}

impl ResponseStream {
    pub(crate) fn new(
        body: Incoming,
        url: String,
        idle: Option<Duration>,
        max_event_bytes: usize,
        timings: RequestTimings,
    ) -> Self {
        ResponseStream {
            body: Some(body),
            decoder: StreamDecoder::with_max_event_bytes(max_event_bytes),
            url,
            idle,
            idle_timer: None,
            last_frame_at: timings.headers_at,
            timings,
            usage: None,
            finish_reason: None,
            body_ended: false,
            finished: false,
            last_event_at: None,
            sniffed_content_type: None,
            current: crate::event::empty_event(timings.headers_at),
        }
    }

    /// For a response whose Content-Type is not `text/event-stream`: reads
    /// until the body's first non-blank bytes show whether it is an event
    /// stream anyway (`data:`, `event:`, `id:`, `retry:` or a `:` comment).
    /// `Ok(None)` when it is (the bytes stay queued for [`Self::next`]),
    /// `Ok(Some(start))` with the body's start when it is not.
    pub(crate) async fn sniff(
        &mut self,
        content_type: &str,
    ) -> Result<Option<Vec<u8>>, ClientError> {
        let mut start = Vec::new();
        loop {
            match looks_like_sse(&start) {
                Some(true) => {
                    self.sniffed_content_type = Some(content_type.to_owned());
                    return Ok(None);
                }
                Some(false) => return Ok(Some(start)),
                None if self.body_ended || start.len() >= SNIFF_LIMIT => return Ok(Some(start)),
                None => {}
            }
            if let Some(data) = self.read_frame().await? {
                start.extend_from_slice(&data[..data.len().min(SNIFF_LIMIT)]);
                self.feed(data);
            }
        }
    }

    /// The Content-Type the server sent (empty when none) when it was not
    /// `text/event-stream` but the body was an event stream anyway.
    pub fn unexpected_content_type(&self) -> Option<&str> {
        self.sniffed_content_type.as_deref()
    }

    /// The next event; `Ok(None)` once the stream is complete.
    ///
    /// After an error the stream is finished and returns `Ok(None)`.
    pub async fn next(&mut self) -> Result<Option<StreamEvent>, ClientError> {
        loop {
            if let Some(ready) = self.poll_buffered() {
                let at = self.current.received_at;
                return ready.map(|more| {
                    more.then(|| {
                        std::mem::replace(&mut self.current, crate::event::empty_event(at))
                    })
                });
            }
            self.read().await.inspect_err(|_| self.finished = true)?;
        }
    }

    /// What [`next`](Self::next) would return without waiting for the
    /// network, lent rather than moved: an event decoded from bytes already
    /// received, or the end of the stream. `None` when `next` would have to
    /// wait; then [`Self::read_more`] waits for the next bytes.
    ///
    /// A reader that also waits on something else (a stop signal) takes
    /// events from here first and `select!`s only when this is `None`, so
    /// the other future is polled once per read rather than once per event.
    pub fn next_buffered(&mut self) -> Option<Result<Option<&StreamEvent>, ClientError>> {
        match self.poll_buffered()? {
            Ok(true) => Some(Ok(Some(&self.current))),
            Ok(false) => Some(Ok(None)),
            Err(e) => Some(Err(e)),
        }
    }

    /// Waits for the next body bytes (or the body's end, or an error);
    /// events they complete then come from [`Self::next_buffered`].
    pub async fn read_more(&mut self) -> Result<(), ClientError> {
        self.read().await.inspect_err(|_| self.finished = true)
    }

    /// `Some(Ok(true))`: an event is in `current`; `Some(Ok(false))`: the
    /// stream is complete; `None`: more bytes are needed.
    fn poll_buffered(&mut self) -> Option<Result<bool, ClientError>> {
        if self.finished {
            return Some(Ok(false));
        }
        if let Some(result) = self.decoder.next_event_into(&mut self.current) {
            return Some(self.observe(result));
        }
        if self.decoder.is_done() {
            self.finished = true;
            let at = self.decoder.done_at().unwrap_or_else(Instant::now);
            self.timings.done_at.get_or_insert(at);
            self.drain_in_background();
            return Some(Ok(false));
        }
        if self.body_ended {
            return Some(self.end_of_body());
        }
        None
    }

    /// Reads the whole stream.
    pub async fn collect(mut self) -> Result<CollectedResponse, ClientError> {
        let mut events = Vec::new();
        let (mut content, mut reasoning_content) = (String::new(), String::new());
        while let Some(event) = self.next().await? {
            content.push_str(&event.content);
            reasoning_content.push_str(&event.reasoning_content);
            events.push(event);
        }
        Ok(CollectedResponse {
            events,
            content,
            reasoning_content,
            usage: self.usage,
            finish_reason: self.finish_reason,
            timings: self.timings,
        })
    }

    /// The stream as a [`futures_util::Stream`] of events.
    pub fn into_stream(self) -> impl Stream<Item = Result<StreamEvent, ClientError>> + Send {
        futures_util::stream::unfold(self, |mut stream| async move {
            match stream.next().await {
                Ok(Some(event)) => Some((Ok(event), stream)),
                Ok(None) => None,
                Err(err) => Some((Err(err), stream)),
            }
        })
    }

    /// Request milestones so far.
    pub fn timings(&self) -> RequestTimings {
        self.timings
    }

    /// The last usage the server sent (the totals, once the stream is done).
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// The last finish reason the server sent.
    pub fn finish_reason(&self) -> Option<&str> {
        self.finish_reason.as_deref()
    }

    /// The URL this stream came from.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Notes what the event in `current` tells about the whole stream.
    fn observe(&mut self, result: Result<(), ClientError>) -> Result<bool, ClientError> {
        match result {
            Ok(()) => {
                let event = &self.current;
                self.last_event_at = Some(event.received_at);
                if let Some(usage) = event.usage {
                    self.usage = Some(usage);
                }
                if let Some(reason) = &event.finish_reason {
                    self.finish_reason = Some(reason.clone());
                }
                Ok(true)
            }
            Err(err) => {
                self.finished = true;
                Err(err)
            }
        }
    }

    /// Reads one body frame into the decoder, stamping its arrival.
    async fn read(&mut self) -> Result<(), ClientError> {
        if let Some(data) = self.read_frame().await? {
            self.feed(data);
        }
        Ok(())
    }

    /// The next body frame, or [`ClientError::TimeoutIdle`] when none arrives
    /// within the idle timeout.
    async fn next_frame(
        &mut self,
    ) -> Result<Option<Result<hyper::body::Frame<bytes::Bytes>, hyper::Error>>, ClientError> {
        let Some(body) = self.body.as_mut() else {
            return Ok(None);
        };
        let Some(after) = self.idle else {
            let frame = body.frame().await;
            self.last_frame_at = Instant::now();
            return Ok(frame);
        };
        let timer = self
            .idle_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(after)));
        loop {
            tokio::select! {
                biased;
                frame = body.frame() => {
                    self.last_frame_at = Instant::now();
                    return Ok(frame);
                }
                () = timer.as_mut() => {
                    let due = tokio::time::Instant::from_std(self.last_frame_at + after);
                    if tokio::time::Instant::now() >= due {
                        return Err(ClientError::TimeoutIdle {
                            url: self.url.clone(),
                            after,
                        });
                    }
                    timer.as_mut().reset(due);
                }
            }
        }
    }

    /// Reads one body frame; `None` for a frame without data or at the end
    /// of the body (then `body_ended` is set).
    async fn read_frame(&mut self) -> Result<Option<bytes::Bytes>, ClientError> {
        if self.body.is_none() {
            self.body_ended = true;
            return Ok(None);
        }
        match self.next_frame().await? {
            None => {
                self.body_ended = true;
                Ok(None)
            }
            Some(Err(err)) => Err(ClientError::Disconnected {
                url: self.url.clone(),
                reason: "the connection failed in the middle of the stream".to_owned(),
                cause: Some(crate::error::chain_text(&err)),
            }),
            Some(Ok(frame)) => Ok(frame.into_data().ok().filter(|d| !d.is_empty())),
        }
    }

    fn feed(&mut self, data: bytes::Bytes) {
        let received_at = self.last_frame_at;
        self.timings.first_byte_at.get_or_insert(received_at);
        self.decoder.feed_bytes(data, received_at);
    }

    /// The body ended: a trailing event may remain; without `[DONE]` or a
    /// finish reason the response is incomplete.
    fn end_of_body(&mut self) -> Result<bool, ClientError> {
        if let Some(result) = self.decoder.finish_into(&mut self.current) {
            return self.observe(result);
        }
        self.finished = true;
        if self.decoder.is_done() || self.finish_reason.is_some() {
            let at = self
                .decoder
                .done_at()
                .or(self.last_event_at)
                .unwrap_or_else(Instant::now);
            self.timings.done_at.get_or_insert(at);
            return Ok(false);
        }
        Err(ClientError::Disconnected {
            url: self.url.clone(),
            reason: "the stream ended before `data: [DONE]` or a finish reason".to_owned(),
            cause: None,
        })
    }

    /// Hands what follows `[DONE]` (normally just the chunked terminator)
    /// to a background task that reads it so the pool can reuse the
    /// connection, giving up quietly after a short wait. The stream is over
    /// at once: a server that keeps the body open never delays the caller.
    fn drain_in_background(&mut self) {
        let Some(mut body) = self.body.take() else {
            return;
        };
        if body.is_end_stream() {
            return;
        }
        // Outside a runtime the body is dropped, which closes the connection.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let deadline = tokio::time::Instant::now() + DRAIN_LIMIT;
                while !body.is_end_stream() {
                    match tokio::time::timeout_at(deadline, body.frame()).await {
                        Ok(Some(Ok(_))) => {}
                        _ => break,
                    }
                }
            });
        }
    }
}

/// Whether `start`, the first bytes of a body, begin an event stream:
/// `Some` once enough non-blank bytes arrived to tell, `None` before.
fn looks_like_sse(start: &[u8]) -> Option<bool> {
    let body = start.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(start);
    let first = body.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = &body[first..];
    let mut undecided = false;
    for field in [&b"data:"[..], b"event:", b"id:", b"retry:", b":"] {
        if rest.starts_with(field) {
            return Some(true);
        }
        undecided |= field.starts_with(rest);
    }
    if undecided { None } else { Some(false) }
}

#[cfg(test)]
mod tests {
    use super::looks_like_sse;

    #[test]
    fn event_streams_are_told_from_other_bodies() {
        for sse in [
            &b"data: {}"[..],
            b"\r\n\r\ndata:{}",
            b": ping",
            b"event: x",
            b"\xEF\xBB\xBFdata: 1",
            b"retry: 5",
        ] {
            assert_eq!(
                looks_like_sse(sse),
                Some(true),
                "{:?}",
                String::from_utf8_lossy(sse)
            );
        }
        for other in [&b"<!doctype html>"[..], b"{\"error\":1}", b"OK", b"  [1]"] {
            assert_eq!(
                looks_like_sse(other),
                Some(false),
                "{:?}",
                String::from_utf8_lossy(other)
            );
        }
        for short in [&b""[..], b"   ", b"da", b"\n\nret"] {
            assert_eq!(
                looks_like_sse(short),
                None,
                "{:?}",
                String::from_utf8_lossy(short)
            );
        }
    }
}
