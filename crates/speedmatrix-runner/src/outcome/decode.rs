//! Prefill points and sustained-decode cells: their numbers, and how tokens were counted.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use speedmatrix_metrics::{Calibration, TokenSource};
use speedmatrix_units::{Concurrency, Tokens};

use speedmatrix_metrics::TOKENS_PER_TEXT_UNIT;

use super::{
    FailureKind, Interference, Latency, Notice, StepId, StepStatus, duration_ns, opt_duration_ns,
};

/// One prefill point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self")]
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
#[serde(remote = "Self")]
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

// Read through `impossible_counts`: a journal written before impossible
// counts were rejected may hold them.
impl Serialize for CellOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        CellOutcome::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for CellOutcome {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        CellOutcome::deserialize(d).map(CellOutcome::without_impossible_counts)
    }
}

impl Serialize for PrefillOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        PrefillOutcome::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for PrefillOutcome {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        PrefillOutcome::deserialize(d).map(PrefillOutcome::without_impossible_counts)
    }
}

impl PrefillOutcome {
    /// The point as read from a journal: a server prompt count no prompt of
    /// its context can have (more than [`TOKENS_PER_TEXT_UNIT`] tokens per
    /// token sent, plus a chat template's) fails it, so that a resume
    /// measures it again.
    fn without_impossible_counts(self) -> Self {
        let sent = self
            .context
            .get()
            .max(crate::plan::ZERO_CONTEXT_PROMPT.get());
        let bound = sent
            .saturating_mul(TOKENS_PER_TEXT_UNIT)
            .saturating_add(speedmatrix_metrics::TEMPLATE_TOKENS);
        match self.prompt_tokens_reported {
            Some(n) if n.get() > bound || !self.prompt_tokens_per_s.is_none_or(f64::is_finite) => {
                let message = format!(
                    "the journal holds a server prompt count of {} for a {}-token prompt, more \
                     than any server counts ({}): recorded before impossible counts were rejected",
                    speedmatrix_units::group_thousands(n.get()),
                    self.context,
                    speedmatrix_units::group_thousands(bound),
                );
                PrefillOutcome::without_numbers(
                    self.context,
                    StepStatus::failed(FailureKind::ImpossibleCount, message),
                    self.repeats,
                )
            }
            _ => self,
        }
    }
}

impl CellOutcome {
    /// The cell as read from a journal: a window whose output no server can
    /// have produced ([`speedmatrix_metrics::impossible_window_output`]), or
    /// whose rates are not numbers, fails the cell, so that a resume
    /// measures it again and the report never carries it.
    fn without_impossible_counts(mut self) -> Self {
        let Some(w) = &self.window else {
            return self;
        };
        let finite = [w.total_tokens_per_s, w.per_request_tokens_per_s]
            .iter()
            .chain(&w.output_rate_series)
            .all(|r| r.is_finite());
        let streams = u64::from(self.concurrency.get());
        if finite
            && !speedmatrix_metrics::impossible_window_output(
                w.output_tokens,
                w.measured,
                streams,
                w.completed_requests,
            )
        {
            return self;
        }
        let message = format!(
            "the journal holds {} output tokens for a {:.1} s window of {} streams, more than \
             any server produces: recorded before impossible counts were rejected",
            speedmatrix_units::group_thousands(w.output_tokens.get()),
            w.measured.as_secs_f64(),
            streams,
        );
        self.status = StepStatus::failed(FailureKind::ImpossibleCount, message);
        self.window = None;
        self
    }

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
    /// The 95 % intervals of the window's figures; `None` in journals
    /// written before they were computed.
    #[serde(default)]
    pub intervals: Option<speedmatrix_report::DecodeIntervals>,
    /// With `--repeats`: every repeat's figures and their spread (the
    /// figures above are then the repeats' means).
    #[serde(default)]
    pub repeats: Option<speedmatrix_report::Repeats>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The decode record a release that stored `completion_tokens` = 2^64 − 1
    /// journaled (`tests/fixtures/hostile/impossible-window.jsonl`).
    const OLD_RECORD: &str =
        include_str!("../../../../tests/fixtures/hostile/impossible-window.jsonl");

    #[test]
    fn a_journaled_window_no_server_can_produce_reads_as_a_failed_cell() {
        let record: serde_json::Value = serde_json::from_str(OLD_RECORD).unwrap();
        let cell: CellOutcome = serde_json::from_value(record["outcome"].clone()).unwrap();
        assert!(cell.window.is_none());
        match &cell.status {
            StepStatus::Failed { failure, .. } => {
                assert_eq!(failure.kind, FailureKind::ImpossibleCount);
                assert!(
                    failure
                        .message
                        .contains("18,446,744,073,709,551,615 output tokens"),
                    "{}",
                    failure.message
                );
            }
            other => panic!("{other:?}"),
        }
        // A possible window reads as it was written.
        let mut fine = record["outcome"].clone();
        fine["window"]["output_tokens"] = 4_000.into();
        fine["window"]["total_tokens_per_s"] = 2_000.0.into();
        fine["window"]["per_request_tokens_per_s"] = 2_000.0.into();
        fine["window"]["output_rate_series"] = serde_json::json!([2_000.0]);
        let cell: CellOutcome = serde_json::from_value(fine).unwrap();
        assert_eq!(cell.status, StepStatus::Measured);
        assert_eq!(
            cell.window.map(|w| w.output_tokens),
            Some(Tokens::new(4_000))
        );
    }

    #[test]
    fn a_journaled_prompt_count_no_prompt_can_have_reads_as_a_failed_point() {
        let point = serde_json::json!({
            "context": 8192, "status": {"kind": "measured"}, "ttft": 40_000_000,
            "prompt_tokens_per_s": 4.6e20, "prompt_tokens_reported": u64::MAX, "repeats": 1
        });
        let p: PrefillOutcome = serde_json::from_value(point.clone()).unwrap();
        assert!(
            matches!(&p.status, StepStatus::Failed { failure, .. } if failure.kind == FailureKind::ImpossibleCount)
        );
        assert_eq!(p.prompt_tokens_per_s, None);
        let mut fine = point;
        fine["prompt_tokens_reported"] = 8_193.into();
        fine["prompt_tokens_per_s"] = 204_825.0.into();
        let p: PrefillOutcome = serde_json::from_value(fine).unwrap();
        assert_eq!(p.status, StepStatus::Measured);
    }
}
