//! Cold prefill: one request per repeat with a never-seen prompt and
//! `max_tokens` 1; prompt tok/s and TTFT, median over repeats.

use std::time::Instant;

use speedmatrix_metrics::{Summary, prefill_metrics};
use speedmatrix_units::Tokens;
use tokio_util::sync::CancellationToken;

use crate::RunnerError;
use crate::outcome::{Failure, FailureKind, PrefillOutcome, StepStatus};
use crate::request::{Recorded, RequestShape, record_one};
use crate::server::Server;

/// Measures one prefill context with the given prompts (one per repeat);
/// also returns a Content-Type the server sent instead of `text/event-stream`.
pub(crate) async fn run_prefill(
    server: &Server,
    shape: &RequestShape,
    context: Tokens,
    prompts: &[String],
    cancel: &CancellationToken,
) -> Result<(PrefillOutcome, Option<String>), RunnerError> {
    let shape = shape.for_one_token();
    let mut recorded = Vec::with_capacity(prompts.len());
    for prompt in prompts {
        let epoch = Instant::now();
        let r = record_one(&server.client, &shape, prompt, epoch, cancel, None).await;
        if cancel.is_cancelled() {
            return Err(RunnerError::Cancelled);
        }
        let failed = r.error.is_some();
        recorded.push(r);
        if failed {
            break;
        }
    }
    let content_type = recorded
        .iter()
        .find_map(|r| r.unexpected_content_type.clone());
    Ok((
        outcome_of(context, &recorded, prompts.len() as u32),
        content_type,
    ))
}

/// The prefill outcome of `recorded`, cold requests of a `context`-token
/// prompt (`repeats` asked for): the first failure fails it, else the
/// medians of prompt tok/s and TTFT.
pub(crate) fn outcome_of(context: Tokens, recorded: &[Recorded], repeats: u32) -> PrefillOutcome {
    let mut ttfts = Vec::new();
    let mut rates = Vec::new();
    let mut reported = None;
    let failed = |kind, message| {
        PrefillOutcome::without_numbers(context, StepStatus::failed(kind, message), repeats)
    };
    for r in recorded {
        if let Some(Failure { kind, message }) = &r.error {
            return failed(*kind, message.clone());
        }
        reported = r.prompt_tokens_reported.or(reported);
        match prefill_metrics(&r.timeline) {
            Ok(m) => {
                ttfts.push(m.ttft);
                rates.push(m.prompt_rate.get());
            }
            Err(e) => return failed(FailureKind::Metrics, e.to_string()),
        }
    }
    match (Summary::of_durations(&ttfts), Summary::of(&rates)) {
        (Ok(ttft), Ok(rate)) => PrefillOutcome {
            context,
            status: StepStatus::Measured,
            ttft: Some(ttft.p50),
            prompt_tokens_per_s: Some(rate.p50),
            prompt_tokens_reported: reported,
            repeats: recorded.len() as u32,
            from_warmup: false,
        },
        (Err(e), _) | (_, Err(e)) => failed(FailureKind::Metrics, e.to_string()),
    }
}
