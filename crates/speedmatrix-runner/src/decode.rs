//! One sustained-decode cell: N streams kept busy, a fixed window measured
//! once every stream is producing tokens.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use speedmatrix_metrics::{GaugeSample, Outcome, Timestamp, Window, window_metrics};
use speedmatrix_report::{CellStatus, DecodeMeasurements, Percentiles, ServerCounter};
use speedmatrix_units::{Concurrency, Tokens};
use tokio_util::sync::CancellationToken;

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
}

/// What a decode cell produced.
pub(crate) struct DecodeOutcome {
    pub(crate) status: CellStatus,
    pub(crate) measurements: Option<DecodeMeasurements>,
    pub(crate) notices: Vec<String>,
    /// True when requests failed in a way that suggests the server is gone.
    pub(crate) server_suspect: bool,
}

/// How long streams keep running after the window closes.
const WINDOW_EDGE_GRACE: Duration = Duration::from_millis(250);

/// How long to wait for every stream's first token after the cache is warm.
fn readiness_limit(context: Tokens, n: Concurrency) -> Duration {
    let work = context.get() as f64 * f64::from(n.get());
    Duration::from_secs(60) + Duration::from_secs_f64(work / 2_000.0)
}

/// Runs the cell: warm-up, streams, window, cancel, drain.
pub(crate) async fn run_cell(
    server: &Server,
    spec: DecodeCellSpec<'_>,
    observer: &dyn Observer,
    cancel: &CancellationToken,
) -> Result<DecodeOutcome, RunError> {
    let mut notices = Vec::new();
    let epoch = Instant::now();

    observer.step_phase(spec.label, "warming the prefix cache");
    if let Some(failure) = warm_up(server, &spec, epoch, cancel).await {
        return Ok(error_outcome(
            failure,
            0,
            spec.prompts.len() as u64,
            notices,
        ));
    }
    if cancel.is_cancelled() {
        return Err(RunError::Cancelled);
    }

    observer.step_phase(spec.label, "starting streams");
    let stop = CancellationToken::new();
    let first_tokens = Arc::new(AtomicUsize::new(0));
    let dead_streams = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(spec.concurrency.get() as usize);
    for i in 0..spec.concurrency.get() as usize {
        let prompt = Arc::clone(&spec.prompts[i % spec.prompts.len()]);
        let client = server.client.clone();
        let shape = spec.shape.clone();
        let stop = stop.clone();
        let first = Arc::clone(&first_tokens);
        let dead = Arc::clone(&dead_streams);
        tasks.push(tokio::spawn(async move {
            stream_loop(client, shape, prompt, epoch, stop, first, dead).await
        }));
    }

    let n = spec.concurrency.get() as usize;
    let ready = wait_ready(server, &spec, n, &first_tokens, &dead_streams, cancel).await;
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
    if !matches!(ready, Readiness::StreamsDied) {
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
    let mut recorded: Vec<Recorded> = Vec::new();
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
    let mut outcome = summarize(
        &spec,
        epoch,
        window_start,
        &recorded,
        &gauges,
        queueing,
        notices,
    );
    if let Some(m) = outcome.measurements.as_mut() {
        m.server_counter = counter;
    }
    Ok(outcome)
}

async fn warm_up(
    server: &Server,
    spec: &DecodeCellSpec<'_>,
    epoch: Instant,
    cancel: &CancellationToken,
) -> Option<(String, String)> {
    let shape = RequestShape {
        max_tokens: Tokens::new(1),
        ignore_eos: false,
        min_tokens: false,
        ..spec.shape.clone()
    };
    let mut set = tokio::task::JoinSet::new();
    for prompt in &spec.prompts {
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
    failure
}

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
    while !stop.is_cancelled() {
        let counter = (!counted).then_some(&first_tokens);
        let before = first_tokens.load(Ordering::Relaxed);
        let r = record_one(&client, &shape, &prompt, epoch, &stop, counter).await;
        counted |= counter.is_some() && first_tokens.load(Ordering::Relaxed) > before;
        let failed = r.error.is_some();
        out.push(r);
        if failed {
            dead.fetch_add(1, Ordering::Relaxed);
            break;
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
        if dead.load(Ordering::Relaxed) > 0 {
            return Readiness::StreamsDied;
        }
        if first_tokens.load(Ordering::Relaxed) >= n {
            if !gauges {
                return Readiness::Ready;
            }
            if let Some(g) = server.gauges().await
                && g.running >= n as f64
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

fn summarize(
    spec: &DecodeCellSpec<'_>,
    epoch: Instant,
    window_start: Instant,
    recorded: &[Recorded],
    gauges: &[Gauges],
    mut queueing: bool,
    mut notices: Vec<String>,
) -> DecodeOutcome {
    let retried: u32 = recorded.iter().map(|r| r.retries).sum();
    if retried > 0 {
        notices.push(format!(
            "{}: the server turned requests away with HTTP 429/503 {retried} times; each was sent again after its Retry-After delay (at most {} times)",
            spec.label,
            crate::request::MAX_RETRIES
        ));
    }
    let failed: Vec<&Recorded> = recorded.iter().filter(|r| r.error.is_some()).collect();
    let good = (recorded.len() - failed.len()) as u64;
    if let Some(first) = failed.first().and_then(|r| r.error.clone()) {
        let mut out = error_outcome(first, failed.len() as u64, good, notices);
        out.server_suspect = failed.iter().any(|r| {
            r.error.as_ref().is_some_and(|(kind, _)| {
                matches!(
                    kind.as_str(),
                    "connect" | "disconnected" | "timeout_connect"
                )
            })
        });
        return out;
    }
    let timelines: Vec<_> = recorded.iter().map(|r| r.timeline.clone()).collect();
    let start = Timestamp::from_instant(epoch, window_start);
    let window = match Window::new(start, spec.duration) {
        Ok(w) => w,
        Err(e) => return error_outcome(("metrics".into(), e.to_string()), 0, good, notices),
    };
    let m = match window_metrics(&timelines, window) {
        Ok(m) => m,
        Err(e) => return error_outcome(("metrics".into(), e.to_string()), 0, good, notices),
    };
    let samples: Vec<GaugeSample> = gauges
        .iter()
        .map(|g| GaugeSample {
            at: Timestamp::from_instant(epoch, g.at),
            running: g.running,
            waiting: g.waiting,
        })
        .collect();
    let n = f64::from(spec.concurrency.get());
    let count = samples.len().max(1) as f64;
    let mean_running = samples.iter().map(|s| s.running).sum::<f64>() / count;
    let mean_waiting = samples.iter().map(|s| s.waiting).sum::<f64>() / count;
    // A replaced stream shows up as a short dip; queueing is a persistent shortfall.
    if !samples.is_empty() && (mean_waiting >= 0.5 || mean_running < 0.9 * n) {
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
            good,
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
        finish_reasons,
        server_counter: None,
    };
    DecodeOutcome {
        status: CellStatus::Valid,
        measurements: Some(measurements),
        notices,
        server_suspect: false,
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
