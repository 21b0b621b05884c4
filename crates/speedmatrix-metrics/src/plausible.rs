//! Counts no server can have produced: the bounds a request's reported token
//! counts are checked against before anything is computed from them
//! (`docs/metrics.md`, "Impossible counts").
//!
//! A server's `usage` is trusted as the exact count, so a count that cannot be
//! true (2^64 − 1 output tokens, a thousand times `max_tokens`, ten million
//! tokens a second for one request) would become the measurement. Each bound
//! is far from anything a working engine reports, so that a request that
//! breaks one is rejected rather than judged:
//!
//! - output tokens ≤ `max_tokens` + [`SPECULATIVE_OVERSHOOT`]: vLLM stops a
//!   request on the token that reaches `max_tokens` and drops the rest of a
//!   speculative step's accepted tokens (its scheduler checks the stop after
//!   each appended token), so it never overshoots; SGLang appends a step's
//!   accepted draft before its length check, so it can overshoot by one
//!   draft (`speculative_num_draft_tokens`, single digits in its docs and
//!   tens at most); llama.cpp, TGI and Ollama stop at the limit.
//! - output tokens ≤ [`TOKENS_PER_TEXT_UNIT`] × (bytes of streamed text +
//!   events with choices) + [`SPECULATIVE_OVERSHOOT`]: a token decodes to at
//!   least one byte, and a token whose text is empty (a special token the
//!   engine skips) still comes in an event of its own step, which a
//!   speculative step shares with at most a draft's worth of tokens.
//! - output tokens ≤ [`MAX_TOKENS_PER_S`] × the request's time +
//!   [`SPECULATIVE_OVERSHOOT`]: no engine generates one request at ten
//!   million tokens a second (the fastest published single-stream figures are
//!   in the thousands), and even a response cache or a loopback replay, which
//!   hands over a stored completion in a millisecond or two (about a million
//!   tokens a second), stays well below it.
//! - prompt tokens ≤ bytes of the prompt sent + [`TEMPLATE_TOKENS`]: a prompt
//!   token covers at least one byte of the text, and a chat template adds
//!   its special tokens and markup around it.

use std::fmt;
use std::time::Duration;

use speedmatrix_units::{Tokens, group_thousands};

/// Tokens a request may exceed `max_tokens` by: more than any speculative
/// step's draft (vLLM never overshoots; SGLang by at most one draft).
pub const SPECULATIVE_OVERSHOOT: u64 = 256;

/// Output tokens a second no server reaches for one request: ten times what
/// a loopback replay of a stored completion delivers.
pub const MAX_TOKENS_PER_S: f64 = 10_000_000.0;

/// Output tokens per byte of streamed text, or per event, that no stream
/// exceeds (a speculative step packs at most a draft into one event).
pub const TOKENS_PER_TEXT_UNIT: u64 = 32;

/// Prompt tokens a chat template may add to the text sent.
pub const TEMPLATE_TOKENS: u64 = 8_192;

/// What was asked of a request, which bounds what it can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountBounds {
    /// The request's `max_tokens`; `None` when the request set none the
    /// client can read (then only the other bounds apply).
    pub max_tokens: Option<Tokens>,
    /// Bytes of the prompt text sent.
    pub prompt_bytes: u64,
}

/// What a request's stream showed, beside the server's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Streamed {
    /// Bytes of answer and reasoning text.
    pub text_bytes: u64,
    /// Events that carried `choices`.
    pub events: u64,
    /// From sending the request to its end.
    pub elapsed: Duration,
}

/// The largest counts a server reported for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReportedCounts {
    /// The largest `usage.completion_tokens`.
    pub usage_completion: Option<u64>,
    /// The largest running count of the engine's own (llama.cpp's
    /// `timings.predicted_n`).
    pub engine_completion: Option<u64>,
    /// The largest `usage.prompt_tokens`.
    pub prompt: Option<u64>,
}

/// Which reported count is impossible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CountField {
    /// `usage.completion_tokens`.
    UsageCompletion,
    /// The engine's running output count (`timings.predicted_n`).
    EngineCompletion,
    /// `usage.prompt_tokens`.
    Prompt,
}

impl CountField {
    fn name(self) -> &'static str {
        match self {
            CountField::UsageCompletion => "usage.completion_tokens",
            CountField::EngineCompletion => "the engine's running output count",
            CountField::Prompt => "usage.prompt_tokens",
        }
    }
}

/// The bound a count broke, with what it was made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundRule {
    /// `max_tokens` plus [`SPECULATIVE_OVERSHOOT`].
    MaxTokens {
        /// The request's `max_tokens`.
        max_tokens: Tokens,
    },
    /// [`TOKENS_PER_TEXT_UNIT`] per byte or event streamed.
    StreamedText {
        /// Bytes of text streamed.
        bytes: u64,
        /// Events with choices.
        events: u64,
    },
    /// [`MAX_TOKENS_PER_S`] over the request's time.
    Elapsed {
        /// The request's time.
        elapsed: Duration,
    },
    /// The prompt's bytes plus [`TEMPLATE_TOKENS`].
    PromptText {
        /// Bytes of the prompt sent.
        bytes: u64,
    },
}

/// A count no server can have produced for the request: its value, the
/// bound and the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImpossibleCount {
    /// Which count.
    pub field: CountField,
    /// What the server reported.
    pub value: u64,
    /// The most it can be.
    pub bound: u64,
    /// Why that is the most.
    pub rule: BoundRule,
}

impl fmt::Display for ImpossibleCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the server reported {} = {}, above the {} this request can have: ",
            self.field.name(),
            group_thousands(self.value),
            group_thousands(self.bound),
        )?;
        match self.rule {
            BoundRule::MaxTokens { max_tokens } => write!(
                f,
                "max_tokens {} plus {SPECULATIVE_OVERSHOOT} for a speculative step's overshoot",
                group_thousands(max_tokens.get())
            ),
            BoundRule::StreamedText { bytes, events } => write!(
                f,
                "{TOKENS_PER_TEXT_UNIT} tokens per byte or event streamed ({} bytes of text in {} events) plus {SPECULATIVE_OVERSHOOT}",
                group_thousands(bytes),
                group_thousands(events)
            ),
            BoundRule::Elapsed { elapsed } => write!(
                f,
                "{} tok/s, more than any engine streams one request, over its {:.3} s plus {SPECULATIVE_OVERSHOOT}",
                group_thousands(MAX_TOKENS_PER_S as u64),
                elapsed.as_secs_f64()
            ),
            BoundRule::PromptText { bytes } => write!(
                f,
                "the {} bytes of the prompt sent plus {TEMPLATE_TOKENS} a chat template may add",
                group_thousands(bytes)
            ),
        }
    }
}

/// Checks a request's reported counts against what it was asked and what its
/// stream showed (see the module docs); the first bound broken, tightest
/// first.
///
/// ```
/// use std::time::Duration;
/// use speedmatrix_metrics::{CountBounds, ReportedCounts, Streamed, check_counts};
/// use speedmatrix_units::Tokens;
///
/// let bounds = CountBounds { max_tokens: Some(Tokens::new(16)), prompt_bytes: 64 };
/// let streamed = Streamed { text_bytes: 32, events: 16, elapsed: Duration::from_millis(40) };
/// let honest = ReportedCounts { usage_completion: Some(16), prompt: Some(16), ..Default::default() };
/// assert!(check_counts(&bounds, &streamed, &honest).is_ok());
/// let huge = ReportedCounts { usage_completion: Some(u64::MAX), ..honest };
/// let e = check_counts(&bounds, &streamed, &huge).unwrap_err();
/// assert_eq!(e.bound, 16 + 256);
/// ```
pub fn check_counts(
    bounds: &CountBounds,
    streamed: &Streamed,
    reported: &ReportedCounts,
) -> Result<(), ImpossibleCount> {
    let completions = [
        (CountField::UsageCompletion, reported.usage_completion),
        (CountField::EngineCompletion, reported.engine_completion),
    ];
    for (field, value) in completions {
        let Some(value) = value else { continue };
        for (bound, rule) in completion_bounds(bounds, streamed) {
            if value > bound {
                return Err(ImpossibleCount {
                    field,
                    value,
                    bound,
                    rule,
                });
            }
        }
    }
    if let Some(value) = reported.prompt {
        let bound = bounds.prompt_bytes.saturating_add(TEMPLATE_TOKENS);
        if value > bound {
            return Err(ImpossibleCount {
                field: CountField::Prompt,
                value,
                bound,
                rule: BoundRule::PromptText {
                    bytes: bounds.prompt_bytes,
                },
            });
        }
    }
    Ok(())
}

/// The bounds on output tokens, in the order they are checked.
fn completion_bounds(bounds: &CountBounds, s: &Streamed) -> Vec<(u64, BoundRule)> {
    let mut out = Vec::with_capacity(3);
    if let Some(max_tokens) = bounds.max_tokens {
        out.push((
            max_tokens.get().saturating_add(SPECULATIVE_OVERSHOOT),
            BoundRule::MaxTokens { max_tokens },
        ));
    }
    out.push((
        s.text_bytes
            .saturating_add(s.events)
            .saturating_mul(TOKENS_PER_TEXT_UNIT)
            .saturating_add(SPECULATIVE_OVERSHOOT),
        BoundRule::StreamedText {
            bytes: s.text_bytes,
            events: s.events,
        },
    ));
    // Far below 2^53: the product is exact enough, and the cast saturates.
    let by_time = (MAX_TOKENS_PER_S * s.elapsed.as_secs_f64()).ceil() as u64;
    out.push((
        by_time.saturating_add(SPECULATIVE_OVERSHOOT),
        BoundRule::Elapsed { elapsed: s.elapsed },
    ));
    out
}

/// Whether a window's output is more than `streams` requests at a time can
/// produce in `measured`, each at [`MAX_TOKENS_PER_S`] with one
/// [`SPECULATIVE_OVERSHOOT`] per request (`requests` of them): a figure
/// recorded before counts were checked, which no run can have measured.
pub fn impossible_window_output(
    output_tokens: Tokens,
    measured: Duration,
    streams: u64,
    requests: u64,
) -> bool {
    let rate = MAX_TOKENS_PER_S * measured.as_secs_f64() * streams.max(1) as f64;
    let slack = SPECULATIVE_OVERSHOOT as f64 * (requests.saturating_add(streams)) as f64;
    output_tokens.get() as f64 > rate + slack
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bounds(max_tokens: u64) -> CountBounds {
        CountBounds {
            max_tokens: Some(Tokens::new(max_tokens)),
            prompt_bytes: 100,
        }
    }

    fn streamed(bytes: u64, events: u64, ms: u64) -> Streamed {
        Streamed {
            text_bytes: bytes,
            events,
            elapsed: Duration::from_millis(ms),
        }
    }

    fn completion(n: u64) -> ReportedCounts {
        ReportedCounts {
            usage_completion: Some(n),
            ..ReportedCounts::default()
        }
    }

    #[test]
    fn the_largest_count_and_a_thousand_times_max_tokens_are_impossible() {
        let s = streamed(32, 16, 500);
        let e = check_counts(&bounds(16), &s, &completion(u64::MAX)).unwrap_err();
        assert_eq!(
            (e.field, e.value, e.bound),
            (CountField::UsageCompletion, u64::MAX, 272)
        );
        assert!(
            e.to_string().contains("18,446,744,073,709,551,615")
                && e.to_string().contains("max_tokens 16"),
            "{e}"
        );
        let e = check_counts(&bounds(16), &s, &completion(16_000)).unwrap_err();
        assert_eq!(
            e.rule,
            BoundRule::MaxTokens {
                max_tokens: Tokens::new(16)
            }
        );
        // One speculative step over the limit is allowed.
        assert!(check_counts(&bounds(16), &s, &completion(16 + 8)).is_ok());
    }

    #[test]
    fn without_max_tokens_the_text_and_the_time_bound_the_count() {
        let free = CountBounds {
            max_tokens: None,
            prompt_bytes: 100,
        };
        let e = check_counts(&free, &streamed(10, 5, 60_000), &completion(100_000)).unwrap_err();
        assert!(
            matches!(
                e.rule,
                BoundRule::StreamedText {
                    bytes: 10,
                    events: 5
                }
            ),
            "{e}"
        );
        assert_eq!(e.bound, 15 * 32 + 256);
        let e = check_counts(&free, &streamed(1 << 40, 1, 1), &completion(100_000)).unwrap_err();
        assert!(matches!(e.rule, BoundRule::Elapsed { .. }), "{e}");
        assert_eq!(e.bound, 10_000 + 256);
    }

    #[test]
    fn a_prompt_count_beyond_its_text_is_impossible_and_an_engine_count_is_checked_too() {
        let s = streamed(32, 16, 500);
        let prompt = ReportedCounts {
            prompt: Some(u64::MAX),
            ..completion(16)
        };
        let e = check_counts(&bounds(16), &s, &prompt).unwrap_err();
        assert_eq!((e.field, e.bound), (CountField::Prompt, 100 + 8_192));
        let engine = ReportedCounts {
            engine_completion: Some(1 << 30),
            ..ReportedCounts::default()
        };
        let e = check_counts(&bounds(16), &s, &engine).unwrap_err();
        assert_eq!(e.field, CountField::EngineCompletion);
    }

    #[test]
    fn a_window_beyond_ten_million_tokens_a_second_per_stream_is_impossible() {
        let s = Duration::from_secs(2);
        assert!(impossible_window_output(Tokens::new(u64::MAX), s, 2, 100));
        assert!(!impossible_window_output(Tokens::new(4_000), s, 2, 100));
        assert!(!impossible_window_output(Tokens::new(20_000_256), s, 1, 0));
        assert!(impossible_window_output(Tokens::new(20_000_257), s, 1, 0));
    }

    proptest! {
        /// Any count a working engine can send passes: at most max_tokens plus
        /// a draft, at least a byte or an event per 32 tokens, under ten
        /// million tokens a second.
        #[test]
        fn honest_counts_pass(
            max_tokens in 1u64..100_000,
            share in 0.0f64..=1.0,
            draft in 0u64..=16,
            bytes_per_token in 1u64..8,
            us_per_token in 2u64..100_000,
            prompt_bytes in 0u64..1_000_000,
        ) {
            let n = ((max_tokens as f64 * share) as u64 + draft).max(1);
            let s = Streamed {
                text_bytes: n * bytes_per_token,
                events: n.div_ceil(draft + 1),
                elapsed: Duration::from_micros(n * us_per_token),
            };
            let b = CountBounds { max_tokens: Some(Tokens::new(max_tokens)), prompt_bytes };
            let r = ReportedCounts {
                usage_completion: Some(n),
                engine_completion: Some(n),
                prompt: Some(prompt_bytes / 2 + 100),
            };
            prop_assert_eq!(check_counts(&b, &s, &r), Ok(()));
        }
    }
}
