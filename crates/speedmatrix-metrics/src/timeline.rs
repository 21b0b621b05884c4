//! What the client observed of one request: the input to every metric.

use speedmatrix_units::Tokens;

use crate::{Chunks, MetricsError, Timestamp};

/// Token counts the server reported in a `usage` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Usage {
    /// `usage.prompt_tokens`: the prompt as the server tokenized it.
    pub prompt_tokens: Tokens,
    /// `usage.completion_tokens`: output tokens so far (per chunk) or in all (final).
    pub completion_tokens: Tokens,
}

impl Usage {
    /// A usage report.
    pub const fn new(prompt_tokens: Tokens, completion_tokens: Tokens) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
        }
    }
}

/// One server-sent event of a streamed completion, as it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Chunk {
    /// When the event's bytes arrived, before parsing.
    pub at: Timestamp,
    /// The event carried non-empty answer text (`delta.content` or `text`).
    pub content: bool,
    /// The event carried non-empty reasoning text (`delta.reasoning_content`
    /// or `delta.reasoning`).
    pub reasoning: bool,
    /// The usage the event carried, if any (cumulative, as vLLM and SGLang
    /// send with `stream_options.continuous_usage_stats`).
    pub usage: Option<Usage>,
    /// Output tokens so far by a running count the engine put in the event
    /// other than `usage` (llama.cpp's `timings.predicted_n`; for TGI, which
    /// sends one event per generated token, the number of events so far).
    /// Exact, like usage.
    pub engine_count: Option<Tokens>,
    /// Tokens of the request's whole output text, tokenized at once with the
    /// run's tokenizer, whose last byte arrived in this event: an estimate
    /// (see `docs/metrics.md`). `None` when the text was not tokenized.
    pub text_tokens: Option<u32>,
}

impl Chunk {
    /// A chunk with answer text.
    pub const fn content(at: Timestamp) -> Self {
        Chunk {
            at,
            content: true,
            reasoning: false,
            usage: None,
            engine_count: None,
            text_tokens: None,
        }
    }

    /// A chunk with reasoning text.
    pub const fn reasoning(at: Timestamp) -> Self {
        Chunk {
            at,
            content: false,
            reasoning: true,
            usage: None,
            engine_count: None,
            text_tokens: None,
        }
    }

    /// A chunk with no text: a role-only delta, a usage-only event.
    pub const fn empty(at: Timestamp) -> Self {
        Chunk {
            at,
            content: false,
            reasoning: false,
            usage: None,
            engine_count: None,
            text_tokens: None,
        }
    }

    /// The same chunk carrying `usage`.
    pub const fn with_usage(mut self, usage: Usage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// The same chunk carrying the engine's running output-token count.
    pub const fn with_engine_count(mut self, count: Tokens) -> Self {
        self.engine_count = Some(count);
        self
    }

    /// The same chunk with `n` tokens of the re-tokenized text ending in it.
    pub const fn with_text_tokens(mut self, n: u32) -> Self {
        self.text_tokens = Some(n);
        self
    }

    /// Whether the chunk carried any text a user would see.
    pub const fn has_text(&self) -> bool {
        self.content || self.reasoning
    }
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The server ended the stream normally.
    Finished {
        /// The server's `finish_reason` (`stop`, `length`, ...), if it sent one.
        finish_reason: Option<String>,
    },
    /// The client stopped reading, e.g. at the end of a measurement window.
    Cancelled,
    /// The request failed.
    Failed {
        /// The client's short error kind (`http_status`, `timeout`, ...).
        kind: String,
    },
}

/// Everything the client observed of one request, as offsets from one epoch.
///
/// Chunks are in arrival order. Timestamps must come from one monotonic
/// clock: `sent_at <= headers_at <= ended_at`, chunks non-decreasing and
/// within `[sent_at, ended_at]`; metrics reject a timeline that is not.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestTimeline {
    /// When the request was written to the connection.
    pub sent_at: Timestamp,
    /// When the response headers arrived.
    pub headers_at: Option<Timestamp>,
    /// When the first byte of the response body arrived.
    pub first_byte_at: Option<Timestamp>,
    /// The stream's events in arrival order, a few bytes each.
    pub chunks: Chunks,
    /// When the stream ended: `[DONE]`, the last byte, the error, or the cancellation.
    pub ended_at: Timestamp,
    /// The server's totals for a stream that ended normally: the last usage it
    /// sent. Leave it `None` for a stream that was cancelled or failed, even if
    /// a usage-only event (`choices: []`) arrived mid-stream: only the usage of
    /// a finished stream is its total.
    pub final_usage: Option<Usage>,
    /// How the request ended.
    pub outcome: Outcome,
}

/// So that [`crate::window_metrics`] takes timelines or anything that holds one.
impl AsRef<RequestTimeline> for RequestTimeline {
    fn as_ref(&self) -> &RequestTimeline {
        self
    }
}

impl RequestTimeline {
    /// A request sent at `sent_at` that ended at `ended_at` with no chunks
    /// recorded yet; fill the other fields directly.
    pub fn new(sent_at: Timestamp, ended_at: Timestamp, outcome: Outcome) -> Self {
        RequestTimeline {
            sent_at,
            headers_at: None,
            first_byte_at: None,
            chunks: Chunks::new(),
            ended_at,
            final_usage: None,
            outcome,
        }
    }

    /// The first chunk with content or reasoning text.
    pub(crate) fn first_text(&self) -> Option<Chunk> {
        self.chunks.iter().find(|c| c.has_text())
    }

    /// The first chunk with answer text.
    pub(crate) fn first_content(&self) -> Option<Chunk> {
        self.chunks.iter().find(|c| c.content)
    }

    /// The server's prompt-token count: final usage, else the last chunk usage.
    pub(crate) fn prompt_tokens(&self) -> Option<Tokens> {
        self.final_usage
            .or_else(|| self.chunks.iter().filter_map(|c| c.usage).last())
            .map(|u| u.prompt_tokens)
    }

    /// Rejects timestamps that cannot come from one monotonic clock.
    pub(crate) fn check(&self) -> Result<(), MetricsError> {
        let bad = |problem: String| Err(MetricsError::InvalidTimeline { problem });
        let ms = |t: Timestamp| t.offset().as_secs_f64() * 1e3;
        if self.ended_at < self.sent_at {
            return bad(format!(
                "ended at {:.3} ms, before it was sent at {:.3} ms",
                ms(self.ended_at),
                ms(self.sent_at)
            ));
        }
        for (name, t) in [
            ("headers arrived", self.headers_at),
            ("first body byte arrived", self.first_byte_at),
        ] {
            if let Some(t) = t.filter(|t| *t < self.sent_at || *t > self.ended_at) {
                return bad(format!(
                    "{name} at {:.3} ms, outside the request's life {:.3}..={:.3} ms",
                    ms(t),
                    ms(self.sent_at),
                    ms(self.ended_at)
                ));
            }
        }
        let mut previous = self.sent_at;
        for (i, c) in self.chunks.iter().enumerate() {
            if c.at < previous || c.at > self.ended_at {
                return bad(format!(
                    "chunk {i} arrived at {:.3} ms, before {:.3} ms or after the end at {:.3} ms",
                    ms(c.at),
                    ms(previous),
                    ms(self.ended_at)
                ));
            }
            previous = c.at;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(sent: u64, ended: u64) -> RequestTimeline {
        RequestTimeline::new(
            Timestamp::from_millis(sent),
            Timestamp::from_millis(ended),
            Outcome::Finished {
                finish_reason: None,
            },
        )
    }

    #[test]
    fn accepts_an_ordered_timeline() {
        let mut t = finished(0, 100);
        t.headers_at = Some(Timestamp::from_millis(5));
        t.chunks = vec![
            Chunk::empty(Timestamp::from_millis(10)),
            Chunk::content(Timestamp::from_millis(10)),
            Chunk::content(Timestamp::from_millis(100)),
        ]
        .into();
        assert_eq!(t.check(), Ok(()));
    }

    #[test]
    fn rejects_disorder() {
        let mut t = finished(10, 5);
        assert!(t.check().is_err());
        t = finished(0, 100);
        t.chunks = vec![
            Chunk::content(Timestamp::from_millis(20)),
            Chunk::content(Timestamp::from_millis(10)),
        ]
        .into();
        let err = t.check().unwrap_err().to_string();
        assert!(err.contains("chunk 1"), "{err}");
        t.chunks = vec![Chunk::content(Timestamp::from_millis(101))].into();
        assert!(t.check().is_err());
        t.chunks = Chunks::new();
        t.first_byte_at = Some(Timestamp::from_millis(200));
        assert!(t.check().is_err());
    }

    #[test]
    fn prompt_tokens_prefer_final_usage() {
        let mut t = finished(0, 100);
        t.chunks = vec![
            Chunk::content(Timestamp::from_millis(10))
                .with_usage(Usage::new(Tokens::new(90), Tokens::new(1))),
        ]
        .into();
        assert_eq!(t.prompt_tokens(), Some(Tokens::new(90)));
        t.final_usage = Some(Usage::new(Tokens::new(91), Tokens::new(1)));
        assert_eq!(t.prompt_tokens(), Some(Tokens::new(91)));
    }
}
