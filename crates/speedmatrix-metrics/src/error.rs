//! The crate's one error type.

use std::time::Duration;

use speedmatrix_units::Tokens;

/// Why a metric could not be computed.
///
/// Every variant is a property of the input (a sample, a window or a request
/// timeline), never a bug in the arithmetic, so callers can mark the affected
/// cell as an error and carry on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// A service-level objective's text did not parse.
    #[error(
        "{0}; write terms as METRIC_pNN=LIMIT joined by commas, METRIC one of ttft, itl, tpot, e2e, \
         e.g. ttft_p99=2s,itl_p99=100ms"
    )]
    Slo(String),
    /// A summary or percentile was asked of no values.
    #[error("cannot summarize an empty sample: there were no values to take percentiles of")]
    EmptySample,
    /// A sample held NaN or an infinity.
    #[error(
        "value {index} of the sample is {value}, not a finite number; drop it before summarizing"
    )]
    NotFinite {
        /// Position of the value in the input.
        index: usize,
        /// The value.
        value: f64,
    },
    /// A percentile outside `0..=100` (or NaN) was asked for.
    #[error("percentile {p} is outside 0..=100")]
    PercentileOutOfRange {
        /// The percentile asked for.
        p: f64,
    },
    /// A window of zero length, or one whose end cannot be represented.
    #[error(
        "a measurement window must have a positive, representable length; got {duration:?} starting {start:?} after the epoch"
    )]
    InvalidWindow {
        /// Offset of the window's start from the epoch.
        start: Duration,
        /// The window's length.
        duration: Duration,
    },
    /// Timestamps of one request are out of order.
    #[error(
        "request timeline is inconsistent: {problem}; take every timestamp from one monotonic clock and subtract the same epoch"
    )]
    InvalidTimeline {
        /// What was out of order, with the offending offsets.
        problem: String,
    },
    /// The server's cumulative completion-token count went down within a stream.
    #[error(
        "the server's cumulative completion_tokens went down from {from} to {to} at chunk {chunk}; usage must only grow within a stream"
    )]
    TokenCountDecreased {
        /// Index of the chunk in the request's chunk list.
        chunk: usize,
        /// The count before.
        from: Tokens,
        /// The smaller count the chunk carried.
        to: Tokens,
    },
    /// A prefill measurement needs a first token and the request had none.
    #[error(
        "the request produced no content or reasoning text, so it has no time to first token; check the server's error or raise max_tokens"
    )]
    NoFirstToken,
    /// A prefill measurement needs the server's prompt-token count and it sent none.
    #[error(
        "the server reported no usage.prompt_tokens for the request; ask for it with stream_options.include_usage = true"
    )]
    MissingPromptTokens,
}
