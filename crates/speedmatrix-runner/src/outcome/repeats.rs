//! A cell measured several times back to back (`--repeats`): the repeats'
//! figures, their spread, and the cell's figures as their means. A decode
//! cell's repeats are windows of the same streams; a burst or rate cell's are
//! whole cells, each with prompts of its own (no repeat finds another's
//! prompts in the prefix cache).

use std::time::Duration;

use speedmatrix_report::{RepeatFigure, Repeats};
use speedmatrix_units::Tokens;

use super::{CellOutcome, Latency, LoadOutcome, LoadResult, WindowResult};

/// `first` (a measured cell) with the `more` windows measured after it:
/// its headline figures become the repeats' means, its `output_tokens`,
/// `measured` and completed requests their sums (so that output tokens
/// over time is still the mean rate, the windows being equal), and every
/// repeat's figures with their mean, 95 % interval and coefficient of
/// variation are kept in `repeats`. The rest (series, telemetry, counts by
/// source) stays the first window's.
pub(crate) fn with_repeats(mut first: CellOutcome, more: Vec<WindowResult>) -> CellOutcome {
    let Some(w0) = first.window.take() else {
        return first;
    };
    let all: Vec<&WindowResult> = std::iter::once(&w0).chain(&more).collect();
    let figure = |f: fn(&WindowResult) -> f64| -> Option<RepeatFigure> {
        let values: Vec<f64> = all.iter().map(|w| f(w)).collect();
        let s = speedmatrix_metrics::spread(&values)?;
        Some(RepeatFigure {
            values,
            mean: s.mean,
            interval: s.interval,
            cv: s.cv,
        })
    };
    let Some(total) = figure(|w| w.total_tokens_per_s) else {
        first.window = Some(w0);
        return first;
    };
    let repeats = Repeats {
        count: u32::try_from(all.len()).unwrap_or(u32::MAX),
        total_tokens_per_s: total,
        per_request_tokens_per_s: figure(|w| w.per_request_tokens_per_s),
        ttft_p50_ms: figure(|w| w.ttft.p50.as_secs_f64() * 1e3),
        time_between_tokens_p50_ms: figure(|w| w.time_between_tokens.p50.as_secs_f64() * 1e3),
    };
    let mean =
        |f: fn(&WindowResult) -> f64| all.iter().map(|w| f(w)).sum::<f64>() / all.len() as f64;
    let mean_latency = |f: fn(&WindowResult) -> Latency| {
        let d = |g: fn(Latency) -> Duration| {
            let secs = all.iter().map(|w| g(f(w)).as_secs_f64()).sum::<f64>() / all.len() as f64;
            Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
        };
        Latency {
            p50: d(|l| l.p50),
            p90: d(|l| l.p90),
            p99: d(|l| l.p99),
        }
    };
    let mut w = w0.clone();
    w.total_tokens_per_s = repeats.total_tokens_per_s.mean;
    w.per_request_tokens_per_s = mean(|w| w.per_request_tokens_per_s);
    w.ttft = mean_latency(|w| w.ttft);
    w.time_between_tokens = mean_latency(|w| w.time_between_tokens);
    w.average_active_requests = mean(|w| w.average_active_requests);
    w.completed_requests = all.iter().map(|w| w.completed_requests).sum();
    w.output_tokens = Tokens::new(all.iter().map(|w| w.output_tokens.get()).sum());
    w.measured = all.iter().map(|w| w.measured).sum();
    w.queueing_detected = all.iter().any(|w| w.queueing_detected);
    w.prompt_token_mismatches = all.iter().map(|w| w.prompt_token_mismatches).sum();
    w.repeats = Some(repeats);
    first.window = Some(w);
    first
}

/// The repeats of a figure: every value, their mean, its 95 % interval and their
/// coefficient of variation; `None` without two finite values.
fn repeat_figure(values: Vec<f64>) -> Option<RepeatFigure> {
    let s = speedmatrix_metrics::spread(&values)?;
    Some(RepeatFigure {
        values,
        mean: s.mean,
        interval: s.interval,
        cv: s.cv,
    })
}

fn p50_ms(l: Option<Latency>) -> Option<f64> {
    l.map(|l| l.p50.as_secs_f64() * 1e3)
}

/// The mean of latencies' percentiles, when every repeat has them.
fn mean_latency(all: &[&LoadResult], f: fn(&LoadResult) -> Option<Latency>) -> Option<Latency> {
    let each: Vec<Latency> = all.iter().map(|r| f(r)).collect::<Option<_>>()?;
    let d = |g: fn(&Latency) -> Duration| {
        let secs = each.iter().map(|l| g(l).as_secs_f64()).sum::<f64>() / each.len() as f64;
        Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX)
    };
    Some(Latency {
        p50: d(|l| l.p50),
        p90: d(|l| l.p90),
        p99: d(|l| l.p99),
    })
}

/// A burst or rate cell from its `runs` (the first measured, the rest after it): the first
/// run that did not measure, when one did not (the cell fails as it did); else the first's
/// outcome with the repeats' figures: output tok/s, rates and latency percentiles their
/// means, request and token counts and the span their sums, the SLO verdict met only when
/// every repeat met it (its terms those of the repeat with the fewest good requests).
pub(crate) fn load_with_repeats(mut runs: Vec<LoadOutcome>) -> Option<LoadOutcome> {
    if let Some(i) = runs
        .iter()
        .position(|r| !r.status.is_measured() || r.result.is_none())
    {
        return Some(runs.swap_remove(i));
    }
    let notices: Vec<_> = runs.iter().flat_map(|r| r.notices.clone()).collect();
    let results: Vec<LoadResult> = runs.iter().filter_map(|r| r.result.clone()).collect();
    let mut first = runs.into_iter().next()?;
    if results.len() < 2 {
        return Some(first);
    }
    let all: Vec<&LoadResult> = results.iter().collect();
    let values = |f: fn(&LoadResult) -> Option<f64>| -> Option<Vec<f64>> {
        all.iter().map(|r| f(r)).collect()
    };
    let repeats = speedmatrix_report::Repeats {
        count: u32::try_from(all.len()).unwrap_or(u32::MAX),
        total_tokens_per_s: repeat_figure(values(|r| Some(r.output_tokens_per_s))?)?,
        per_request_tokens_per_s: None,
        ttft_p50_ms: values(|r| p50_ms(r.ttft)).and_then(repeat_figure),
        time_between_tokens_p50_ms: values(|r| p50_ms(r.itl)).and_then(repeat_figure),
    };
    let mean = |v: Option<Vec<f64>>| v.map(|v| v.iter().sum::<f64>() / v.len() as f64);
    let mut r = results[0].clone();
    r.sent = all.iter().map(|x| x.sent).sum();
    r.completed = all.iter().map(|x| x.completed).sum();
    r.failed = all.iter().map(|x| x.failed).sum();
    r.unfinished = all.iter().map(|x| x.unfinished).sum();
    r.span = all.iter().map(|x| x.span).sum();
    r.max_in_flight = all.iter().map(|x| x.max_in_flight).max().unwrap_or(0);
    r.output_tokens = Tokens::new(all.iter().map(|x| x.output_tokens.get()).sum());
    r.output_tokens_per_s = repeats.total_tokens_per_s.mean;
    r.achieved_rate_per_s = mean(values(|x| x.achieved_rate_per_s));
    r.ttft = mean_latency(&all, |x| x.ttft);
    r.e2e = mean_latency(&all, |x| x.e2e);
    r.itl = mean_latency(&all, |x| x.itl);
    r.tpot = mean_latency(&all, |x| x.tpot);
    r.send_lag = mean_latency(&all, |x| x.send_lag);
    r.slo = slo_of_repeats(&all);
    r.repeats = Some(repeats);
    first.result = Some(r);
    first.notices = notices;
    first.notices.dedup();
    Some(first)
}

/// The SLO verdict of repeated cells: met when every repeat met it; good requests and
/// requests summed, goodput their mean; the terms of the repeat with the smallest share of
/// good requests.
fn slo_of_repeats(all: &[&LoadResult]) -> Option<super::SloVerdict> {
    let each: Vec<&super::SloVerdict> =
        all.iter().map(|r| r.slo.as_ref()).collect::<Option<_>>()?;
    let share = |v: &super::SloVerdict| v.good_requests as f64 / v.requests.max(1) as f64;
    let worst = each
        .iter()
        .min_by(|a, b| share(a).total_cmp(&share(b)))
        .copied()?;
    Some(super::SloVerdict {
        met: each.iter().all(|v| v.met),
        good_requests: each.iter().map(|v| v.good_requests).sum(),
        requests: each.iter().map(|v| v.requests).sum(),
        goodput_per_s: each.iter().map(|v| v.goodput_per_s).sum::<f64>() / each.len() as f64,
        terms: worst.terms.clone(),
    })
}
