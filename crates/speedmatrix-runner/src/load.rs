//! Burst and open-loop rate cells: requests sent on a schedule fixed before
//! the cell (all at once, or at drawn arrival times), each measured from
//! the time it was meant to be sent, then summarized by the metrics crate's
//! [`load_metrics`].
//!
//! A sender task walks the schedule and sleeps until each intended time;
//! each request then runs in its own task. With an in-flight cap a request
//! waits for a free slot after its intended time, and that wait counts in
//! its latency. After the last send the cell waits up to its drain time for
//! the requests still running, then cancels them: they are counted as
//! unfinished, their latencies unknown.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use speedmatrix_metrics::{LoadMetrics, LoadRequest, Slo, Summary, Timestamp, load_metrics};
use speedmatrix_units::{Concurrency, RequestRate, Tokens};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::config::{RateLength, RateSpec};
use crate::estimate::tokenize_texts;
use crate::observer::{Event, StepPhase};
use crate::outcome::{
    Failure, FailureKind, Latency, LoadOutcome, LoadPoint, LoadResult, Notice, PrefixCacheCheck,
    SloTermVerdict, SloVerdict, StepId, StepStatus,
};
use crate::request::{Recorded, RequestShape, record_one};
use crate::server::{Server, read_counters};
use crate::{ConfigProblem, Observer, RunnerError};
use speedmatrix_engines::CounterDeltas;

/// Inputs of one load cell.
pub(crate) struct LoadCellSpec<'a> {
    pub(crate) step: StepId,
    pub(crate) context: Tokens,
    pub(crate) point: LoadPoint,
    /// One prompt per request, in send order.
    pub(crate) prompts: Vec<LoadPrompt>,
    /// Intended send times from the cell's start, one per prompt.
    pub(crate) schedule: Vec<Duration>,
    pub(crate) shape: RequestShape,
    /// The prompts differ in length (a workload's): the cell reports their lengths.
    pub(crate) lengths_vary: bool,
    pub(crate) max_in_flight: Option<Concurrency>,
    pub(crate) drain: Duration,
    pub(crate) warm_cache: bool,
    pub(crate) slo: Option<&'a Slo>,
    pub(crate) tokenizer: &'a speedmatrix_workload::Tokenizer,
    /// With a shared prefix: a prompt that starts with it, sent once before
    /// the cell, the prefix's length, and the hit rate it should give.
    pub(crate) prefix: Option<PrefixWarm>,
}

/// One request of a load cell: what it sends, the prompt tokens the server should count
/// (`None` when the run cannot know them exactly: chat messages as a dataset gives them) and
/// its own `max_tokens` (a dataset's answer length), else the cell's.
#[derive(Debug, Clone)]
pub(crate) struct LoadPrompt {
    pub(crate) body: crate::workload::Body,
    pub(crate) expected_tokens: Option<Tokens>,
    pub(crate) max_tokens: Option<Tokens>,
}

impl LoadPrompt {
    /// A prompt of the run's own, `tokens` long.
    pub(crate) fn text(text: impl Into<Arc<str>>, tokens: Tokens) -> LoadPrompt {
        LoadPrompt {
            body: crate::workload::Body::Text(text.into()),
            expected_tokens: Some(tokens),
            max_tokens: None,
        }
    }

    /// The shape this request is sent with: the cell's, with its own `max_tokens`.
    fn shape(&self, cell: &RequestShape) -> RequestShape {
        match self.max_tokens {
            Some(t) => RequestShape {
                max_tokens: t,
                ..cell.clone()
            },
            None => cell.clone(),
        }
    }
}

/// The shared prefix of a cell and the request that caches it.
pub(crate) struct PrefixWarm {
    pub(crate) prompt: Arc<str>,
    pub(crate) shared_tokens: Tokens,
    pub(crate) intended_hit_rate: Option<f64>,
}

/// How long a burst's requests may run after they are all sent.
pub(crate) const BURST_DRAIN: Duration = Duration::from_secs(3_600);

/// A rate cell's send times: drawn from the run's seed mixed with the cell's
/// context and rate (cells are independent, runs repeatable). Only arrivals
/// inside the cell's sending time are sent; a schedule with none, or with
/// more than a cell may hold, is refused (`validate` refuses both before
/// the run; this is the cell's own check).
pub(crate) fn rate_schedule(
    r: &RateSpec,
    context: Tokens,
    rate: RequestRate,
) -> Result<Vec<Duration>, RunnerError> {
    let arrivals = cell_arrivals(r, context, rate)?;
    let cap = crate::limits::MAX_REQUESTS_PER_CELL;
    let most = usize::try_from(cap.saturating_add(1)).unwrap_or(usize::MAX);
    let (times, length) = match r.length {
        RateLength::Duration(d) => (arrivals.within_at_most(d, most), Some(d)),
        RateLength::Requests(n) => (
            arrivals.first(usize::try_from(n).unwrap_or(usize::MAX).min(most)),
            None,
        ),
    };
    let too_many = |requests: u64| {
        RunnerError::InvalidConfig(ConfigProblem::TooManyRequests {
            cell: format!("the rate cell {rate} at context {context}"),
            requests,
            cap,
        })
    };
    if let RateLength::Requests(n) = r.length
        && n > cap
    {
        return Err(too_many(n));
    }
    if times.len() as u64 > cap {
        return Err(too_many(times.len() as u64));
    }
    match (times.is_empty(), length) {
        (true, Some(length)) => Err(RunnerError::InvalidConfig(ConfigProblem::NoArrival {
            rate,
            context,
            first: arrivals.first(1).first().copied().unwrap_or(Duration::MAX),
            length,
        })),
        _ => Ok(times),
    }
}

/// When a rate cell's first request would be sent; `None` when its schedule
/// cannot be drawn.
pub(crate) fn first_arrival(r: &RateSpec, context: Tokens, rate: RequestRate) -> Option<Duration> {
    let arrivals = cell_arrivals(r, context, rate).ok()?;
    Some(arrivals.first(1).first().copied().unwrap_or(Duration::MAX))
}

fn cell_arrivals(
    r: &RateSpec,
    context: Tokens,
    rate: RequestRate,
) -> Result<speedmatrix_workload::Arrivals, RunnerError> {
    let seed = r.seed ^ context.get().rotate_left(20) ^ rate.milli();
    speedmatrix_workload::Arrivals::new(r.arrival, rate.get(), seed).map_err(RunnerError::Arrivals)
}

/// Counts requests in flight and the most at once.
#[derive(Default)]
struct InFlight {
    now: AtomicU64,
    most: AtomicU64,
}

impl InFlight {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(n, Ordering::SeqCst);
    }
    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs the cell: warm-up if asked, the schedule, the drain, the numbers.
pub(crate) async fn run_load_cell(
    server: &Server,
    spec: LoadCellSpec<'_>,
    observer: &dyn Observer,
    cancel: &CancellationToken,
) -> Result<LoadOutcome, RunnerError> {
    let phase = |phase| {
        observer.event(Event::Phase {
            step: spec.step,
            phase,
        })
    };
    let epoch = Instant::now();
    if spec.warm_cache {
        phase(StepPhase::WarmingCache);
        if let Some(failure) = warm(server, &spec, epoch, cancel).await {
            return Ok(outcome(&spec, failed_status(failure, 0), None, Vec::new()));
        }
    }
    if let Some(prefix) = &spec.prefix {
        phase(StepPhase::WarmingCache);
        let shape = spec.shape.for_one_token();
        let r = record_one(&server.client, &shape, &prefix.prompt, epoch, cancel, None).await;
        if let Some(failure) = r.error {
            return Ok(outcome(&spec, failed_status(failure, 0), None, Vec::new()));
        }
    }
    if cancel.is_cancelled() {
        return Err(RunnerError::Cancelled);
    }
    // The prefix cache is judged on the cell's own requests: read before them.
    let counters_before = match (&spec.prefix, server.has_metrics()) {
        (Some(_), true) => read_counters(server.client.clone()).await,
        _ => None,
    };
    phase(StepPhase::Measuring);
    let stop = CancellationToken::new();
    let in_flight = Arc::new(InFlight::default());
    let slots = spec
        .max_in_flight
        .map(|n| Arc::new(Semaphore::new(n.get() as usize)));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let mut last_send_at = start;
    // Every request may queue behind all the others, or behind the cap's worth.
    let together = spec.max_in_flight.map_or(spec.schedule.len(), |n| {
        (n.get() as usize).min(spec.schedule.len())
    });
    let shape = spec.shape.together(together);
    for (index, (prompt, &at)) in spec.prompts.iter().zip(&spec.schedule).enumerate() {
        let intended = start + at;
        tokio::select! {
            () = tokio::time::sleep_until(intended.into()) => {}
            () = cancel.cancelled() => break,
        }
        last_send_at = Instant::now();
        let (client, shape, body) = (
            server.client.clone(),
            prompt.shape(&shape),
            prompt.body.clone(),
        );
        let (stop, in_flight, slots) = (stop.clone(), Arc::clone(&in_flight), slots.clone());
        tasks.spawn(async move {
            // The wait for a slot is part of the request's latency.
            let _slot = match &slots {
                Some(s) => Some(Arc::clone(s).acquire_owned().await),
                None => None,
            };
            in_flight.enter();
            let r = record_one(&client, &shape, body.as_prompt(), epoch, &stop, None).await;
            in_flight.leave();
            (intended, index, r)
        });
    }
    if cancel.is_cancelled() {
        stop.cancel();
        while tasks.join_next().await.is_some() {}
        return Err(RunnerError::Cancelled);
    }
    phase(StepPhase::Draining);
    let mut recorded: Vec<(Instant, usize, Recorded)> = Vec::with_capacity(spec.prompts.len());
    let drain_until = tokio::time::Instant::now() + spec.drain;
    loop {
        tokio::select! {
            next = tasks.join_next() => match next {
                Some(Ok(r)) => recorded.push(r),
                Some(Err(_)) => {}
                None => break,
            },
            () = tokio::time::sleep_until(drain_until) => {
                // The rest are cut: they come back as cancelled.
                stop.cancel();
            }
            () = cancel.cancelled() => {
                stop.cancel();
                while tasks.join_next().await.is_some() {}
                return Err(RunnerError::Cancelled);
            }
        }
    }
    let counters_after = match counters_before {
        Some(_) => read_counters(server.client.clone()).await,
        None => None,
    };
    let prefix_cache = spec.prefix.as_ref().map(|p| PrefixCacheCheck {
        shared_tokens: p.shared_tokens,
        intended_hit_rate: p.intended_hit_rate,
        measured_hit_rate: counters_before.zip(counters_after).and_then(|(a, b)| {
            CounterDeltas::between(&a.counters, &b.counters).prefix_cache_hit_rate()
        }),
    });
    let run = CellRun {
        epoch,
        start,
        last_send_at,
        intended_span: spec.schedule.last().copied().unwrap_or_default(),
        max_in_flight: in_flight.most.load(Ordering::SeqCst),
        prefix_cache,
    };
    summarize(&spec, &run, recorded).await
}

/// What the cell's sending and draining told, beside its requests.
struct CellRun {
    epoch: Instant,
    start: Instant,
    last_send_at: Instant,
    /// The last intended send time, from the start.
    intended_span: Duration,
    max_in_flight: u64,
    prefix_cache: Option<PrefixCacheCheck>,
}

/// Sends every prompt once with `max_tokens` 1, eight at a time.
async fn warm(
    server: &Server,
    spec: &LoadCellSpec<'_>,
    epoch: Instant,
    cancel: &CancellationToken,
) -> Option<Failure> {
    let shape = spec.shape.for_one_token().together(8);
    let slots = Arc::new(Semaphore::new(8));
    let mut set = tokio::task::JoinSet::new();
    for prompt in &spec.prompts {
        let (client, shape, body) = (server.client.clone(), shape.clone(), prompt.body.clone());
        let (cancel, slots) = (cancel.clone(), Arc::clone(&slots));
        set.spawn(async move {
            let _slot = slots.acquire_owned().await;
            record_one(&client, &shape, body.as_prompt(), epoch, &cancel, None).await
        });
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

async fn summarize(
    spec: &LoadCellSpec<'_>,
    run: &CellRun,
    recorded: Vec<(Instant, usize, Recorded)>,
) -> Result<LoadOutcome, RunnerError> {
    let epoch = run.epoch;
    let mut notices = Vec::new();
    let mut intended = Vec::with_capacity(recorded.len());
    let mut sent = Vec::with_capacity(recorded.len());
    let mut records = Vec::with_capacity(recorded.len());
    for (at, index, r) in recorded {
        intended.push(at);
        sent.push(&spec.prompts[index]);
        records.push(r);
    }
    let records = tokenize_texts(spec.tokenizer, records).await;
    let failed = records.iter().filter(|r| r.error.is_some()).count() as u64;
    let good = records.len() as u64 - failed;
    let first_failure = records.iter().find_map(|r| r.error.clone());
    let retried: u32 = records.iter().map(|r| r.retries).sum();
    if retried > 0 {
        notices.push(Notice::Retried {
            step: spec.step,
            times: retried,
            per_request: crate::request::MAX_RETRIES,
        });
    }
    let mismatched: Vec<Tokens> = records
        .iter()
        .zip(&sent)
        .filter_map(
            |(r, p)| match (r.prompt_tokens_reported, p.expected_tokens) {
                (Some(reported), Some(expected)) if reported != expected => Some(expected),
                _ => None,
            },
        )
        .collect();
    if let Some(&first) = mismatched.first() {
        notices.push(Notice::PromptMismatch {
            step: spec.step,
            requests: mismatched.len() as u64,
            sent: first,
        });
    }
    // What was sent, as the server counted it (the run's count where it said nothing).
    let input_lengths: Vec<u64> = records
        .iter()
        .zip(&sent)
        .filter_map(|(r, p)| r.prompt_tokens_reported.or(p.expected_tokens))
        .map(Tokens::get)
        .collect();
    let requests: Vec<LoadRequest<'_>> = records
        .iter()
        .zip(&intended)
        .map(|(r, &at)| LoadRequest {
            timeline: &r.timeline,
            intended: Timestamp::from_instant(epoch, at),
        })
        .collect();
    let m = match load_metrics(&requests, spec.slo) {
        Ok(m) => m,
        Err(e) => {
            let status = StepStatus::Failed {
                failure: Failure {
                    kind: FailureKind::Metrics,
                    message: e.to_string(),
                },
                failed: failed.max(1),
                good,
            };
            return Ok(outcome(spec, status, None, notices));
        }
    };
    if m.completed == 0 {
        let failure = first_failure.unwrap_or(Failure {
            kind: FailureKind::NoTokens,
            message: "no request finished before the cell's drain time ran out".into(),
        });
        return Ok(outcome(spec, failed_status(failure, failed), None, notices));
    }
    let status = match first_failure {
        Some(first) => StepStatus::Partial {
            failed,
            good,
            kinds: failure_kinds(&records),
            first,
        },
        None => StepStatus::Measured,
    };
    let sent_span = run.last_send_at.saturating_duration_since(run.start);
    let rate_cell = matches!(spec.point, LoadPoint::Rate { .. });
    let mut result = result_of(
        &m,
        rate_cell
            .then(|| rate(spec.schedule.len(), run.intended_span))
            .flatten(),
        rate_cell
            .then(|| rate(m.sent as usize, sent_span))
            .flatten(),
        run.max_in_flight,
    );
    result.prefix_cache = run.prefix_cache;
    if spec.lengths_vary {
        let as_f64: Vec<f64> = input_lengths.iter().map(|&n| n as f64).collect();
        result.input_lengths = Summary::of(&as_f64)
            .ok()
            .map(|s| token_lengths(s, &speedmatrix_metrics::length_histogram(&input_lengths)));
    }
    Ok(outcome(spec, status, Some(result), notices))
}

/// `n` requests over `over`, per second.
fn rate(n: usize, over: Duration) -> Option<f64> {
    (!over.is_zero()).then(|| n as f64 / over.as_secs_f64())
}

pub(crate) fn failure_kinds(records: &[Recorded]) -> std::collections::BTreeMap<FailureKind, u64> {
    let mut kinds = std::collections::BTreeMap::new();
    for f in records.iter().filter_map(|r| r.error.as_ref()) {
        *kinds.entry(f.kind).or_insert(0) += 1;
    }
    kinds
}

fn failed_status(failure: Failure, failed: u64) -> StepStatus {
    StepStatus::Failed {
        failure,
        failed: failed.max(1),
        good: 0,
    }
}

fn outcome(
    spec: &LoadCellSpec<'_>,
    status: StepStatus,
    result: Option<LoadResult>,
    notices: Vec<Notice>,
) -> LoadOutcome {
    LoadOutcome {
        context: spec.context,
        point: spec.point,
        status,
        result,
        notices,
    }
}

/// A cell's lengths for the report: the metrics crate's summary and histogram.
pub(crate) fn token_lengths(
    s: Summary<f64>,
    histogram: &[speedmatrix_metrics::LengthBin],
) -> speedmatrix_report::TokenLengths {
    speedmatrix_report::TokenLengths {
        min: s.min,
        mean: s.mean,
        p50: s.p50,
        p90: s.p90,
        p99: s.p99,
        max: s.max,
        histogram: histogram
            .iter()
            .map(|b| speedmatrix_report::LengthBin {
                from: b.from,
                to: b.to,
                requests: b.count,
            })
            .collect(),
    }
}

fn latency(s: Option<Summary<Duration>>) -> Option<Latency> {
    s.map(|s| Latency {
        p50: s.p50,
        p90: s.p90,
        p99: s.p99,
    })
}

pub(crate) fn result_of(
    m: &LoadMetrics,
    intended_rate: Option<f64>,
    achieved_rate: Option<f64>,
    max_in_flight: u64,
) -> LoadResult {
    LoadResult {
        sent: m.sent,
        completed: m.completed,
        failed: m.failed,
        unfinished: m.unfinished,
        span: m.span,
        intended_rate_per_s: intended_rate,
        achieved_rate_per_s: achieved_rate,
        max_in_flight,
        output_tokens: m.output_tokens,
        output_tokens_per_s: m.output_rate.get(),
        ttft: latency(m.ttft),
        ttfc: latency(m.ttfc),
        output_lengths: m
            .output_lengths
            .map(|s| token_lengths(s, &m.output_length_histogram)),
        input_lengths: None,
        reasoning_lengths: m.reasoning_lengths.map(|s| token_lengths(s, &[])),
        reasoning_rates: m.reasoning_rates.map(rates),
        answer_rates: m.answer_rates.map(rates),
        e2e: latency(m.end_to_end),
        itl: latency(m.itl),
        tpot: latency(m.tpot),
        send_lag: latency(m.send_lag),
        token_source: m.token_source,
        slo: m.slo.as_ref().map(|o| SloVerdict {
            met: o.met,
            good_requests: o.good_requests,
            requests: o.requests,
            goodput_per_s: o.goodput(m.span).unwrap_or(0.0),
            terms: o
                .terms
                .iter()
                .map(|t| SloTermVerdict {
                    term: format!("{}_p{}", t.term.metric.name(), t.term.percentile),
                    limit: t.term.limit,
                    value: t.value,
                    met: t.met,
                })
                .collect(),
        }),
        prefix_cache: None,
        turns: Vec::new(),
        repeats: None,
    }
}

/// A per-request rate sample's percentiles, tok/s.
fn rates(s: speedmatrix_metrics::Summary<f64>) -> speedmatrix_report::Percentiles {
    speedmatrix_report::Percentiles {
        p50: s.p50,
        p90: s.p90,
        p99: s.p99,
    }
}
