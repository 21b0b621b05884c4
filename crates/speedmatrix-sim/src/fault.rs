//! Fault injection for reliability tests: the `x-sim-fault` header grammar.
//!
//! A request header `x-sim-fault`, a request body field `"sim_fault"` (for clients that cannot
//! set headers), or a profile's `faults` field (applied to every generation request) lists faults
//! separated by `;` or `,`. The header wins over the body field, which wins over the profile; the
//! header also works on the other endpoints (`/v1/models`, `/metrics`, …) for `status` and
//! `slow-headers`.
//!
//! | fault | effect |
//! |---|---|
//! | `status=CODE` | answer HTTP `CODE` (400–599) with a vLLM-shaped error body, before any work |
//! | `retry-after=S` | with `status`: send `Retry-After: S` (default 1 s for 429 and 503) |
//! | `slow-headers=D` | wait `D` before sending the response headers |
//! | `stall=D` or `stall=D@N` | stop sending for `D` after `N` tokens (default 0) |
//! | `close-after=N` | drop the connection after `N` tokens, with no final chunk or `[DONE]` |
//! | `malformed-chunk-after=N` | after `N` tokens send one `data:` line that is not valid JSON |
//! | `oversized-line=BYTES` or `oversized-line=BYTES@N` | after `N` tokens (default 0) send one valid, empty chunk padded to a `data:` line of about `BYTES` bytes |
//!
//! Durations are a number with a unit: `250ms`, `2s`, `1.5s`. Token-counted faults apply to
//! streaming responses; a non-streaming response honours `status`, `slow-headers`, `stall` (before
//! answering) and `close-after` (no answer at all).
//!
//! ```
//! use std::time::Duration;
//! use speedmatrix_sim::Fault;
//!
//! let f = Fault::parse("stall=1.5s@10; close-after=20")?;
//! assert_eq!(f.stall, Some((Duration::from_millis(1_500), 10)));
//! assert_eq!(f.close_after_tokens, Some(20));
//! assert!(Fault::parse("explode=now").is_err());
//! # Ok::<(), speedmatrix_sim::SimError>(())
//! ```

use std::time::Duration;

use crate::SimError;

/// The request header that carries a fault specification.
pub const FAULT_HEADER: &str = "x-sim-fault";

/// Faults to inject into one response (see the module docs for the grammar).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fault {
    /// Answer with this HTTP status instead of serving the request.
    pub status: Option<u16>,
    /// `Retry-After` seconds sent with `status`.
    pub retry_after_s: Option<u32>,
    /// Delay before the response headers.
    pub slow_headers: Option<Duration>,
    /// Pause of this length after this many tokens.
    pub stall: Option<(Duration, u32)>,
    /// Drop the connection after this many tokens.
    pub close_after_tokens: Option<u32>,
    /// Send one malformed `data:` line after this many tokens.
    pub malformed_chunk_after_tokens: Option<u32>,
    /// Send one `data:` line of this many bytes after this many tokens.
    pub oversized_line: Option<(usize, u32)>,
}

impl Fault {
    /// Parses a fault specification; an empty one means no faults.
    pub fn parse(spec: &str) -> Result<Fault, SimError> {
        let bad = |reason: String| SimError::BadFault {
            spec: spec.to_owned(),
            reason,
        };
        let mut fault = Fault::default();
        for item in spec
            .split([';', ','])
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| bad(format!("`{item}` is not KEY=VALUE")))?;
            let (key, value) = (key.trim(), value.trim());
            match key {
                "status" => {
                    let code: u16 = number(value).map_err(&bad)?;
                    if !(400..=599).contains(&code) {
                        return Err(bad(format!("status must be 400–599, got {code}")));
                    }
                    fault.status = Some(code);
                }
                "retry-after" => fault.retry_after_s = Some(number(value).map_err(&bad)?),
                "slow-headers" => fault.slow_headers = Some(duration(value).map_err(&bad)?),
                "stall" => {
                    let (d, after) = with_after(value);
                    fault.stall = Some((
                        duration(d).map_err(&bad)?,
                        after.map(number).transpose().map_err(&bad)?.unwrap_or(0),
                    ));
                }
                "close-after" => fault.close_after_tokens = Some(number(value).map_err(&bad)?),
                "malformed-chunk-after" => {
                    fault.malformed_chunk_after_tokens = Some(number(value).map_err(&bad)?)
                }
                "oversized-line" => {
                    let (bytes, after) = with_after(value);
                    fault.oversized_line = Some((
                        number(bytes).map_err(&bad)?,
                        after.map(number).transpose().map_err(&bad)?.unwrap_or(0),
                    ));
                }
                other => {
                    return Err(bad(format!(
                        "unknown fault `{other}`; known: status, retry-after, slow-headers, stall, close-after, \
                         malformed-chunk-after, oversized-line"
                    )));
                }
            }
        }
        Ok(fault)
    }

    /// Whether the specification asked for nothing.
    pub fn is_none(&self) -> bool {
        *self == Fault::default()
    }

    /// The `Retry-After` value to send with `status`, if any.
    pub(crate) fn retry_after(&self) -> Option<u32> {
        match (self.retry_after_s, self.status) {
            (Some(s), _) => Some(s),
            (None, Some(429 | 503)) => Some(1),
            _ => None,
        }
    }
}

fn with_after(value: &str) -> (&str, Option<&str>) {
    match value.split_once('@') {
        Some((v, n)) => (v.trim(), Some(n.trim())),
        None => (value, None),
    }
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("`{text}` is not a whole number in range"))
}

/// Parses `250ms`, `2s`, `1.5s`.
fn duration(text: &str) -> Result<Duration, String> {
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(format!(
            "`{text}` is not a duration: write e.g. 250ms or 2s"
        ));
    };
    let number = number.trim();
    if let Ok(whole) = number.parse::<u32>() {
        let d = if scale < 1.0 {
            Duration::from_millis(whole.into())
        } else {
            Duration::from_secs(whole.into())
        };
        if d <= Duration::from_secs(86_400) {
            return Ok(d);
        }
    }
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: write e.g. 250ms or 2s"))?;
    if !value.is_finite() || !(0.0..=86_400.0).contains(&value) {
        return Err(format!("`{text}` is not a duration between 0 and 24 h"));
    }
    Ok(Duration::from_secs_f64(value * scale))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn parses_every_fault() {
        let f = Fault::parse(
            "status=429, retry-after=3; slow-headers=250ms; stall=2s@5; close-after=7; \
             malformed-chunk-after=2; oversized-line=100000@1",
        )
        .unwrap();
        assert_eq!(f.status, Some(429));
        assert_eq!(f.retry_after(), Some(3));
        assert_eq!(f.slow_headers, Some(Duration::from_millis(250)));
        assert_eq!(f.stall, Some((Duration::from_secs(2), 5)));
        assert_eq!(f.close_after_tokens, Some(7));
        assert_eq!(f.malformed_chunk_after_tokens, Some(2));
        assert_eq!(f.oversized_line, Some((100_000, 1)));
    }

    #[test]
    fn defaults_and_retry_after() {
        assert!(Fault::parse("").unwrap().is_none());
        assert_eq!(
            Fault::parse("stall=1s").unwrap().stall,
            Some((Duration::from_secs(1), 0))
        );
        assert_eq!(Fault::parse("status=503").unwrap().retry_after(), Some(1));
        assert_eq!(Fault::parse("status=500").unwrap().retry_after(), None);
    }

    #[test]
    fn rejects_bad_specs() {
        for spec in [
            "status=200",
            "status=abc",
            "stall=2",
            "stall=-1s",
            "close-after",
            "boom=1",
            "stall=1s@x",
        ] {
            assert!(Fault::parse(spec).is_err(), "{spec}");
        }
    }

    proptest! {
        #[test]
        fn never_panics(spec in ".{0,40}") {
            let _ = Fault::parse(&spec);
        }

        #[test]
        fn durations_round_trip_in_ms(ms in 0u64..100_000) {
            let f = Fault::parse(&format!("slow-headers={ms}ms")).unwrap();
            prop_assert_eq!(f.slow_headers, Some(Duration::from_millis(ms)));
        }
    }
}
