//! Typed units and the shared vocabulary of every speedmatrix crate.
//!
//! A number in this project carries its unit in its type: a prompt length is
//! [`Tokens`], a number of simultaneous requests is [`Concurrency`], memory is
//! [`ByteSize`]. Durations are [`std::time::Duration`]. The types parse the
//! forms users type on the command line (`16k`, `248K`, `24GiB`) and print the
//! forms the speed test matrix shows (`16K`, `8,192`).
//!
//! ```
//! use speedmatrix_units::{ByteSize, Concurrency, Tokens};
//!
//! let ctx: Tokens = "16k".parse()?;
//! assert_eq!(ctx.get(), 16_384);
//! assert_eq!(ctx.to_string(), "16K");
//! assert_eq!(Tokens::new(8_000).to_string(), "8,000");
//!
//! let n: Concurrency = "32".parse()?;
//! assert_eq!(n.get(), 32);
//! assert!("0".parse::<Concurrency>().is_err());
//!
//! let rate: speedmatrix_units::RequestRate = "0.5".parse()?;
//! assert_eq!(rate.to_string(), "0.5/s");
//!
//! let mem: ByteSize = "24GiB".parse()?;
//! assert_eq!(mem.get(), 24 << 30);
//! # Ok::<(), speedmatrix_units::UnitsError>(())
//! ```
//!
//! The words every crate shares are defined here once too: [`Api`] (which
//! endpoint), [`PromptSharing`] (whether a cell's streams share a prompt),
//! [`PrefillMode`] (how prefill rows are measured), [`LoadKind`] (what a cell's
//! load is) and [`Engine`] (which inference engine), with `clap` and `schemars`
//! derives behind the features of those names; and [`Interval`], the 95 %
//! confidence interval every uncertain figure carries.

use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

mod interval;
mod vocabulary;

pub use crate::interval::{CONFIDENCE_LEVEL, Interval};
pub use crate::vocabulary::{Api, Engine, LoadKind, PrefillMode, PromptSharing, ReasoningParser};

/// Why a unit could not be parsed from text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnitsError {
    /// The text is not a number with an optional suffix.
    #[error("`{text}` is not a {what}: expected {expected}")]
    Invalid {
        /// The text given.
        text: String,
        /// What was being parsed.
        what: &'static str,
        /// The forms accepted.
        expected: &'static str,
    },
    /// The value does not fit the type.
    #[error("`{text}` is too large for a {what}")]
    Overflow {
        /// The text given.
        text: String,
        /// What was being parsed.
        what: &'static str,
    },
    /// Zero where at least one is needed.
    #[error("{what} must be at least 1, got `{text}`")]
    Zero {
        /// The text given.
        text: String,
        /// What was being parsed.
        what: &'static str,
    },
}

/// A count of tokens (prompt length, output length, KV-cache capacity).
///
/// `K` means 1,024 tokens, as context lengths are named (`16K` = 16,384).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Tokens(u64);

impl Tokens {
    /// Zero tokens.
    pub const ZERO: Tokens = Tokens(0);

    /// `n` tokens.
    pub const fn new(n: u64) -> Self {
        Tokens(n)
    }

    /// `k` × 1,024 tokens.
    pub const fn kibi(k: u64) -> Self {
        Tokens(k * 1024)
    }

    /// The count.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// Sum, or `None` on overflow.
    pub const fn checked_add(self, other: Tokens) -> Option<Tokens> {
        match self.0.checked_add(other.0) {
            Some(n) => Some(Tokens(n)),
            None => None,
        }
    }

    /// `self × n`, or `None` on overflow.
    pub const fn checked_mul(self, n: u64) -> Option<Tokens> {
        match self.0.checked_mul(n) {
            Some(v) => Some(Tokens(v)),
            None => None,
        }
    }

    /// Difference clamped at zero.
    pub const fn saturating_sub(self, other: Tokens) -> Tokens {
        Tokens(self.0.saturating_sub(other.0))
    }
}

impl From<u64> for Tokens {
    fn from(n: u64) -> Self {
        Tokens(n)
    }
}

impl fmt::Display for Tokens {
    /// `0`, `16K` for whole multiples of 1,024, else the count with thousands separators.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 != 0 && self.0.is_multiple_of(1024) {
            write!(f, "{}K", group_thousands(self.0 / 1024))
        } else {
            f.write_str(&group_thousands(self.0))
        }
    }
}

impl FromStr for Tokens {
    type Err = UnitsError;

    /// Accepts `8192`, `8,192`, `8_192`, `16k`, `16K`, `1M` (= 1,048,576).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const WHAT: &str = "token count";
        const EXPECTED: &str = "a whole number with an optional k or M suffix, e.g. 8192 or 16k";
        let text = s.trim();
        let (digits, scale) = match text.char_indices().last() {
            Some((i, 'k' | 'K')) => (&text[..i], 1024_u64),
            Some((i, 'm' | 'M')) => (&text[..i], 1024 * 1024),
            _ => (text, 1),
        };
        let base = parse_grouped(digits).ok_or_else(|| UnitsError::Invalid {
            text: s.to_owned(),
            what: WHAT,
            expected: EXPECTED,
        })?;
        base.checked_mul(scale)
            .map(Tokens)
            .ok_or_else(|| UnitsError::Overflow {
                text: s.to_owned(),
                what: WHAT,
            })
    }
}

/// A number of requests in flight at once; never zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Concurrency(NonZeroU32);

impl Concurrency {
    /// One request at a time.
    pub const ONE: Concurrency = Concurrency(NonZeroU32::MIN);

    /// `n` requests at once, or `None` for zero.
    pub const fn new(n: u32) -> Option<Self> {
        match NonZeroU32::new(n) {
            Some(v) => Some(Concurrency(v)),
            None => None,
        }
    }

    /// The number of requests.
    pub const fn get(self) -> u32 {
        self.0.get()
    }
}

impl fmt::Display for Concurrency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for Concurrency {
    type Err = UnitsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const WHAT: &str = "concurrency";
        let n = parse_grouped(s.trim()).ok_or_else(|| UnitsError::Invalid {
            text: s.to_owned(),
            what: WHAT,
            expected: "a whole number of simultaneous requests, e.g. 16",
        })?;
        let n = u32::try_from(n).map_err(|_| UnitsError::Overflow {
            text: s.to_owned(),
            what: WHAT,
        })?;
        Concurrency::new(n).ok_or_else(|| UnitsError::Zero {
            text: s.to_owned(),
            what: WHAT,
        })
    }
}

/// Requests per second, to a thousandth: exact, ordered and hashable, so a
/// rate can key a cell. Never zero.
///
/// ```
/// use speedmatrix_units::RequestRate;
///
/// let r: RequestRate = "2.5".parse()?;
/// assert_eq!(r.get(), 2.5);
/// assert_eq!(r.to_string(), "2.5/s");
/// assert_eq!("4/s".parse::<RequestRate>()?.milli(), 4_000);
/// assert!("0".parse::<RequestRate>().is_err());
/// assert!("0.0001".parse::<RequestRate>().is_err(), "below a thousandth");
/// # Ok::<(), speedmatrix_units::UnitsError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestRate(std::num::NonZeroU64);

impl RequestRate {
    /// `milli` thousandths of a request per second, or `None` for zero.
    pub const fn from_milli(milli: u64) -> Option<Self> {
        match std::num::NonZeroU64::new(milli) {
            Some(v) => Some(RequestRate(v)),
            None => None,
        }
    }

    /// Thousandths of a request per second.
    pub const fn milli(self) -> u64 {
        self.0.get()
    }

    /// Requests per second.
    pub fn get(self) -> f64 {
        self.0.get() as f64 / 1_000.0
    }
}

impl fmt::Display for RequestRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, frac) = (self.milli() / 1_000, self.milli() % 1_000);
        if frac == 0 {
            write!(f, "{whole}/s")
        } else {
            let digits = format!("{frac:03}");
            write!(f, "{whole}.{}/s", digits.trim_end_matches('0'))
        }
    }
}

impl FromStr for RequestRate {
    type Err = UnitsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const WHAT: &str = "request rate";
        let text = s.trim().trim_end_matches("/s").trim();
        let invalid = || UnitsError::Invalid {
            text: s.to_owned(),
            what: WHAT,
            expected: "requests per second, e.g. 2 or 0.5, to a thousandth",
        };
        let value: f64 = text.parse().map_err(|_| invalid())?;
        if !value.is_finite() || value < 0.0 {
            return Err(invalid());
        }
        let milli = (value * 1_000.0).round();
        if milli > u64::MAX as f64 / 2.0 {
            return Err(UnitsError::Overflow {
                text: s.to_owned(),
                what: WHAT,
            });
        }
        if (milli - value * 1_000.0).abs() > 1e-6 {
            return Err(invalid());
        }
        RequestRate::from_milli(milli as u64).ok_or_else(|| UnitsError::Zero {
            text: s.to_owned(),
            what: WHAT,
        })
    }
}

/// An amount of memory in bytes.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct ByteSize(u64);

impl ByteSize {
    /// `n` bytes.
    pub const fn new(n: u64) -> Self {
        ByteSize(n)
    }

    /// `g` GiB (2^30 bytes each).
    pub const fn gib(g: u64) -> Self {
        ByteSize(g << 30)
    }

    /// The number of bytes.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The size in GiB as a float, for display and ratios.
    pub fn as_gib_f64(self) -> f64 {
        self.0 as f64 / (1u64 << 30) as f64
    }
}

impl fmt::Display for ByteSize {
    /// Binary units with two decimals (`23.58 GiB`), plain bytes below 1 KiB.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
        for (name, shift) in UNITS {
            if self.0 >= 1u64 << shift {
                return write!(f, "{:.2} {name}", self.0 as f64 / (1u64 << shift) as f64);
            }
        }
        write!(f, "{} B", self.0)
    }
}

impl FromStr for ByteSize {
    type Err = UnitsError;

    /// Accepts plain bytes and `KiB`/`MiB`/`GiB`/`TiB` (also `K`/`M`/`G`/`T`, binary),
    /// with an optional fractional part: `24GiB`, `23.58 GiB`, `512MiB`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        const WHAT: &str = "byte size";
        let invalid = || UnitsError::Invalid {
            text: s.to_owned(),
            what: WHAT,
            expected: "a number with an optional KiB, MiB, GiB or TiB suffix, e.g. 24GiB",
        };
        let text = s.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_' || c == ','))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let shift = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kib" => 10,
            "m" | "mib" => 20,
            "g" | "gib" => 30,
            "t" | "tib" => 40,
            _ => return Err(invalid()),
        };
        let cleaned: String = number.chars().filter(|c| *c != '_' && *c != ',').collect();
        if cleaned.is_empty() || cleaned.starts_with('.') || cleaned.ends_with('.') {
            return Err(invalid());
        }
        if let Some(whole) = parse_grouped(&cleaned) {
            return whole
                .checked_mul(1u64 << shift)
                .map(ByteSize)
                .ok_or_else(|| UnitsError::Overflow {
                    text: s.to_owned(),
                    what: WHAT,
                });
        }
        let value: f64 = cleaned.parse().map_err(|_| invalid())?;
        let bytes = value * (1u64 << shift) as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(UnitsError::Overflow {
                text: s.to_owned(),
                what: WHAT,
            });
        }
        Ok(ByteSize(bytes.round() as u64))
    }
}

/// Parses ASCII digits with optional `,` or `_` separators.
fn parse_grouped(s: &str) -> Option<u64> {
    if s.is_empty() || s.starts_with([',', '_']) || s.ends_with([',', '_']) {
        return None;
    }
    let mut n: u64 = 0;
    for c in s.chars() {
        match c {
            '0'..='9' => n = n.checked_mul(10)?.checked_add(u64::from(c as u8 - b'0'))?,
            ',' | '_' => {}
            _ => return None,
        }
    }
    Some(n)
}

/// `1234567` → `1,234,567`, as the report tables print counts.
pub fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seed_contexts_parse_and_print() {
        for (text, n) in [
            ("0", 0),
            ("8K", 8192),
            ("16k", 16_384),
            ("248K", 253_952),
            ("128K", 131_072),
        ] {
            let t: Tokens = text.parse().unwrap();
            assert_eq!(t.get(), n);
            assert_eq!(t.to_string(), text.to_ascii_uppercase());
        }
        assert_eq!(Tokens::new(8_000).to_string(), "8,000");
        assert_eq!("8,192".parse::<Tokens>().unwrap().get(), 8192);
        assert_eq!("1M".parse::<Tokens>().unwrap().get(), 1 << 20);
    }

    #[test]
    fn bad_token_text_is_an_error() {
        for bad in ["", "k", "-1", "1.5k", "12x", ",1", "99999999999999999999"] {
            assert!(bad.parse::<Tokens>().is_err(), "{bad} parsed");
        }
        assert!(matches!(
            "18446744073709551615k".parse::<Tokens>(),
            Err(UnitsError::Overflow { .. })
        ));
    }

    #[test]
    fn concurrency_rejects_zero_and_overflow() {
        assert!(matches!(
            "0".parse::<Concurrency>(),
            Err(UnitsError::Zero { .. })
        ));
        assert!(matches!(
            "5000000000".parse::<Concurrency>(),
            Err(UnitsError::Overflow { .. })
        ));
        assert_eq!("128".parse::<Concurrency>().unwrap().get(), 128);
    }

    #[test]
    fn byte_sizes() {
        assert_eq!("1GiB".parse::<ByteSize>().unwrap(), ByteSize::gib(1));
        assert_eq!("512 MiB".parse::<ByteSize>().unwrap().get(), 512 << 20);
        assert_eq!("1.5G".parse::<ByteSize>().unwrap().get(), 3 << 29);
        assert_eq!(ByteSize::gib(24).to_string(), "24.00 GiB");
        assert_eq!(ByteSize::new(100).to_string(), "100 B");
        for bad in ["", "GiB", "1.2.3G", "12 parsecs", ".5G"] {
            assert!(bad.parse::<ByteSize>().is_err(), "{bad} parsed");
        }
    }

    #[test]
    fn serde_is_transparent() {
        assert_eq!(serde_json::to_string(&Tokens::new(5)).unwrap(), "5");
        assert!(serde_json::from_str::<Concurrency>("0").is_err());
    }

    proptest! {
        #[test]
        fn tokens_display_round_trips(n in 0u64..(1 << 40)) {
            let t = Tokens::new(n);
            prop_assert_eq!(t.to_string().parse::<Tokens>().unwrap(), t);
        }

        #[test]
        fn grouping_round_trips(n in any::<u64>()) {
            prop_assert_eq!(parse_grouped(&group_thousands(n)), Some(n));
        }

        #[test]
        fn arbitrary_text_never_panics(s in ".{0,24}") {
            let _ = s.parse::<Tokens>();
            let _ = s.parse::<Concurrency>();
            let _ = s.parse::<ByteSize>();
        }
    }
}
