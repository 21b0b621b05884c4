//! Turning one stream's events into its metrics timeline (sans-IO: what counts as a token
//! is tested on bytes), and the counts and text kept beside it.

use speedmatrix_metrics::{
    Chunk, CountBounds, ImpossibleCount, Outcome, ReportedCounts, RequestTimeline, Streamed,
    Timestamp, Usage, check_counts,
};
use speedmatrix_units::Tokens;

use super::{OutputText, Recorded};
use crate::outcome::{Failure, FailureKind};

/// Turns one stream's events into its metrics timeline: sans-IO, so what
/// counts as a token can be tested on bytes.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(super) timeline: RequestTimeline,
    pub(super) prompt_tokens: Option<Tokens>,
    pub(super) one_event_per_token: bool,
    pub(super) events_with_choices: u64,
    pub(super) text: OutputText,
    /// The text is kept until the first chunk with text shows the server's
    /// own count; a later chunk without one then means the text is lost.
    pub(super) keep_text: bool,
    /// Keep the text whatever the server counts.
    pub(crate) always_keep_text: bool,
    pub(super) text_lost: bool,
    /// Index of the last chunk with text, and the last usage with its index.
    pub(super) last_text: Option<usize>,
    pub(super) last_usage: Option<(usize, Usage)>,
    /// Bytes of text streamed, and the largest counts the server reported:
    /// what [`check_counts`] judges.
    pub(super) text_bytes: u64,
    pub(super) most: ReportedCounts,
    /// Splits `<think>` reasoning out of the answer text (`--reasoning-parser`).
    pub(crate) think: Option<speedmatrix_client::ThinkSplitter>,
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
            think: None,
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
    pub(super) fn into_failed(
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
        // The answer text with its `<think>` part moved to the reasoning, when asked. A chunk
        // whose text was all tag (or held as maybe one) still brought a token: of reasoning.
        let split;
        let mut tag_only = false;
        let ev = match &mut self.think {
            Some(think) if !ev.content.is_empty() => {
                let mut copy = ev.clone();
                think.apply(&mut copy);
                tag_only = !copy.has_text();
                split = copy;
                &split
            }
            _ => ev,
        };
        if ev.has_choices {
            self.events_with_choices += 1;
        }
        let Some(mut chunk) = self.chunk_of(ev, at) else {
            return false;
        };
        chunk.reasoning |= tag_only;
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
    pub(super) fn chunk_of(
        &self,
        ev: &speedmatrix_client::StreamEvent,
        at: Timestamp,
    ) -> Option<Chunk> {
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
        // Text held as maybe a tag belongs to the last chunk with text.
        if let Some((reasoning, content)) = self.think.as_mut().map(|t| t.finish())
            && self.keep_text
            && let Some(last) = self.text.ends.last_mut()
        {
            self.text.text.push_str(&reasoning);
            self.text.text.push_str(&content);
            last.1 = self.text.text.len();
        }
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
