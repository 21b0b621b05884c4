//! What a step or the run has to tell (notices), and why a run stopped early.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use speedmatrix_metrics::EstimateMethod;
use speedmatrix_units::Tokens;

use super::{StepId, duration_ns};

/// Something a step or the run has to tell, as data: the report and the
/// CLI each put it into words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "notice", rename_all = "snake_case")]
pub enum Notice {
    /// The server never showed every stream running with none waiting; the
    /// window opened anyway.
    NeverReady {
        /// The cell.
        step: StepId,
    },
    /// The gauges showed queueing during the window.
    QueueingDuringWindow {
        /// The cell.
        step: StepId,
    },
    /// The server turned requests away with 429/503 and they were sent again.
    Retried {
        /// The step.
        step: StepId,
        /// Retries in all.
        times: u32,
        /// Retries allowed per request.
        per_request: u32,
    },
    /// Requests were counted by the server with another prompt length.
    PromptMismatch {
        /// The step.
        step: StepId,
        /// How many.
        requests: u64,
        /// The prompt length sent.
        sent: Tokens,
    },
    /// Requests stopped early with `finish_reason: "stop"` although
    /// `ignore_eos` was set.
    IgnoreEosIgnored {
        /// The cell.
        step: StepId,
    },
    /// The client used most of its runtime threads' time during the window,
    /// so its own speed may have limited what it measured.
    ClientBound {
        /// The cell.
        step: StepId,
        /// The client's CPU use.
        load: crate::ClientLoad,
    },
    /// The server still reported running requests after the drain's limit.
    StillBusyAfterDrain {
        /// The cell.
        step: StepId,
        /// How long was waited.
        #[serde(with = "duration_ns")]
        waited: Duration,
    },
    /// Some of the window's tokens are estimates.
    Estimated {
        /// The cell.
        step: StepId,
        /// Share of the tokens estimated, 0–1.
        share: f64,
        /// How.
        method: EstimateMethod,
        /// Finished requests the factor came from (0: uncalibrated).
        calibration_requests: u64,
        /// Finished requests with the server's total in all; more than
        /// `calibration_requests` when those were a sample of them.
        #[serde(default)]
        finished_requests: u64,
        /// The factor.
        factor: f64,
        /// Relative uncertainty of the window's tokens, when known.
        uncertainty: Option<f64>,
        /// How many times wider the uncertainty is for coming from a sample
        /// than it would be from every finished request at the same spread.
        #[serde(default)]
        sample_widening: Option<f64>,
    },
    /// The context 0 row sent a short prompt with a unique cache marker.
    ZeroContextPrompt {
        /// Its tokens.
        tokens: Tokens,
    },
    /// Every request carried these extra body fields.
    ExtraBody {
        /// The fields, as JSON.
        fields: serde_json::Map<String, serde_json::Value>,
    },
    /// Every request carried fields that make the engine count on every chunk.
    EngineFields {
        /// The engine.
        engine: String,
        /// The fields.
        fields: serde_json::Map<String, serde_json::Value>,
    },
    /// The server answered streams with another Content-Type (empty: none).
    UnexpectedContentType {
        /// What it sent.
        content_type: String,
    },
    /// The server refused a request field it does not know (HTTP 400/422 naming it), so
    /// every request was sent without it.
    FieldRefused {
        /// The field, e.g. `ignore_eos`.
        field: String,
        /// What the run did instead, and what it means for the numbers.
        instead: String,
    },
    /// One of the server's descriptive endpoints (`/v1/models`, `/version`, `/metrics`, …)
    /// answered with an error or something unreadable; the run went on without it.
    ProbeWarning {
        /// What was wrong, e.g. `/v1/models: HTTP 500: Internal Server Error`.
        warning: String,
    },
    /// A dataset's sample ran out during the cell: its records were sent again from the
    /// first, and may have found their prompts in the prefix cache.
    DatasetReused {
        /// The cell.
        step: StepId,
        /// Records in the sample.
        records: u64,
    },
    /// TLS certificate verification was off.
    Insecure,
    /// The run stopped early.
    Stopped {
        /// Why.
        why: StopReason,
    },
}

/// Why a run ended before measuring every planned step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The cancellation token fired (Ctrl-C).
    Cancelled,
    /// The server stopped answering.
    ServerGone(String),
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Cancelled => f.write_str("interrupted"),
            StopReason::ServerGone(why) => write!(f, "the server stopped answering ({why})"),
        }
    }
}
