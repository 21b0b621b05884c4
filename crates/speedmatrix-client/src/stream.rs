//! A streaming response: events with arrival instants, and request timings.

use std::time::{Duration, Instant};

use futures_util::Stream;
use http_body_util::BodyExt;
use hyper::body::{Body as _, Incoming};

use crate::Error;
use crate::event::{StreamDecoder, StreamEvent, Usage};

/// Instants of one request's milestones (monotonic clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RequestTimings {
    /// Just before the request was handed to the connection pool.
    pub sent_at: Instant,
    /// When the response head had arrived.
    pub headers_at: Instant,
    /// When the first body bytes arrived.
    pub first_byte_at: Option<Instant>,
    /// When `data: [DONE]` (or the clean end of the body) arrived.
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

/// After `[DONE]`, how long to keep reading so the connection can be reused.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// The events of one streaming response, read on demand.
///
/// Call [`next`](Self::next) until it returns `Ok(None)` (the server sent
/// `data: [DONE]`) or an error. Dropping it early closes the connection, which
/// makes vLLM abort the request. `next` is cancel-safe: when a `select!`
/// drops it mid-wait, no event is lost.
#[derive(Debug)]
pub struct ResponseStream {
    body: Incoming,
    decoder: StreamDecoder,
    url: String,
    idle: Option<Duration>,
    timings: RequestTimings,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    body_ended: bool,
    finished: bool,
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
            body,
            decoder: StreamDecoder::with_max_event_bytes(max_event_bytes),
            url,
            idle,
            timings,
            usage: None,
            finish_reason: None,
            body_ended: false,
            finished: false,
        }
    }

    /// The next event; `Ok(None)` once the stream is complete.
    ///
    /// After an error the stream is finished and returns `Ok(None)`.
    pub async fn next(&mut self) -> Result<Option<StreamEvent>, Error> {
        loop {
            if self.finished {
                return Ok(None);
            }
            if let Some(result) = self.decoder.next_event() {
                return self.observe(result);
            }
            if self.decoder.is_done() {
                self.finished = true;
                self.timings.done_at.get_or_insert_with(Instant::now);
                self.drain().await;
                return Ok(None);
            }
            if self.body_ended {
                return self.end_of_body();
            }
            self.read().await.inspect_err(|_| self.finished = true)?;
        }
    }

    /// Reads the whole stream.
    pub async fn collect(mut self) -> Result<CollectedResponse, Error> {
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
    pub fn into_stream(self) -> impl Stream<Item = Result<StreamEvent, Error>> + Send {
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

    fn observe(
        &mut self,
        result: Result<StreamEvent, Error>,
    ) -> Result<Option<StreamEvent>, Error> {
        match result {
            Ok(event) => {
                if let Some(usage) = event.usage {
                    self.usage = Some(usage);
                }
                if let Some(reason) = &event.finish_reason {
                    self.finish_reason = Some(reason.clone());
                }
                Ok(Some(event))
            }
            Err(err) => {
                self.finished = true;
                Err(err)
            }
        }
    }

    /// Reads one body frame into the decoder, stamping its arrival.
    async fn read(&mut self) -> Result<(), Error> {
        let frame = match self.idle {
            Some(after) => tokio::time::timeout(after, self.body.frame())
                .await
                .map_err(|_| Error::TimeoutIdle {
                    url: self.url.clone(),
                    after,
                })?,
            None => self.body.frame().await,
        };
        let received_at = Instant::now();
        match frame {
            None => self.body_ended = true,
            Some(Err(err)) => {
                return Err(Error::Disconnected {
                    url: self.url.clone(),
                    reason: "the connection failed in the middle of the stream".to_owned(),
                    cause: Some(crate::error::chain_text(&err)),
                });
            }
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data()
                    && !data.is_empty()
                {
                    self.timings.first_byte_at.get_or_insert(received_at);
                    self.decoder.feed_bytes(data, received_at);
                }
            }
        }
        Ok(())
    }

    /// The body ended: a trailing event may remain; without `[DONE]` or a
    /// finish reason the response is incomplete.
    fn end_of_body(&mut self) -> Result<Option<StreamEvent>, Error> {
        if let Some(result) = self.decoder.finish() {
            return self.observe(result);
        }
        self.finished = true;
        if self.decoder.is_done() || self.finish_reason.is_some() {
            self.timings.done_at.get_or_insert_with(Instant::now);
            return Ok(None);
        }
        Err(Error::Disconnected {
            url: self.url.clone(),
            reason: "the stream ended before `data: [DONE]` or a finish reason".to_owned(),
            cause: None,
        })
    }

    /// Reads what follows `[DONE]` (normally just the chunked terminator) so
    /// the pool can reuse the connection; gives up quietly after a short wait.
    async fn drain(&mut self) {
        let deadline = tokio::time::Instant::now() + DRAIN_LIMIT;
        while !self.body.is_end_stream() {
            match tokio::time::timeout_at(deadline, self.body.frame()).await {
                Ok(Some(Ok(_))) => {}
                _ => break,
            }
        }
    }
}
