//! Whether a window's stated 95 % intervals cover the simulator's truth:
//! shared by the `coverage` bench (which prints the figures) and the
//! runner's tests (which fail when coverage is badly off).
//!
//! A cell runs in virtual time ([`speedmatrix_sim::VirtualRun`]) with seeded
//! noise on every step; its requests become the [`RequestTimeline`]s a
//! client would have recorded (a chunk per step with vLLM's cumulative
//! usage), and [`window_metrics`] measures the window that opens once every
//! stream has had its first token, as the runner's does. The truth of a
//! figure is the same figure over a window many times longer, from other
//! seeds, averaged over them (`docs/metrics.md`, "Checked on the simulator").

use std::time::Duration;

use speedmatrix_metrics::{
    Chunk, Outcome, RequestTimeline, Timestamp, Usage, Window, WindowMetrics, window_metrics,
};
use speedmatrix_sim::{Profile, StepNoise, VirtualOutcome, VirtualRequest, VirtualRun};
use speedmatrix_units::{Interval, Tokens};

/// How long streams run past the window's end, as the runner keeps them
/// open, so every stream's token curve is known up to the edge.
const GRACE: Duration = Duration::from_millis(250);

/// The first seed of the truth's long runs: far from the windows' seeds.
pub(crate) const TRUTH_SEEDS: u64 = 1 << 40;

/// A sustained-decode cell with noisy steps.
#[derive(Debug, Clone)]
pub(crate) struct Cell {
    /// Shown in the table.
    pub(crate) label: String,
    /// The simulated server.
    pub(crate) profile: Profile,
    /// Streams kept busy.
    pub(crate) streams: u32,
    /// Prompt tokens of every request (the cell's context).
    pub(crate) prompt_tokens: u32,
    /// `max_tokens` of every request.
    pub(crate) max_tokens: u32,
    /// The measurement window.
    pub(crate) window: Duration,
    /// Coefficient of variation of each step's duration.
    pub(crate) cv: f64,
}

/// The figures a window states an interval for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Figure {
    /// Total output tok/s.
    Total,
    /// Per-request tok/s.
    PerRequest,
    /// Median TTFT, seconds.
    TtftP50,
    /// Median time between tokens, seconds.
    ItlP50,
}

impl Figure {
    /// Every figure, in table order.
    pub(crate) const ALL: [Figure; 4] = [
        Figure::Total,
        Figure::PerRequest,
        Figure::TtftP50,
        Figure::ItlP50,
    ];

    /// Its name in the table.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Figure::Total => "total tok/s",
            Figure::PerRequest => "per-request tok/s",
            Figure::TtftP50 => "TTFT p50",
            Figure::ItlP50 => "ITL p50",
        }
    }

    /// Its value and stated interval in `m`.
    fn of(self, m: &WindowMetrics) -> (Option<f64>, Option<Interval>) {
        let i = &m.intervals;
        match self {
            Figure::Total => (Some(m.total_output_rate.get()), i.total_output_rate),
            Figure::PerRequest => (m.per_request_rate.map(|r| r.get()), i.per_request_rate),
            Figure::TtftP50 => (m.ttft.map(|s| s.p50.as_secs_f64()), i.ttft_p50),
            Figure::ItlP50 => (
                m.time_between_tokens.map(|s| s.p50.as_secs_f64()),
                i.time_between_tokens_p50,
            ),
        }
    }
}

/// How one figure of one cell covered its truth over many seeds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Row {
    /// The figure.
    pub(crate) figure: Figure,
    /// Its truth.
    pub(crate) truth: f64,
    /// Seeds run.
    pub(crate) seeds: u64,
    /// Seeds whose window stated an interval.
    pub(crate) stated: u64,
    /// Of those, intervals that held the truth.
    pub(crate) covered: u64,
    /// Of those, intervals that held the mean of the seeds' estimates: the
    /// figure's expected value as this window measures it, which differs
    /// from the truth where the cell is not stationary (see `bias`).
    pub(crate) covered_mean: u64,
    /// Of those, intervals that would have held the truth at half their
    /// width: a check that cannot tell this from `covered` could not see
    /// intervals too narrow by half.
    pub(crate) covered_at_half: u64,
    /// Median of the stated intervals' half-width over the estimate.
    pub(crate) median_half: f64,
    /// Mean of the estimates over the truth, less one.
    pub(crate) bias: f64,
    /// Standard deviation of the estimates over the truth.
    pub(crate) sd: f64,
}

impl Row {
    /// Share of stated intervals that held the truth, 0–1.
    pub(crate) fn coverage(&self) -> f64 {
        self.covered as f64 / self.stated.max(1) as f64
    }

    /// Share of stated intervals that would have held the truth at half
    /// their width, 0–1.
    pub(crate) fn coverage_at_half(&self) -> f64 {
        self.covered_at_half as f64 / self.stated.max(1) as f64
    }

    /// Share of stated intervals that held the estimates' mean, 0–1.
    pub(crate) fn coverage_of_mean(&self) -> f64 {
        self.covered_mean as f64 / self.stated.max(1) as f64
    }
}

/// The window metrics of `cell` with `seed`, over a window of `window`
/// that opens once every stream has had its first token.
///
/// # Errors
/// The simulator's or the metrics' error, as text.
pub(crate) fn measure(cell: &Cell, seed: u64, window: Duration) -> Result<WindowMetrics, String> {
    let run = VirtualRun {
        streams: cell.streams,
        prompt_tokens: cell.prompt_tokens,
        max_tokens: cell.max_tokens,
        after_ready: window + GRACE,
        noise: Some(StepNoise { cv: cell.cv, seed }),
    };
    let out = run.run(&cell.profile).map_err(|e| e.to_string())?;
    let timelines = timelines(&out);
    let w = Window::new(Timestamp::from_offset(out.ready), window).map_err(|e| e.to_string())?;
    window_metrics(&timelines, w).map_err(|e| e.to_string())
}

/// What a client would have recorded of the run's requests.
fn timelines(out: &VirtualOutcome) -> Vec<RequestTimeline> {
    out.requests.iter().map(|r| timeline(r, out.end)).collect()
}

/// One request as a vLLM stream with continuous usage: a chunk per step
/// carrying the running count, cancelled at `end` when still running.
fn timeline(r: &VirtualRequest, end: Duration) -> RequestTimeline {
    let at = Timestamp::from_offset;
    let prompt = Tokens::new(u64::from(r.prompt_tokens));
    let outcome = match r.finished {
        Some(_) => Outcome::Finished {
            finish_reason: Some("length".into()),
        },
        None => Outcome::Cancelled,
    };
    let mut t = RequestTimeline::new(at(r.sent), at(r.finished.unwrap_or(end)), outcome);
    let mut count = 0u64;
    t.chunks = r
        .emissions
        .iter()
        .map(|e| {
            count += u64::from(e.tokens);
            Chunk::content(at(e.at)).with_usage(Usage::new(prompt, Tokens::new(count)))
        })
        .collect();
    if r.finished.is_some() {
        t.final_usage = Some(Usage::new(prompt, Tokens::new(count)));
    }
    t
}

/// Each figure's truth: its value over a window `windows` times the cell's,
/// split over `runs` seeds from [`TRUTH_SEEDS`] (each a window of
/// `windows / runs` cell windows), averaged over them; `None` where no run
/// had the figure.
///
/// # Errors
/// As [`measure`].
pub(crate) fn truth(cell: &Cell, windows: u32, runs: u32) -> Result<[Option<f64>; 4], String> {
    let long = cell.window * windows.div_ceil(runs.max(1));
    let mut sums = [(0.0, 0u32); 4];
    for seed in TRUTH_SEEDS..TRUTH_SEEDS + u64::from(runs.max(1)) {
        let m = measure(cell, seed, long)?;
        for (sum, figure) in sums.iter_mut().zip(Figure::ALL) {
            if let (Some(v), _) = figure.of(&m) {
                *sum = (sum.0 + v, sum.1 + 1);
            }
        }
    }
    Ok(sums.map(|(s, n)| (n > 0).then(|| s / f64::from(n))))
}

/// How the windows of seeds `0..seeds` covered `truth` (from [`truth`]),
/// a row per figure with a truth.
///
/// # Errors
/// As [`measure`].
pub(crate) fn coverage(
    cell: &Cell,
    truth: [Option<f64>; 4],
    seeds: u64,
) -> Result<Vec<Row>, String> {
    let mut seen: [Vec<(f64, Option<Interval>)>; 4] = Default::default();
    for seed in 0..seeds {
        let m = measure(cell, seed, cell.window)?;
        for (values, figure) in seen.iter_mut().zip(Figure::ALL) {
            if let (Some(v), i) = figure.of(&m) {
                values.push((v, i));
            }
        }
    }
    Ok(Figure::ALL
        .into_iter()
        .zip(truth)
        .zip(seen)
        .filter_map(|((figure, truth), seen)| Some(row(figure, truth?, seeds, &seen)))
        .collect())
}

fn row(figure: Figure, truth: f64, seeds: u64, seen: &[(f64, Option<Interval>)]) -> Row {
    let stated: Vec<(f64, Interval)> = seen.iter().filter_map(|&(v, i)| Some((v, i?))).collect();
    let holding = |x: f64| stated.iter().filter(|(_, i)| i.contains(x)).count() as u64;
    let at_half = stated
        .iter()
        .filter(|(v, i)| {
            let half = |bound: f64| v + (bound - v) / 2.0;
            half(i.low) <= truth && truth <= half(i.high)
        })
        .count() as u64;
    let mut halves: Vec<f64> = stated
        .iter()
        .filter_map(|&(v, i)| i.relative_half_width(v))
        .collect();
    halves.sort_by(f64::total_cmp);
    let n = seen.len().max(1) as f64;
    let mean = seen.iter().map(|(v, _)| v).sum::<f64>() / n;
    let var = seen.iter().map(|(v, _)| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    let stated_mean = stated.iter().map(|(v, _)| v).sum::<f64>() / stated.len().max(1) as f64;
    Row {
        figure,
        truth,
        seeds,
        stated: stated.len() as u64,
        covered: holding(truth),
        covered_mean: holding(stated_mean),
        covered_at_half: at_half,
        median_half: halves.get(halves.len() / 2).copied().unwrap_or(f64::NAN),
        bias: mean / truth - 1.0,
        sd: var.sqrt() / truth,
    }
}

/// The Wilson score interval of a binomial share of `k` in `n` at 95 %.
pub(crate) fn wilson(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (n, p, z) = (n as f64, k as f64 / n as f64, 1.959_963_984_540_054);
    let z2n = z * z / n;
    let centre = (p + z2n / 2.0) / (1.0 + z2n);
    let half = z / (1.0 + z2n) * (p * (1.0 - p) / n + z2n / (4.0 * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}
