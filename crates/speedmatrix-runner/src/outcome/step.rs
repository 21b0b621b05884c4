//! What a step is and how it ended: ids, load points, failures, exclusions and skips.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use speedmatrix_client::ErrorKind;
use speedmatrix_units::{Concurrency, RequestRate, Tokens};

/// One step of a run: a prefill point or a decode cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum StepId {
    /// Cold prefill at a context.
    Prefill {
        /// Prompt length.
        context: Tokens,
    },
    /// A sustained-decode cell.
    Decode {
        /// Prompt length of every stream.
        context: Tokens,
        /// Streams kept busy.
        concurrency: Concurrency,
    },
    /// A burst or an open-loop rate cell.
    Load {
        /// Prompt length of every request.
        context: Tokens,
        /// The burst's size or the rate.
        point: LoadPoint,
    },
}

/// The load of a burst or rate cell: its column in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadPoint {
    /// This many requests sent at once.
    Burst {
        /// Requests in the burst.
        requests: Concurrency,
    },
    /// Requests arriving at this rate.
    Rate {
        /// Intended requests per second.
        rate: RequestRate,
    },
    /// This many multi-turn conversations at once.
    Conversations {
        /// Conversations running together.
        count: Concurrency,
    },
}

impl fmt::Display for LoadPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadPoint::Burst { requests } => write!(f, "burst of {requests}"),
            LoadPoint::Rate { rate } => write!(f, "{rate}"),
            LoadPoint::Conversations { count } => write!(f, "{count} conversations"),
        }
    }
}

impl fmt::Display for StepId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StepId::Prefill { context } => write!(f, "prefill {context}"),
            StepId::Decode {
                context,
                concurrency,
            } => write!(f, "decode {context} × {concurrency}"),
            StepId::Load { context, point } => write!(f, "load {context} × {point}"),
        }
    }
}

/// What went wrong, in the client's terms or the runner's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum FailureKind {
    /// A request failed in the client (connect, status, timeout, protocol, ...).
    Request(ErrorKind),
    /// A metric could not be computed from what was recorded.
    Metrics,
    /// No output token arrived inside the window.
    NoTokens,
    /// The server reported a token count no server can have produced for
    /// the request (`speedmatrix_metrics::check_counts`); the count is not kept.
    ImpossibleCount,
    /// The request ran past the deadline its plan gives it (`docs/metrics.md`).
    Deadline,
}

impl FailureKind {
    /// The stable name: the client's error kind, `metrics`, `no_tokens`,
    /// `impossible_count` or `deadline`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Request(k) => k.as_str(),
            FailureKind::Metrics => "metrics",
            FailureKind::NoTokens => "no_tokens",
            FailureKind::ImpossibleCount => "impossible_count",
            FailureKind::Deadline => "deadline",
        }
    }
}

impl From<FailureKind> for String {
    fn from(k: FailureKind) -> String {
        k.as_str().to_owned()
    }
}

impl TryFrom<String> for FailureKind {
    type Error = String;
    fn try_from(name: String) -> Result<FailureKind, String> {
        match name.as_str() {
            "metrics" => Ok(FailureKind::Metrics),
            "no_tokens" => Ok(FailureKind::NoTokens),
            "impossible_count" => Ok(FailureKind::ImpossibleCount),
            "deadline" => Ok(FailureKind::Deadline),
            other => ErrorKind::from_name(other)
                .map(FailureKind::Request)
                .ok_or_else(|| format!("unknown failure kind `{other}`")),
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failure and the message it came with (the API key redacted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Its class.
    pub kind: FailureKind,
    /// What the client or the metrics said.
    pub message: String,
}

/// Why a planned step does not run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "excluded", rename_all = "snake_case")]
pub enum Exclusion {
    /// The requests would not fit the KV cache by the engine's rule.
    OverCapacity {
        /// Requests at once.
        concurrency: Concurrency,
        /// Tokens of one request (prompt + max output).
        request_tokens: Tokens,
        /// What the requests need, in `unit`.
        needed: u64,
        /// What the cache has, in `unit`.
        limit: u64,
        /// `blocks`, `tokens`, `slots`, ...
        unit: String,
        /// The engine's rule, in words.
        rule: String,
    },
    /// A request would not fit the server's context limit.
    TooLong {
        /// What is too long.
        what: TooLong,
        /// Its tokens.
        tokens: Tokens,
        /// The server's `max_model_len`.
        max_model_len: Tokens,
    },
}

/// What exceeds the server's context limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TooLong {
    /// A prefill prompt plus its one output token.
    PromptPlusOneToken,
    /// A decode cell's context plus its max output.
    ContextPlusMaxOutput,
}

impl fmt::Display for Exclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exclusion::OverCapacity {
                concurrency,
                request_tokens,
                needed,
                limit,
                unit,
                rule,
            } => write!(
                f,
                "{concurrency} × {request_tokens} tokens needs {} {unit} > {} available ({rule})",
                speedmatrix_units::group_thousands(*needed),
                speedmatrix_units::group_thousands(*limit),
            ),
            Exclusion::TooLong {
                what,
                tokens,
                max_model_len,
            } => {
                let what = match what {
                    TooLong::PromptPlusOneToken => "a prompt plus one output token",
                    TooLong::ContextPlusMaxOutput => "context + max output",
                };
                write!(
                    f,
                    "{what} of {tokens} tokens exceeds the server's max_model_len of {max_model_len}"
                )
            }
        }
    }
}

/// Why a step that was planned to run did not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// The run was interrupted during the step.
    Interrupted,
    /// The run stopped before the step.
    RunStopped,
    /// The server stopped answering during the step (it runs again on resume).
    ServerStopped,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkipReason::Interrupted => "interrupted",
            SkipReason::RunStopped => "the run stopped before this step",
            SkipReason::ServerStopped => "the server stopped answering during this step",
        })
    }
}

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StepStatus {
    /// Measured; every request was good.
    Measured,
    /// Measured, but some requests failed (and a stream ran the whole window).
    Partial {
        /// Requests that failed.
        failed: u64,
        /// Requests that were good.
        good: u64,
        /// Failed requests by kind.
        kinds: BTreeMap<FailureKind, u64>,
        /// The first failure.
        first: Failure,
    },
    /// Nothing usable was measured.
    Failed {
        /// The first failure.
        failure: Failure,
        /// Requests that failed (at least one).
        failed: u64,
        /// Requests that were good.
        good: u64,
    },
    /// Not run: the plan excluded it.
    Excluded(Exclusion),
    /// Not run: the run or the server stopped.
    Skipped(SkipReason),
}

impl StepStatus {
    /// Whether the step produced numbers.
    pub fn is_measured(&self) -> bool {
        matches!(self, StepStatus::Measured | StepStatus::Partial { .. })
    }

    /// A failure with one request and no good ones.
    pub(crate) fn failed(kind: FailureKind, message: String) -> StepStatus {
        StepStatus::Failed {
            failure: Failure { kind, message },
            failed: 1,
            good: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_kinds_round_trip_by_name() {
        for kind in [
            FailureKind::Request(ErrorKind::TimeoutIdle),
            FailureKind::Request(ErrorKind::Disconnected),
            FailureKind::Metrics,
            FailureKind::NoTokens,
            FailureKind::ImpossibleCount,
            FailureKind::Deadline,
        ] {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(serde_json::from_str::<FailureKind>(&json).unwrap(), kind);
        }
        assert!(serde_json::from_str::<FailureKind>("\"exploded\"").is_err());
    }

    #[test]
    fn exclusions_read_as_the_report_shows_them() {
        let over = Exclusion::OverCapacity {
            concurrency: Concurrency::new(4).unwrap(),
            request_tokens: Tokens::kibi(17),
            needed: 4_352,
            limit: 4_095,
            unit: "blocks".into(),
            rule: "N × cdiv(ℓ, block_size) ≤ num_blocks − 1".into(),
        };
        assert_eq!(
            over.to_string(),
            "4 × 17K tokens needs 4,352 blocks > 4,095 available (N × cdiv(ℓ, block_size) ≤ num_blocks − 1)"
        );
        let json = serde_json::to_string(&over).unwrap();
        assert_eq!(serde_json::from_str::<Exclusion>(&json).unwrap(), over);
    }
}
