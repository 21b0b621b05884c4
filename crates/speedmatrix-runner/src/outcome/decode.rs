//! Prefill points and sustained-decode cells: their numbers, and how tokens were counted.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use speedmatrix_metrics::{Calibration, TokenSource};
use speedmatrix_units::{Concurrency, Tokens};

use super::{Interference, Latency, Notice, StepId, StepStatus, duration_ns, opt_duration_ns};

/// One prefill point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrefillOutcome {
    /// Prompt tokens built.
    pub context: Tokens,
    /// How it ended.
    pub status: StepStatus,
    /// Median time to first token over the repeats.
    #[serde(default, with = "opt_duration_ns")]
    pub ttft: Option<Duration>,
    /// Median server-reported prompt tokens per second of TTFT.
    #[serde(default)]
    pub prompt_tokens_per_s: Option<f64>,
    /// Prompt tokens the server reported.
    #[serde(default)]
    pub prompt_tokens_reported: Option<Tokens>,
    /// Requests measured.
    pub repeats: u32,
    /// Measured on the first warm-up request of a decode cell.
    #[serde(default)]
    pub from_warmup: bool,
}

impl PrefillOutcome {
    /// A point that produced no numbers.
    pub(crate) fn without_numbers(context: Tokens, status: StepStatus, repeats: u32) -> Self {
        PrefillOutcome {
            context,
            status,
            ttft: None,
            prompt_tokens_per_s: None,
            prompt_tokens_reported: None,
            repeats,
            from_warmup: false,
        }
    }
}

/// One sustained-decode cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellOutcome {
    /// Prompt length of every stream.
    pub context: Tokens,
    /// Streams kept busy.
    pub concurrency: Concurrency,
    /// How it ended.
    pub status: StepStatus,
    /// The window's numbers, when measured.
    #[serde(default)]
    pub window: Option<WindowResult>,
    /// What the cell had to say (queueing, retries, estimates, ...).
    #[serde(default)]
    pub notices: Vec<Notice>,
}

impl CellOutcome {
    /// The step this cell is.
    pub fn step(&self) -> StepId {
        StepId::Decode {
            context: self.context,
            concurrency: self.concurrency,
        }
    }
}

/// The numbers of one measured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowResult {
    /// Output tokens in the window over its length.
    pub total_tokens_per_s: f64,
    /// Decoding tokens over decoding time (see docs/metrics.md).
    pub per_request_tokens_per_s: f64,
    /// Time to first token.
    pub ttft: Latency,
    /// Time between tokens.
    pub time_between_tokens: Latency,
    /// Requests in flight, time-weighted.
    pub average_active_requests: f64,
    /// Requests that finished inside the window.
    pub completed_requests: u64,
    /// Output tokens that arrived in the window.
    pub output_tokens: Tokens,
    /// The window's length.
    #[serde(with = "duration_ns")]
    pub measured: Duration,
    /// The server queued requests.
    pub queueing_detected: bool,
    /// Requests counted by the server with another prompt length.
    pub prompt_token_mismatches: u64,
    /// How output tokens were counted.
    pub token_count: TokenCounting,
    /// How requests ended: finish reason → count.
    pub finish_reasons: BTreeMap<String, u64>,
    /// The server's own output-token count over the window, when it has one.
    #[serde(default)]
    pub server_counter: Option<CounterIncrease>,
    /// The client's own CPU use over the window; `None` with the embedded
    /// simulator (it shares the process) or where there is no process clock.
    #[serde(default)]
    pub client: Option<crate::ClientLoad>,
    /// What the GPUs, the host and the server did over the window.
    #[serde(default)]
    pub telemetry: Option<speedmatrix_report::CellTelemetry>,
    /// Total tok/s in each equal part of the window (see
    /// [`speedmatrix_metrics::series_bins`]), for the cell's time series.
    pub output_rate_series: Vec<f64>,
    /// The prefill–decode interference probe after the window, when asked.
    #[serde(default)]
    pub interference: Option<Interference>,
}

/// How a window's output tokens were counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenCounting {
    /// The least exact source among requests with tokens in the window.
    pub weakest: Option<TokenSource>,
    /// Requests with tokens in the window by source.
    pub requests_by_source: BTreeMap<TokenSource, u64>,
    /// Share of the window's tokens that are estimates, 0–1.
    pub estimated_share: f64,
    /// How estimates were calibrated, when there were any.
    pub calibration: Option<Calibration>,
    /// Relative uncertainty of the window's tokens: 0 when exact, `None`
    /// when an estimate could not be calibrated.
    pub relative_uncertainty: Option<f64>,
}

impl TokenCounting {
    /// The metrics crate's account, kept as is.
    pub(crate) fn of(t: &speedmatrix_metrics::TokenCount, weakest: Option<TokenSource>) -> Self {
        TokenCounting {
            weakest,
            requests_by_source: t.requests_by_source.clone(),
            estimated_share: t.estimated_share,
            calibration: t.calibration,
            relative_uncertainty: t.relative_uncertainty(),
        }
    }

    /// Whether any of the window's tokens are estimates.
    pub fn is_estimated(&self) -> bool {
        self.calibration.is_some()
    }
}

/// The increase of a server's output-token counter between two scrapes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CounterIncrease {
    /// Tokens counted.
    pub tokens: Tokens,
    /// Time between the scrapes' answers.
    #[serde(with = "duration_ns")]
    pub between_scrapes: Duration,
}
