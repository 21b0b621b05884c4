//! Service-level objectives: whether a cell's latencies meet targets, and
//! its goodput, as DistServe defines it (the requests that meet every
//! target, per second).
//!
//! An objective is a list of terms `metric_pNN=limit`, e.g.
//! `ttft_p99=2s,itl_p99=100ms`. A cell **meets** the objective when every
//! term's percentile over the cell is at or under its limit (TTFT, TPOT and
//! end-to-end latency over the cell's requests, ITL over all their
//! token intervals). A **request** meets it when its own figures do: its
//! TTFT and end-to-end latency, and its TPOT (the mean time per output
//! token after the first) for both `itl` and `tpot` terms, since one
//! request has one mean but many intervals. Attainment is the share of
//! requests that meet it; goodput is their number over the cell's time.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::{MetricsError, percentile};

/// A latency an objective can bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    /// Time to first token (from the intended send time in an open-loop run).
    Ttft,
    /// Time between tokens, over every token interval.
    Itl,
    /// Time per output token: a request's mean interval after its first token.
    Tpot,
    /// End-to-end latency.
    E2e,
}

impl SloMetric {
    /// The name terms use.
    pub fn name(self) -> &'static str {
        match self {
            SloMetric::Ttft => "ttft",
            SloMetric::Itl => "itl",
            SloMetric::Tpot => "tpot",
            SloMetric::E2e => "e2e",
        }
    }
}

/// One term: the `percentile` of `metric` must not exceed `limit`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SloTerm {
    /// The latency bounded.
    pub metric: SloMetric,
    /// The percentile judged, 0–100.
    pub percentile: f64,
    /// The limit.
    pub limit: Duration,
}

impl fmt::Display for SloTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}_p{}={}ms",
            self.metric.name(),
            self.percentile,
            self.limit.as_secs_f64() * 1e3
        )
    }
}

/// A service-level objective: every term must hold.
///
/// ```
/// use std::time::Duration;
/// use speedmatrix_metrics::{Slo, SloMetric};
///
/// let slo: Slo = "ttft_p99=2s,itl_p99.9=100ms".parse()?;
/// assert_eq!(slo.terms[0].metric, SloMetric::Ttft);
/// assert_eq!(slo.terms[1].percentile, 99.9);
/// assert_eq!(slo.terms[1].limit, Duration::from_millis(100));
/// assert!("ttft=2s".parse::<Slo>().is_err(), "the percentile is named");
/// # Ok::<(), speedmatrix_metrics::MetricsError>(())
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Slo {
    /// The terms, in the order given.
    pub terms: Vec<SloTerm>,
}

/// A duration as `2s`, `100ms`, `1.5s`, `250us`.
fn parse_limit(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration such as 2s or 100ms"))?;
    let secs = match unit.trim() {
        "s" | "" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        "m" | "min" => value * 60.0,
        other => {
            return Err(format!(
                "`{other}` in `{text}` is not a unit (s, ms, us, min)"
            ));
        }
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("the limit `{text}` must be a positive duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

impl FromStr for Slo {
    type Err = MetricsError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = MetricsError::Slo;
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, limit) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("`{part}` has no `=LIMIT`")))?;
            let (metric, pct) = name
                .trim()
                .split_once("_p")
                .ok_or_else(|| bad(format!("`{name}` names no percentile (`_p99`)")))?;
            let metric = match metric {
                "ttft" => SloMetric::Ttft,
                "itl" => SloMetric::Itl,
                "tpot" => SloMetric::Tpot,
                "e2e" | "e2el" => SloMetric::E2e,
                other => return Err(bad(format!("`{other}` is not a latency"))),
            };
            let percentile: f64 = pct
                .parse()
                .ok()
                .filter(|p: &f64| (0.0..=100.0).contains(p))
                .ok_or_else(|| bad(format!("`p{pct}` is not a percentile 0–100")))?;
            let limit = parse_limit(limit).map_err(bad)?;
            terms.push(SloTerm {
                metric,
                percentile,
                limit,
            });
        }
        if terms.is_empty() {
            return Err(bad("no term".into()));
        }
        Ok(Slo { terms })
    }
}

impl fmt::Display for Slo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms: Vec<String> = self.terms.iter().map(ToString::to_string).collect();
        f.write_str(&terms.join(","))
    }
}

/// One request's latencies, as the objective judges them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RequestLatency {
    /// Time to first token; `None` when none came.
    pub ttft: Option<Duration>,
    /// Mean time per output token after the first; `None` below two tokens.
    pub tpot: Option<Duration>,
    /// End-to-end latency.
    pub e2e: Duration,
}

/// How one term fared over a cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TermOutcome {
    /// The term.
    pub term: SloTerm,
    /// Its percentile over the cell; `None` when the cell had no such values.
    pub value: Option<Duration>,
    /// Whether the value is at or under the limit (a missing value fails).
    pub met: bool,
}

/// How a cell fared against an objective.
#[derive(Debug, Clone, PartialEq)]
pub struct SloOutcome {
    /// Each term over the cell.
    pub terms: Vec<TermOutcome>,
    /// Every term met.
    pub met: bool,
    /// Requests that met every term on their own figures.
    pub good_requests: u64,
    /// Of the requests judged.
    pub requests: u64,
}

impl SloOutcome {
    /// Good requests / requests judged, 0–1; `None` for no request.
    pub fn attainment(&self) -> Option<f64> {
        (self.requests > 0).then(|| self.good_requests as f64 / self.requests as f64)
    }

    /// Good requests per second of `elapsed`.
    pub fn goodput(&self, elapsed: Duration) -> Option<f64> {
        (!elapsed.is_zero()).then(|| self.good_requests as f64 / elapsed.as_secs_f64())
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Judges a cell: `requests` (finished ones; a failed request is judged by
/// the caller as not good) and `intervals`, every token interval of them.
///
/// # Errors
/// [`MetricsError`] only for a percentile of a non-finite sample, which
/// durations cannot be; kept for the signature's honesty.
pub fn judge(
    slo: &Slo,
    requests: &[RequestLatency],
    intervals: &[Duration],
) -> Result<SloOutcome, MetricsError> {
    let over = |values: Vec<f64>, p: f64| -> Result<Option<Duration>, MetricsError> {
        if values.is_empty() {
            return Ok(None);
        }
        Ok(Some(Duration::from_secs_f64(percentile(&values, p)?)))
    };
    let mut terms = Vec::with_capacity(slo.terms.len());
    for &term in &slo.terms {
        let values: Vec<f64> = match term.metric {
            SloMetric::Ttft => requests.iter().filter_map(|r| r.ttft.map(secs)).collect(),
            SloMetric::Tpot => requests.iter().filter_map(|r| r.tpot.map(secs)).collect(),
            SloMetric::E2e => requests.iter().map(|r| secs(r.e2e)).collect(),
            SloMetric::Itl => intervals.iter().copied().map(secs).collect(),
        };
        let value = over(values, term.percentile)?;
        terms.push(TermOutcome {
            term,
            value,
            met: value.is_some_and(|v| v <= term.limit),
        });
    }
    let good = |r: &RequestLatency| {
        slo.terms.iter().all(|t| match t.metric {
            SloMetric::Ttft => r.ttft.is_some_and(|v| v <= t.limit),
            // One request has one mean interval: its TPOT stands for both.
            SloMetric::Itl | SloMetric::Tpot => r.tpot.is_none_or(|v| v <= t.limit),
            SloMetric::E2e => r.e2e <= t.limit,
        })
    };
    Ok(SloOutcome {
        met: terms.iter().all(|t| t.met),
        terms,
        good_requests: requests.iter().filter(|r| good(r)).count() as u64,
        requests: requests.len() as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn terms_parse_and_bad_ones_say_why() {
        let slo: Slo = "ttft_p99=2s, e2e_p50=1.5min,tpot_p90=40ms".parse().unwrap();
        assert_eq!(slo.terms.len(), 3);
        assert_eq!(slo.terms[1].limit, Duration::from_secs(90));
        assert_eq!(
            slo.to_string(),
            "ttft_p99=2000ms,e2e_p50=90000ms,tpot_p90=40ms"
        );
        for (bad, why) in [
            ("", "no term"),
            ("ttft_p99", "no `=LIMIT`"),
            ("ttfb_p99=1s", "`ttfb` is not a latency"),
            ("ttft_p101=1s", "not a percentile"),
            ("ttft_p99=fast", "not a duration"),
            ("ttft_p99=2h", "is not a unit"),
            ("ttft_p99=0s", "positive"),
        ] {
            let e = bad.parse::<Slo>().unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_cell_meets_by_percentile_and_requests_by_their_own_figures() {
        let slo: Slo = "ttft_p50=100ms,itl_p99=20ms".parse().unwrap();
        let r = |ttft: u64, tpot: u64| RequestLatency {
            ttft: Some(ms(ttft)),
            tpot: Some(ms(tpot)),
            e2e: ms(1_000),
        };
        let requests = [r(50, 10), r(90, 10), r(300, 10), r(80, 30)];
        let intervals: Vec<Duration> = (0..100).map(|i| ms(if i < 99 { 10 } else { 50 })).collect();
        let o = judge(&slo, &requests, &intervals).unwrap();
        // TTFT p50 = 85 ms; ITL p99 of 99 × 10 ms and one 50 ms = 10.4 ms.
        assert!(o.terms[0].met && o.terms[1].met && o.met);
        assert_eq!(o.terms[0].value, Some(ms(85)));
        // Two requests fail on their own: 300 ms TTFT, 30 ms TPOT.
        assert_eq!((o.good_requests, o.requests), (2, 4));
        assert_eq!(o.attainment(), Some(0.5));
        assert_eq!(o.goodput(Duration::from_secs(2)), Some(1.0));
        let none = judge(&slo, &[], &[]).unwrap();
        assert!(!none.met, "no value, no pass");
        assert_eq!(none.attainment(), None);
    }

    proptest! {
        #[test]
        fn looser_limits_never_judge_worse(
            ttfts in prop::collection::vec(1u64..5_000, 1..50),
            limit in 1u64..5_000,
            extra in 0u64..5_000,
        ) {
            let requests: Vec<RequestLatency> = ttfts.iter().map(|&t| RequestLatency {
                ttft: Some(ms(t)), tpot: None, e2e: ms(t * 2),
            }).collect();
            let term = |l: u64| Slo { terms: vec![SloTerm { metric: SloMetric::Ttft, percentile: 90.0, limit: ms(l) }] };
            let tight = judge(&term(limit), &requests, &[]).unwrap();
            let loose = judge(&term(limit + extra), &requests, &[]).unwrap();
            prop_assert!(loose.good_requests >= tight.good_requests);
            prop_assert!(loose.met || !tight.met);
        }
    }
}
