//! Inputs of token estimates: the streamed text tokenized as a whole, and
//! calibration requests for cells whose server sends no count on its chunks.

use std::sync::Arc;
use std::time::Instant;

use speedmatrix_units::{Concurrency, Tokens};
use speedmatrix_workload::Tokenizer;
use tokio_util::sync::CancellationToken;

use crate::request::{Recorded, RequestShape, record_one};
use crate::server::Server;

/// Requests run to their end to calibrate a cell's estimates when none of
/// its own finished inside the cell: enough for a spread (Student's t with
/// two degrees of freedom), few enough to keep the cell short.
pub(crate) const CALIBRATION_REQUESTS: usize = 3;

/// Output tokens of each calibration request: long enough that one token
/// more or less moves its ratio by under 0.4 %.
pub(crate) const CALIBRATION_TOKENS: u64 = 256;

/// Tokenizes the kept text of every request (each as a whole, never chunk by
/// chunk) and records on each chunk how many of its tokens ended there. Runs
/// on the blocking pool: a cell's text can be hundreds of thousands of tokens.
pub(crate) async fn tokenize_texts(
    tokenizer: &Tokenizer,
    recorded: Vec<Recorded>,
) -> Vec<Recorded> {
    if recorded.iter().all(|r| r.text.is_none()) {
        return recorded;
    }
    let tokenizer = tokenizer.clone();
    let work = tokio::task::spawn_blocking(move || {
        let mut recorded = recorded;
        for r in &mut recorded {
            tokenize_one(&tokenizer, r);
        }
        recorded
    });
    // A panic inside the tokenizer is the only way to get here; the cell
    // then has no estimate rather than no result.
    work.await.unwrap_or_default()
}

fn tokenize_one(tokenizer: &Tokenizer, r: &mut Recorded) {
    let Some(text) = r.text.as_ref() else {
        return;
    };
    match tokenizer.token_ends(&text.text) {
        Ok(ends) => text.assign(&ends, &mut r.timeline.chunks),
        Err(e) => tracing::debug!(error = %e, "could not tokenize a response's text"),
    }
}

/// Runs [`CALIBRATION_REQUESTS`] requests of the cell's prompts to their end
/// (at most `concurrency` at once, so they fit where the cell fit), to learn
/// how the server's own count relates to the estimates. Timed from the
/// cell's `epoch`, so they fall after its window.
pub(crate) async fn calibration_requests(
    server: &Server,
    shape: &RequestShape,
    prompts: &[Arc<str>],
    concurrency: Concurrency,
    epoch: Instant,
    cancel: &CancellationToken,
) -> Vec<Recorded> {
    let at_once = (concurrency.get() as usize).clamp(1, CALIBRATION_REQUESTS);
    let shape = RequestShape {
        max_tokens: Tokens::new(CALIBRATION_TOKENS.min(shape.max_tokens.get())),
        ..shape.together(at_once)
    };
    let mut out = Vec::with_capacity(CALIBRATION_REQUESTS);
    let mut next = 0;
    while next < CALIBRATION_REQUESTS && !cancel.is_cancelled() {
        let mut set = tokio::task::JoinSet::new();
        for i in next..(next + at_once).min(CALIBRATION_REQUESTS) {
            let client = server.client.clone();
            let shape = shape.clone();
            let prompt = Arc::clone(&prompts[i % prompts.len()]);
            let cancel = cancel.clone();
            set.spawn(
                async move { record_one(&client, &shape, &prompt, epoch, &cancel, None).await },
            );
        }
        next += at_once;
        while let Some(r) = set.join_next().await {
            out.extend(r.ok().filter(|r| r.error.is_none()));
        }
    }
    out
}
