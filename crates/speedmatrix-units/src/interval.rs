//! A confidence interval of one figure, in the figure's own unit.

use serde::{Deserialize, Serialize};

/// The confidence of every interval speedmatrix states: 95 %.
pub const CONFIDENCE_LEVEL: f64 = 0.95;

/// A [`CONFIDENCE_LEVEL`] confidence interval `[low, high]` of one figure,
/// in the unit of the figure it belongs to (a `…_tokens_per_s` figure's
/// interval is in tokens per second, a `…_ms` figure's in milliseconds).
/// How each is computed is in `docs/metrics.md`, "Uncertainty".
///
/// ```
/// use speedmatrix_units::Interval;
///
/// let i = Interval::new(1_367.0, 1_385.0).expect("ordered and finite");
/// assert_eq!(i.half_width(), 9.0);
/// assert!(i.contains(1_376.0));
/// assert_eq!(i.relative_half_width(1_376.0), Some(9.0 / 1_376.0));
/// assert!(Interval::new(2.0, 1.0).is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Interval {
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
}

impl Interval {
    /// `[low, high]`; `None` unless both are finite and `low <= high`.
    pub fn new(low: f64, high: f64) -> Option<Interval> {
        (low.is_finite() && high.is_finite() && low <= high).then_some(Interval { low, high })
    }

    /// `estimate ± half_width`; `None` unless both are finite and the width is not negative.
    pub fn around(estimate: f64, half_width: f64) -> Option<Interval> {
        (half_width >= 0.0)
            .then(|| Interval::new(estimate - half_width, estimate + half_width))
            .flatten()
    }

    /// Half the interval's width.
    pub fn half_width(self) -> f64 {
        (self.high - self.low) / 2.0
    }

    /// The larger distance from `estimate` to either bound, relative to
    /// `estimate`; `None` when `estimate` is not positive.
    pub fn relative_half_width(self, estimate: f64) -> Option<f64> {
        (estimate > 0.0 && estimate.is_finite()).then(|| {
            let wider = (estimate - self.low).max(self.high - estimate).max(0.0);
            wider / estimate
        })
    }

    /// Whether `x` lies in the interval, bounds included.
    pub fn contains(self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }

    /// The interval with both bounds multiplied by `factor` (a unit change:
    /// seconds to milliseconds); `None` for a negative or non-finite factor.
    pub fn scaled(self, factor: f64) -> Option<Interval> {
        (factor >= 0.0)
            .then(|| Interval::new(self.low * factor, self.high * factor))
            .flatten()
    }
}
