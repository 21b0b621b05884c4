//! Burst, rate and conversation cells: their numbers, the objective's verdict, knee paths.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use speedmatrix_metrics::TokenSource;
use speedmatrix_units::Tokens;

use super::{Latency, LoadPoint, Notice, StepId, StepStatus, duration_ns, opt_duration_ns};

/// One burst or rate cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self")]
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

// Read through `without_impossible_counts`, as decode cells are.
impl Serialize for LoadOutcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        LoadOutcome::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for LoadOutcome {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        LoadOutcome::deserialize(d).map(LoadOutcome::without_impossible_counts)
    }
}

impl LoadOutcome {
    /// The cell as read from a journal: output no server can have produced
    /// for its requests over its span (each at
    /// [`speedmatrix_metrics::MAX_TOKENS_PER_S`]), or a rate that is not a
    /// number, fails it, so that a resume measures it again.
    fn without_impossible_counts(mut self) -> Self {
        let Some(r) = &self.result else {
            return self;
        };
        let impossible = !r.output_tokens_per_s.is_finite()
            || speedmatrix_metrics::impossible_window_output(
                r.output_tokens,
                r.span,
                r.sent,
                r.sent,
            );
        if !impossible {
            return self;
        }
        let message = format!(
            "the journal holds {} output tokens for {} requests over {:.1} s, more than any \
             server produces: recorded before impossible counts were rejected",
            speedmatrix_units::group_thousands(r.output_tokens.get()),
            r.sent,
            r.span.as_secs_f64(),
        );
        self.status = StepStatus::failed(super::FailureKind::ImpossibleCount, message);
        self.result = None;
        self
    }

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
    /// Intended send → first content token (after any reasoning); `None` in journals
    /// written before it was kept.
    #[serde(default)]
    pub ttfc: Option<Latency>,
    /// Output tokens of each finished request; `None` in journals written before.
    #[serde(default)]
    pub output_lengths: Option<speedmatrix_report::TokenLengths>,
    /// Reasoning tokens of each finished request, when the model streamed reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_lengths: Option<speedmatrix_report::TokenLengths>,
    /// Reasoning tok/s of each finished request that reasoned (p50, p90, p99).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_rates: Option<speedmatrix_report::Percentiles>,
    /// Answer tok/s after the reasoning, of the same requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_rates: Option<speedmatrix_report::Percentiles>,
    /// Prompt tokens of each request sent, when they were not all the cell's context (a
    /// dataset, `--input-tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_lengths: Option<speedmatrix_report::TokenLengths>,
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
    /// With `--repeats`: every repeat's figures and their spread (the figures above are then
    /// the repeats' means, and the counts their sums).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<speedmatrix_report::Repeats>,
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
