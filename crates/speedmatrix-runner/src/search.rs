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
