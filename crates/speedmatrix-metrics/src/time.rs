//! Instants as offsets from an epoch, and measurement windows.

use std::time::{Duration, Instant};

use crate::MetricsError;

/// An instant, as the time elapsed since an epoch the caller chose (the
/// start of a run or of a matrix cell).
///
/// Metrics never read a clock: the runner converts each [`Instant`] it took
/// with [`Timestamp::from_instant`], and tests write instants down directly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(Duration);

impl Timestamp {
    /// The epoch itself.
    pub const EPOCH: Timestamp = Timestamp(Duration::ZERO);

    /// The instant `offset` after the epoch.
    pub const fn from_offset(offset: Duration) -> Self {
        Timestamp(offset)
    }

    /// The instant `ms` milliseconds after the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(Duration::from_millis(ms))
    }

    /// The instant `s` seconds after the epoch.
    pub const fn from_secs(s: u64) -> Self {
        Timestamp(Duration::from_secs(s))
    }

    /// `at` relative to `epoch`; an `at` before the epoch becomes the epoch.
    pub fn from_instant(epoch: Instant, at: Instant) -> Self {
        Timestamp(at.saturating_duration_since(epoch))
    }

    /// Time elapsed since the epoch.
    pub const fn offset(self) -> Duration {
        self.0
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// The instant `d` later, or `None` if it cannot be represented.
    pub fn checked_add(self, d: Duration) -> Option<Timestamp> {
        self.0.checked_add(d).map(Timestamp)
    }

    pub(crate) fn secs(self) -> f64 {
        self.0.as_secs_f64()
    }
}

/// A measurement window `(start, start + duration]` of a sustained-decode cell.
///
/// Half-open so that a token arriving exactly on a boundary is counted in
/// exactly one of two adjacent windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    start: Timestamp,
    duration: Duration,
    end: Timestamp,
}

impl Window {
    /// The window of length `duration` that opens at `start`.
    ///
    /// # Errors
    /// [`MetricsError::InvalidWindow`] when `duration` is zero or the end
    /// cannot be represented.
    pub fn new(start: Timestamp, duration: Duration) -> Result<Self, MetricsError> {
        let invalid = || MetricsError::InvalidWindow {
            start: start.offset(),
            duration,
        };
        if duration.is_zero() {
            return Err(invalid());
        }
        let end = start.checked_add(duration).ok_or_else(invalid)?;
        Ok(Window {
            start,
            duration,
            end,
        })
    }

    /// When the window opens (excluded from it).
    pub const fn start(self) -> Timestamp {
        self.start
    }

    /// The window's length, the "measured for" figure.
    pub const fn duration(self) -> Duration {
        self.duration
    }

    /// When the window closes (included in it).
    pub const fn end(self) -> Timestamp {
        self.end
    }

    /// Whether `at` lies in `(start, end]`.
    pub fn contains(self, at: Timestamp) -> bool {
        self.start < at && at <= self.end
    }

    /// Length of the overlap between `[from, to]` and the window.
    pub(crate) fn overlap(self, from: Timestamp, to: Timestamp) -> Duration {
        let lo = from.max(self.start);
        let hi = to.min(self.end);
        hi.saturating_since(lo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_length_window_is_rejected() {
        let err = Window::new(Timestamp::EPOCH, Duration::ZERO).unwrap_err();
        assert!(matches!(err, MetricsError::InvalidWindow { .. }));
    }

    #[test]
    fn window_is_open_at_start_and_closed_at_end() {
        let w = Window::new(Timestamp::from_secs(1), Duration::from_secs(2)).unwrap();
        assert!(!w.contains(Timestamp::from_secs(1)));
        assert!(w.contains(Timestamp::from_millis(1_001)));
        assert!(w.contains(Timestamp::from_secs(3)));
        assert!(!w.contains(Timestamp::from_millis(3_001)));
    }

    #[test]
    fn overlap_is_clipped_to_the_window() {
        let w = Window::new(Timestamp::from_secs(10), Duration::from_secs(10)).unwrap();
        let o = |a, b| w.overlap(Timestamp::from_secs(a), Timestamp::from_secs(b));
        assert_eq!(o(0, 5), Duration::ZERO);
        assert_eq!(o(5, 15), Duration::from_secs(5));
        assert_eq!(o(12, 14), Duration::from_secs(2));
        assert_eq!(o(0, 100), Duration::from_secs(10));
    }

    #[test]
    fn instants_before_the_epoch_saturate() {
        let epoch = Instant::now();
        let later = epoch + Duration::from_millis(5);
        assert_eq!(
            Timestamp::from_instant(epoch, later),
            Timestamp::from_millis(5)
        );
        assert_eq!(Timestamp::from_instant(later, epoch), Timestamp::EPOCH);
    }
}
