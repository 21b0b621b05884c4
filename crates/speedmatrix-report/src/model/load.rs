//! Load cells beyond the sustained-decode window (schema version 4): bursts
//! of N requests sent at once, and open-loop runs at a request rate, each
//! latency measured from the request's intended send time.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use speedmatrix_units::{LoadKind, Tokens};

use super::{CellStatus, Percentiles, TokenCountSource};

/// The load runs of a document, when it has them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadRun {
    /// `burst` (N requests at once per cell), `rate` (requests arriving at a
    /// rate) or `conversation` (N multi-turn conversations at once); never
    /// `sustained`, whose cells are the document's `decode`.
    pub mode: LoadKind,
    /// How arrivals were drawn, for `rate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival: Option<ArrivalSetup>,
    /// A cap on requests in flight at once (`--max-concurrency`), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// The service-level objective the cells were judged by, as given
    /// (`ttft_p99=2000ms,itl_p99=100ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<String>,
    /// Where the prompts came from, when not the run's own (`--dataset`, `--input-tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<Workload>,
    /// One cell per context × load, row by row (a search's cells in the order tried).
    pub cells: Vec<LoadCell>,
    /// Each context's knee search, when the run searched for the highest
    /// load that meets the objective.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub searches: Vec<KneeResult>,
}

/// One context's knee search (bracketing by doubling or halving, then
/// bisection; docs/metrics.md, "Knee search").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KneeResult {
    /// The context searched.
    #[schemars(with = "u64")]
    pub context: Tokens,
    /// What it looked for: `most_load_meeting_slo` (the knee), or
    /// `per_request_at_floor` (the fastest requests among loads whose output
    /// tok/s reach `floor_tokens_per_s`); absent in older documents (a knee).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// The floor of output tok/s, for `per_request_at_floor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_tokens_per_s: Option<f64>,
    /// Each load tried, in order: burst size or requests per second.
    pub path: Vec<KneeStep>,
    /// The answer: the highest load that met the objective, or the load
    /// whose requests were fastest at the floor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knee: Option<f64>,
    /// `converged`, `max_met` (the highest load allowed met it), `nothing_met`,
    /// `floor_not_reached` (not even the highest load reached the floor)
    /// or `step_limit`; absent when the run stopped first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
}

/// One try of a knee search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KneeStep {
    /// Burst size or requests per second.
    pub load: f64,
    /// Whether the cell met the objective (and reached the floor, if any).
    pub met: bool,
    /// Its output tok/s over the span, when measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens_per_s: Option<f64>,
    /// Its median request's decode speed (1 / TPOT p50), tok/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_request_tokens_per_s: Option<f64>,
}

/// How an open-loop run's send times were drawn (before the run, from a seed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArrivalSetup {
    /// `poisson`, `constant` or `gamma`.
    pub process: String,
    /// The gamma shape (1 is Poisson), for `gamma`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burstiness: Option<f64>,
    /// The seed of the schedule.
    pub seed: u64,
    /// How long each rate cell sends for, seconds, when bounded by time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// How many requests each rate cell sends, when bounded by count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
}

/// One context × load of a load run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadCell {
    /// Prompt length of every request.
    #[schemars(with = "u64")]
    pub context: Tokens,
    /// Requests in the burst (`burst`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    /// Intended requests per second (`rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// Whether it ran and how it went.
    pub status: CellStatus,
    /// The numbers, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measurements: Option<LoadMeasurements>,
}

/// What a load cell measured. Latencies are of the finished requests, from
/// each request's intended send time (a burst's start; an open-loop run's
/// drawn time), so a client that sends late cannot hide queueing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadMeasurements {
    /// Requests sent.
    pub sent: u64,
    /// Requests the server finished.
    pub completed: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Requests still running when the cell ended, cancelled; no latency is known for them.
    pub unfinished: u64,
    /// From the first intended send to the last request's end, seconds.
    pub duration_s: f64,
    /// Requests per second the schedule meant (`rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intended_rate_per_s: Option<f64>,
    /// Requests per second actually sent: sent ÷ (last send − first intended send).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub achieved_rate_per_s: Option<f64>,
    /// Most requests in flight at once, as the client counted them.
    pub max_in_flight: u64,
    /// Output tokens of every request.
    #[schemars(with = "u64")]
    pub output_tokens: Tokens,
    /// Output tokens ÷ `duration_s`.
    pub output_tokens_per_s: f64,
    /// Intended send → first token, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<Percentiles>,
    /// Intended send → end, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<Percentiles>,
    /// Time between tokens over every interval, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_ms: Option<Percentiles>,
    /// Per request mean time per output token after the first, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<Percentiles>,
    /// Actual − intended send time, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_lag_ms: Option<Percentiles>,
    /// How the output tokens were counted (the least exact source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_count_source: Option<TokenCountSource>,
    /// How the cell fared against the objective, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloResult>,
    /// The prompt tokens every request shared (`--shared-prefix`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<u64>")]
    pub shared_prefix_tokens: Option<Tokens>,
    /// The prefix-cache hit rate the shared prefix should give (its full KV
    /// blocks, never a prompt's last token), percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_intended_pct: Option<f64>,
    /// The server's hit rate over the cell (its counters' differences), percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_measured_pct: Option<f64>,
    /// In a conversation cell, each turn's figures over the conversations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnStats>,
    /// With `--repeats`: each repeat's output tok/s, TTFT p50 and ITL p50 with their mean,
    /// 95 % interval and coefficient of variation (the figures above are then the repeats'
    /// means, the counts their sums). Absent before schema version 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeats: Option<super::Repeats>,
    /// Intended send → first content token in milliseconds (after any reasoning: later than
    /// `ttft_ms` when the model reasons first). Absent before schema version 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfc_ms: Option<Percentiles>,
    /// Output tokens per finished request: how long the answers were (each `max_tokens` with
    /// `ignore_eos`; where the model stopped with `--respect-eos`). Absent before version 6.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_request: Option<TokenLengths>,
    /// Prompt tokens per request sent, as the server counted them (the run's own count where
    /// it reported none): the lengths a dataset or `--input-tokens` gave. Absent when every
    /// prompt had the cell's context (and before schema version 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens_per_request: Option<TokenLengths>,
    /// Reasoning ("thinking") tokens per finished request — its output tokens before its
    /// first content token — when the model streamed reasoning apart from its answer
    /// (`delta.reasoning_content` / `delta.reasoning`); they are part of the output tokens.
    /// Absent for a model that answered at once (and before schema version 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens_per_request: Option<TokenLengths>,
    /// Reasoning tokens per second of each finished request that reasoned — its reasoning
    /// tokens over the time from its first token to its first answer text — p50, p90, p99.
    /// Absent when no request reasoned (and before schema 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens_per_s: Option<Percentiles>,
    /// Answer tokens per second after the reasoning, of the same requests: the answer's
    /// tokens after its first over the time from its first answer text to its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_tokens_per_s: Option<Percentiles>,
}

/// Token lengths per request of a cell (prompts sent or answers received).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenLengths {
    /// The shortest.
    pub min: f64,
    /// Their mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// The longest.
    pub max: f64,
    /// How many requests had each length, in power-of-two bins (`1`, `2–3`, `4–7`, …) from
    /// the shortest to the longest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub histogram: Vec<LengthBin>,
}

/// Requests whose length lies in `from..=to` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LengthBin {
    /// The smallest length of the bin, tokens.
    pub from: u64,
    /// The largest length of the bin, tokens.
    pub to: u64,
    /// Requests in it.
    pub requests: u64,
}

/// Where a load run's prompts came from, so that it can be repeated exactly: a dataset
/// file (named by its SHA-256) and the sample drawn from it, or a length distribution.
/// Absent when the prompts were the run's own at each context (and before schema 6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// The dataset's file name (without its folder), when prompts came from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// Its format: `sharegpt`, `jsonl` or `text`; for a replayed trace `mooncake` (with
    /// `hash_ids`) or `trace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// The file's SHA-256 (lowercase hex): `sha256sum FILE` shows the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Usable records in the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<u64>,
    /// Records left out as unusable (a conversation without a user turn, an empty prompt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_records: Option<u64>,
    /// Records drawn (`--dataset-sample`), when not all of them were used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<u64>,
    /// The seed of the sample, the lengths and the text cut from a corpus.
    pub seed: u64,
    /// The prompt length distribution (`--input-tokens`), as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<String>,
    /// Each request's `max_tokens` came from the dataset's answer lengths.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_tokens_from_dataset: bool,
    /// A replayed trace (`format` `mooncake` or `trace`): how much faster than its own time
    /// it was sent (`--trace-speed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_speed: Option<f64>,
    /// A Mooncake trace: tokens per `hash_ids` block its prompts were built in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_tokens: Option<u64>,
}

impl Workload {
    /// A short line for the page: `sharegpt.json (sharegpt, sha256 1a2b3c4d5e6f, 200 of
    /// 94,145 records, seed 7)`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(f) = &self.format {
            parts.push(f.clone());
        }
        if let Some(h) = &self.sha256 {
            parts.push(format!("sha256 {}", &h[..h.len().min(12)]));
        }
        match (self.sample, self.records) {
            (Some(n), Some(all)) => parts.push(format!("{n} of {all} records")),
            (None, Some(all)) => parts.push(format!("{all} records")),
            _ => {}
        }
        if let Some(d) = &self.input_tokens {
            parts.push(format!("prompt tokens {d}"));
        }
        parts.push(format!("seed {}", self.seed));
        if self.output_tokens_from_dataset {
            parts.push("answer lengths from the dataset".into());
        }
        if let Some(speed) = self.trace_speed {
            parts.push(format!("replayed at {speed}× its pace"));
        }
        if let Some(b) = self.block_tokens {
            parts.push(format!("prefix blocks of {b} tokens"));
        }
        match &self.dataset {
            Some(name) => format!("{name} ({})", parts.join(", ")),
            None => parts.join(", "),
        }
    }
}

/// One turn of the conversations of a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnStats {
    /// 1 for the first turn.
    pub turn: u32,
    /// Requests of this turn that finished.
    pub completed: u64,
    /// Their TTFT, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<Percentiles>,
    /// Their mean prompt tokens as the server counted them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_mean: Option<f64>,
}

/// A cell against the run's objective.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SloResult {
    /// Every term's percentile at or under its limit.
    pub met: bool,
    /// Requests that met every term on their own figures, percent of those sent.
    pub attainment_pct: f64,
    /// Those requests per second of the cell's duration (DistServe's goodput).
    pub goodput_per_s: f64,
    /// Each term over the cell.
    pub terms: Vec<SloTermResult>,
}

/// One term over a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SloTermResult {
    /// The term as written (`ttft_p99`).
    pub term: String,
    /// Its limit, milliseconds.
    pub limit_ms: f64,
    /// The cell's value, milliseconds; absent when the cell had none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_ms: Option<f64>,
    /// At or under the limit.
    pub met: bool,
}
