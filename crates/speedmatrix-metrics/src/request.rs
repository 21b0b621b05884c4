//! Metrics of one request, and of a cold prefill request.

use std::time::Duration;

use speedmatrix_units::Tokens;

use crate::stats::DurationSample;
use crate::tokens::Arrivals;
use crate::{MetricsError, RequestTimeline, Summary, TokenSource, TokensPerSecond};

/// Latencies and token counts of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMetrics {
    /// Sent → first chunk with content or reasoning text (TTFT).
    pub ttft: Option<Duration>,
    /// Sent → first chunk with answer text; later than `ttft` when the model reasons first.
    pub time_to_first_content: Option<Duration>,
    /// Sent → first byte of the response body (TTFR).
    pub ttfr: Option<Duration>,
    /// Sent → response headers.
    pub time_to_headers: Option<Duration>,
    /// Sent → end of the stream.
    pub end_to_end: Duration,
    /// Output tokens, counted as `token_source` says.
    pub output_tokens: Tokens,
    /// Where `output_tokens` came from.
    pub token_source: TokenSource,
    /// `(last token arrival − first token arrival) / (output_tokens − 1)`;
    /// `None` below two tokens.
    pub tpot: Option<Duration>,
    /// Time between tokens, a chunk of `k` tokens spreading its gap over `k`
    /// intervals; `None` below two tokens.
    pub time_between_tokens: Option<Summary<Duration>>,
    /// Raw gaps between consecutive token-bearing chunks; `None` below two such chunks.
    pub chunk_gaps: Option<Summary<Duration>>,
}

/// Computes [`RequestMetrics`] from one request's timeline.
///
/// # Errors
/// [`MetricsError::InvalidTimeline`] for timestamps out of order,
/// [`MetricsError::TokenCountDecreased`] when the server's cumulative usage shrinks.
pub fn request_metrics(t: &RequestTimeline) -> Result<RequestMetrics, MetricsError> {
    let arrivals = Arrivals::of(t)?;
    let since_sent = |at: crate::Timestamp| at.saturating_since(t.sent_at);
    let output_tokens = arrivals.total();
    Ok(RequestMetrics {
        ttft: t.first_text().map(|c| since_sent(c.at)),
        time_to_first_content: t.first_content().map(|c| since_sent(c.at)),
        ttfr: t.first_byte_at.map(since_sent),
        time_to_headers: t.headers_at.map(since_sent),
        end_to_end: since_sent(t.ended_at),
        output_tokens,
        token_source: arrivals.source,
        tpot: tpot(&arrivals, output_tokens),
        time_between_tokens: {
            let mut sample = DurationSample::default();
            arrivals.scaled_intervals(1.0, |_| true, |_, d, n| sample.push(d, n));
            sample.summary()
        },
        chunk_gaps: {
            let mut sample = DurationSample::default();
            arrivals.chunk_gaps(|_| true, |d| sample.push(d, 1));
            sample.summary()
        },
    })
}

/// `(last arrival − first arrival) / (n − 1)`; `None` below two tokens.
pub(crate) fn tpot(arrivals: &Arrivals, n: Tokens) -> Option<Duration> {
    let (first, last) = (arrivals.list.first()?, arrivals.list.last()?);
    let intervals = u128::from(n.get().checked_sub(1).filter(|k| *k > 0)?);
    let ns = last.at.saturating_since(first.at).as_nanos() / intervals;
    Some(Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
}

/// Prompt throughput of a cold request (nothing of its prompt cached).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefillMetrics {
    /// Sent → first content or reasoning token.
    pub ttft: Duration,
    /// `usage.prompt_tokens` as the server reported it.
    pub prompt_tokens: Tokens,
    /// `prompt_tokens / ttft`.
    pub prompt_rate: TokensPerSecond,
}

/// Computes [`PrefillMetrics`]: prompt tokens over TTFT.
///
/// The request should be cold (no prefix cache hit) and short (`max_tokens`
/// of 1 or a few), so that TTFT is almost all prefill.
///
/// # Errors
/// [`MetricsError::NoFirstToken`], [`MetricsError::MissingPromptTokens`], and
/// the errors of [`request_metrics`].
pub fn prefill_metrics(t: &RequestTimeline) -> Result<PrefillMetrics, MetricsError> {
    t.check()?;
    let first = t.first_text().ok_or(MetricsError::NoFirstToken)?;
    let ttft = first.at.saturating_since(t.sent_at);
    let prompt_tokens = t.prompt_tokens().ok_or(MetricsError::MissingPromptTokens)?;
    let prompt_rate = TokensPerSecond::over(prompt_tokens.get() as f64, ttft).ok_or_else(|| {
        MetricsError::InvalidTimeline {
            problem: "the first token arrived at the instant the request was sent".to_owned(),
        }
    })?;
    Ok(PrefillMetrics {
        ttft,
        prompt_tokens,
        prompt_rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Chunk, Outcome, Timestamp, Usage};

    fn ms(n: u64) -> Timestamp {
        Timestamp::from_millis(n)
    }

    fn finished(sent: u64, ended: u64) -> RequestTimeline {
        RequestTimeline::new(
            ms(sent),
            ms(ended),
            Outcome::Finished {
                finish_reason: Some("length".to_owned()),
            },
        )
    }

    #[test]
    fn reasoning_first_separates_ttft_from_first_content() {
        let mut t = finished(100, 1_000);
        t.headers_at = Some(ms(110));
        t.first_byte_at = Some(ms(120));
        t.chunks = vec![
            Chunk::empty(ms(120)),
            Chunk::reasoning(ms(150)),
            Chunk::reasoning(ms(160)),
            Chunk::content(ms(200)),
            Chunk::content(ms(250)),
        ]
        .into();
        let m = request_metrics(&t).unwrap();
        assert_eq!(m.time_to_headers, Some(Duration::from_millis(10)));
        assert_eq!(m.ttfr, Some(Duration::from_millis(20)));
        assert_eq!(m.ttft, Some(Duration::from_millis(50)));
        assert_eq!(m.time_to_first_content, Some(Duration::from_millis(100)));
        assert_eq!(m.end_to_end, Duration::from_millis(900));
        assert_eq!(m.output_tokens, Tokens::new(4));
        assert_eq!(m.token_source, TokenSource::ChunkCount);
        // (250 - 150) / (4 - 1)
        assert_eq!(m.tpot, Some(Duration::from_nanos(33_333_333)));
        let gaps = m.chunk_gaps.unwrap();
        assert_eq!(gaps.count, 3);
        assert_eq!(gaps.min, Duration::from_millis(10));
        assert_eq!(gaps.max, Duration::from_millis(50));
    }

    #[test]
    fn speculative_chunks_do_not_inflate_time_between_tokens() {
        // Every 30 ms a chunk of 3 tokens: a token every 10 ms, not every 30.
        let mut t = finished(0, 1_000);
        t.chunks = (1..=10)
            .map(|i| {
                Chunk::content(ms(30 * i))
                    .with_usage(Usage::new(Tokens::new(50), Tokens::new(3 * i)))
            })
            .collect();
        let m = request_metrics(&t).unwrap();
        assert_eq!(m.output_tokens, Tokens::new(30));
        assert_eq!(m.token_source, TokenSource::ContinuousUsage);
        let tbt = m.time_between_tokens.unwrap();
        assert_eq!(tbt.count, 29);
        assert_eq!(tbt.p50, Duration::from_millis(10));
        assert_eq!(tbt.max, Duration::from_millis(10));
        assert_eq!(m.chunk_gaps.unwrap().p50, Duration::from_millis(30));
        // 270 ms over 29 intervals; the mean of the spread intervals is the TPOT.
        assert_eq!(m.tpot, Some(Duration::from_nanos(270_000_000 / 29)));
        assert_eq!(tbt.mean, Duration::from_nanos(9_310_345));
    }

    #[test]
    fn failed_request_has_no_token_metrics() {
        let mut t = RequestTimeline::new(
            ms(0),
            ms(40),
            Outcome::Failed {
                kind: "http_status".to_owned(),
            },
        );
        t.headers_at = Some(ms(40));
        let m = request_metrics(&t).unwrap();
        assert_eq!(m.ttft, None);
        assert_eq!(m.output_tokens, Tokens::ZERO);
        assert_eq!(m.tpot, None);
        assert_eq!(m.time_between_tokens, None);
        assert_eq!(m.chunk_gaps, None);
    }

    #[test]
    fn prefill_rate_is_prompt_tokens_over_ttft() {
        let mut t = finished(0, 900);
        t.chunks = vec![Chunk::empty(ms(10)), Chunk::content(ms(800))].into();
        assert_eq!(prefill_metrics(&t), Err(MetricsError::MissingPromptTokens));
        t.final_usage = Some(Usage::new(Tokens::new(8_192), Tokens::new(1)));
        let p = prefill_metrics(&t).unwrap();
        assert_eq!(p.ttft, Duration::from_millis(800));
        assert_eq!(p.prompt_tokens, Tokens::new(8_192));
        assert_eq!(p.prompt_rate.get(), 10_240.0);
    }

    #[test]
    fn prefill_without_a_token_is_an_error() {
        let mut t = finished(0, 900);
        t.final_usage = Some(Usage::new(Tokens::new(8_192), Tokens::new(0)));
        assert_eq!(prefill_metrics(&t), Err(MetricsError::NoFirstToken));
        t.chunks = vec![Chunk::content(ms(0))].into();
        assert!(matches!(
            prefill_metrics(&t),
            Err(MetricsError::InvalidTimeline { .. })
        ));
    }
}
