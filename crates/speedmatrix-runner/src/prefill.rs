//! Cold prefill: one request per repeat with a never-seen prompt and
//! `max_tokens` 1; prompt tok/s and TTFT, median over repeats.

use std::time::{Duration, Instant};

use speedmatrix_metrics::{Summary, prefill_metrics};
use speedmatrix_report::{CellStatus, PrefillRow};
use speedmatrix_units::Tokens;
use tokio_util::sync::CancellationToken;

use crate::RunError;
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
) -> Result<(PrefillRow, Option<String>), RunError> {
    let shape = RequestShape {
        max_tokens: Tokens::new(1),
        ignore_eos: false,
        min_tokens: false,
        ..shape.clone()
    };
    let mut recorded = Vec::with_capacity(prompts.len());
    for prompt in prompts {
        let epoch = Instant::now();
        let r = record_one(&server.client, &shape, prompt, epoch, cancel, None).await;
        if cancel.is_cancelled() {
            return Err(RunError::Cancelled);
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
        row_from(context, &recorded, prompts.len() as u32)?,
        content_type,
    ))
}

/// The prefill row of `recorded`, cold requests of a `context`-token prompt
/// (`repeats` asked for): the first failure makes it an error row, else the
/// medians of prompt tok/s and TTFT.
pub(crate) fn row_from(
    context: Tokens,
    recorded: &[Recorded],
    repeats: u32,
) -> Result<PrefillRow, RunError> {
    let mut ttfts = Vec::new();
    let mut rates = Vec::new();
    let mut reported = None;
    for r in recorded {
        if let Some((kind, message)) = &r.error {
            return Ok(error_row(context, kind.clone(), message.clone(), repeats));
        }
        reported = r.prompt_tokens_reported.or(reported);
        match prefill_metrics(&r.timeline) {
            Ok(m) => {
                ttfts.push(m.ttft);
                rates.push(m.prompt_rate.get());
            }
            Err(e) => {
                return Ok(error_row(context, "metrics".into(), e.to_string(), repeats));
            }
        }
    }
    let ttft = Summary::of_durations(&ttfts).map_err(RunError::Metrics)?;
    let rate = Summary::of(&rates).map_err(RunError::Metrics)?;
    Ok(PrefillRow {
        context,
        status: CellStatus::Valid,
        prompt_tokens_per_s: Some(rate.p50),
        ttft_ms: Some(ms(ttft.p50)),
        prompt_tokens_requested: context,
        prompt_tokens_reported: reported,
        repeats: recorded.len() as u32,
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn error_row(context: Tokens, error_kind: String, message: String, repeats: u32) -> PrefillRow {
    PrefillRow {
        context,
        status: CellStatus::Error {
            error_kind,
            message,
            failed_requests: 1,
            good_requests: 0,
        },
        prompt_tokens_per_s: None,
        ttft_ms: None,
        prompt_tokens_requested: context,
        prompt_tokens_reported: None,
        repeats,
    }
}
