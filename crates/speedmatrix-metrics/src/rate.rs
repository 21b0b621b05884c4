//! Token rates.

use std::fmt;
use std::time::Duration;

/// A rate in tokens per second: finite and never negative.
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd)]
pub struct TokensPerSecond(f64);

impl TokensPerSecond {
    /// `rate` tokens per second, or `None` if it is negative, NaN or infinite.
    pub fn new(rate: f64) -> Option<Self> {
        (rate.is_finite() && rate >= 0.0).then_some(TokensPerSecond(rate))
    }

    /// `tokens` spread over `elapsed`, or `None` when `elapsed` is zero.
    pub fn over(tokens: f64, elapsed: Duration) -> Option<Self> {
        if elapsed.is_zero() {
            return None;
        }
        TokensPerSecond::new(tokens / elapsed.as_secs_f64())
    }

    /// The rate in tokens per second.
    pub const fn get(self) -> f64 {
        self.0
    }
}

impl fmt::Display for TokensPerSecond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1} tok/s", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_is_not_a_rate() {
        assert!(TokensPerSecond::new(-1.0).is_none());
        assert!(TokensPerSecond::new(f64::NAN).is_none());
        assert!(TokensPerSecond::over(5.0, Duration::ZERO).is_none());
        let r = TokensPerSecond::over(1_000.0, Duration::from_secs(10)).unwrap();
        assert_eq!(r.get(), 100.0);
        assert_eq!(r.to_string(), "100.0 tok/s");
    }
}
