//! The prefill–decode interference probe: a cold prompt sent into a cell's running streams.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use speedmatrix_units::Tokens;

use super::{Failure, Latency, duration_ns, opt_duration_ns};

/// One cold long prompt sent into a cell's running streams after its
/// window (docs/metrics.md, "Prefill under load").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interference {
    /// The injected prompt's length.
    pub prompt_tokens: Tokens,
    /// Its TTFT sent alone (before the streams started), nothing cached.
    #[serde(with = "opt_duration_ns")]
    pub ttft_alone: Option<Duration>,
    /// Its TTFT sent into the N running streams, nothing cached.
    #[serde(with = "opt_duration_ns")]
    pub ttft_under_load: Option<Duration>,
    /// The streams' total tok/s in the window before it.
    pub rate_before: f64,
    /// Their total tok/s from its send to its first token.
    pub rate_during: f64,
    /// Their total tok/s in the settle time after its first token.
    pub rate_after: f64,
    /// Their time between tokens from its send to its first token.
    pub itl_during: Option<Latency>,
    /// Output tokens the streams did not produce while it was prefilled:
    /// `rate_before × (first token − send) − tokens produced then`.
    pub tokens_lost: f64,
    /// Those tokens as time at the before rate: how long decoding stood still.
    #[serde(with = "duration_ns")]
    pub stall: Duration,
    /// The streams' total tok/s in equal parts from a second before its send
    /// to the end of the settle time: `(start of the part relative to the
    /// send in ms, tok/s)`, for the timeline chart.
    #[serde(default)]
    pub timeline: Vec<(f64, f64)>,
    /// Why the probe has no figures, when it failed.
    pub failure: Option<Failure>,
}
