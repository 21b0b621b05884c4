//! The runner's own results, typed: what each step measured or why it did
//! not, and what is worth telling about it. The journal stores these; the
//! report document is made from them once, at the end (`report.rs`).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use speedmatrix_client::ErrorKind;
use speedmatrix_metrics::{Calibration, EstimateMethod, TokenSource};
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
}

impl FailureKind {
    /// The stable name: the client's error kind, `metrics` or `no_tokens`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Request(k) => k.as_str(),
            FailureKind::Metrics => "metrics",
            FailureKind::NoTokens => "no_tokens",
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

/// One burst or rate cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadOutcome {
    /// Prompt length of every request.
    pub context: Tokens,
    /// The burst's size or the rate.
    pub point: LoadPoint,
    /// How it ended.
    pub status: StepStatus,
    /// The numbers, when measured.
    #[serde(default)]
    pub result: Option<LoadResult>,
    /// What the cell had to say.
    #[serde(default)]
    pub notices: Vec<Notice>,
}

impl LoadOutcome {
    /// The step this cell is.
    pub fn step(&self) -> StepId {
        StepId::Load {
            context: self.context,
            point: self.point,
        }
    }
}

/// One context's knee search: every load tried in order, whether it met the
/// objective, and the highest that did.
#[derive(Debug, Clone, PartialEq)]
pub struct KneePath {
    /// The context searched.
    pub context: Tokens,
    /// What the search looked for.
    pub goal: crate::config::SearchGoal,
    /// Each load tried, in order.
    pub path: Vec<KneeTry>,
    /// The answer: the highest load that met the objective, or the load
    /// with the fastest requests at the floor.
    pub knee: Option<LoadPoint>,
    /// Why the search ended; `None` when the run stopped first.
    pub end: Option<crate::search::SearchEnd>,
}

/// One try of a search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KneeTry {
    /// The load tried.
    pub point: LoadPoint,
    /// Whether its cell met the objective (and reached the floor, when one
    /// was asked).
    pub met: bool,
    /// Its output tok/s over the span, when measured.
    pub total_tokens_per_s: Option<f64>,
    /// Its median request's decode speed (1 / TPOT p50), tok/s.
    pub per_request_tokens_per_s: Option<f64>,
}

/// The numbers of one burst or rate cell (see `docs/metrics.md`, "Load cells").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadResult {
    /// Requests sent.
    pub sent: u64,
    /// Requests the server finished.
    pub completed: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Requests still running when the cell ended, cancelled.
    pub unfinished: u64,
    /// From the first intended send to the last request's end.
    #[serde(with = "duration_ns")]
    pub span: Duration,
    /// Requests per second the schedule meant (rate cells).
    pub intended_rate_per_s: Option<f64>,
    /// Requests per second actually sent.
    pub achieved_rate_per_s: Option<f64>,
    /// Most requests in flight at once.
    pub max_in_flight: u64,
    /// Output tokens of every request.
    pub output_tokens: Tokens,
    /// Output tokens over the span.
    pub output_tokens_per_s: f64,
    /// Intended send → first token.
    pub ttft: Option<Latency>,
    /// Intended send → end.
    pub e2e: Option<Latency>,
    /// Every token interval.
    pub itl: Option<Latency>,
    /// Per request mean time per output token.
    pub tpot: Option<Latency>,
    /// Actual − intended send.
    pub send_lag: Option<Latency>,
    /// The least exact token source.
    pub token_source: Option<TokenSource>,
    /// The objective's verdict, when one was given.
    pub slo: Option<SloVerdict>,
    /// With a shared prefix: the hit rate it should give and the server's.
    #[serde(default)]
    pub prefix_cache: Option<PrefixCacheCheck>,
    /// In a conversation cell, each turn's figures.
    #[serde(default)]
    pub turns: Vec<TurnResult>,
}

/// One turn of a conversation cell, over its conversations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnResult {
    /// 1 for the first turn.
    pub turn: u32,
    /// Requests of this turn that finished.
    pub completed: u64,
    /// Their TTFT.
    pub ttft: Option<Latency>,
    /// Their mean prompt tokens as the server counted them.
    pub prompt_tokens_mean: Option<f64>,
}

/// A shared-prefix cell's prefix cache: intended against measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PrefixCacheCheck {
    /// The prompt tokens every request shares.
    pub shared_tokens: Tokens,
    /// The hit rate the prefix should give (its full KV blocks, never the
    /// prompt's last token), when the block size is known.
    pub intended_hit_rate: Option<f64>,
    /// Prefix-cache hits ÷ lookups over the cell, from the server's counters.
    pub measured_hit_rate: Option<f64>,
}

/// A load cell against the objective.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloVerdict {
    /// Every term met.
    pub met: bool,
    /// Requests that met every term on their own figures.
    pub good_requests: u64,
    /// Requests judged (failed and unfinished ones included).
    pub requests: u64,
    /// Good requests per second of the span.
    pub goodput_per_s: f64,
    /// Each term: its name (`ttft_p99`), limit, the cell's value, met.
    pub terms: Vec<SloTermVerdict>,
}

/// One term over a load cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloTermVerdict {
    /// `ttft_p99`, `itl_p99.9`, ...
    pub term: String,
    /// The limit.
    #[serde(with = "duration_ns")]
    pub limit: Duration,
    /// The cell's value.
    #[serde(with = "opt_duration_ns")]
    pub value: Option<Duration>,
    /// At or under the limit.
    pub met: bool,
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

/// Median, 90th and 99th percentile of a latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    #[serde(with = "duration_ns")]
    pub p50: Duration,
    /// 90th percentile.
    #[serde(with = "duration_ns")]
    pub p90: Duration,
    /// 99th percentile.
    #[serde(with = "duration_ns")]
    pub p99: Duration,
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
        /// The factor.
        factor: f64,
        /// Relative uncertainty of the window's tokens, when known.
        uncertainty: Option<f64>,
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

/// Durations as whole nanoseconds in the journal.
pub(crate) mod duration_ns {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_nanos)
    }
}

mod opt_duration_ns {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(d).map(|n| n.map(Duration::from_nanos))
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
