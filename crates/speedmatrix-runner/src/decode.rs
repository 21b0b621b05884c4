//! One sustained-decode cell: N streams kept busy, a fixed window measured
//! once every stream is producing tokens.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use speedmatrix_metrics::{
    Calibration, EstimateMethod, GaugeSample, MetricsError, Outcome, Timestamp, Window,
    WindowMetrics, average_gauges, window_metrics,
};
use speedmatrix_report::{CellStatus, DecodeMeasurements, Percentiles, ServerCounter};
use speedmatrix_units::{Concurrency, Tokens};
use tokio_util::sync::CancellationToken;

use crate::estimate::{calibration_requests, tokenize_texts};
use crate::request::{Recorded, RequestShape, record_one};
use crate::server::{CounterReading, Drain, Gauges, Server, read_generation_counter};
use crate::{Observer, RunError};

/// Inputs of one decode cell.
pub(crate) struct DecodeCellSpec<'a> {
    pub(crate) label: &'a str,
    pub(crate) prompts: Vec<Arc<str>>,
    pub(crate) expected_prompt_tokens: Tokens,
    pub(crate) concurrency: Concurrency,
    pub(crate) context: Tokens,
    pub(crate) shape: RequestShape,
    pub(crate) duration: Duration,
    /// Send the first warm-up request alone and hand it back: it is the
    /// context's prefill measurement (`--prefill-mode warmup`).
    pub(crate) measure_first_warmup: bool,
    /// Tokenizes streamed text for estimates when the server sends no count.
    pub(crate) tokenizer: &'a speedmatrix_workload::Tokenizer,
}

/// What a decode cell produced.
pub(crate) struct DecodeOutcome {
    pub(crate) status: CellStatus,
    pub(crate) measurements: Option<DecodeMeasurements>,
    pub(crate) notices: Vec<String>,
    /// True when requests failed in a way that suggests the server is gone.
    pub(crate) server_suspect: bool,
    /// The first warm-up request, when the spec asked to measure it.
    pub(crate) first_warmup: Option<Recorded>,
    /// A Content-Type the server sent instead of `text/event-stream`.
    pub(crate) unexpected_content_type: Option<String>,
}

/// How long streams keep running after the window closes.
const WINDOW_EDGE_GRACE: Duration = Duration::from_millis(250);

/// A stream slot whose requests fail this many times in a row stops.
const MAX_CONSECUTIVE_FAILURES: u32 = 3;

/// Pause before a failed request's slot sends its next one.
const FAILURE_BACKOFF: Duration = Duration::from_millis(100);

/// How long to wait for every stream's first token after the cache is warm.
fn readiness_limit(context: Tokens, n: Concurrency) -> Duration {
    let work = context.get() as f64 * f64::from(n.get());
    Duration::from_secs(60) + Duration::from_secs_f64(work / 2_000.0)
}

/// One request of the cell and the stream slot that sent it.
struct SlotRecord {
    slot: usize,
    record: Recorded,
}

/// Runs the cell: warm-up, streams, window, cancel, drain, then the
/// token-count estimates and their calibration where the server sent no count.
pub(crate) async fn run_cell(
    server: &Server,
    spec: DecodeCellSpec<'_>,
    observer: &dyn Observer,
    cancel: &CancellationToken,
) -> Result<DecodeOutcome, RunError> {
    let mut notices = Vec::new();
    let epoch = Instant::now();

    observer.step_phase(spec.label, "warming the prefix cache");
    let (first_warmup, warm_failure) = warm_up(server, &spec, epoch, cancel).await;
    if cancel.is_cancelled() {
        return Err(RunError::Cancelled);
    }
    if let Some(failure) = warm_failure {
        let mut out = error_outcome(failure, 0, spec.prompts.len() as u64, notices);
        out.first_warmup = first_warmup;
        return Ok(out);
    }

    observer.step_phase(spec.label, "starting streams");
    let stop = CancellationToken::new();
    let first_tokens = Arc::new(AtomicUsize::new(0));
    let dead_slots = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(spec.concurrency.get() as usize);
    for slot in 0..spec.concurrency.get() as usize {
        let prompt = Arc::clone(&spec.prompts[slot % spec.prompts.len()]);
        let client = server.client.clone();
        let shape = spec.shape.clone();
        let stop = stop.clone();
        let first = Arc::clone(&first_tokens);
        let dead = Arc::clone(&dead_slots);
        tasks.push(tokio::spawn(async move {
            let records = stream_loop(client, shape, prompt, epoch, stop, first, dead).await;
            records
                .into_iter()
                .map(|record| SlotRecord { slot, record })
                .collect::<Vec<_>>()
        }));
    }

    let n = spec.concurrency.get() as usize;
    let ready = wait_ready(server, &spec, n, &first_tokens, &dead_slots, cancel).await;
    let mut queueing = false;
    match ready {
        Readiness::Ready => {}
        Readiness::Cancelled => {
            stop.cancel();
            for t in tasks {
                let _ = t.await;
            }
            return Err(RunError::Cancelled);
        }
        Readiness::Queued => {
            queueing = true;
            notices.push(format!(
                "{}: the server never reported all {n} requests running with none waiting; \
                 the window opened anyway and the cell is marked as queueing",
                spec.label
            ));
        }
        Readiness::StreamsDied => {}
    }

    let window_start = Instant::now();
    let mut gauges = Vec::new();
    let mut counter = None;
    let window_opened = !matches!(ready, Readiness::StreamsDied);
    if window_opened {
        observer.step_phase(spec.label, "measuring");
        // The counter scrapes run beside the window, never inside its timing.
        let opening = server
            .has_generation_counter()
            .then(|| tokio::spawn(read_generation_counter(server.client.clone())));
        gauges = measure_window(server, window_start, spec.duration, cancel).await;
        let closing = opening
            .is_some()
            .then(|| tokio::spawn(read_generation_counter(server.client.clone())));
        // Streams stay open a moment past the window's end so that each
        // stream's token curve is known up to the edge (see docs/metrics.md).
        tokio::time::sleep(WINDOW_EDGE_GRACE).await;
        if let (Some(open), Some(close)) = (opening, closing) {
            counter = counter_increase(open.await.ok().flatten(), close.await.ok().flatten());
        }
    }
    stop.cancel();
    let mut recorded: Vec<SlotRecord> = Vec::new();
    for t in tasks {
        if let Ok(mut r) = t.await {
            recorded.append(&mut r);
        }
    }
    if cancel.is_cancelled() {
        return Err(RunError::Cancelled);
    }
    observer.step_phase(spec.label, "waiting for the server to drain");
    if server.drain(Duration::from_secs(60)).await == Drain::Busy {
        notices.push(format!(
            "{}: the server still reported running requests 60 s after the window closed",
            spec.label
        ));
    }
    let window = Window::new(Timestamp::from_instant(epoch, window_start), spec.duration);
    let cell = Cell {
        spec: &spec,
        epoch,
        window_opened,
        queueing,
    };
    let mut outcome = match window {
        Ok(window) => {
            cell.summarize(server, observer, cancel, window, recorded, &gauges, notices)
                .await
        }
        Err(e) => error_outcome(("metrics".into(), e.to_string()), 0, 0, notices),
    };
    if let Some(m) = outcome.measurements.as_mut() {
        m.server_counter = counter;
    }
    outcome.first_warmup = first_warmup;
    Ok(outcome)
}

/// Sends the cell's prompts once with `max_tokens` 1 so the server's prefix
/// cache holds them. With `measure_first_warmup` the first goes alone and
/// is returned: nothing of it was cached, so it is a cold prefill.
async fn warm_up(
    server: &Server,
    spec: &DecodeCellSpec<'_>,
    epoch: Instant,
    cancel: &CancellationToken,
) -> (Option<Recorded>, Option<(String, String)>) {
    let shape = RequestShape {
        max_tokens: Tokens::new(1),
        ignore_eos: false,
        min_tokens: false,
        ..spec.shape.clone()
    };
    let mut prompts = spec.prompts.iter();
    let mut first = None;
    if spec.measure_first_warmup
        && let Some(prompt) = prompts.next()
    {
        let r = record_one(&server.client, &shape, prompt, epoch, cancel, None).await;
        let failure = r.error.clone();
        first = Some(r);
        if failure.is_some() {
            return (first, failure);
        }
    }
    let mut set = tokio::task::JoinSet::new();
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

/// Keeps one stream slot busy until `stop`: a finished request is replaced
/// at once, a failed one after a short pause, and a slot whose requests fail
/// [`MAX_CONSECUTIVE_FAILURES`] times in a row stops (counted in `dead`).
async fn stream_loop(
    client: speedmatrix_client::Client,
    shape: RequestShape,
    prompt: Arc<str>,
    epoch: Instant,
    stop: CancellationToken,
    first_tokens: Arc<AtomicUsize>,
    dead: Arc<AtomicUsize>,
) -> Vec<Recorded> {
    let mut out = Vec::new();
    let mut counted = false;
    let mut failures_in_a_row = 0;
    while !stop.is_cancelled() {
        let counter = (!counted).then_some(&first_tokens);
        let before = first_tokens.load(Ordering::Relaxed);
        let r = record_one(&client, &shape, &prompt, epoch, &stop, counter).await;
        counted |= counter.is_some() && first_tokens.load(Ordering::Relaxed) > before;
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
            () = stop.cancelled() => {}
        }
    }
    out
}

enum Readiness {
    Ready,
    Queued,
    StreamsDied,
    Cancelled,
}

/// Waits until every live slot has its first token (and the server's gauges
/// say they all run, where it exports them); a slot that stopped after
/// repeated failures no longer counts, and with none left the streams died.
async fn wait_ready(
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
async fn measure_window(
    server: &Server,
    start: Instant,
    duration: Duration,
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
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        }
    }
}

/// What summarizing a cell needs to know besides its requests.
struct Cell<'s, 'a> {
    spec: &'s DecodeCellSpec<'a>,
    epoch: Instant,
    window_opened: bool,
    queueing: bool,
}

impl Cell<'_, '_> {
    #[allow(clippy::too_many_arguments)]
    async fn summarize(
        &self,
        server: &Server,
        observer: &dyn Observer,
        cancel: &CancellationToken,
        window: Window,
        recorded: Vec<SlotRecord>,
        gauges: &[Gauges],
        mut notices: Vec<String>,
    ) -> DecodeOutcome {
        let spec = self.spec;
        let retried: u32 = recorded.iter().map(|r| r.record.retries).sum();
        if retried > 0 {
            notices.push(format!(
                "{}: the server turned requests away with HTTP 429/503 {retried} times; each was sent again after its Retry-After delay (at most {} times)",
                spec.label,
                crate::request::MAX_RETRIES
            ));
        }
        let unexpected_content_type = recorded
            .iter()
            .find_map(|r| r.record.unexpected_content_type.clone());
        let health = Health::of(&recorded, window, self.window_opened);
        if let Some(failure) = health.error() {
            let mut out = error_outcome(failure, health.failed, health.good, notices);
            out.server_suspect = health.connection_lost;
            out.unexpected_content_type = unexpected_content_type;
            return out;
        }
        let mut recorded: Vec<Recorded> = recorded.into_iter().map(|r| r.record).collect();
        recorded = tokenize_texts(spec.tokenizer, recorded).await;
        let mut m = match metrics_of(&recorded, window) {
            Ok(m) => m,
            Err(e) => {
                return error_outcome(("metrics".into(), e.to_string()), 0, health.good, notices);
            }
        };
        // The cell's own finished requests calibrate estimates when they can;
        // else a few requests run to their end now, after the window.
        if m.token_count.calibration.is_some_and(|c| c.requests < 2) && !cancel.is_cancelled() {
            observer.step_phase(spec.label, "calibrating the token estimate");
            let extra = calibration_requests(
                server,
                &spec.shape,
                &spec.prompts,
                spec.concurrency,
                self.epoch,
                cancel,
            )
            .await;
            recorded.extend(tokenize_texts(spec.tokenizer, extra).await);
            match metrics_of(&recorded, window) {
                Ok(again) => m = again,
                Err(e) => {
                    return error_outcome(
                        ("metrics".into(), e.to_string()),
                        0,
                        health.good,
                        notices,
                    );
                }
            }
        }
        let mut outcome = self.measured(&recorded, &m, gauges, notices);
        if let Some(status) = health.partial() {
            outcome.status = status;
        }
        outcome.unexpected_content_type = unexpected_content_type;
        outcome
    }

    fn measured(
        &self,
        recorded: &[Recorded],
        m: &WindowMetrics,
        gauges: &[Gauges],
        mut notices: Vec<String>,
    ) -> DecodeOutcome {
        let spec = self.spec;
        let mut queueing = self.queueing;
        let samples: Vec<GaugeSample> = gauges
            .iter()
            .map(|g| GaugeSample {
                at: Timestamp::from_instant(self.epoch, g.at),
                running: g.running,
                waiting: g.waiting,
            })
            .collect();
        let averages = average_gauges(&samples, m.window).ok().flatten();
        if averages.is_some_and(|a| a.shows_queueing(spec.concurrency.get())) {
            queueing = true;
            notices.push(format!(
                "{}: the server reported fewer than {} running requests or some waiting during the window",
                spec.label, spec.concurrency
            ));
        }
        let mismatches = recorded
            .iter()
            .filter(|r| {
                r.prompt_tokens_reported
                    .is_some_and(|p| p != spec.expected_prompt_tokens)
            })
            .count() as u64;
        if mismatches > 0 {
            notices.push(format!(
                "{}: {mismatches} requests were counted by the server with a prompt length other than the {} tokens sent",
                spec.label, spec.expected_prompt_tokens
            ));
        }
        let mut finish_reasons = BTreeMap::new();
        for r in recorded {
            if let Outcome::Finished { finish_reason } = &r.timeline.outcome {
                let key = finish_reason.clone().unwrap_or_else(|| "none".into());
                *finish_reasons.entry(key).or_insert(0u64) += 1;
            }
        }
        if finish_reasons.contains_key("stop") {
            notices.push(format!(
                "{}: some requests stopped early (finish_reason \"stop\") although ignore_eos was set; the server seems to ignore it (try --min-tokens)",
                spec.label
            ));
        }
        if let Some(c) = &m.token_count.calibration {
            notices.push(estimate_notice(spec.label, m, c));
        }
        let ms = |s: Option<speedmatrix_metrics::Summary<Duration>>| {
            s.map(|s| Percentiles {
                p50: s.p50.as_secs_f64() * 1e3,
                p90: s.p90.as_secs_f64() * 1e3,
                p99: s.p99.as_secs_f64() * 1e3,
            })
        };
        let (Some(ttft), Some(tbt)) = (ms(m.ttft), ms(m.time_between_tokens)) else {
            return error_outcome(
                (
                    "no_tokens".into(),
                    "no output token arrived inside the measurement window".into(),
                ),
                0,
                recorded.len() as u64,
                notices,
            );
        };
        let measurements = DecodeMeasurements {
            total_tokens_per_s: m.total_output_rate.get(),
            per_request_tokens_per_s: m.per_request_rate.map_or(0.0, |r| r.get()),
            ttft_ms: ttft,
            time_between_tokens_ms: tbt,
            average_active_requests: m.average_active_requests,
            completed_requests: m.completed_requests,
            output_tokens: m.output_tokens,
            measured_s: m.window.duration().as_secs_f64(),
            queueing_detected: queueing,
            prompt_token_mismatches: mismatches,
            token_count_source: crate::convert::token_source(m.token_source),
            token_count: Some(crate::convert::token_count(&m.token_count)),
            finish_reasons,
            server_counter: None,
        };
        DecodeOutcome {
            status: CellStatus::Valid,
            measurements: Some(measurements),
            notices,
            server_suspect: false,
            first_warmup: None,
            unexpected_content_type: None,
        }
    }
}

fn metrics_of(recorded: &[Recorded], window: Window) -> Result<WindowMetrics, MetricsError> {
    let timelines: Vec<_> = recorded.iter().map(|r| r.timeline.clone()).collect();
    window_metrics(&timelines, window)
}

/// The notice a cell with estimated counts gives: how, on what, how sure.
fn estimate_notice(label: &str, m: &WindowMetrics, c: &Calibration) -> String {
    let method = match c.method {
        EstimateMethod::Tokenizer => "re-tokenizing each stream's whole text",
        EstimateMethod::ChunkCount => "counting chunks",
    };
    let share = m.token_count.estimated_share * 100.0;
    let calibration = if c.requests > 0 {
        format!(
            "calibrated on {} finished requests (× {:.3})",
            c.requests, c.factor
        )
    } else {
        "uncalibrated: no finished request reported its usage".to_owned()
    };
    let uncertainty = m
        .token_count
        .relative_uncertainty()
        .map_or_else(|| "unknown".to_owned(), |u| format!("±{:.1} %", u * 100.0));
    format!(
        "{label}: the server sent no token count for streams cancelled at the window's end; \
         {share:.0} % of the window's tokens were estimated by {method}, {calibration}; \
         uncertainty {uncertainty}"
    )
}

/// Failed and good requests of a cell, and whether any stream slot ran the
/// whole window without a failure.
struct Health {
    failed: u64,
    good: u64,
    kinds: BTreeMap<String, u64>,
    first: Option<(String, String)>,
    clean_slot: bool,
    connection_lost: bool,
}

impl Health {
    fn of(recorded: &[SlotRecord], w: Window, window_opened: bool) -> Health {
        let mut kinds = BTreeMap::new();
        let mut first = None;
        let mut failed = 0;
        let mut connection_lost = false;
        for r in recorded {
            if let Some((kind, message)) = &r.record.error {
                failed += 1;
                *kinds.entry(kind.clone()).or_insert(0) += 1;
                first.get_or_insert_with(|| (kind.clone(), message.clone()));
                connection_lost |= matches!(
                    kind.as_str(),
                    "connect" | "disconnected" | "timeout_connect"
                );
            }
        }
        let slots: std::collections::BTreeSet<usize> = recorded.iter().map(|r| r.slot).collect();
        let clean_slot = window_opened
            && slots.iter().any(|&s| {
                let mine = || recorded.iter().filter(move |r| r.slot == s);
                let in_flight_at = |t: Timestamp| {
                    mine().any(|r| {
                        r.record.error.is_none()
                            && r.record.timeline.sent_at <= t
                            && r.record.timeline.ended_at >= t
                    })
                };
                let failed_inside = mine().any(|r| {
                    r.record.error.is_some()
                        && r.record.timeline.ended_at > w.start()
                        && r.record.timeline.sent_at < w.end()
                });
                !failed_inside && in_flight_at(w.start()) && in_flight_at(w.end())
            });
        Health {
            failed,
            good: recorded.len() as u64 - failed,
            kinds,
            first,
            clean_slot,
            connection_lost,
        }
    }

    /// The cell's error when requests failed and no stream ran the whole window.
    fn error(&self) -> Option<(String, String)> {
        if self.failed == 0 || self.clean_slot {
            return None;
        }
        self.first.clone()
    }

    /// The partial status when requests failed but a stream ran the whole window.
    fn partial(&self) -> Option<CellStatus> {
        let (_, message) = self.first.clone().filter(|_| self.clean_slot)?;
        Some(CellStatus::Partial {
            failed_requests: self.failed,
            good_requests: self.good,
            error_kinds: self.kinds.clone(),
            message,
        })
    }
}

/// The counter's increase between two readings; `None` when either is
/// missing or the counter went backwards (a server restart).
fn counter_increase(
    open: Option<CounterReading>,
    close: Option<CounterReading>,
) -> Option<ServerCounter> {
    let (open, close) = (open?, close?);
    let tokens = close.tokens - open.tokens;
    // NaN readings fail this too.
    if tokens.is_nan() || tokens < 0.0 || close.at <= open.at {
        return None;
    }
    Some(ServerCounter {
        generation_tokens: Tokens::new(tokens.round() as u64),
        between_scrapes_s: (close.at - open.at).as_secs_f64(),
    })
}

fn error_outcome(
    (kind, message): (String, String),
    failed: u64,
    good: u64,
    notices: Vec<String>,
) -> DecodeOutcome {
    DecodeOutcome {
        status: CellStatus::Error {
            error_kind: kind,
            message,
            failed_requests: failed.max(1),
            good_requests: good,
        },
        measurements: None,
        notices,
        server_suspect: false,
        first_warmup: None,
        unexpected_content_type: None,
    }
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
        assert_eq!(c.generation_tokens, Tokens::new(750));
        assert!((c.between_scrapes_s - 2.5).abs() < 1e-9);
        assert!((c.tokens_per_s() - 300.0).abs() < 1e-9);
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
