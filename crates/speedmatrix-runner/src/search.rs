//! The knee search: the highest load at which a cell still meets its
//! objective, found with few cells.
//!
//! Loads are positive integers (requests in a burst, or a rate in
//! thousandths of a request per second). The search tries its start; from a
//! pass it doubles until a cell fails or the upper bound passes, from a
//! failure it halves until one passes; then it bisects between the highest
//! pass and the lowest failure until they are within the resolution. Each
//! try is one ordinary cell, and the search stops after a bounded number of
//! them, keeping what it found. It assumes the objective is met at low load
//! and missed at high (a server that meets it again higher up is not
//! looked for).
//!
//! The run's side is here too: a load point as the search's integer, the
//! bound, and judging each try's cell (did it meet the objective, is it below
//! the boundary, which try is the answer). `steps.rs` runs the cells.

use crate::config::{LoadMode, MatrixSpec, SearchGoal};
use crate::outcome::{KneeTry, LoadOutcome, LoadPoint};

/// Why the search ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchEnd {
    /// The highest pass and the lowest failure are within the resolution.
    Converged,
    /// The upper bound met the objective: the knee is at or above it.
    MaxMet,
    /// Even the lowest load tried missed the objective.
    NothingMet,
    /// The step budget ran out before convergence.
    StepLimit,
}

/// A search in progress: what was tried, and what to try next.
#[derive(Debug, Clone, PartialEq)]
pub struct KneeSearch {
    start: u64,
    max: u64,
    resolution: u64,
    relative: f64,
    max_steps: usize,
    path: Vec<(u64, bool)>,
}

impl KneeSearch {
    /// A search from `start`, never above `max`, converged when the gap is
    /// at most `resolution` or `relative` of the highest pass, in at most
    /// `max_steps` cells. `start` and `max` are clamped to at least 1.
    pub fn new(start: u64, max: u64, resolution: u64, relative: f64, max_steps: usize) -> Self {
        let start = start.max(1);
        KneeSearch {
            start,
            max: max.max(start),
            resolution: resolution.max(1),
            relative: relative.max(0.0),
            max_steps: max_steps.max(1),
            path: Vec::new(),
        }
    }

    /// Every load tried, in order, with whether it met the objective.
    pub fn path(&self) -> &[(u64, bool)] {
        &self.path
    }

    /// The highest load that met the objective.
    pub fn knee(&self) -> Option<u64> {
        self.path.iter().filter(|p| p.1).map(|p| p.0).max()
    }

    fn lowest_failure(&self) -> Option<u64> {
        self.path.iter().filter(|p| !p.1).map(|p| p.0).min()
    }

    /// Records the outcome of trying `load`.
    pub fn record(&mut self, load: u64, met: bool) {
        self.path.push((load, met));
    }

    /// Why the search is over, or `None` while there is a next load.
    pub fn end(&self) -> Option<SearchEnd> {
        let (pass, fail) = (self.knee(), self.lowest_failure());
        match (pass, fail) {
            (Some(p), _) if p >= self.max => Some(SearchEnd::MaxMet),
            (None, Some(1)) => Some(SearchEnd::NothingMet),
            (Some(p), Some(f)) if f <= p.saturating_add(self.tolerance(p)) => {
                Some(SearchEnd::Converged)
            }
            _ if self.path.len() >= self.max_steps => Some(SearchEnd::StepLimit),
            _ => None,
        }
    }

    fn tolerance(&self, pass: u64) -> u64 {
        self.resolution
            .max((pass as f64 * self.relative).floor() as u64)
    }

    /// The next load to try, or `None` when the search is over.
    pub fn next(&self) -> Option<u64> {
        if self.end().is_some() {
            return None;
        }
        let next = match (self.knee(), self.lowest_failure()) {
            (None, None) => self.start,
            // Bracketing up: double, but not past the bound.
            (Some(p), None) => p.saturating_mul(2).min(self.max),
            // Bracketing down: halve.
            (None, Some(f)) => (f / 2).max(1),
            (Some(p), Some(f)) => p + (f - p) / 2,
        };
        // Never try a load twice: a repeat would loop.
        (!self.path.iter().any(|t| t.0 == next)).then_some(next)
    }
}

/// A load point as the search's integer: requests in a burst, thousandths
/// of a request per second, or conversations.
pub(crate) fn load_units(p: LoadPoint) -> u64 {
    match p {
        LoadPoint::Burst { requests } => u64::from(requests.get()),
        LoadPoint::Rate { rate } => rate.milli(),
        LoadPoint::Conversations { count } => u64::from(count.get()),
    }
}

/// The load point of `units`, of the same kind as `like`; `None` when
/// `units` is out of that kind's range.
pub(crate) fn point_of(like: LoadPoint, units: u64) -> Option<LoadPoint> {
    match like {
        LoadPoint::Burst { .. } => {
            speedmatrix_units::Concurrency::new(u32::try_from(units).unwrap_or(u32::MAX))
                .map(|requests| LoadPoint::Burst { requests })
        }
        LoadPoint::Rate { .. } => {
            speedmatrix_units::RequestRate::from_milli(units).map(|rate| LoadPoint::Rate { rate })
        }
        LoadPoint::Conversations { .. } => {
            speedmatrix_units::Concurrency::new(u32::try_from(units).unwrap_or(u32::MAX))
                .map(|count| LoadPoint::Conversations { count })
        }
    }
}

/// The highest load a search from `first` may try: the highest load the
/// matrix gives, or, with one given load, far above it (no bound of the
/// user's).
pub(crate) fn upper_bound(m: &MatrixSpec, first: u64) -> u64 {
    let given: Vec<u64> = match &m.load {
        LoadMode::Burst(b) => b.requests.iter().map(|&n| u64::from(n)).collect(),
        LoadMode::Rate(r) => r.rates.iter().map(|r| r.milli()).collect(),
        LoadMode::Conversation(_) => m.concurrencies.iter().map(|n| u64::from(n.get())).collect(),
        LoadMode::Sustained => Vec::new(),
    };
    let top = given.iter().copied().max().unwrap_or(first);
    let bound = if top > first {
        top
    } else {
        first.saturating_mul(1 << 20)
    };
    bound.min(most_units(m)).max(first)
}

/// The highest load whose cell plans no more requests than a cell may hold
/// ([`crate::limits::MAX_REQUESTS_PER_CELL`]), in the search's units.
fn most_units(m: &MatrixSpec) -> u64 {
    let cap = crate::limits::MAX_REQUESTS_PER_CELL;
    match &m.load {
        LoadMode::Burst(_) | LoadMode::Sustained => cap,
        LoadMode::Conversation(c) => cap / u64::from(c.turns.max(1)),
        LoadMode::Rate(r) => match r.length {
            crate::config::RateLength::Requests(_) => u64::MAX,
            // Thousandths of a request per second that send at most `cap` in `d`.
            crate::config::RateLength::Duration(d) => {
                let per_s = cap as f64 / d.as_secs_f64().max(1e-3);
                (per_s * 1_000.0).floor().min(u64::MAX as f64) as u64
            }
        },
    }
}

/// One search try's verdict and figures. A cell that could not run or
/// measure meets nothing.
pub(crate) fn judge(point: LoadPoint, cell: &LoadOutcome, goal: SearchGoal) -> KneeTry {
    let result = cell.result.as_ref().filter(|_| cell.status.is_measured());
    let total = result.map(|r| r.output_tokens_per_s);
    let per_request = result
        .and_then(|r| r.tpot)
        .map(|t| t.p50.as_secs_f64())
        .filter(|s| *s > 0.0)
        .map(|s| 1.0 / s);
    // Without --slo a floor search has no objective beyond the floor.
    let slo_met = result.is_some_and(|r| r.slo.as_ref().is_none_or(|v| v.met));
    let met = match goal {
        SearchGoal::MostLoadMeetingSlo => {
            result.is_some_and(|r| r.slo.as_ref().is_some_and(|v| v.met))
        }
        SearchGoal::PerRequestAtFloor { floor } => {
            slo_met && total.is_some_and(|t| t >= floor.get())
        }
    };
    KneeTry {
        point,
        met,
        total_tokens_per_s: total,
        per_request_tokens_per_s: per_request,
    }
}

/// Whether a try is below the boundary the search looks for (the bracket's
/// "pass"): meeting the objective, or (for a floor) not reaching it yet.
pub(crate) fn below_boundary(goal: SearchGoal, tried: &KneeTry) -> bool {
    match goal {
        SearchGoal::MostLoadMeetingSlo => tried.met,
        SearchGoal::PerRequestAtFloor { floor } => {
            tried.total_tokens_per_s.is_some_and(|t| t < floor.get())
        }
    }
}

/// The search's answer: the highest load that met the objective, or the try
/// with the fastest requests at the floor. `like` gives the points' kind.
pub(crate) fn knee_of(
    goal: SearchGoal,
    search: &KneeSearch,
    like: LoadPoint,
    path: &[KneeTry],
) -> Option<LoadPoint> {
    match goal {
        SearchGoal::MostLoadMeetingSlo => search.knee().and_then(|u| point_of(like, u)),
        SearchGoal::PerRequestAtFloor { .. } => fastest_at_floor(path),
    }
}

/// The try with the fastest requests among those that met the floor (and
/// the objective); ties go to the lower load.
fn fastest_at_floor(path: &[KneeTry]) -> Option<LoadPoint> {
    path.iter()
        .filter(|t| t.met)
        .filter_map(|t| Some((t, t.per_request_tokens_per_s?)))
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.point.cmp(&a.0.point)))
        .map(|(t, _)| t.point)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(mut s: KneeSearch, knee: u64) -> KneeSearch {
        while let Some(load) = s.next() {
            s.record(load, load <= knee);
        }
        s
    }

    #[test]
    fn brackets_up_then_bisects() {
        let s = run(KneeSearch::new(2, 1_000, 1, 0.0, 20), 13);
        let loads: Vec<u64> = s.path().iter().map(|p| p.0).collect();
        assert_eq!(loads, [2, 4, 8, 16, 12, 14, 13]);
        assert_eq!((s.knee(), s.end()), (Some(13), Some(SearchEnd::Converged)));
    }

    #[test]
    fn brackets_down_when_the_start_fails_and_says_when_nothing_met() {
        let s = run(KneeSearch::new(64, 64, 1, 0.0, 20), 5);
        assert_eq!(s.knee(), Some(5));
        let none = run(KneeSearch::new(8, 8, 1, 0.0, 20), 0);
        assert_eq!(
            (none.knee(), none.end()),
            (None, Some(SearchEnd::NothingMet))
        );
        let top = run(KneeSearch::new(4, 100, 1, 0.0, 20), 1_000);
        assert_eq!(
            (top.knee(), top.end()),
            (Some(100), Some(SearchEnd::MaxMet))
        );
        let short = run(KneeSearch::new(1, 1_000_000, 1, 0.0, 3), 500_000);
        assert_eq!(short.end(), Some(SearchEnd::StepLimit));
        assert_eq!(short.path().len(), 3);
    }

    fn burst(n: u32) -> LoadPoint {
        LoadPoint::Burst {
            requests: speedmatrix_units::Concurrency::new(n).unwrap(),
        }
    }

    #[test]
    fn load_points_round_trip_through_the_search_units() {
        for p in [
            burst(12),
            LoadPoint::Rate {
                rate: speedmatrix_units::RequestRate::from_milli(2_500).unwrap(),
            },
            LoadPoint::Conversations {
                count: speedmatrix_units::Concurrency::new(3).unwrap(),
            },
        ] {
            assert_eq!(point_of(p, load_units(p)), Some(p));
        }
        assert_eq!(point_of(burst(1), 0), None);
    }

    #[test]
    fn the_fastest_try_at_the_floor_is_the_knee_and_ties_go_to_the_lower_load() {
        let tried = |n, met, speed| KneeTry {
            point: burst(n),
            met,
            total_tokens_per_s: Some(100.0),
            per_request_tokens_per_s: speed,
        };
        let path = [
            tried(8, true, Some(40.0)),
            tried(4, true, Some(50.0)),
            tried(2, true, Some(50.0)),
            tried(1, false, Some(90.0)),
            tried(16, true, None),
        ];
        assert_eq!(fastest_at_floor(&path), Some(burst(2)));
        assert_eq!(fastest_at_floor(&path[3..]), None);
    }

    proptest! {
        #[test]
        fn finds_any_monotone_knee_within_its_tolerance(
            start in 1u64..10_000,
            knee in 0u64..100_000,
            relative in 0.0f64..0.2,
        ) {
            let s = run(KneeSearch::new(start, 1_000_000, 1, relative, 60), knee);
            match s.end() {
                Some(SearchEnd::Converged) => {
                    let found = s.knee().unwrap();
                    prop_assert!(found <= knee);
                    let tol = 1.max((found as f64 * relative).floor() as u64);
                    prop_assert!(knee - found <= tol, "{found} vs {knee}");
                }
                Some(SearchEnd::NothingMet) => prop_assert_eq!(knee, 0),
                other => prop_assert!(false, "{other:?} after {:?}", s.path()),
            }
            // About log2 of the range, never more.
            prop_assert!(s.path().len() <= 2 * 21);
        }
    }
}
