//! What a journal must match to be continued: the [`ResumeKey`] of everything that changes a
//! measurement, every field typed (journal layout 2). Layout 1 wrote some of them as words;
//! `v1.rs` reads those.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use speedmatrix_units::{Api, Concurrency, LoadKind, PrefillMode, PromptSharing, Tokens};

use super::fnv1a;
use crate::config::{LoadMode, RateLength};
use crate::outcome::LoadPoint;
use crate::{RunConfig, SharedPrefix, Target};

/// Everything that changes a measurement: a journal resumes only a run with
/// the same key, or two different runs would be merged into one report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResumeKey {
    /// The server (`embedded:<profile>` for the built-in simulator).
    pub server: String,
    /// The model requests were sent to.
    pub served_model: String,
    /// The engine version the server reports.
    pub engine_version: Option<String>,
    /// The tokenizer's name.
    pub tokenizer: String,
    /// A hash of the tokenizer's definition: another tokenizer under the same
    /// name builds other prompts.
    pub tokenizer_hash: String,
    /// The endpoint.
    pub api: Api,
    /// The prompt text seed.
    pub seed: u64,
    /// Prompt sharing between a cell's streams.
    pub prompt_sharing: PromptSharing,
    /// A hash of the extra body fields every request carries.
    pub extra_body_hash: String,
    /// Decode rows.
    pub contexts: Vec<Tokens>,
    /// Decode columns.
    pub concurrencies: Vec<Concurrency>,
    /// Prefill points.
    pub prefill_contexts: Vec<Tokens>,
    /// Cold prefill requests per point.
    pub prefill_repeats: u32,
    /// Measurements of each decode cell (1 in journals written before repeats).
    #[serde(default = "one")]
    pub repeats: u32,
    /// How prefill is measured.
    pub prefill_mode: PrefillMode,
    /// The window, in nanoseconds.
    pub window_ns: u64,
    /// The most output tokens of a decode request.
    pub max_output_tokens: Tokens,
    /// Whether `min_tokens = max_tokens` was sent too.
    pub min_tokens: bool,
    /// The bursts, rates or conversations, when the run measures those instead of the
    /// sustained window (absent in journals of sustained runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadKey>,
    /// The interference probe, when asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inject: Option<InjectKey>,
    /// The workload's dataset (by its SHA-256) and sample, or its length distribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<speedmatrix_report::Workload>,
}

/// What a burst, rate or conversation run measures, for [`ResumeKey`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadKey {
    /// The kind of load.
    pub mode: LoadKind,
    /// The columns: burst sizes, rates or conversations.
    pub points: Vec<LoadPoint>,
    /// The in-flight cap.
    pub max_in_flight: Option<Concurrency>,
    /// Whether prompts were sent once before each cell.
    pub warm_cache: bool,
    /// The arrival schedule of a rate run, or a conversation's shape.
    pub schedule: Option<Schedule>,
    /// The objective, as written.
    pub slo: Option<String>,
    /// The prefix the cell's prompts share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_prefix: Option<SharedPrefix>,
    /// Whether answers could end where the model ended them (`--respect-eos`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub respect_eos: bool,
}

/// How a rate run's arrivals are drawn, or a conversation's turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum Schedule {
    /// Open-loop arrivals.
    Rate {
        /// `poisson`, `constant` or `gamma`.
        arrival: String,
        /// The gamma shape, for `gamma`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        burstiness: Option<f64>,
        /// The schedule's seed.
        seed: u64,
        /// How long each cell sends, in nanoseconds, when it sends for a time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ns: Option<u64>,
        /// How many requests each cell sends, when it sends a number.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requests: Option<u64>,
        /// How long a cell waits for its last requests, in nanoseconds.
        drain_ns: u64,
    },
    /// Multi-turn conversations.
    Conversation {
        /// Turns per conversation.
        turns: u32,
        /// Tokens of each new question.
        question_tokens: Tokens,
    },
}

/// The interference probe, for [`ResumeKey`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectKey {
    /// The injected prompt's length.
    pub tokens: Tokens,
    /// How long the streams are watched after its first token, in nanoseconds.
    pub settle_ns: u64,
}

/// `url` without a user or password: they are no part of what was measured, and never stored.
fn without_credentials(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://{host}{}", &rest[end..]),
        None => url.to_owned(),
    }
}

pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl LoadKey {
    fn of(spec: &crate::MatrixSpec) -> Option<LoadKey> {
        let slo = spec.slo.as_ref().map(ToString::to_string);
        let (points, max_in_flight, warm_cache, schedule) = match &spec.load {
            LoadMode::Sustained => return None,
            LoadMode::Burst(b) => (
                b.requests
                    .iter()
                    .filter_map(|&n| Concurrency::new(n))
                    .map(|requests| LoadPoint::Burst { requests })
                    .collect(),
                b.max_concurrency,
                b.warm_cache,
                None,
            ),
            LoadMode::Rate(r) => (
                r.rates
                    .iter()
                    .map(|&rate| LoadPoint::Rate { rate })
                    .collect(),
                r.max_in_flight,
                r.warm_cache,
                Some(Schedule::Rate {
                    arrival: match r.arrival {
                        speedmatrix_workload::ArrivalProcess::Poisson => "poisson",
                        speedmatrix_workload::ArrivalProcess::Constant => "constant",
                        _ => "gamma",
                    }
                    .to_owned(),
                    burstiness: match r.arrival {
                        speedmatrix_workload::ArrivalProcess::Gamma { burstiness } => {
                            Some(burstiness)
                        }
                        _ => None,
                    },
                    seed: r.seed,
                    duration_ns: match r.length {
                        RateLength::Duration(d) => Some(nanos(d)),
                        RateLength::Requests(_) => None,
                    },
                    requests: match r.length {
                        RateLength::Requests(n) => Some(n),
                        RateLength::Duration(_) => None,
                    },
                    drain_ns: nanos(r.drain),
                }),
            ),
            LoadMode::Conversation(c) => (
                spec.concurrencies
                    .iter()
                    .map(|&count| LoadPoint::Conversations { count })
                    .collect(),
                None,
                false,
                Some(Schedule::Conversation {
                    turns: c.turns,
                    question_tokens: c.question,
                }),
            ),
        };
        Some(LoadKey {
            mode: spec.load.kind(),
            points,
            max_in_flight,
            warm_cache,
            schedule,
            slo,
            shared_prefix: spec.shared_prefix,
            respect_eos: spec.respect_eos,
        })
    }
}

impl ResumeKey {
    /// The key of `config` measured against a server that reported
    /// `served_model` and `engine_version`.
    pub(crate) fn of(config: &RunConfig, served_model: &str, engine_version: Option<&str>) -> Self {
        let m = &config.matrix;
        let server = match (&config.labels.server_key, &config.target) {
            (Some(name), _) => name.clone(),
            (None, Target::Url(url)) => without_credentials(url.trim_end_matches('/')),
            #[cfg(feature = "embedded")]
            (None, Target::Embedded(profile)) => format!(
                "embedded:{}:{:016x}",
                profile.name,
                fnv1a(
                    serde_json::to_string(profile)
                        .unwrap_or_default()
                        .as_bytes()
                )
            ),
        };
        ResumeKey {
            server,
            served_model: served_model.to_owned(),
            engine_version: engine_version.map(str::to_owned),
            tokenizer: config.tokenizer.name().to_owned(),
            tokenizer_hash: format!("{:016x}", config.tokenizer.fingerprint()),
            api: config.api,
            seed: config.seed,
            prompt_sharing: config.prompt_sharing,
            extra_body_hash: format!(
                "{:016x}",
                fnv1a(
                    serde_json::Value::Object(config.extra_body.clone())
                        .to_string()
                        .as_bytes()
                )
            ),
            contexts: m.contexts.clone(),
            concurrencies: m.concurrencies.clone(),
            prefill_contexts: m.prefill_contexts.clone(),
            prefill_repeats: m.prefill_repeats,
            repeats: m.repeats,
            prefill_mode: m.prefill_mode,
            window_ns: nanos(m.window),
            max_output_tokens: m.max_output,
            min_tokens: config.send_min_tokens,
            load: LoadKey::of(m),
            inject: m.inject.map(|i| InjectKey {
                tokens: i.tokens,
                settle_ns: nanos(i.settle),
            }),
            workload: config.workload.as_ref().map(|w| w.record.clone()),
        }
    }

    /// The window this key measures.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }

    /// Every field whose value differs between `self` (the journal's) and `now`.
    pub fn differences(&self, now: &ResumeKey) -> Vec<super::KeyDifference> {
        super::json_differences(self, now)
    }
}

/// The repeats of a journal written before `--repeats`.
fn one() -> u32 {
    1
}

#[cfg(test)]
mod tests {
    #[test]
    fn credentials_are_no_part_of_the_server() {
        assert_eq!(
            super::without_credentials("http://u:pw@host:8000/v1"),
            "http://host:8000/v1"
        );
        assert_eq!(
            super::without_credentials("http://host:8000"),
            "http://host:8000"
        );
        assert_eq!(super::without_credentials("host:8000"), "host:8000");
    }
}
