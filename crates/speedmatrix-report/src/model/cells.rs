//! A cell's outcome in the document: its status, its numbers and how its
//! output tokens were counted.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use speedmatrix_units::{Concurrency, Interval, Tokens};

/// Whether a cell or prefill point produced numbers, and if not why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CellStatus {
    /// Measured; the numbers are trustworthy.
    Valid,
    /// Measured, but some requests failed: the numbers cover the good
    /// requests only (failed ones are counted, never averaged in), and at
    /// least one stream ran the whole window.
    Partial {
        /// Requests that failed.
        failed_requests: u64,
        /// Requests that completed or were still streaming when the window closed.
        good_requests: u64,
        /// Failed requests by the client's error kind (`disconnected`, `http_status`, ...).
        error_kinds: BTreeMap<String, u64>,
        /// The first error as the client saw it.
        message: String,
    },
    /// Not run: the requests would not fit the server's KV cache.
    OverCapacity {
        /// The rule or figure that excluded it, e.g. `4 × 136K > 348K KV tokens`.
        reason: String,
    },
    /// Run, but requests failed.
    Error {
        /// Short machine-readable class, e.g. `timeout`, `http_500`, `stream`.
        error_kind: String,
        /// The first error as the client saw it.
        message: String,
        /// Requests that failed.
        failed_requests: u64,
        /// Requests that completed or were still streaming when the window closed.
        good_requests: u64,
    },
    /// Not run for another reason (interrupted, excluded by a flag).
    Skipped {
        /// Why, in words.
        reason: String,
    },
}

impl CellStatus {
    /// Short label for tables: `Valid`, `Partial`, `Over capacity`, `Error`, `Skipped`.
    pub fn label(&self) -> &'static str {
        match self {
            CellStatus::Valid => "Valid",
            CellStatus::Partial { .. } => "Partial",
            CellStatus::OverCapacity { .. } => "Over capacity",
            CellStatus::Error { .. } => "Error",
            CellStatus::Skipped { .. } => "Skipped",
        }
    }

    /// Whether this is [`CellStatus::Valid`].
    pub fn is_valid(&self) -> bool {
        matches!(self, CellStatus::Valid)
    }

    /// Whether the cell was measured: valid, or partial (some requests failed).
    pub fn is_measured(&self) -> bool {
        matches!(self, CellStatus::Valid | CellStatus::Partial { .. })
    }

    /// The reason or message behind a non-valid status, empty for `Valid`.
    pub fn detail(&self) -> String {
        match self {
            CellStatus::Valid => String::new(),
            CellStatus::OverCapacity { reason } | CellStatus::Skipped { reason } => reason.clone(),
            CellStatus::Error {
                error_kind,
                message,
                failed_requests,
                good_requests,
            } => format!(
                "{error_kind}: {message} ({failed_requests} failed, {good_requests} good requests)"
            ),
            CellStatus::Partial {
                failed_requests,
                good_requests,
                error_kinds,
                message,
            } => {
                let kinds: Vec<String> = error_kinds
                    .iter()
                    .map(|(kind, n)| format!("{n} {kind}"))
                    .collect();
                format!(
                    "{failed_requests} of {} requests failed ({}); numbers from the {good_requests} good ones; first error: {message}",
                    failed_requests + good_requests,
                    kinds.join(", ")
                )
            }
        }
    }
}

impl DecodeMeasurements {
    /// Whether the window's output tokens are (partly) estimates.
    pub fn is_estimated(&self) -> bool {
        self.token_count
            .as_ref()
            .map_or_else(|| self.token_count_source.is_estimate(), |t| t.estimated)
    }

    /// Whether the estimate is too uncertain to show the cell as plainly valid.
    pub fn is_too_uncertain(&self) -> bool {
        self.token_count.as_ref().map_or_else(
            || self.token_count_source.is_estimate(),
            TokenCount::is_too_uncertain,
        )
    }

    /// The estimate's mark for tables (`est. ±0.4 %`), empty when exact.
    pub fn estimate_mark(&self) -> String {
        match &self.token_count {
            Some(t) => t.mark(),
            None if self.token_count_source.is_estimate() => "est., uncalibrated".to_owned(),
            None => String::new(),
        }
    }
}

impl DecodeCell {
    /// The status as tables show it: `Valid`, `Partial`, or `Estimated`
    /// for a measured cell whose token count is an estimate with more than
    /// [`MAX_PLAIN_UNCERTAINTY_PCT`] or unknown uncertainty; with the
    /// estimate's mark (`Valid (est. ±0.4 %)`) whenever it is one.
    pub fn status_label(&self) -> String {
        let Some(m) = self
            .measurements
            .as_ref()
            .filter(|_| self.status.is_measured())
        else {
            return self.status.label().to_owned();
        };
        let mark = m.estimate_mark();
        match (&self.status, m.is_too_uncertain()) {
            (CellStatus::Valid, true) => {
                format!(
                    "Estimated ({})",
                    mark.trim_start_matches("est.")
                        .trim_start_matches([',', ' '])
                )
            }
            (status, _) if mark.is_empty() => status.label().to_owned(),
            (status, _) => format!("{} ({mark})", status.label()),
        }
    }
}

/// One sustained-decode cell: `concurrency` streams of `context`-token prompts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecodeCell {
    /// Prompt length of every stream.
    #[schemars(with = "u64")]
    pub context: Tokens,
    /// Streams kept in flight.
    #[schemars(with = "std::num::NonZeroU32")]
    pub concurrency: Concurrency,
    /// Outcome.
    pub status: CellStatus,
    /// The numbers; present when `status` is valid, optional (partial) for errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurements: Option<DecodeMeasurements>,
}

/// Median, 90th and 99th percentile of one latency, all in the unit the field names.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// The prefill–decode interference probe of a cell (docs/metrics.md,
/// "Prefill under load").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Interference {
    /// The injected prompt's length.
    #[schemars(with = "u64")]
    pub prompt_tokens: Tokens,
    /// Its TTFT sent alone, before the streams, nothing cached, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_alone_ms: Option<f64>,
    /// Its TTFT sent into the running streams, nothing cached, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_under_load_ms: Option<f64>,
    /// The streams' total tok/s in the window before it.
    pub tokens_per_s_before: f64,
    /// Their total tok/s from its send to its first token.
    pub tokens_per_s_during: f64,
    /// Their total tok/s in the settle time after its first token.
    pub tokens_per_s_after: f64,
    /// Their time between tokens while it was prefilled, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_during_ms: Option<Percentiles>,
    /// Output tokens the streams did not produce while it was prefilled.
    pub tokens_lost: f64,
    /// Those tokens as time at the before rate, milliseconds.
    pub stall_ms: f64,
    /// The streams' total tok/s in equal parts from a second before its
    /// send to the end of the settle time, for the timeline chart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<TimelinePoint>,
    /// Why the probe has no figures, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// One part of the interference timeline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TimelinePoint {
    /// Start of the part relative to the injected send, milliseconds
    /// (negative before it).
    pub t_ms: f64,
    /// The streams' total output tok/s over the part.
    pub tokens_per_s: f64,
}

/// Where output-token counts came from, from most to least exact.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TokenCountSource {
    /// Cumulative `usage` on every chunk (vLLM and SGLang `continuous_usage_stats`).
    UsagePerChunk,
    /// A running count the engine put in every chunk besides `usage`
    /// (llama.cpp `timings.predicted_n`; TGI's one event per token).
    EngineCount,
    /// `usage` at the end of a finished request: exact in sum, shared out
    /// over its chunks by their tokenized text.
    FinalUsage,
    /// Estimated: the request's whole text tokenized with the run's
    /// tokenizer, scaled by the cell's calibration.
    Tokenizer,
    /// Estimated: chunks with text, scaled by the cell's calibration.
    ChunkCount,
}

impl TokenCountSource {
    /// Words for footnotes.
    pub fn describe(self) -> &'static str {
        match self {
            TokenCountSource::UsagePerChunk => "server-reported usage on every chunk",
            TokenCountSource::EngineCount => "the engine's running token count on every chunk",
            TokenCountSource::FinalUsage => "server-reported usage at the end of each request",
            TokenCountSource::Tokenizer => {
                "the streamed text re-tokenized with the run's tokenizer (an estimate)"
            }
            TokenCountSource::ChunkCount => "streamed chunks counted (an estimate)",
        }
    }

    /// The name used in JSON and CSV (`usage_per_chunk`, `tokenizer`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TokenCountSource::UsagePerChunk => "usage_per_chunk",
            TokenCountSource::EngineCount => "engine_count",
            TokenCountSource::FinalUsage => "final_usage",
            TokenCountSource::Tokenizer => "tokenizer",
            TokenCountSource::ChunkCount => "chunk_count",
        }
    }

    /// Whether counts from this source are estimates.
    pub fn is_estimate(self) -> bool {
        matches!(
            self,
            TokenCountSource::Tokenizer | TokenCountSource::ChunkCount
        )
    }
}

/// The largest uncertainty of an estimated token count that is still shown
/// as plainly valid, percent.
pub const MAX_PLAIN_UNCERTAINTY_PCT: f64 = 1.0;

/// How a cell's output tokens were counted, in detail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenCount {
    /// Requests with tokens in the window by how they were counted
    /// ([`TokenCountSource::as_str`] → requests).
    pub requests_by_source: BTreeMap<String, u64>,
    /// Whether some of the window's tokens are estimates.
    pub estimated: bool,
    /// Share of the window's output tokens that are estimates, percent.
    pub estimated_share_pct: f64,
    /// What the estimates counted (`tokenizer` or `chunk_count`), when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_method: Option<TokenCountSource>,
    /// Server tokens per estimated token, from the calibration requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration_factor: Option<f64>,
    /// Finished requests with a server count that calibrated the estimate.
    #[serde(default)]
    pub calibration_requests: u64,
    /// Half-width of the 95 % interval of the window's output-token count
    /// (and so of its tok/s), percent: 0 when every count is exact, absent
    /// when an estimate could not be calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty_pct: Option<f64>,
}

impl TokenCount {
    /// Every count of the window was the server's own.
    pub fn exact(source: TokenCountSource, requests: u64) -> TokenCount {
        TokenCount {
            requests_by_source: BTreeMap::from([(source.as_str().to_owned(), requests)]),
            estimated: false,
            estimated_share_pct: 0.0,
            estimate_method: None,
            calibration_factor: None,
            calibration_requests: 0,
            uncertainty_pct: Some(0.0),
        }
    }

    /// Whether the count is too uncertain to call the cell plainly valid:
    /// estimated with more than [`MAX_PLAIN_UNCERTAINTY_PCT`] or an unknown uncertainty.
    pub fn is_too_uncertain(&self) -> bool {
        self.estimated
            && self
                .uncertainty_pct
                .is_none_or(|u| u > MAX_PLAIN_UNCERTAINTY_PCT)
    }

    /// A short mark for tables: `est. ±0.4 %`, `est., uncalibrated`; empty when exact.
    pub fn mark(&self) -> String {
        if !self.estimated {
            return String::new();
        }
        match self.uncertainty_pct {
            Some(u) => format!("est. ±{u:.1} %"),
            None => "est., uncalibrated".to_owned(),
        }
    }
}

/// The numbers of one decode cell's measurement window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecodeMeasurements {
    /// Output tokens of all streams arriving inside the window / window length.
    pub total_tokens_per_s: f64,
    /// Median over streams of each stream's output tokens per second inside the window.
    pub per_request_tokens_per_s: f64,
    /// Time to first token of requests started inside the window, milliseconds.
    pub ttft_ms: Percentiles,
    /// Time between output tokens inside the window, milliseconds.
    pub time_between_tokens_ms: Percentiles,
    /// Time-weighted mean of requests in flight.
    pub average_active_requests: f64,
    /// Requests that finished inside the window.
    pub completed_requests: u64,
    /// Output tokens that arrived inside the window.
    #[schemars(with = "u64")]
    pub output_tokens: Tokens,
    /// Length of the measured window, seconds.
    pub measured_s: f64,
    /// The server queued requests (waiting > 0) during the window.
    pub queueing_detected: bool,
    /// Requests whose server-reported prompt tokens differ from the prompt built.
    pub prompt_token_mismatches: u64,
    /// Where output-token counts came from: the least exact source among
    /// the requests with tokens in the window.
    pub token_count_source: TokenCountSource,
    /// How output tokens were counted in detail: sources, estimate and its
    /// uncertainty. Absent in documents of schema version 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_count: Option<TokenCount>,
    /// How requests ended: finish reason → count (`length`, `stop`, `abort`).
    #[serde(default)]
    pub finish_reasons: BTreeMap<String, u64>,
    /// The server's own count of output tokens over the window, for cross-checking
    /// `total_tokens_per_s`: the increase of vLLM's `vllm:generation_tokens_total`
    /// (summed over label sets) between a scrape at the window's start and one at
    /// its end. Absent when the server exports no such counter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_counter: Option<ServerCounter>,
    /// The client's own CPU use over the window. Absent before schema
    /// version 3 and with the built-in simulator (it shares the process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientCpu>,
    /// What the GPUs, the host and the server did over the window. Absent
    /// before schema version 4 and when the run gathered no telemetry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<super::CellTelemetry>,
    /// One cold long prompt sent into the running streams after the window
    /// (`--inject`): its TTFT alone and under load, the streams' stall.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interference: Option<Interference>,
    /// The 95 % confidence intervals of this window's figures, from within
    /// the window (docs/metrics.md, "Uncertainty"). Absent before schema
    /// version 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intervals: Option<DecodeIntervals>,
    /// With `--repeats N` (N > 1): each repeat's figures and their spread;
    /// the figures above are then the repeats' means (see [`Repeats`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<Repeats>,
    /// In a predicted document: where the measurement is expected to fall (see
    /// [`PredictionBand`]). Absent in measured documents and before schema version 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub band: Option<PredictionBand>,
}

/// A predicted cell's band: the range its measurement falls in with probability `level`
/// (0.8), from the predictor's leave-one-rig-out errors on public rigs of the same engine
/// family and phase (`docs/predict.md`). Not a confidence interval of a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PredictionBand {
    /// The probability the band is meant to hold the measurement, e.g. `0.8`.
    pub level: f64,
    /// Of `total_tokens_per_s`.
    pub total_tokens_per_s: Interval,
    /// Of `per_request_tokens_per_s`.
    pub per_request_tokens_per_s: Interval,
}

/// The 95 % confidence intervals of one window's figures, each in its
/// figure's unit; a figure the window cannot bound has none.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecodeIntervals {
    /// Equal parts of the window the batch means were taken over.
    pub batches: u32,
    /// Of `total_tokens_per_s`: batch means, widened by an estimated count's uncertainty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens_per_s: Option<Interval>,
    /// Of `per_request_tokens_per_s`: batch means of decoding tokens over decoding time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_request_tokens_per_s: Option<Interval>,
    /// Of the median TTFT, milliseconds: order statistics (six requests or more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p50_ms: Option<Interval>,
    /// Of the median time between tokens, milliseconds: batch medians.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_between_tokens_p50_ms: Option<Interval>,
}

/// A cell measured several times back to back (`--repeats N`, one warm-up):
/// each figure's value in every repeat, their mean, the 95 % interval of
/// the mean (Student's t over the repeats) and their coefficient of
/// variation. The cell's headline figures are these means; its other
/// fields (counts, series, telemetry) are the first repeat's, its
/// `output_tokens` and `measured_s` the repeats' sums.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Repeats {
    /// Repeats measured.
    pub count: u32,
    /// Total output tok/s of each repeat.
    pub total_tokens_per_s: RepeatFigure,
    /// Per-request tok/s of each repeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_request_tokens_per_s: Option<RepeatFigure>,
    /// Median TTFT of each repeat, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p50_ms: Option<RepeatFigure>,
    /// Median time between tokens of each repeat, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_between_tokens_p50_ms: Option<RepeatFigure>,
}

/// One figure over a cell's repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RepeatFigure {
    /// The figure in each repeat, in order.
    pub values: Vec<f64>,
    /// Their mean.
    pub mean: f64,
    /// The 95 % interval of the mean; absent for one repeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Interval>,
    /// Sample standard deviation over the mean; absent for one repeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cv: Option<f64>,
}

impl DecodeMeasurements {
    /// The interval of total tok/s a comparison should use: the repeats'
    /// when the cell was repeated, else the window's.
    pub fn total_tokens_per_s_interval(&self) -> Option<Interval> {
        match &self.repeats {
            Some(r) => r.total_tokens_per_s.interval,
            None => self.intervals.and_then(|i| i.total_tokens_per_s),
        }
    }

    /// Likewise for the median TTFT, milliseconds.
    pub fn ttft_p50_interval(&self) -> Option<Interval> {
        match &self.repeats {
            Some(r) => r.ttft_p50_ms.as_ref().and_then(|f| f.interval),
            None => self.intervals.and_then(|i| i.ttft_p50_ms),
        }
    }

    /// Likewise for the median time between tokens, milliseconds.
    pub fn time_between_tokens_p50_interval(&self) -> Option<Interval> {
        match &self.repeats {
            Some(r) => r
                .time_between_tokens_p50_ms
                .as_ref()
                .and_then(|f| f.interval),
            None => self.intervals.and_then(|i| i.time_between_tokens_p50_ms),
        }
    }
}

/// The benchmark client's CPU use over a window, read from its process CPU clock.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientCpu {
    /// CPU time of the whole client process over the window / window length, in cores.
    pub cpu_cores: f64,
    /// Threads of the client's async runtime.
    pub runtime_threads: u32,
    /// The client was busy at least 80 % of its runtime threads' time: its
    /// own speed may have limited the cell's numbers.
    pub client_bound: bool,
}

/// The increase of a server-side token counter between two scrapes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerCounter {
    /// Output tokens the server counted between the two scrapes.
    #[schemars(with = "u64")]
    pub generation_tokens: Tokens,
    /// Time between the two scrapes' answers, seconds (≈ `measured_s`; scraping
    /// never lengthens the window).
    pub between_scrapes_s: f64,
}

impl ServerCounter {
    /// The server's output rate over the scrapes' interval, tokens per second.
    pub fn tokens_per_s(&self) -> f64 {
        if self.between_scrapes_s > 0.0 {
            self.generation_tokens.get() as f64 / self.between_scrapes_s
        } else {
            0.0
        }
    }
}
