//! One sustained-decode cell: N streams kept busy, a fixed window measured
//! once every stream is producing tokens (`streams.rs`), then the cell's
//! numbers, failures and notices (`summary.rs`).

mod streams;
mod summary;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use speedmatrix_metrics::{Timestamp, Window};
use speedmatrix_units::{Concurrency, Tokens};
use tokio_util::sync::CancellationToken;

use crate::client_load::{ClientLoad, CpuReading, runtime_threads};
use crate::estimate::{CALIBRATION_SAMPLE, CalibrationSample};
use crate::observer::{Event, StepPhase};
use crate::outcome::{CellOutcome, CounterIncrease, FailureKind, Notice, StepId, StepStatus};
use crate::request::{Recorded, RequestShape, record_one};
use crate::server::{CounterReading, Drain, EdgeReading, Server, read_counters};
use crate::stop::StopSignal;
use crate::telemetry::{CellWindow, RunTelemetry};
use crate::{Observer, RunnerError};

use self::streams::{
    Readiness, Shared, SlotRecord, measure_window, start_streams, wait_ready, warm_up,
};
use self::summary::Cell;

/// Inputs of one decode cell.
pub(crate) struct DecodeCellSpec<'a> {
    pub(crate) step: StepId,
    pub(crate) prompts: Vec<Arc<str>>,
    pub(crate) expected_prompt_tokens: Tokens,
    pub(crate) concurrency: Concurrency,
    pub(crate) context: Tokens,
    pub(crate) shape: RequestShape,
    pub(crate) window: Duration,
    /// Send the first warm-up request alone and hand it back: it is the
    /// context's prefill measurement (prefill mode `warmup`).
    pub(crate) measure_first_warmup: bool,
    /// Tokenizes streamed text for estimates when the server sends no count.
    pub(crate) tokenizer: &'a speedmatrix_workload::Tokenizer,
    /// Time between scrapes of the server's gauges inside the window.
    pub(crate) metrics_interval: Duration,
    /// The server's KV block size, when it reports one.
    pub(crate) block_tokens: Option<u64>,
    /// The interference probe: a cold long prompt after the window.
    pub(crate) inject: Option<CellInject>,
    /// Seeds the choice of the finished requests that calibrate estimates.
    pub(crate) seed: u64,
    /// Send the warm-up requests first; a repeat after the first skips
    /// them, the prefix cache already holding its prompts.
    pub(crate) warm: bool,
}

/// The interference probe's two cold prompts (one sent alone, one into the
/// streams) and how long the streams are watched after it.
pub(crate) struct CellInject {
    pub(crate) tokens: Tokens,
    pub(crate) alone: Arc<str>,
    pub(crate) loaded: Arc<str>,
    pub(crate) settle: Duration,
}

/// What the probe recorded.
pub(super) struct InjectRecord {
    pub(super) tokens: Tokens,
    pub(super) alone: Recorded,
    pub(super) loaded: Recorded,
    /// The end of the settle time after the loaded request.
    pub(super) settle_end: Instant,
}

/// What a decode cell produced, besides its outcome.
pub(crate) struct DecodeOutcome {
    pub(crate) cell: CellOutcome,
    /// The first warm-up request, when the spec asked to measure it.
    pub(crate) first_warmup: Option<Recorded>,
    /// A Content-Type the server sent instead of `text/event-stream`.
    pub(crate) unexpected_content_type: Option<String>,
}

/// How long streams keep running after the window closes.
const WINDOW_EDGE_GRACE: Duration = Duration::from_millis(250);

/// How long the server gets to finish the cancelled requests.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Runs the cell: warm-up, streams, window, cancel, drain, then the
/// token-count estimates and their calibration where the server sent no count.
pub(crate) async fn run_cell(
    server: &Server,
    spec: DecodeCellSpec<'_>,
    telemetry: &RunTelemetry,
    observer: &dyn Observer,
    cancel: &CancellationToken,
) -> Result<DecodeOutcome, RunnerError> {
    let phase = |phase| {
        observer.event(Event::Phase {
            step: spec.step,
            phase,
        })
    };
    let mut notices = Vec::new();
    let epoch = Instant::now();

    phase(StepPhase::WarmingCache);
    let (first_warmup, warm_failure) = if spec.warm {
        warm_up(server, &spec, epoch, cancel).await
    } else {
        (None, None)
    };
    if cancel.is_cancelled() {
        return Err(RunnerError::Cancelled);
    }
    if let Some(failure) = warm_failure {
        let status = StepStatus::Failed {
            failure,
            failed: 1,
            good: spec.prompts.len() as u64,
        };
        let mut out = failed(&spec, status, notices);
        out.first_warmup = first_warmup;
        return Ok(out);
    }

    // The probe's prompt alone, before any stream: its TTFT on an idle server.
    let alone = match &spec.inject {
        Some(inject) => {
            let shape = spec.shape.for_one_token();
            Some(record_one(&server.client, &shape, &inject.alone, epoch, cancel, None).await)
        }
        None => None,
    };

    phase(StepPhase::StartingStreams);
    // The cell's own requests look their prompts up as they start: the
    // prefix-cache counters are read before them (outside the window).
    let at_streams = if server.has_metrics() {
        read_counters(server.client.clone()).await
    } else {
        None
    };
    let shared = Shared {
        stop: StopSignal::default(),
        first_tokens: Arc::new(AtomicUsize::new(0)),
        dead_slots: Arc::new(AtomicUsize::new(0)),
        sample: Arc::new(Mutex::new(CalibrationSample::new(
            CALIBRATION_SAMPLE,
            spec.seed,
        ))),
    };
    let stop = &shared.stop;
    let tasks = start_streams(server, &spec, epoch, &shared);

    let n = spec.concurrency.get() as usize;
    let ready = wait_ready(
        server,
        &spec,
        n,
        &shared.first_tokens,
        &shared.dead_slots,
        cancel,
    )
    .await;
    let mut queueing = false;
    match ready {
        Readiness::Ready | Readiness::StreamsDied => {}
        Readiness::Cancelled => {
            stop.stop();
            for t in tasks {
                let _ = t.await;
            }
            return Err(RunnerError::Cancelled);
        }
        Readiness::Queued => {
            queueing = true;
            notices.push(Notice::NeverReady { step: spec.step });
        }
    }

    let window_start = Instant::now();
    let mut gauges = Vec::new();
    let mut counter = None;
    let mut client = None;
    let mut edges: (Option<EdgeReading>, Option<EdgeReading>) = (None, None);
    let window_opened = !matches!(ready, Readiness::StreamsDied);
    if window_opened {
        phase(StepPhase::Measuring);
        // The counter scrapes run beside the window, never inside its timing.
        let opening = server
            .has_metrics()
            .then(|| tokio::spawn(read_counters(server.client.clone())));
        let cpu_before = CpuReading::now().filter(|_| !server.is_embedded());
        gauges = measure_window(
            server,
            window_start,
            spec.window,
            spec.metrics_interval,
            cancel,
        )
        .await;
        client = cpu_before
            .zip(CpuReading::now())
            .map(|(before, after)| before.until(after, runtime_threads()));
        let closing = opening
            .is_some()
            .then(|| tokio::spawn(read_counters(server.client.clone())));
        // Streams stay open a moment past the window's end so that each
        // stream's token curve is known up to the edge (see docs/metrics.md).
        tokio::time::sleep(WINDOW_EDGE_GRACE).await;
        if let (Some(open), Some(close)) = (opening, closing) {
            edges = (open.await.ok().flatten(), close.await.ok().flatten());
            counter = counter_increase(
                edges.0.and_then(|e| e.generation),
                edges.1.and_then(|e| e.generation),
            );
        }
    }
    // The probe: a cold long prompt into the running streams, then the settle time.
    let inject = match (&spec.inject, alone) {
        (Some(inject), Some(alone)) if window_opened && !cancel.is_cancelled() => {
            let shape = spec
                .shape
                .for_one_token()
                .together(spec.concurrency.get() as usize + 1);
            let loaded =
                record_one(&server.client, &shape, &inject.loaded, epoch, cancel, None).await;
            tokio::select! {
                () = tokio::time::sleep(inject.settle) => {}
                () = cancel.cancelled() => {}
            }
            Some(InjectRecord {
                tokens: inject.tokens,
                alone,
                loaded,
                settle_end: Instant::now(),
            })
        }
        _ => None,
    };
    stop.stop();
    let mut recorded: Vec<SlotRecord> = Vec::new();
    for t in tasks {
        if let Ok(mut r) = t.await {
            recorded.append(&mut r);
        }
    }
    restore_sample(&shared.sample, &mut recorded);
    if cancel.is_cancelled() {
        return Err(RunnerError::Cancelled);
    }
    phase(StepPhase::Draining);
    if server.drain(DRAIN_LIMIT).await == Drain::Busy {
        notices.push(Notice::StillBusyAfterDrain {
            step: spec.step,
            waited: DRAIN_LIMIT,
        });
    }
    let window = match Window::new(Timestamp::from_instant(epoch, window_start), spec.window) {
        Ok(w) => w,
        Err(e) => {
            let status = StepStatus::failed(FailureKind::Metrics, e.to_string());
            return Ok(failed(&spec, status, notices));
        }
    };
    let cell = Cell {
        spec: &spec,
        epoch,
        window_opened,
        queueing,
        inject,
    };
    let mut outcome = cell
        .summarize(server, observer, cancel, window, recorded, &gauges, notices)
        .await;
    if let Some(w) = outcome.cell.window.as_mut() {
        w.server_counter = counter;
        w.client = client;
        w.telemetry = Some(telemetry.cell(&CellWindow {
            start: window_start,
            end: window_start + spec.window,
            output_tokens: w.output_tokens,
            concurrency: spec.concurrency.get(),
            gauges: &gauges,
            open: edges.0.as_ref().map(|e| &e.counters),
            close: edges.1.as_ref().map(|e| &e.counters),
            streams_start: at_streams.as_ref().map(|e| &e.counters),
            client,
            prompt_tokens: spec.expected_prompt_tokens.get(),
            block_tokens: spec.block_tokens,
            output_rate_series: &w.output_rate_series,
        }));
    }
    if let Some(load) = client.filter(ClientLoad::is_client_bound) {
        outcome.cell.notices.push(Notice::ClientBound {
            step: spec.step,
            load,
        });
    }
    outcome.first_warmup = first_warmup;
    Ok(outcome)
}

/// Gives the calibration sample's texts back to their requests (every
/// stream has ended).
fn restore_sample(sample: &Mutex<CalibrationSample>, recorded: &mut [SlotRecord]) {
    let sample = std::mem::replace(
        &mut *sample.lock().unwrap_or_else(PoisonError::into_inner),
        CalibrationSample::new(0, 0),
    );
    sample.restore(
        recorded
            .iter_mut()
            .map(|r| ((r.slot, r.seq), &mut r.record)),
    );
}

/// A cell that produced no numbers.
fn failed(spec: &DecodeCellSpec<'_>, status: StepStatus, notices: Vec<Notice>) -> DecodeOutcome {
    DecodeOutcome {
        cell: CellOutcome {
            context: spec.context,
            concurrency: spec.concurrency,
            status,
            window: None,
            notices,
        },
        first_warmup: None,
        unexpected_content_type: None,
    }
}

/// The counter's increase between two readings; `None` when either is
/// missing or the counter went backwards (a server restart).
fn counter_increase(
    open: Option<CounterReading>,
    close: Option<CounterReading>,
) -> Option<CounterIncrease> {
    let (open, close) = (open?, close?);
    let tokens = close.tokens - open.tokens;
    // NaN readings fail this too.
    if tokens.is_nan() || tokens < 0.0 || close.at <= open.at {
        return None;
    }
    Some(CounterIncrease {
        tokens: Tokens::new(tokens.round() as u64),
        between_scrapes: close.at - open.at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(at: Instant, tokens: f64) -> Option<CounterReading> {
        Some(CounterReading { at, tokens })
    }

    #[test]
    fn counter_increase_is_the_difference_over_the_interval() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(2_500);
        let c = counter_increase(reading(t0, 1_000.0), reading(t1, 1_750.0)).unwrap();
        assert_eq!(c.tokens, Tokens::new(750));
        assert_eq!(c.between_scrapes, Duration::from_millis(2_500));
    }

    #[test]
    fn counter_resets_and_missing_readings_give_nothing() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        assert!(counter_increase(reading(t0, 500.0), reading(t1, 10.0)).is_none());
        assert!(counter_increase(None, reading(t1, 10.0)).is_none());
        assert!(counter_increase(reading(t0, 1.0), None).is_none());
        assert!(counter_increase(reading(t1, 1.0), reading(t0, 2.0)).is_none());
    }
}
