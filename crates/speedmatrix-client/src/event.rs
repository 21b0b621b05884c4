//! OpenAI streaming chunks: JSON `data:` payloads turned into typed events.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use speedmatrix_units::Tokens;

use crate::ClientError;
use crate::error::{error_message_of, snippet};
use crate::sse::{SseDecoder, SseEvent};

mod fast;
mod general;

use self::general::parse_serde;

/// Token counts as the server reports them in `usage`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens in the prompt, as the server counted them.
    #[serde(default)]
    pub prompt_tokens: Tokens,
    /// Tokens generated so far (cumulative in continuous usage chunks).
    #[serde(default)]
    pub completion_tokens: Tokens,
    /// Prompt tokens served from the prefix cache, when the server says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_prompt_tokens: Option<Tokens>,
}

/// One streamed chunk, stamped with the instant its bytes arrived.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct StreamEvent {
    /// When the read that completed this event returned, taken before any
    /// parsing. Events that arrived in the same read share it.
    pub received_at: Instant,
    /// Answer text in this chunk (`choices[0].text` or `choices[0].delta.content`).
    pub content: String,
    /// Reasoning text in this chunk (`delta.reasoning_content` or `delta.reasoning`).
    pub reasoning_content: String,
    /// `choices[0].finish_reason` when the server set it (`"stop"`, `"length"`, ...).
    pub finish_reason: Option<String>,
    /// Usage carried by this chunk: cumulative with `continuous_usage_stats`,
    /// or the final totals in the usage-only chunk that `include_usage` adds.
    pub usage: Option<Usage>,
    /// False for the usage-only chunk (`"choices": []`).
    pub has_choices: bool,
    /// Output tokens so far by the engine's own running count outside
    /// `usage`: llama.cpp's `timings.predicted_n` (sent on every chunk when
    /// the request sets `timings_per_token`).
    pub engine_tokens: Option<Tokens>,
}

impl StreamEvent {
    /// True when the chunk carries any text, answer or reasoning.
    pub fn has_text(&self) -> bool {
        !self.content.is_empty() || !self.reasoning_content.is_empty()
    }
}

/// Sans-IO decoder from response bytes to [`StreamEvent`]s.
///
/// [`ResponseStream`](crate::ResponseStream) uses it on the network; use it
/// directly to replay captured bytes or to test a server's framing.
///
/// ```
/// use std::time::Instant;
/// use speedmatrix_client::StreamDecoder;
///
/// let mut decoder = StreamDecoder::new();
/// let now = Instant::now();
/// decoder.feed(
///     b"data: {\"choices\":[{\"index\":0,\"text\":\" Hi\",\"finish_reason\":null}]}\n\n\
///       data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n\
///       data: [DONE]\n\n",
///     now,
/// );
/// let first = decoder.next_event().unwrap().unwrap();
/// assert_eq!(first.content, " Hi");
/// assert_eq!(first.received_at, now);
/// let usage = decoder.next_event().unwrap().unwrap().usage.unwrap();
/// assert_eq!(usage.completion_tokens.get(), 1);
/// assert!(decoder.next_event().is_none());
/// assert!(decoder.is_done());
/// ```
#[derive(Debug)]
pub struct StreamDecoder {
    sse: SseDecoder,
    opening: fast::Opening,
    received_at: Instant,
    done: bool,
    done_at: Option<Instant>,
}

impl Default for StreamDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl StreamDecoder {
    /// A decoder with the default 64 MiB cap per event.
    pub fn new() -> Self {
        Self::with_max_event_bytes(crate::sse::DEFAULT_MAX_EVENT_BYTES)
    }

    /// A decoder that fails once one event exceeds `max` bytes.
    pub fn with_max_event_bytes(max: usize) -> Self {
        StreamDecoder {
            sse: SseDecoder::with_max_event_bytes(max),
            opening: fast::Opening::default(),
            received_at: Instant::now(),
            done: false,
            done_at: None,
        }
    }

    /// Appends bytes that arrived at `received_at` (copying them).
    pub fn feed(&mut self, bytes: &[u8], received_at: Instant) {
        self.received_at = received_at;
        self.sse.feed(bytes);
    }

    /// Appends a shared buffer that arrived at `received_at`, decoded in place
    /// when it starts at a line boundary.
    pub fn feed_bytes(&mut self, bytes: bytes::Bytes, received_at: Instant) {
        self.received_at = received_at;
        self.sse.feed_bytes(bytes);
    }

    /// The next event, or `None` when more bytes are needed or `[DONE]` was seen.
    pub fn next_event(&mut self) -> Option<Result<StreamEvent, ClientError>> {
        let mut event = empty_event(self.received_at);
        self.next_event_into(&mut event).map(|r| r.map(|()| event))
    }

    /// [`Self::next_event`] written into `event` (every field replaced), so
    /// a reader of millions of events reuses one and its strings' memory.
    pub fn next_event_into(&mut self, event: &mut StreamEvent) -> Option<Result<(), ClientError>> {
        while !self.done {
            let at = self.received_at;
            let parsed = match self.sse.next_event()? {
                Ok(sse) => parse_event(&sse, at, &mut self.opening, event),
                Err(err) => Err(err),
            };
            match parsed {
                Ok(Parsed::Event) => return Some(Ok(())),
                Ok(Parsed::Done) => self.mark_done(at),
                Ok(Parsed::Skip) => {}
                Err(err) => return Some(Err(err)),
            }
        }
        None
    }

    /// Call at end of input: yields an event left without its closing blank line.
    pub fn finish(&mut self) -> Option<Result<StreamEvent, ClientError>> {
        let mut event = empty_event(self.received_at);
        self.finish_into(&mut event).map(|r| r.map(|()| event))
    }

    /// [`Self::finish`] written into `event`, as [`Self::next_event_into`].
    pub fn finish_into(&mut self, event: &mut StreamEvent) -> Option<Result<(), ClientError>> {
        if self.done {
            return None;
        }
        let at = self.received_at;
        let parsed = match self.sse.finish()? {
            Ok(sse) => parse_event(&sse, at, &mut self.opening, event),
            Err(err) => Err(err),
        };
        match parsed {
            Ok(Parsed::Event) => Some(Ok(())),
            Ok(Parsed::Done) => {
                self.mark_done(at);
                None
            }
            Ok(Parsed::Skip) => None,
            Err(err) => Some(Err(err)),
        }
    }

    /// True once `data: [DONE]` was decoded.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// When the bytes of `data: [DONE]` arrived, once it was decoded.
    pub fn done_at(&self) -> Option<Instant> {
        self.done_at
    }

    fn mark_done(&mut self, at: Instant) {
        self.done = true;
        self.done_at.get_or_insert(at);
    }
}

/// What one SSE event was: a chunk (written into the caller's event), the end, or nothing.
enum Parsed {
    Event,
    Done,
    Skip,
}

fn parse_event(
    sse: &SseEvent<'_>,
    received_at: Instant,
    opening: &mut fast::Opening,
    event: &mut StreamEvent,
) -> Result<Parsed, ClientError> {
    if sse.is_done() {
        return Ok(Parsed::Done);
    }
    if sse.event_type == "error" {
        return Err(error_event(sse.data));
    }
    if sse.data.iter().all(u8::is_ascii_whitespace) {
        return Ok(Parsed::Skip);
    }
    // Validating UTF-8 once up front (SIMD-fast) lets serde_json borrow
    // strings without re-checking each one, which is measurably faster.
    let text = std::str::from_utf8(sse.data).map_err(|err| ClientError::Protocol {
        reason: format!("stream chunk is not UTF-8 ({err})"),
        snippet: snippet(sse.data),
    })?;
    reset(event, received_at);
    let is_error = match fast::parse(text, event, opening) {
        Some(is_error) => is_error,
        None => {
            reset(event, received_at);
            parse_serde(text, event).map_err(|err| ClientError::Protocol {
                reason: format!("stream chunk is not the expected JSON ({err})"),
                snippet: snippet(sse.data),
            })?
        }
    };
    if is_error {
        return Err(error_event(sse.data));
    }
    Ok(Parsed::Event)
}

/// An event with nothing in it, its strings' memory kept.
fn reset(event: &mut StreamEvent, received_at: Instant) {
    event.received_at = received_at;
    event.content.clear();
    event.reasoning_content.clear();
    event.finish_reason = None;
    event.usage = None;
    event.has_choices = false;
    event.engine_tokens = None;
}

pub(crate) fn empty_event(received_at: Instant) -> StreamEvent {
    StreamEvent {
        received_at,
        content: String::new(),
        reasoning_content: String::new(),
        finish_reason: None,
        usage: None,
        has_choices: false,
        engine_tokens: None,
    }
}

fn error_event(data: &[u8]) -> ClientError {
    let (message, code) = serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .and_then(|v| error_message_of(&v))
        .unwrap_or_else(|| (snippet(data), None));
    ClientError::ServerErrorEvent { message, code }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Vec<Result<StreamEvent, ClientError>> {
        let mut d = StreamDecoder::new();
        d.feed(bytes, Instant::now());
        std::iter::from_fn(|| d.next_event()).collect()
    }

    #[test]
    fn chat_delta_splits_reasoning_from_content() {
        let events = decode(
            b"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"think\"}}]}\n\n\
              data: {\"choices\":[{\"delta\":{\"reasoning\":\"more\",\"content\":\"\"}}]}\n\n\
              data: {\"choices\":[{\"delta\":{\"content\":\"a\\\"b\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":3,\"total_tokens\":6}}\n\n",
        );
        let events: Vec<StreamEvent> = events.into_iter().map(Result::unwrap).collect();
        assert_eq!(events[0].reasoning_content, "think");
        assert_eq!(events[1].reasoning_content, "more");
        assert!(events[1].content.is_empty());
        assert_eq!(events[2].content, "a\"b");
        assert_eq!(events[2].finish_reason.as_deref(), Some("stop"));
        assert_eq!(events[2].usage.unwrap().completion_tokens.get(), 3);
    }

    #[test]
    fn tool_call_deltas_are_answer_text() {
        // vLLM's shape: the name in the first delta, the arguments streamed after it.
        let events: Vec<StreamEvent> = decode(
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"index\":0,\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}}]}\n\n\
              data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"city\\\": \"}}]}}]}\n\n\
              data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":{\"odd\":1}}}],\"content\":\"x\"}}]}\n\n\
              data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":null}}]}\n\n",
        )
        .into_iter()
        .map(Result::unwrap)
        .collect();
        assert_eq!(events[0].content, "get_weather");
        assert_eq!(events[1].content, "{\"city\": ");
        assert!(events[1].has_text() && events[1].reasoning_content.is_empty());
        // Arguments that are not text are ignored; content before or after stays.
        assert_eq!(events[2].content, "x");
        assert!(!events[3].has_text());
    }

    #[test]
    fn error_objects_and_error_events_are_errors() {
        for body in [
            &b"data: {\"error\":{\"message\":\"boom\",\"type\":\"x\",\"code\":500}}\n\n"[..],
            b"data: {\"object\":\"error\",\"message\":\"boom\",\"code\":500}\n\n",
            b"event: error\ndata: boom\n\n",
        ] {
            let events = decode(body);
            match &events[0] {
                Err(ClientError::ServerErrorEvent { message, .. }) => assert_eq!(message, "boom"),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn odd_but_valid_shapes_are_read() {
        let events: Vec<StreamEvent> = decode(
            b"data: {\"choices\":null,\"error\":null,\"usage\":null}\n\n\
              data: {\"choices\":[{\"delta\":null,\"text\":\"a\\nb\\u00e9\"},{\"text\":\"second\"}]}\n\n\
              data: {\"choices\":[{\"delta\":{\"reasoning\":\"r1\",\"reasoning_content\":\"r2\"}}]}\n\n\
              data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"r3\",\"reasoning\":\"r4\"}}]}\n\n",
        )
        .into_iter()
        .map(Result::unwrap)
        .collect();
        assert!(!events[0].has_choices && events[0].usage.is_none());
        assert_eq!(events[1].content, "a\nb\u{e9}");
        assert_eq!(events[2].reasoning_content, "r2");
        assert_eq!(events[3].reasoning_content, "r3");
    }

    #[test]
    fn engine_counts_and_empty_finish_reasons() {
        let events: Vec<StreamEvent> = decode(
            b"data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":\"\"}],\"timings\":{\"prompt_n\":-1,\"predicted_n\":7}}\n\n\
              data: {\"choices\":[{\"index\":0,\"text\":\" b\",\"finish_reason\":\"\"}],\"timings\":{\"predicted_n\":-1}}\n\n\
              data: {\"choices\":[{\"index\":0,\"text\":\" c\",\"finish_reason\":\"eos_token\"}],\"timings\":{\"predicted_n\":9.5}}\n\n",
        )
        .into_iter()
        .map(Result::unwrap)
        .collect();
        assert_eq!(events[0].engine_tokens, Some(Tokens::new(7)));
        assert_eq!(events[0].finish_reason, None);
        // An odd count is ignored, never a broken stream.
        assert_eq!(events[1].engine_tokens, None);
        assert_eq!(events[2].engine_tokens, None);
        assert_eq!(events[2].finish_reason.as_deref(), Some("eos_token"));
    }

    #[test]
    fn non_object_chunks_are_protocol_errors() {
        for body in [
            &b"data: [1,2]\n\n"[..],
            b"data: \"text\"\n\n",
            b"data: {} trailing\n\n",
        ] {
            let events = decode(body);
            assert_eq!(
                events[0].as_ref().unwrap_err().kind(),
                crate::ErrorKind::Protocol
            );
        }
    }

    #[test]
    fn bad_json_is_a_protocol_error() {
        let events = decode(b"data: {not json\n\n");
        assert_eq!(
            events[0].as_ref().unwrap_err().kind(),
            crate::ErrorKind::Protocol
        );
    }

    #[test]
    fn nothing_after_done() {
        let events = decode(b"data: [DONE]\n\ndata: {\"choices\":[]}\n\n");
        assert!(events.is_empty());
    }

    /// Coverage-guided under `cargo xtask fuzz`: OpenAI chunks on top of SSE
    /// never panic, and decode the same whatever the read boundaries.
    #[test]
    fn fuzz_stream() {
        bolero::check!().for_each(|input: &[u8]| {
            let (head, data) = input.split_at(input.len().min(8));
            let mut seed = [0u8; 8];
            seed[..head.len()].copy_from_slice(head);
            let at = Instant::now();
            let decode = |parts: &[&[u8]]| {
                let mut d = StreamDecoder::new();
                let mut events = Vec::new();
                for part in parts {
                    d.feed(part, at);
                    while let Some(e) = d.next_event() {
                        events.push(e.map_err(|e| e.kind()));
                    }
                }
                if let Some(e) = d.finish() {
                    events.push(e.map_err(|e| e.kind()));
                }
                events
            };
            let split = crate::sse::tests::pieces(data, u64::from_le_bytes(seed));
            assert_eq!(
                decode(&[data]),
                decode(&split),
                "events depend on read boundaries"
            );
        });
    }
}
