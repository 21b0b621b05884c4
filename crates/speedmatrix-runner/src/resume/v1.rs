//! Journals of layout 1, which wrote parts of the key as words (the shared prefix, a rate
//! run's schedule and the interference probe in Rust's debug notation): such a journal is
//! still continued. Its key is compared with this run's key written the way layout 1 wrote
//! it — those words are computed here for the comparison only, never written.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use speedmatrix_units::{Api, Concurrency, PrefillMode, PromptSharing, Tokens};

use super::key::{InjectKey, LoadKey, ResumeKey, Schedule};
use crate::config::RateLength;
use crate::outcome::LoadPoint;

/// A layout-1 key, as journals of that layout hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResumeKeyV1 {
    server: String,
    served_model: String,
    engine_version: Option<String>,
    tokenizer: String,
    tokenizer_hash: String,
    api: Api,
    seed: u64,
    prompt_sharing: PromptSharing,
    extra_body_hash: String,
    contexts: Vec<Tokens>,
    concurrencies: Vec<Concurrency>,
    prefill_contexts: Vec<Tokens>,
    prefill_repeats: u32,
    prefill_mode: PrefillMode,
    window_ns: u64,
    max_tokens: Tokens,
    min_tokens: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    load: Option<LoadKeyV1>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    inject: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadKeyV1 {
    mode: String,
    points: Vec<LoadPoint>,
    max_in_flight: Option<Concurrency>,
    warm_cache: bool,
    schedule: Option<String>,
    slo: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    shared_prefix: Option<String>,
}

impl ResumeKeyV1 {
    /// `key` as layout 1 wrote it.
    pub(crate) fn of(key: &ResumeKey) -> ResumeKeyV1 {
        let k = key.clone();
        ResumeKeyV1 {
            server: k.server,
            served_model: k.served_model,
            engine_version: k.engine_version,
            tokenizer: k.tokenizer,
            tokenizer_hash: k.tokenizer_hash,
            api: k.api,
            seed: k.seed,
            prompt_sharing: k.prompt_sharing,
            extra_body_hash: k.extra_body_hash,
            contexts: k.contexts,
            concurrencies: k.concurrencies,
            prefill_contexts: k.prefill_contexts,
            prefill_repeats: k.prefill_repeats,
            prefill_mode: k.prefill_mode,
            window_ns: k.window_ns,
            max_tokens: k.max_output_tokens,
            min_tokens: k.min_tokens,
            load: k.load.map(load_v1),
            inject: k.inject.map(|InjectKey { tokens, settle_ns }| {
                format!(
                    "{} tokens, settle {:?}",
                    tokens.get(),
                    Duration::from_nanos(settle_ns)
                )
            }),
        }
    }

    /// Every field in which this journal's key and `now` (written as layout 1 wrote it) differ.
    pub(crate) fn differences(&self, now: &ResumeKey) -> Vec<super::KeyDifference> {
        super::json_differences(self, &ResumeKeyV1::of(now))
    }
}

fn load_v1(l: LoadKey) -> LoadKeyV1 {
    LoadKeyV1 {
        mode: l.mode.as_str().to_owned(),
        points: l.points,
        max_in_flight: l.max_in_flight,
        warm_cache: l.warm_cache,
        schedule: l.schedule.map(|s| match s {
            Schedule::Rate {
                arrival,
                burstiness,
                seed,
                duration_ns,
                requests,
                drain_ns,
            } => {
                let process = match burstiness {
                    Some(b) => format!("{arrival} (burstiness {b})"),
                    None => arrival,
                };
                let length = match (duration_ns, requests) {
                    (_, Some(n)) => RateLength::Requests(n),
                    (d, None) => RateLength::Duration(Duration::from_nanos(d.unwrap_or(0))),
                };
                format!(
                    "{process} seed {seed} {length:?} drain {:?}",
                    Duration::from_nanos(drain_ns)
                )
            }
            Schedule::Conversation {
                turns,
                question_tokens,
            } => format!(
                "{turns} turns, questions of {} tokens",
                question_tokens.get()
            ),
        }),
        slo: l.slo,
        shared_prefix: l.shared_prefix.map(|p| format!("{p:?}")),
    }
}
