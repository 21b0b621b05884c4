//! The cell's load: cache warm-up, N stream slots kept busy, readiness, and
//! the fixed window with its gauge scrapes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use speedmatrix_units::{Concurrency, Tokens};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::DecodeCellSpec;
use crate::estimate::CalibrationSample;
use crate::outcome::Failure;
use crate::request::{Recorded, RequestShape, record_one};
use crate::server::{Gauges, Server};
use crate::stop::{Stop, StopListener, StopSignal};

/// A stream slot whose requests fail this many times in a row stops.
const MAX_CONSECUTIVE_FAILURES: u32 = 3;

/// Pause before a failed request's slot sends its next one.
const FAILURE_BACKOFF: Duration = Duration::from_millis(100);

/// How long to wait for every stream's first token after the cache is warm.
fn readiness_limit(context: Tokens, n: Concurrency) -> Duration {
    let work = context.get() as f64 * f64::from(n.get());
    Duration::from_secs(60) + Duration::from_secs_f64(work / 2_000.0)
}

/// One request of the cell, the stream slot that sent it and its place
/// among that slot's requests.
pub(super) struct SlotRecord {
    pub(super) slot: usize,
    pub(super) seq: usize,
    pub(super) record: Recorded,
}

/// Sends the cell's prompts once with `max_tokens` 1 so the server's prefix
/// cache holds them. With `measure_first_warmup` the first goes alone and
/// is returned: nothing of it was cached, so it is a cold prefill.
pub(super) async fn warm_up(
    server: &Server,
    spec: &DecodeCellSpec<'_>,
    epoch: Instant,
    cancel: &CancellationToken,
) -> (Option<Recorded>, Option<Failure>) {
    let shape = spec.shape.for_one_token();
    let mut prompts = spec.prompts.iter();
    let mut first = None;
    if spec.measure_first_warmup
        && let Some(prompt) = prompts.next()
    {
        let r = record_one(
            &server.client,
            &shape.together(1),
            prompt,
            epoch,
            cancel,
            None,
        )
        .await;
        let failure = r.error.clone();
        first = Some(r);
        if failure.is_some() {
            return (first, failure);
        }
    }
    let mut set = tokio::task::JoinSet::new();
    let shape = shape.together(prompts.len());
    for prompt in prompts {
        let client = server.client.clone();
        let shape = shape.clone();
        let prompt = Arc::clone(prompt);
        let cancel = cancel.clone();
        set.spawn(async move { record_one(&client, &shape, &prompt, epoch, &cancel, None).await });
    }
    let mut failure = None;
    while let Some(r) = set.join_next().await {
        if let Ok(r) = r
            && failure.is_none()
        {
            failure = r.error;
        }
    }
    (first, failure)
}

/// What every stream slot of a cell shares.
pub(super) struct Shared {
    pub(super) stop: StopSignal,
    /// Slots that have had their first token.
    pub(super) first_tokens: Arc<AtomicUsize>,
    /// Slots that stopped after repeated failures.
    pub(super) dead_slots: Arc<AtomicUsize>,
    /// The texts of the finished requests that calibrate the cell's estimates.
    pub(super) sample: Arc<Mutex<CalibrationSample>>,
}

/// Starts one task per stream slot; each returns its requests when `stop` fires.
pub(super) fn start_streams(
    server: &Server,
    spec: &DecodeCellSpec<'_>,
    epoch: Instant,
    shared: &Shared,
) -> Vec<JoinHandle<Vec<SlotRecord>>> {
    (0..spec.concurrency.get() as usize)
        .map(|slot| {
            let prompt = Arc::clone(&spec.prompts[slot % spec.prompts.len()]);
            let slot_run = SlotRun {
                slot,
                client: server.client.clone(),
                shape: spec.shape.together(spec.concurrency.get() as usize),
                epoch,
                stop: shared.stop.listener(),
                first_tokens: Arc::clone(&shared.first_tokens),
                dead: Arc::clone(&shared.dead_slots),
                sample: Arc::clone(&shared.sample),
            };
            tokio::spawn(async move {
                let records = stream_loop(slot_run, prompt).await;
                records
                    .into_iter()
                    .enumerate()
                    .map(|(seq, record)| SlotRecord { slot, seq, record })
                    .collect()
            })
        })
        .collect()
}

/// What one stream slot's task holds.
struct SlotRun {
    slot: usize,
    client: speedmatrix_client::Client,
    shape: RequestShape,
    epoch: Instant,
    stop: StopListener,
    first_tokens: Arc<AtomicUsize>,
    dead: Arc<AtomicUsize>,
    sample: Arc<Mutex<CalibrationSample>>,
}

/// Keeps one stream slot busy until `stop`: a finished request is replaced
/// at once, a failed one after a short pause, and a slot whose requests fail
/// [`MAX_CONSECUTIVE_FAILURES`] times in a row stops (counted in `dead`).
/// A finished request's text goes to the calibration sample or is dropped
/// as soon as it ends.
async fn stream_loop(run: SlotRun, prompt: Arc<str>) -> Vec<Recorded> {
    let SlotRun {
        slot,
        client,
        shape,
        epoch,
        stop,
        first_tokens,
        dead,
        sample,
    } = run;
    let stop = Stop::Listener(&stop);
    let mut out = Vec::new();
    let mut counted = false;
    let mut failures_in_a_row = 0;
    while !stop.is_stopped() {
        let counter = (!counted).then_some(&first_tokens);
        let before = first_tokens.load(Ordering::Relaxed);
        let mut r = record_one(&client, &shape, &prompt, epoch, stop, counter).await;
        counted |= counter.is_some() && first_tokens.load(Ordering::Relaxed) > before;
        if CalibrationSample::is_candidate(&r) {
            sample
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .offer((slot, out.len()), &mut r);
        }
        let failed = r.error.is_some();
        out.push(r);
        if !failed {
            failures_in_a_row = 0;
            continue;
        }
        failures_in_a_row += 1;
        if failures_in_a_row >= MAX_CONSECUTIVE_FAILURES {
            dead.fetch_add(1, Ordering::Relaxed);
            break;
        }
        tokio::select! {
            () = tokio::time::sleep(FAILURE_BACKOFF) => {}
            () = stop.stopped() => {}
        }
    }
    out
}

pub(super) enum Readiness {
    Ready,
    Queued,
    StreamsDied,
    Cancelled,
}

/// Waits until every live slot has its first token (and the server's gauges
/// say they all run, where it exports them); a slot that stopped after
/// repeated failures no longer counts, and with none left the streams died.
pub(super) async fn wait_ready(
    server: &Server,
    spec: &DecodeCellSpec<'_>,
    n: usize,
    first_tokens: &AtomicUsize,
    dead: &AtomicUsize,
    cancel: &CancellationToken,
) -> Readiness {
    let deadline = Instant::now() + readiness_limit(spec.context, spec.concurrency);
    let gauges = server.has_gauges();
    loop {
        if cancel.is_cancelled() {
            return Readiness::Cancelled;
        }
        let live = n.saturating_sub(dead.load(Ordering::Relaxed));
        if live == 0 {
            return Readiness::StreamsDied;
        }
        if first_tokens.load(Ordering::Relaxed) >= live {
            if !gauges {
                return Readiness::Ready;
            }
            if let Some(g) = server.gauges().await
                && g.running >= live as f64
                && g.waiting == 0.0
            {
                return Readiness::Ready;
            }
        }
        if Instant::now() >= deadline {
            return Readiness::Queued;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sleeps through the window while sampling the server's gauges; the window
/// ends on the clock, never later because a scrape was slow.
pub(super) async fn measure_window(
    server: &Server,
    start: Instant,
    duration: Duration,
    scrape_every: Duration,
    cancel: &CancellationToken,
) -> Vec<Gauges> {
    let end = tokio::time::Instant::from_std(start + duration);
    let mut samples = Vec::new();
    if !server.has_gauges() {
        tokio::select! {
            () = tokio::time::sleep_until(end) => {}
            () = cancel.cancelled() => {}
        }
        return samples;
    }
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(end) => return samples,
            () = cancel.cancelled() => return samples,
            g = server.gauges() => {
                if let Some(g) = g {
                    samples.push(g);
                }
                tokio::select! {
                    () = tokio::time::sleep_until(end) => return samples,
                    () = cancel.cancelled() => return samples,
                    () = tokio::time::sleep(scrape_every) => {}
                }
            }
        }
    }
}
