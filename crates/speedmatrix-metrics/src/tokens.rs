//! Where output tokens arrived: the one place that decides what counts as a token.

use std::time::Duration;

use speedmatrix_units::Tokens;

use crate::{MetricsError, RequestTimeline, Timestamp};

/// Where a request's output-token counts came from, from least to most exact
/// (the derived order is that ranking, so `min` picks the weakest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TokenSource {
    /// No usage from the server: every chunk with text counts as one token.
    /// Under-counts when a chunk carries several tokens (speculative decoding).
    ChunkCount,
    /// Only a final `usage.completion_tokens`: the total is exact, and it is
    /// shared out evenly over the chunks with text.
    FinalUsage,
    /// Cumulative usage on every chunk with text: each chunk's tokens are the
    /// growth of `completion_tokens` since the previous report.
    ContinuousUsage,
}

/// Tokens that arrived together in one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arrival {
    pub(crate) at: Timestamp,
    /// At least one.
    pub(crate) tokens: u64,
}

/// A request's token arrivals in time order, and how they were counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Arrivals {
    pub(crate) source: TokenSource,
    pub(crate) list: Vec<Arrival>,
}

impl Arrivals {
    /// Checks `t` and finds where its tokens arrived.
    pub(crate) fn of(t: &RequestTimeline) -> Result<Self, MetricsError> {
        t.check()?;
        let continuous = t.chunks.iter().any(|c| c.usage.is_some())
            && t.chunks.iter().all(|c| !c.has_text() || c.usage.is_some());
        if continuous {
            return from_cumulative_usage(t);
        }
        let text: Vec<Timestamp> = t
            .chunks
            .iter()
            .filter(|c| c.has_text())
            .map(|c| c.at)
            .collect();
        Ok(match t.final_usage {
            Some(u) => Arrivals {
                source: TokenSource::FinalUsage,
                list: share_out(&text, u.completion_tokens.get()),
            },
            None => Arrivals {
                source: TokenSource::ChunkCount,
                list: text.iter().map(|&at| Arrival { at, tokens: 1 }).collect(),
            },
        })
    }

    /// All output tokens, saturating at `u64::MAX` for absurd server reports.
    pub(crate) fn total(&self) -> Tokens {
        Tokens::new(
            self.list
                .iter()
                .fold(0u64, |n, a| n.saturating_add(a.tokens)),
        )
    }

    /// Time-between-token samples as `(interval, multiplicity)`: the first
    /// chunk's extra tokens are zero intervals, and each later chunk of `k`
    /// tokens splits the gap since the previous chunk into `k` equal parts.
    /// Only chunks accepted by `keep` contribute.
    pub(crate) fn token_intervals(&self, keep: impl Fn(Timestamp) -> bool) -> Vec<(Duration, u64)> {
        let mut out = Vec::new();
        if let Some(first) = self.list.first().filter(|a| keep(a.at)) {
            out.push((Duration::ZERO, first.tokens - 1));
        }
        for w in self.list.windows(2) {
            if keep(w[1].at) {
                out.extend(spread(w[1].at.saturating_since(w[0].at), w[1].tokens));
            }
        }
        out
    }

    /// Gaps between consecutive token-bearing chunks that `keep` accepts.
    pub(crate) fn chunk_gaps(&self, keep: impl Fn(Timestamp) -> bool) -> Vec<Duration> {
        self.list
            .windows(2)
            .filter(|w| keep(w[1].at))
            .map(|w| w[1].at.saturating_since(w[0].at))
            .collect()
    }
}

fn from_cumulative_usage(t: &RequestTimeline) -> Result<Arrivals, MetricsError> {
    let mut list = Vec::new();
    let mut so_far = Tokens::ZERO;
    for (chunk, c) in t.chunks.iter().enumerate() {
        let Some(u) = c.usage else { continue };
        if u.completion_tokens < so_far {
            return Err(MetricsError::TokenCountDecreased {
                chunk,
                from: so_far,
                to: u.completion_tokens,
            });
        }
        let tokens = u.completion_tokens.get() - so_far.get();
        if tokens > 0 {
            list.push(Arrival { at: c.at, tokens });
        }
        so_far = u.completion_tokens;
    }
    Ok(Arrivals {
        source: TokenSource::ContinuousUsage,
        list,
    })
}

/// Gives chunk `j` of `k` the tokens `⌊(j+1)n/k⌋ − ⌊jn/k⌋`: whole tokens,
/// as even as whole tokens allow, summing to `n`.
fn share_out(at: &[Timestamp], n: u64) -> Vec<Arrival> {
    let k = at.len() as u128;
    let upto = |j: u128| (j * u128::from(n) / k.max(1)) as u64;
    at.iter()
        .enumerate()
        .map(|(j, &at)| Arrival {
            at,
            tokens: upto(j as u128 + 1) - upto(j as u128),
        })
        .filter(|a| a.tokens > 0)
        .collect()
}

/// Splits `gap` into `k` intervals that differ by at most a nanosecond and
/// sum to `gap` exactly, as `(interval, multiplicity)` pairs.
pub(crate) fn spread(gap: Duration, k: u64) -> [(Duration, u64); 2] {
    let total = gap.as_nanos();
    let k128 = u128::from(k.max(1));
    let base = total / k128;
    let longer = (total % k128) as u64;
    let ns = |n: u128| Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX));
    [(ns(base + 1), longer), (ns(base), k.max(1) - longer)]
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{Chunk, Outcome, Usage};

    fn ms(n: u64) -> Timestamp {
        Timestamp::from_millis(n)
    }

    fn timeline(chunks: Vec<Chunk>) -> RequestTimeline {
        let mut t = RequestTimeline::new(ms(0), ms(10_000), Outcome::Cancelled);
        t.chunks = chunks;
        t
    }

    fn usage(n: u64) -> Usage {
        Usage::new(Tokens::new(10), Tokens::new(n))
    }

    #[test]
    fn cumulative_usage_gives_per_chunk_tokens() {
        let t = timeline(vec![
            Chunk::empty(ms(5)).with_usage(usage(0)),
            Chunk::reasoning(ms(10)).with_usage(usage(1)),
            Chunk::content(ms(20)).with_usage(usage(4)),
            Chunk::content(ms(30)).with_usage(usage(4)),
            Chunk::empty(ms(31)).with_usage(usage(6)),
        ]);
        let a = Arrivals::of(&t).unwrap();
        assert_eq!(a.source, TokenSource::ContinuousUsage);
        let got: Vec<(u64, u64)> = a
            .list
            .iter()
            .map(|x| (x.at.offset().as_millis() as u64, x.tokens))
            .collect();
        assert_eq!(got, vec![(10, 1), (20, 3), (31, 2)]);
        assert_eq!(a.total(), Tokens::new(6));
    }

    #[test]
    fn decreasing_usage_is_an_error() {
        let t = timeline(vec![
            Chunk::content(ms(10)).with_usage(usage(3)),
            Chunk::content(ms(20)).with_usage(usage(2)),
        ]);
        assert!(matches!(
            Arrivals::of(&t),
            Err(MetricsError::TokenCountDecreased { chunk: 1, .. })
        ));
    }

    #[test]
    fn a_text_chunk_without_usage_falls_back() {
        let mut t = timeline(vec![
            Chunk::content(ms(10)).with_usage(usage(1)),
            Chunk::content(ms(20)),
            Chunk::content(ms(30)),
        ]);
        let a = Arrivals::of(&t).unwrap();
        assert_eq!(a.source, TokenSource::ChunkCount);
        assert_eq!(a.total(), Tokens::new(3));
        t.final_usage = Some(usage(7));
        let a = Arrivals::of(&t).unwrap();
        assert_eq!(a.source, TokenSource::FinalUsage);
        let shares: Vec<u64> = a.list.iter().map(|x| x.tokens).collect();
        assert_eq!(shares, vec![2, 2, 3]);
    }

    #[test]
    fn first_chunk_extra_tokens_are_zero_intervals() {
        let t = timeline(vec![
            Chunk::content(ms(100)).with_usage(usage(3)),
            Chunk::content(ms(130)).with_usage(usage(6)),
        ]);
        let a = Arrivals::of(&t).unwrap();
        let iv = a.token_intervals(|_| true);
        let expanded: Vec<Duration> = iv
            .iter()
            .flat_map(|(d, n)| std::iter::repeat_n(*d, *n as usize))
            .collect();
        let mut sorted = expanded.clone();
        sorted.sort();
        let z = Duration::ZERO;
        let ten = Duration::from_millis(10);
        assert_eq!(sorted, vec![z, z, ten, ten, ten]);
        assert_eq!(a.chunk_gaps(|_| true), vec![Duration::from_millis(30)]);
    }

    proptest! {
        #[test]
        fn spreading_preserves_the_gap(gap_ns in 0u64..10_000_000_000, k in 1u64..10_000) {
            let parts = spread(Duration::from_nanos(gap_ns), k);
            let count: u64 = parts.iter().map(|p| p.1).sum();
            let sum: u128 = parts.iter().map(|(d, n)| d.as_nanos() * u128::from(*n)).sum();
            prop_assert_eq!(count, k);
            prop_assert_eq!(sum, u128::from(gap_ns));
            prop_assert!(parts[0].0 - parts[1].0 <= Duration::from_nanos(1));
        }

        #[test]
        fn intervals_sum_to_first_to_last(
            steps in prop::collection::vec((0u64..50, 1u64..8), 1..40),
        ) {
            let mut at = 0;
            let mut cum = 0;
            let chunks: Vec<Chunk> = steps.iter().map(|(dt, k)| {
                at += dt;
                cum += k;
                Chunk::content(ms(at)).with_usage(usage(cum))
            }).collect();
            let a = Arrivals::of(&timeline(chunks)).unwrap();
            let iv = a.token_intervals(|_| true);
            let n: u64 = iv.iter().map(|p| p.1).sum();
            let sum: u128 = iv.iter().map(|(d, n)| d.as_nanos() * u128::from(*n)).sum();
            prop_assert_eq!(n, cum - 1);
            prop_assert_eq!(sum, Duration::from_millis(at - steps[0].0).as_nanos());
        }

        #[test]
        fn shares_sum_to_the_total(k in 1usize..50, n in 0u64..100_000) {
            let at: Vec<Timestamp> = (0..k as u64).map(ms).collect();
            let total: u64 = share_out(&at, n).iter().map(|a| a.tokens).sum();
            prop_assert_eq!(total, n);
        }
    }
}
