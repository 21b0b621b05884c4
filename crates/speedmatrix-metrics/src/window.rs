//! Throughput and latency of a sustained-decode window.

use std::collections::BTreeMap;
use std::time::Duration;

use speedmatrix_units::{Interval, Tokens};

use crate::calibrate::{Calibration, Calibrator};
use crate::stats::DurationSample;
use crate::tokens::{Arrivals, EstimateMethod};
use crate::uncertainty::{
    HISTOGRAM_RESOLUTION, LogHistogram, WINDOW_BATCHES, batch_means, with_latency_floor,
};
use crate::{
    MetricsError, Outcome, RequestTimeline, Summary, Timestamp, TokenSource, TokensPerSecond,
    Window,
};

/// What a window `(t0, t0 + D]` of a sustained-decode cell measured.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowMetrics {
    /// The window measured; its duration is the "measured for" figure.
    pub window: Window,
    /// Output tokens that arrived in the window, interpolated at the edges, rounded.
    pub output_tokens: Tokens,
    /// Output tokens in the window / D, across all requests (unrounded tokens).
    pub total_output_rate: TokensPerSecond,
    /// Decoding tokens in the window / summed decoding time in the window;
    /// `None` when no request was decoding inside the window.
    pub per_request_rate: Option<TokensPerSecond>,
    /// Requests in flight (sent → end), averaged over the window by time.
    pub average_active_requests: f64,
    /// Requests between their first and last token, averaged over the window
    /// by time; `total_output_rate ≈ per_request_rate × average_decoding_requests`.
    pub average_decoding_requests: f64,
    /// Requests whose life overlaps the window (failed ones left out).
    pub requests: u64,
    /// Requests that finished normally inside the window.
    pub completed_requests: u64,
    /// Requests that failed inside the window.
    pub failed_requests: u64,
    /// TTFT of the requests whose life overlaps the window and that got a first token.
    pub ttft: Option<Summary<Duration>>,
    /// Time between tokens, from token-bearing chunks that arrived in the window.
    pub time_between_tokens: Option<Summary<Duration>>,
    /// Raw gaps between token-bearing chunks, for chunks that arrived in the window.
    pub chunk_gaps: Option<Summary<Duration>>,
    /// The least exact token source among requests with tokens in the window;
    /// `None` when no tokens arrived.
    pub token_source: Option<TokenSource>,
    /// How the window's output tokens were counted, and how sure the count is.
    pub token_count: TokenCount,
    /// Total tok/s in each of [`series_bins`] equal parts of the window, in
    /// order: the same curves as `total_output_rate`, cut at the parts' edges,
    /// so the parts' tokens add up to the window's.
    pub output_rate_series: Vec<TokensPerSecond>,
    /// The 95 % intervals of the window's figures.
    pub intervals: WindowIntervals,
}

/// The 95 % confidence intervals of a window's figures (`docs/metrics.md`,
/// "Uncertainty"); each `None` when the window cannot support one.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WindowIntervals {
    /// Equal parts the window was split into for batch means.
    pub batches: usize,
    /// Of `total_output_rate`, tokens per second: batch means, widened by
    /// the token count's own uncertainty when it is an estimate.
    pub total_output_rate: Option<Interval>,
    /// Of `per_request_rate`, tokens per second: batch means of each part's
    /// decoding tokens over its decoding time, widened likewise.
    pub per_request_rate: Option<Interval>,
    /// Of the median TTFT, seconds: distribution-free (order statistics),
    /// from six requests up, never narrower than [`crate::LATENCY_FLOOR`].
    pub ttft_p50: Option<Interval>,
    /// Of the median time between tokens, seconds: batch medians (each
    /// part's median to 0.1 %), never narrower than [`crate::LATENCY_FLOOR`].
    pub time_between_tokens_p50: Option<Interval>,
}

/// Batch medians of time between tokens count from this many values a part.
const LEAST_BATCH_VALUES: u64 = 10;

/// How many equal parts a window's time series has: one per half second,
/// at most 60 (a 30 s window: 60 parts of 0.5 s), at least one.
pub fn series_bins(window: Duration) -> usize {
    let halves = (window.as_secs_f64() / 0.5).ceil();
    (halves as usize).clamp(1, 60)
}

/// The edges of `bins` equal parts of `w`, `bins + 1` of them.
fn bin_edges(w: Window, bins: usize) -> Vec<Timestamp> {
    let step = w.duration().as_secs_f64() / bins as f64;
    (0..=bins)
        .map(|k| {
            if k == bins {
                w.end()
            } else {
                w.start()
                    .checked_add(Duration::from_secs_f64(step * k as f64))
                    .unwrap_or(w.end())
            }
        })
        .collect()
}

/// How a window's output tokens were counted.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TokenCount {
    /// Requests with tokens in the window, by how their tokens were counted.
    pub requests_by_source: BTreeMap<TokenSource, u64>,
    /// Share of the window's output tokens that are estimates, 0–1.
    pub estimated_share: f64,
    /// How the estimates were scaled; `None` when no estimated token
    /// arrived in the window.
    pub calibration: Option<Calibration>,
}

impl TokenCount {
    /// Whether any of the window's tokens are estimates.
    pub fn is_estimated(&self) -> bool {
        self.calibration.is_some()
    }

    /// The uncertainty of the window's output-token count (and so of its
    /// tok/s) relative to it: 0 when every count is exact, the estimated
    /// share times the calibration's uncertainty otherwise, `None` when an
    /// estimate could not be calibrated.
    pub fn relative_uncertainty(&self) -> Option<f64> {
        match &self.calibration {
            None => Some(0.0),
            Some(c) => c.relative_uncertainty.map(|u| u * self.estimated_share),
        }
    }
}

/// Computes [`WindowMetrics`] of `requests` (every request of the cell, in
/// any order; those outside the window contribute nothing) over `window`.
///
/// Failed requests contribute only to `failed_requests`: their tokens and
/// latencies are left out. Estimated token counts (requests the server gave
/// no count for) are scaled by a [`Calibration`] on the finished requests
/// among `requests` that have an exact count.
///
/// # Errors
/// The timeline errors of [`crate::request_metrics`] for any request.
pub fn window_metrics<T: AsRef<RequestTimeline>>(
    requests: &[T],
    window: Window,
) -> Result<WindowMetrics, MetricsError> {
    // A window holds millions of tokens, so no request's arrivals are kept
    // past its turn: exact ones are added at once, estimates once the
    // calibration over every request is known.
    let mut acc = Accumulator::default();
    acc.edges = bin_edges(window, series_bins(window.duration()));
    acc.bins = vec![0.0; acc.edges.len() - 1];
    let batches = WINDOW_BATCHES.min(series_bins(window.duration()));
    acc.batch_edges = bin_edges(window, batches);
    acc.batches = vec![Batch::default(); batches];
    // One interval per token and one gap per chunk, mostly: room for them
    // at once rather than by doubling (an estimate's scaling may add more).
    let chunks: usize = requests.iter().map(|t| t.as_ref().chunks.len()).sum();
    acc.intervals.reserve(chunks);
    let (mut estimated, mut calibrators) = (Vec::new(), Vec::new());
    for (i, t) in requests.iter().map(AsRef::as_ref).enumerate() {
        let arrivals = Arrivals::of(t)?;
        if Calibrator::can_calibrate(t, &arrivals) {
            calibrators.push((i, arrivals.total()));
        }
        if is_failed(t) {
            acc.add_failed(t, window);
        } else if arrivals.source.is_exact() {
            acc.add(t, &arrivals, 1.0, window);
        } else {
            estimated.push(i);
        }
    }
    let overlaps = |t: &RequestTimeline| t.sent_at < window.end() && t.ended_at > window.start();
    let overlapping = estimated
        .iter()
        .filter(|&&i| overlaps(requests[i].as_ref()))
        .count();
    let calibration = (overlapping > 0).then(|| {
        // Estimating the exact requests costs passes over their chunks: only
        // a window with estimates pays it.
        let mut calibrator = Calibrator::default();
        for &(i, exact) in &calibrators {
            calibrator.offer(requests[i].as_ref(), exact);
        }
        let tokenized = estimated
            .iter()
            .map(|&i| requests[i].as_ref())
            .filter(|t| overlaps(t))
            .filter(|t| Arrivals::estimate(t, EstimateMethod::Tokenizer).is_some())
            .count();
        calibrator.best(overlapping as u64, tokenized as u64)
    });
    for t in estimated.iter().map(|&i| requests[i].as_ref()) {
        let (arrivals, scale) = counted(t, calibration.as_ref())?;
        acc.add(t, &arrivals, scale, window);
    }
    // The time-between-tokens sample is summarized, and its memory freed,
    // before the chunk gaps' is gathered: the two never take room together.
    let time_between_tokens = std::mem::take(&mut acc.intervals).summary();
    let itl_batches: Vec<f64> = acc
        .batches
        .iter_mut()
        .filter(|b| b.itl.total() >= LEAST_BATCH_VALUES)
        .filter_map(|b| std::mem::take(&mut b.itl).quantile(0.5))
        .collect();
    let mut gaps = DurationSample::default();
    gaps.reserve(chunks);
    let inside = |at: Timestamp| window.contains(at);
    for t in requests.iter().map(AsRef::as_ref).filter(|t| !is_failed(t)) {
        let (arrivals, _) = counted(t, calibration.as_ref())?;
        arrivals.chunk_gaps(inside, |d| gaps.push(d, 1));
    }
    let mut m = acc.finish(window, calibration, time_between_tokens, gaps.summary());
    m.intervals.time_between_tokens_p50 = m.time_between_tokens.and_then(|tbt| {
        let p50 = tbt.p50.as_secs_f64();
        let i = batch_means(
            &itl_batches.iter().map(|ns| ns / 1e9).collect::<Vec<_>>(),
            p50,
        )?;
        let i = Interval::around(p50, i.half_width().max(p50 * HISTOGRAM_RESOLUTION))?;
        with_latency_floor(p50, i)
    });
    Ok(m)
}

/// How `t`'s tokens are counted in the window, and the factor on each
/// chunk's tokens: its own count, or the calibrated estimate.
fn counted(
    t: &RequestTimeline,
    calibration: Option<&Calibration>,
) -> Result<(Arrivals, f64), MetricsError> {
    let arrivals = Arrivals::of(t)?;
    match calibration {
        Some(c) if !arrivals.source.is_exact() => {
            let by = Arrivals::estimate(t, c.method).unwrap_or(arrivals);
            let scale = if by.source == c.method.source() {
                c.factor
            } else {
                1.0
            };
            Ok((by, scale))
        }
        _ => Ok((arrivals, 1.0)),
    }
}

fn is_failed(t: &RequestTimeline) -> bool {
    matches!(t.outcome, Outcome::Failed { .. })
}

#[derive(Debug, Default)]
struct Accumulator {
    tokens: f64,
    estimated_tokens: f64,
    decode_tokens: f64,
    decode_time: Duration,
    active_time: Duration,
    requests: u64,
    completed: u64,
    failed: u64,
    ttft: DurationSample,
    intervals: DurationSample,
    source: Option<TokenSource>,
    by_source: BTreeMap<TokenSource, u64>,
    /// The series' part edges and the tokens in each part.
    edges: Vec<Timestamp>,
    bins: Vec<f64>,
    /// The batch-means parts' edges and what each part holds.
    batch_edges: Vec<Timestamp>,
    batches: Vec<Batch>,
}

/// What one batch-means part of the window holds.
#[derive(Debug, Clone, Default)]
struct Batch {
    tokens: f64,
    decode_tokens: f64,
    decode_time: Duration,
    itl: LogHistogram,
}

impl Accumulator {
    fn add_failed(&mut self, t: &RequestTimeline, w: Window) {
        if w.contains(t.ended_at) {
            self.failed += 1;
        }
    }

    fn add(&mut self, t: &RequestTimeline, arrivals: &Arrivals, scale: f64, w: Window) {
        let curve = Curve::of(arrivals, scale);
        // The curve only grows; the clamp absorbs rounding at segment joins.
        let tokens = (curve.at(w.end()) - curve.at(w.start())).max(0.0);
        self.tokens += tokens;
        if tokens > 0.0 {
            let mut below = curve.at(self.edges[0]);
            for (bin, &edge) in self.bins.iter_mut().zip(&self.edges[1..]) {
                let above = curve.at(edge);
                *bin += (above - below).max(0.0);
                below = above;
            }
        }
        if tokens > 0.0 {
            self.source = Some(
                self.source
                    .map_or(arrivals.source, |s| s.min(arrivals.source)),
            );
            *self.by_source.entry(arrivals.source).or_insert(0) += 1;
            if !arrivals.source.is_exact() {
                self.estimated_tokens += tokens;
            }
        }
        if let Some((from, to)) = curve.span() {
            let (a, b) = (from.max(w.start()), to.min(w.end()));
            if a < b {
                self.decode_tokens += (curve.at(b) - curve.at(a)).max(0.0);
                self.decode_time += b.saturating_since(a);
            }
            self.add_to_batches(&curve, from, to);
        }
        let overlaps = t.sent_at < w.end() && t.ended_at > w.start();
        if overlaps {
            self.requests += 1;
            self.active_time += w.overlap(t.sent_at, t.ended_at);
            if let Some(c) = t.first_text() {
                self.ttft.push(c.at.saturating_since(t.sent_at), 1);
            }
        }
        if w.contains(t.ended_at) && t.is_finished() {
            self.completed += 1;
        }
        let inside = |at: Timestamp| w.contains(at);
        let (intervals, edges, batches) =
            (&mut self.intervals, &self.batch_edges, &mut self.batches);
        arrivals.scaled_intervals(scale, inside, |at, d, n| {
            intervals.push(d, n);
            // The part whose (start, end] holds `at`.
            let k = edges.partition_point(|e| *e < at).saturating_sub(1);
            if let Some(b) = batches.get_mut(k) {
                b.itl.push(d.as_nanos() as f64, n);
            }
        });
    }

    /// The request's tokens, and its decoding tokens and time, in each
    /// batch-means part (its curve rises between `from` and `to`).
    fn add_to_batches(&mut self, curve: &Curve, from: Timestamp, to: Timestamp) {
        for (k, b) in self.batches.iter_mut().enumerate() {
            let (lo, hi) = (self.batch_edges[k], self.batch_edges[k + 1]);
            b.tokens += (curve.at(hi) - curve.at(lo)).max(0.0);
            let (a, z) = (from.max(lo), to.min(hi));
            if a < z {
                b.decode_tokens += (curve.at(z) - curve.at(a)).max(0.0);
                b.decode_time += z.saturating_since(a);
            }
        }
    }

    /// Batch-means intervals of the total and the per-request rate, each
    /// widened by the count's relative uncertainty `count_u` (0 when exact).
    fn rate_intervals(
        &self,
        total: f64,
        per_request: Option<f64>,
        count_u: Option<f64>,
    ) -> (Option<Interval>, Option<Interval>) {
        let part_s = |k: usize| {
            self.batch_edges[k + 1]
                .saturating_since(self.batch_edges[k])
                .as_secs_f64()
        };
        let totals: Vec<f64> = (0..self.batches.len())
            .filter(|&k| part_s(k) > 0.0)
            .map(|k| self.batches[k].tokens / part_s(k))
            .collect();
        let per: Vec<f64> = self
            .batches
            .iter()
            .filter(|b| !b.decode_time.is_zero())
            .map(|b| b.decode_tokens / b.decode_time.as_secs_f64())
            .collect();
        // Timing noise and an estimated count's error add in quadrature.
        let widen = |i: Interval, estimate: f64| {
            let u = count_u?;
            Interval::around(estimate, i.half_width().hypot(u * estimate))
        };
        let total_i = batch_means(&totals, total).and_then(|i| widen(i, total));
        let per_i = per_request.and_then(|p| batch_means(&per, p).and_then(|i| widen(i, p)));
        (total_i, per_i)
    }

    fn finish(
        mut self,
        w: Window,
        calibration: Option<Calibration>,
        time_between_tokens: Option<Summary<Duration>>,
        chunk_gaps: Option<Summary<Duration>>,
    ) -> WindowMetrics {
        let d = w.duration();
        let by_time = |busy: Duration| busy.as_secs_f64() / d.as_secs_f64();
        let bin_s = d.as_secs_f64() / self.bins.len().max(1) as f64;
        let output_rate_series = self
            .bins
            .iter()
            .map(|&t| TokensPerSecond::new(t / bin_s).unwrap_or_default())
            .collect();
        let estimated_share = if self.tokens > 0.0 {
            (self.estimated_tokens / self.tokens).clamp(0.0, 1.0)
        } else {
            0.0
        };
        let calibration = calibration.filter(|_| self.estimated_tokens > 0.0);
        let token_count = TokenCount {
            requests_by_source: std::mem::take(&mut self.by_source),
            estimated_share,
            calibration,
        };
        let total_output_rate = TokensPerSecond::over(self.tokens, d).unwrap_or_default();
        let per_request_rate = TokensPerSecond::over(self.decode_tokens, self.decode_time);
        let (total_i, per_i) = self.rate_intervals(
            total_output_rate.get(),
            per_request_rate.map(TokensPerSecond::get),
            token_count.relative_uncertainty(),
        );
        let (ttft, ttft_p50) = match std::mem::take(&mut self.ttft).summary_and_median_interval() {
            Some((s, i)) => (
                Some(s),
                i.and_then(|(lo, hi)| Interval::new(lo.as_secs_f64(), hi.as_secs_f64()))
                    .and_then(|i| with_latency_floor(s.p50.as_secs_f64(), i)),
            ),
            None => (None, None),
        };
        let intervals = WindowIntervals {
            batches: self.batches.len(),
            total_output_rate: total_i,
            per_request_rate: per_i,
            ttft_p50,
            time_between_tokens_p50: None,
        };
        WindowMetrics {
            window: w,
            output_tokens: Tokens::new(self.tokens.round() as u64),
            total_output_rate,
            per_request_rate,
            average_active_requests: by_time(self.active_time),
            average_decoding_requests: by_time(self.decode_time),
            requests: self.requests,
            completed_requests: self.completed,
            failed_requests: self.failed,
            ttft,
            time_between_tokens,
            chunk_gaps,
            token_source: self.source,
            token_count,
            output_rate_series,
            intervals,
        }
    }
}

/// A request's cumulative output-token count as a function of time: zero
/// before the first arrival, a step to the first chunk's tokens at it, then
/// linear from each chunk to the next (a chunk's tokens are taken to arrive
/// evenly over the gap before it), flat after the last.
#[derive(Debug)]
pub(crate) struct Curve {
    /// Arrival times in seconds after the epoch.
    secs: Vec<f64>,
    /// Tokens arrived up to and including each arrival.
    cumulative: Vec<f64>,
    first: Option<Timestamp>,
    last: Option<Timestamp>,
}

impl Curve {
    /// The curve of `arrivals` with every chunk carrying `scale` times its tokens.
    pub(crate) fn of(arrivals: &Arrivals, scale: f64) -> Self {
        let mut total = 0.0;
        let cumulative = arrivals
            .list
            .iter()
            .map(|a| {
                total += a.tokens as f64 * scale;
                total
            })
            .collect();
        Curve {
            secs: arrivals.list.iter().map(|a| a.at.secs()).collect(),
            cumulative,
            first: arrivals.list.first().map(|a| a.at),
            last: arrivals.list.last().map(|a| a.at),
        }
    }

    /// First and last token arrival.
    fn span(&self) -> Option<(Timestamp, Timestamp)> {
        Some((self.first?, self.last?))
    }

    /// Tokens arrived by `t`, interpolated between arrivals.
    pub(crate) fn at(&self, t: Timestamp) -> f64 {
        let s = t.secs();
        // Index of the last arrival at or before `t`.
        let Some(j) = self.secs.partition_point(|x| *x <= s).checked_sub(1) else {
            return 0.0;
        };
        let Some(&next) = self.secs.get(j + 1) else {
            return self.cumulative[j];
        };
        // `next > s >= secs[j]`, so the division is by a positive gap.
        let frac = (s - self.secs[j]) / (next - self.secs[j]);
        self.cumulative[j] + frac * (self.cumulative[j + 1] - self.cumulative[j])
    }
}

/// One scrape of the server's scheduler gauges (e.g. vLLM's
/// `vllm:num_requests_running` and `vllm:num_requests_waiting`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaugeSample {
    /// When the scrape's response arrived.
    pub at: Timestamp,
    /// Requests the server was running.
    pub running: f64,
    /// Requests the server had queued.
    pub waiting: f64,
}

/// Server gauges averaged over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaugeAverages {
    /// Mean of `running` over the samples in the window.
    pub running: f64,
    /// Mean of `waiting` over the samples in the window.
    pub waiting: f64,
    /// How many samples fell in the window.
    pub samples: u64,
}

impl GaugeAverages {
    /// Whether the server queued a cell of `concurrency` streams during the
    /// window: on average half a request or more waiting, or fewer than 90 %
    /// of the streams running. A finished stream's replacement shows up as a
    /// short dip in `running`; queueing is a persistent shortfall.
    pub fn shows_queueing(&self, concurrency: u32) -> bool {
        self.waiting >= 0.5 || self.running < 0.9 * f64::from(concurrency)
    }
}

/// Averages the gauge samples taken in `[t0, t0 + D]` (both edges included:
/// a scrape is a point, not a token). Scrapes are taken at a fixed period,
/// so a plain mean is a time average.
///
/// Returns `None` when no sample fell in the window.
///
/// # Errors
/// [`MetricsError::NotFinite`] for a NaN or infinite gauge value.
pub fn average_gauges(
    samples: &[GaugeSample],
    window: Window,
) -> Result<Option<GaugeAverages>, MetricsError> {
    let (mut running, mut waiting, mut n) = (0.0, 0.0, 0u64);
    for (index, g) in samples.iter().enumerate() {
        if let Some(value) = [g.running, g.waiting].into_iter().find(|v| !v.is_finite()) {
            return Err(MetricsError::NotFinite { index, value });
        }
        if window.start() <= g.at && g.at <= window.end() {
            running += g.running;
            waiting += g.waiting;
            n += 1;
        }
    }
    Ok((n > 0).then(|| GaugeAverages {
        running: running / n as f64,
        waiting: waiting / n as f64,
        samples: n,
    }))
}
