//! Multi-turn conversation cells: N conversations at once, each turn's
//! prompt the previous turn's prompt, its answer and a new question, so the
//! server's prefix cache holds every turn but the newest text.
//!
//! Each conversation runs its turns one after another in its own task; a
//! failed turn ends that conversation (its later turns are not sent). The
//! cell's figures are those of every turn (the metrics crate's load
//! metrics, each request measured from its own send: a closed loop), with
//! TTFT per turn, and the prefix-cache hit rate the turns should give beside
//! the server's own.

use std::sync::Arc;
use std::time::Instant;

use speedmatrix_engines::CounterDeltas;
use speedmatrix_metrics::{LoadRequest, Summary, load_metrics, request_metrics};
use speedmatrix_units::Tokens;
use tokio_util::sync::CancellationToken;

use crate::estimate::tokenize_texts;
use crate::observer::{Event, StepPhase};
use crate::outcome::{
    Failure, FailureKind, Latency, LoadOutcome, LoadPoint, PrefixCacheCheck, StepId, StepStatus,
    TurnResult,
};
use crate::request::{Recorded, RequestShape, record_one};
use crate::server::{Server, read_counters};
use crate::{Observer, RunnerError};

/// Inputs of one conversation cell.
pub(crate) struct ConversationCellSpec<'a> {
    pub(crate) step: StepId,
    pub(crate) context: Tokens,
    pub(crate) point: LoadPoint,
    /// Each conversation's first prompt.
    pub(crate) openings: Vec<Arc<str>>,
    /// Each conversation's later questions, one per turn after the first.
    pub(crate) questions: Vec<Vec<Arc<str>>>,
    pub(crate) shape: RequestShape,
    pub(crate) tokenizer: &'a speedmatrix_workload::Tokenizer,
    pub(crate) slo: Option<&'a speedmatrix_metrics::Slo>,
    /// The server's KV block size, for the intended hit rate.
    pub(crate) block_tokens: Option<u64>,
}

/// One turn as sent.
struct Turn {
    index: u32,
    record: Recorded,
}

/// Runs the cell.
pub(crate) async fn run_conversation_cell(
    server: &Server,
    spec: ConversationCellSpec<'_>,
    observer: &dyn Observer,
    cancel: &CancellationToken,
) -> Result<LoadOutcome, RunnerError> {
    observer.event(Event::Phase {
        step: spec.step,
        phase: StepPhase::Measuring,
    });
    let epoch = Instant::now();
    let before = if server.has_metrics() {
        read_counters(server.client.clone()).await
    } else {
        None
    };
    let shape = RequestShape {
        keep_text: true,
        ..spec.shape.together(spec.openings.len())
    };
    let mut set = tokio::task::JoinSet::new();
    for (opening, questions) in spec.openings.iter().zip(&spec.questions) {
        let (client, shape, cancel) = (server.client.clone(), shape.clone(), cancel.clone());
        let (opening, questions) = (Arc::clone(opening), questions.clone());
        set.spawn(async move {
            let mut turns = Vec::new();
            let mut prompt = opening.to_string();
            for index in 1..=(questions.len() as u32 + 1) {
                let record = record_one(&client, &shape, &prompt, epoch, &cancel, None).await;
                let answer = record.text.as_ref().map(|t| t.text.clone());
                let ended = record.error.is_some() || cancel.is_cancelled();
                turns.push(Turn { index, record });
                let (Some(answer), Some(question)) = (answer, questions.get(index as usize - 1))
                else {
                    break;
                };
                if ended {
                    break;
                }
                prompt.push_str(&answer);
                prompt.push_str("\n\n");
                prompt.push_str(question);
            }
            turns
        });
    }
    let mut turns: Vec<Turn> = Vec::new();
    while let Some(r) = set.join_next().await {
        if let Ok(mut t) = r {
            turns.append(&mut t);
        }
    }
    if cancel.is_cancelled() {
        return Err(RunnerError::Cancelled);
    }
    let after = match before {
        Some(_) => read_counters(server.client.clone()).await,
        None => None,
    };
    let measured_hit_rate = before.zip(after).and_then(|(a, b)| {
        CounterDeltas::between(&a.counters, &b.counters).prefix_cache_hit_rate()
    });
    let (indices, records): (Vec<u32>, Vec<Recorded>) =
        turns.into_iter().map(|t| (t.index, t.record)).unzip();
    let records = tokenize_texts(spec.tokenizer, records).await;
    Ok(summarize(&spec, &indices, &records, measured_hit_rate))
}

fn summarize(
    spec: &ConversationCellSpec<'_>,
    indices: &[u32],
    records: &[Recorded],
    measured_hit_rate: Option<f64>,
) -> LoadOutcome {
    let outcome = |status, result| LoadOutcome {
        context: spec.context,
        point: spec.point,
        status,
        result,
        notices: Vec::new(),
    };
    let failed = records.iter().filter(|r| r.error.is_some()).count() as u64;
    let good = records.len() as u64 - failed;
    let first_failure = records.iter().find_map(|r| r.error.clone());
    let requests: Vec<LoadRequest<'_>> = records
        .iter()
        .map(|r| LoadRequest {
            timeline: &r.timeline,
            intended: r.timeline.sent_at,
        })
        .collect();
    let m = match load_metrics(&requests, spec.slo) {
        Ok(m) if m.completed > 0 => m,
        Ok(_) | Err(_) => {
            let failure = first_failure.unwrap_or(Failure {
                kind: FailureKind::NoTokens,
                message: "no turn finished".into(),
            });
            let status = StepStatus::Failed {
                failure,
                failed: failed.max(1),
                good,
            };
            return outcome(status, None);
        }
    };
    let status = match first_failure {
        Some(first) => StepStatus::Partial {
            failed,
            good,
            kinds: crate::load::failure_kinds(records),
            first,
        },
        None => StepStatus::Measured,
    };
    let mut result = crate::load::result_of(&m, None, None, spec.openings.len() as u64);
    result.turns = turns(indices, records);
    result.prefix_cache = Some(PrefixCacheCheck {
        shared_tokens: Tokens::ZERO,
        intended_hit_rate: intended_hit_rate(indices, records, spec.block_tokens),
        measured_hit_rate,
    });
    outcome(status, Some(result))
}

/// Each turn's TTFT and mean prompt tokens over the conversations.
fn turns(indices: &[u32], records: &[Recorded]) -> Vec<TurnResult> {
    let last = indices.iter().copied().max().unwrap_or(0);
    (1..=last)
        .map(|turn| {
            let of_turn: Vec<&Recorded> = indices
                .iter()
                .zip(records)
                .filter(|(i, r)| **i == turn && r.error.is_none())
                .map(|(_, r)| r)
                .collect();
            let ttfts: Vec<std::time::Duration> = of_turn
                .iter()
                .filter_map(|r| request_metrics(&r.timeline).ok()?.ttft)
                .collect();
            let prompts: Vec<f64> = of_turn
                .iter()
                .filter_map(|r| r.prompt_tokens_reported.map(|t| t.get() as f64))
                .collect();
            TurnResult {
                turn,
                completed: of_turn.len() as u64,
                ttft: Summary::of_durations(&ttfts).ok().map(|s| Latency {
                    p50: s.p50,
                    p90: s.p90,
                    p99: s.p99,
                }),
                prompt_tokens_mean: Summary::of(&prompts).ok().map(|s| s.mean),
            }
        })
        .collect()
}

/// The hit rate the turns should give: each later turn finds its previous
/// turn's prompt and answer (the server's own counts) in the cache, in whole
/// blocks and never its own last token; the first turn finds nothing.
fn intended_hit_rate(indices: &[u32], records: &[Recorded], block: Option<u64>) -> Option<f64> {
    let block = block?;
    // Turns of one conversation are consecutive in `records` (one task each).
    let (mut cached, mut total) = (0u64, 0u64);
    let mut previous: Option<u64> = None;
    for (i, r) in indices.iter().zip(records) {
        let prompt = r.prompt_tokens_reported?.get();
        let answer = r.timeline.final_usage.map(|u| u.completion_tokens.get());
        if *i > 1
            && let Some(prev) = previous
        {
            cached += prev.min(prompt.saturating_sub(1)) / block * block;
        }
        total += prompt;
        previous = answer.map(|a| prompt + a);
    }
    (total > 0).then(|| cached as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use speedmatrix_metrics::{Outcome, RequestTimeline, Timestamp, Usage};

    fn turn(prompt: u64, answer: u64) -> Recorded {
        let mut t = RequestTimeline::new(
            Timestamp::from_millis(0),
            Timestamp::from_millis(10),
            Outcome::Finished {
                finish_reason: Some("length".into()),
            },
        );
        t.final_usage = Some(Usage::new(Tokens::new(prompt), Tokens::new(answer)));
        Recorded {
            timeline: t,
            prompt_tokens_reported: Some(Tokens::new(prompt)),
            error: None,
            retries: 0,
            text: None,
            unexpected_content_type: None,
        }
    }

    #[test]
    fn later_turns_should_hit_the_last_prompt_and_answer_in_whole_blocks() {
        // One conversation: 100, then 100 + 40 + 30 = 170, then 170 + 40 + 30 = 240.
        let records = [turn(100, 40), turn(170, 40), turn(240, 40)];
        // Turn 2 finds 140 → 128 in 16-token blocks; turn 3 finds 210 → 208.
        let rate = intended_hit_rate(&[1, 2, 3], &records, Some(16)).unwrap();
        assert!((rate - (128.0 + 208.0) / (100.0 + 170.0 + 240.0)).abs() < 1e-12);
        assert_eq!(intended_hit_rate(&[1], &records[..1], None), None);
    }
}
