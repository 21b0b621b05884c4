//! Metrics math over request timelines: TTFT, time between tokens, windowed
//! throughput, percentiles.
//!
//! The crate is pure: it reads no clock and does no I/O. The client records
//! what it saw of each request as a [`RequestTimeline`] (instants as
//! [`Timestamp`]s, offsets from an epoch the runner picks), and these
//! functions turn timelines into numbers:
//!
//! - [`request_metrics`]: TTFT, TTFR, time to first content, end-to-end,
//!   output tokens with their [`TokenSource`], TPOT, time between tokens.
//! - [`window_metrics`]: a sustained-decode [`Window`]: total and
//!   per-request tok/s, average active requests, completed requests, output
//!   tokens, TTFT and time-between-token [`Summary`]s.
//! - [`prefill_metrics`]: prompt tok/s and TTFT of a cold request.
//! - [`average_gauges`]: the server's running/waiting gauges over a window.
//! - [`check_counts`]: the bounds a server's token counts must keep to be
//!   believed (`max_tokens`, the streamed text, the time taken).
//! - [`Summary`] and [`percentile`]: one percentile method, Hyndman & Fan
//!   type 7 (numpy's default), with errors instead of NaN.
//!
//! Every definition, with its formula, is written down in `docs/metrics.md`.
//!
//! # Example
//!
//! One stream sent at 0 s whose first token arrives at 50 ms, then a token
//! every 10 ms, each chunk carrying the server's cumulative usage; measured
//! over the window (5 s, 15 s]:
//!
//! ```
//! use std::time::Duration;
//!
//! use speedmatrix_metrics::{
//!     Chunk, Outcome, RequestTimeline, Timestamp, TokenSource, Usage, Window, window_metrics,
//! };
//! use speedmatrix_units::Tokens;
//!
//! let mut stream = RequestTimeline::new(
//!     Timestamp::EPOCH,
//!     Timestamp::from_millis(20_040),
//!     Outcome::Cancelled,
//! );
//! stream.chunks = (1..=2_000)
//!     .map(|n| {
//!         let usage = Usage::new(Tokens::new(1_000), Tokens::new(n));
//!         Chunk::content(Timestamp::from_millis(40 + 10 * n)).with_usage(usage)
//!     })
//!     .collect();
//!
//! let window = Window::new(Timestamp::from_secs(5), Duration::from_secs(10))?;
//! let m = window_metrics(&[stream], window)?;
//! assert_eq!(m.total_output_rate.get(), 100.0);
//! assert_eq!(m.per_request_rate.map(|r| r.get()), Some(100.0));
//! assert_eq!(m.output_tokens, Tokens::new(1_000));
//! assert_eq!(m.average_active_requests, 1.0);
//! assert_eq!(m.token_source, Some(TokenSource::ContinuousUsage));
//! let tbt = m.time_between_tokens.expect("tokens arrived in the window");
//! assert_eq!(tbt.p50, Duration::from_millis(10));
//! let ttft = m.ttft.expect("the stream got a first token");
//! assert_eq!(ttft.p50, Duration::from_millis(50));
//! # Ok::<(), speedmatrix_metrics::MetricsError>(())
//! ```

mod calibrate;
mod chunks;
mod error;
mod load;
mod plausible;
mod rate;
mod request;
mod series;
mod slo;
mod stats;
mod time;
mod timeline;
mod tokens;
mod uncertainty;
mod verdict;
mod window;

pub use crate::calibrate::{CONFIDENCE, Calibration};
pub use crate::chunks::{Chunks, Iter as ChunkIter};
pub use crate::error::MetricsError;
pub use crate::load::{LoadMetrics, LoadRequest, load_metrics};
pub use crate::plausible::{
    BoundRule, CountBounds, CountField, ImpossibleCount, MAX_TOKENS_PER_S, ReportedCounts,
    SPECULATIVE_OVERSHOOT, Streamed, TEMPLATE_TOKENS, TOKENS_PER_TEXT_UNIT, check_counts,
    impossible_window_output,
};
pub use crate::rate::TokensPerSecond;
pub use crate::request::{PrefillMetrics, RequestMetrics, prefill_metrics, request_metrics};
pub use crate::series::binned_levels;
pub use crate::slo::{RequestLatency, Slo, SloMetric, SloOutcome, SloTerm, TermOutcome, judge};
pub use crate::stats::{LengthBin, Summary, length_histogram, percentile};
pub use crate::time::{Timestamp, Window};
pub use crate::timeline::{Chunk, Outcome, RequestTimeline, Usage};
pub use crate::tokens::{EstimateMethod, TokenSource};
pub use crate::uncertainty::{
    LATENCY_FLOOR, Spread, WINDOW_BATCHES, batch_means, quantile_ranks, ratio_interval, spread,
};
pub use crate::verdict::{
    CellSignals, VerdictKind, VerdictRules, intended_hit_rate, intended_prefix_hit_rate, verdicts,
};
pub use crate::window::{
    GaugeAverages, GaugeSample, TokenCount, WindowIntervals, WindowMetrics, average_gauges,
    series_bins, window_metrics,
};
