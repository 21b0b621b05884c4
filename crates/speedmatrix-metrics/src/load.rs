//! A batch or an open-loop run of requests, each measured from the time it
//! was *meant* to be sent.
//!
//! In an open-loop run the send times are drawn before the run; a client
//! that falls behind sends late, and measuring from the actual send would
//! hide the queueing it caused (coordinated omission). So TTFT and end-to-end
//! latency here start at the intended time, and the lag between intended and
//! actual send is reported beside them. A burst's requests are all meant for
//! its start.

use std::time::Duration;

use speedmatrix_units::Tokens;

use crate::request::tpot;
use crate::slo::{RequestLatency, Slo, SloOutcome, judge};
use crate::stats::DurationSample;
use crate::tokens::Arrivals;
use crate::{
    MetricsError, Outcome, RequestTimeline, Summary, Timestamp, TokenCount, TokenSource,
    TokensPerSecond, Window, window_metrics,
};

/// One request of a load cell and when it was meant to be sent.
#[derive(Debug, Clone, Copy)]
pub struct LoadRequest<'a> {
    /// What the client saw.
    pub timeline: &'a RequestTimeline,
    /// When the schedule meant it to be sent (at or before `timeline.sent_at`).
    pub intended: Timestamp,
}

impl AsRef<RequestTimeline> for LoadRequest<'_> {
    fn as_ref(&self) -> &RequestTimeline {
        self.timeline
    }
}

/// What a load cell measured.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadMetrics {
    /// From the first intended send to the last request's end: the cell's time.
    pub span: Duration,
    /// Requests sent.
    pub sent: u64,
    /// Requests the server finished.
    pub completed: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Requests still running when the cell ended (cancelled, latencies unknown).
    pub unfinished: u64,
    /// Output tokens of every request (the cancelled ones' tokens included).
    pub output_tokens: Tokens,
    /// Output tokens over the span.
    pub output_rate: TokensPerSecond,
    /// Intended send → first token, finished requests.
    pub ttft: Option<Summary<Duration>>,
    /// Intended send → first *content* token (after any reasoning), finished requests that
    /// wrote content: later than `ttft` when the model reasons first.
    pub ttfc: Option<Summary<Duration>>,
    /// Output tokens of each finished request: its length as the model ended it (with
    /// `ignore_eos`, `max_tokens` each; without, where the model stopped).
    pub output_lengths: Option<Summary<f64>>,
    /// The same lengths in power-of-two bins ([`crate::length_histogram`]).
    pub output_length_histogram: Vec<crate::LengthBin>,
    /// Reasoning ("thinking") tokens of each finished request — its output tokens that
    /// arrived before its first content chunk — when any request streamed reasoning text;
    /// `None` for a model that answered at once.
    pub reasoning_lengths: Option<Summary<f64>>,
    /// Reasoning tok/s of each finished request that reasoned: its reasoning tokens over the
    /// time from its first token to its first content chunk; `None` when no request streamed
    /// reasoning text.
    pub reasoning_rates: Option<Summary<f64>>,
    /// Answer tok/s after the reasoning, of each finished request that reasoned and then
    /// answered with two tokens or more: the answer's tokens after its first over the time
    /// from its first content chunk to its last token.
    pub answer_rates: Option<Summary<f64>>,
    /// Intended send → end, finished requests.
    pub end_to_end: Option<Summary<Duration>>,
    /// Per request mean time per output token after the first.
    pub tpot: Option<Summary<Duration>>,
    /// Every token interval of the finished requests.
    pub itl: Option<Summary<Duration>>,
    /// Actual − intended send time, every sent request.
    pub send_lag: Option<Summary<Duration>>,
    /// How the output tokens were counted.
    pub token_count: TokenCount,
    /// The least exact token source among the requests.
    pub token_source: Option<TokenSource>,
    /// The objective's verdict, when one was given.
    pub slo: Option<SloOutcome>,
}

/// A request's reasoning tokens: those that arrived before its first content chunk (all of
/// them when it wrote reasoning and no content). Reasoning parsers stream the thinking first
/// and the answer after it (vLLM's `reasoning_content`, SGLang's, llama.cpp's
/// `reasoning_content`), so this split is exact wherever the counts are per chunk.
fn reasoning_tokens(t: &RequestTimeline, arrivals: &Arrivals) -> u64 {
    if !t.chunks.iter().any(|c| c.reasoning) {
        return 0;
    }
    let first_content = t.first_content().map(|c| c.at);
    arrivals
        .list
        .iter()
        .filter(|a| first_content.is_none_or(|at| a.at < at))
        .map(|a| a.tokens)
        .sum()
}

/// A reasoning request's two rates, each over the gaps between its tokens: its `reasoning`
/// tokens over the time from its first token to its first content chunk (to its last token
/// when it wrote no content: then one gap fewer), and its answer's tokens after the first
/// over the time from its first content chunk to its last token. `None` for a request that did not reason;
/// a rate over no time, or over no gap, is `None`.
fn phase_rates(
    t: &RequestTimeline,
    arrivals: &Arrivals,
    reasoning: u64,
) -> Option<(Option<f64>, Option<f64>)> {
    let first = t.first_text()?.at;
    if !t.chunks.iter().any(|c| c.reasoning) {
        return None;
    }
    // The last token's arrival: a stream's end may wait for a usage chunk or `[DONE]`.
    let last = arrivals.list.last().map_or(t.ended_at, |a| a.at);
    let rate = |tokens: u64, from: crate::Timestamp, to: crate::Timestamp| {
        let secs = to.saturating_since(from).as_secs_f64();
        (tokens > 0 && secs > 0.0).then(|| tokens as f64 / secs)
    };
    Some(match t.first_content() {
        Some(c) => {
            let answer = arrivals.total().get().saturating_sub(reasoning);
            (
                rate(reasoning, first, c.at),
                rate(answer.saturating_sub(1), c.at, last),
            )
        }
        None => (rate(reasoning.saturating_sub(1), first, last), None),
    })
}

/// Measures a load cell. Latencies count only finished requests; failed
/// and unfinished ones are counted, and fail the objective's attainment.
///
/// # Errors
/// [`MetricsError`] for a timeline out of order or a cell with no request.
pub fn load_metrics(
    requests: &[LoadRequest<'_>],
    slo: Option<&Slo>,
) -> Result<LoadMetrics, MetricsError> {
    let start = requests
        .iter()
        .map(|r| r.intended)
        .min()
        .ok_or(MetricsError::EmptySample)?;
    let end = requests
        .iter()
        .map(|r| r.timeline.ended_at)
        .max()
        .unwrap_or(start);
    let span = end.saturating_since(start);
    // The token counts (with estimates calibrated as a window does) over a
    // window that holds every request.
    let whole = Window::new(start, span.max(Duration::from_nanos(1)))?;
    let w = window_metrics(requests, whole)?;
    let (mut ttft, mut e2e, mut per_token_sample, mut itl, mut lag) = (
        DurationSample::default(),
        DurationSample::default(),
        DurationSample::default(),
        DurationSample::default(),
        DurationSample::default(),
    );
    let mut ttfc = DurationSample::default();
    let mut lengths: Vec<f64> = Vec::new();
    let (mut thinking, mut reasoned): (Vec<f64>, bool) = (Vec::new(), false);
    let (mut thinking_rates, mut answer_rates) = (Vec::new(), Vec::new());
    let mut latencies = Vec::new();
    let mut intervals = Vec::new();
    let (mut completed, mut failed, mut unfinished) = (0, 0, 0);
    for r in requests {
        let t = r.timeline;
        lag.push(t.sent_at.saturating_since(r.intended), 1);
        match t.outcome {
            Outcome::Finished { .. } => completed += 1,
            Outcome::Failed { .. } => {
                failed += 1;
                continue;
            }
            Outcome::Cancelled => {
                unfinished += 1;
                continue;
            }
        }
        let arrivals = Arrivals::of(t)?;
        let first = t.first_text().map(|c| c.at.saturating_since(r.intended));
        if let Some(c) = t.first_content() {
            ttfc.push(c.at.saturating_since(r.intended), 1);
        }
        lengths.push(arrivals.total().get() as f64);
        let thought = reasoning_tokens(t, &arrivals);
        thinking.push(thought as f64);
        reasoned |= t.chunks.iter().any(|c| c.reasoning);
        if let Some((r, a)) = phase_rates(t, &arrivals, thought) {
            thinking_rates.extend(r);
            answer_rates.extend(a);
        }
        let total = t.ended_at.saturating_since(r.intended);
        let per_token = tpot(&arrivals, arrivals.total());
        if let Some(d) = first {
            ttft.push(d, 1);
        }
        e2e.push(total, 1);
        if let Some(d) = per_token {
            per_token_sample.push(d, 1);
        }
        arrivals.scaled_intervals(
            1.0,
            |_| true,
            |_, d, n| {
                itl.push(d, n);
                if slo.is_some() {
                    intervals.extend(std::iter::repeat_n(d, n as usize));
                }
            },
        );
        latencies.push(RequestLatency {
            ttft: first,
            tpot: per_token,
            e2e: total,
        });
    }
    let slo = match slo {
        Some(s) => {
            let mut o = judge(s, &latencies, &intervals)?;
            // Requests that failed or never finished met no objective.
            o.requests += failed + unfinished;
            Some(o)
        }
        None => None,
    };
    Ok(LoadMetrics {
        span,
        sent: requests.len() as u64,
        completed,
        failed,
        unfinished,
        output_tokens: w.output_tokens,
        output_rate: w.total_output_rate,
        ttft: ttft.summary(),
        ttfc: ttfc.summary(),
        output_lengths: Summary::of(&lengths).ok(),
        output_length_histogram: crate::length_histogram(
            &lengths.iter().map(|&n| n as u64).collect::<Vec<_>>(),
        ),
        reasoning_lengths: if reasoned {
            Summary::of(&thinking).ok()
        } else {
            None
        },
        reasoning_rates: Summary::of(&thinking_rates).ok(),
        answer_rates: Summary::of(&answer_rates).ok(),
        end_to_end: e2e.summary(),
        tpot: per_token_sample.summary(),
        itl: itl.summary(),
        send_lag: lag.summary(),
        token_count: w.token_count,
        token_source: w.token_source,
        slo,
    })
}
