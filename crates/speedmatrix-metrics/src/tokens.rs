//! Where output tokens arrived: the one place that decides what counts as a token.

use std::time::Duration;

use speedmatrix_units::Tokens;

use crate::{Chunk, MetricsError, Outcome, RequestTimeline, Timestamp};

/// Where a request's output-token counts came from, from least to most exact
/// (the derived order is that ranking, so `min` picks the weakest).
///
/// The first two are estimates, scaled by a [`Calibration`](crate::Calibration) inside a window;
/// the other three are the server's own counts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// No count from the server and no tokenized text: every chunk with text
    /// counts as one token (times the calibration factor in a window).
    ChunkCount,
    /// No count from the server: the request's whole text, tokenized at once
    /// by the run's tokenizer (times the calibration factor in a window).
    Tokenizer,
    /// The server's total at the end of a finished request
    /// (`usage.completion_tokens`): exact in sum, shared out over the chunks
    /// with text in proportion to their tokenized text (evenly without it).
    FinalUsage,
    /// A running count the engine put in every chunk with text, other than
    /// `usage` (llama.cpp's `timings.predicted_n`, TGI's one event per token).
    EngineCount,
    /// Cumulative usage on every chunk with text: each chunk's tokens are the
    /// growth of `completion_tokens` since the previous report.
    ContinuousUsage,
}

impl TokenSource {
    /// Every source is exact except the two estimates.
    pub const fn is_exact(self) -> bool {
        !matches!(self, TokenSource::ChunkCount | TokenSource::Tokenizer)
    }
}

/// How an estimate is made when the server gives no count.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum EstimateMethod {
    /// Tokens of the whole output text, tokenized at once.
    Tokenizer,
    /// Chunks with text.
    ChunkCount,
}

impl EstimateMethod {
    /// The token source a request counted this way has.
    pub const fn source(self) -> TokenSource {
        match self {
            EstimateMethod::Tokenizer => TokenSource::Tokenizer,
            EstimateMethod::ChunkCount => TokenSource::ChunkCount,
        }
    }
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
    /// Checks `t` and finds where its tokens arrived, by the most exact
    /// source the timeline holds (estimates unscaled).
    pub(crate) fn of(t: &RequestTimeline) -> Result<Self, MetricsError> {
        if let Some(arrivals) = continuous_usage_in_one_pass(t) {
            return Ok(arrivals);
        }
        match final_usage_in_one_pass(t) {
            Some(arrivals) => Ok(arrivals),
            None => Self::of_any(t),
        }
    }

    /// [`Self::of`] for every kind of timeline, one question per pass.
    fn of_any(t: &RequestTimeline) -> Result<Self, MetricsError> {
        t.check()?;
        if counts_every_text_chunk(t, |c| c.usage.map(|u| u.completion_tokens)) {
            return from_running_count(t, TokenSource::ContinuousUsage, |c| {
                c.usage.map(|u| u.completion_tokens)
            });
        }
        if counts_every_text_chunk(t, |c| c.engine_count) {
            return from_running_count(t, TokenSource::EngineCount, |c| c.engine_count);
        }
        if let Some(u) = t.final_usage.filter(|_| t.is_finished()) {
            let weights: Vec<(Timestamp, u64)> = match tokenized(t) {
                Some(w) if w.iter().any(|(_, n)| *n > 0) => w,
                _ => text_chunks(t).map(|c| (c.at, 1)).collect(),
            };
            return Ok(Arrivals {
                source: TokenSource::FinalUsage,
                list: share_out(&weights, u.completion_tokens.get()),
            });
        }
        let method = if tokenized(t).is_some() {
            EstimateMethod::Tokenizer
        } else {
            EstimateMethod::ChunkCount
        };
        Ok(Self::estimate(t, method).unwrap_or_else(|| Self::estimate_by_chunks(t)))
    }

    /// The request's tokens as `method` estimates them (unscaled); `None`
    /// when the timeline lacks what the method needs (tokenized text).
    pub(crate) fn estimate(t: &RequestTimeline, method: EstimateMethod) -> Option<Self> {
        match method {
            EstimateMethod::ChunkCount => Some(Self::estimate_by_chunks(t)),
            EstimateMethod::Tokenizer => Some(Arrivals {
                source: TokenSource::Tokenizer,
                list: tokenized(t)?
                    .into_iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(at, tokens)| Arrival { at, tokens })
                    .collect(),
            }),
        }
    }

    fn estimate_by_chunks(t: &RequestTimeline) -> Self {
        Arrivals {
            source: TokenSource::ChunkCount,
            list: text_chunks(t)
                .map(|c| Arrival {
                    at: c.at,
                    tokens: 1,
                })
                .collect(),
        }
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
    #[cfg(test)]
    pub(crate) fn token_intervals(&self, keep: impl Fn(Timestamp) -> bool) -> Vec<(Duration, u64)> {
        let mut out = Vec::new();
        self.scaled_intervals(1.0, keep, |_, d, n| out.push((d, n)));
        out
    }

    /// [`Self::token_intervals`] with every chunk taken to carry `scale`
    /// times its tokens (an estimate's calibration): `k · scale` intervals,
    /// rounded to a whole number of at least one, splitting the gap. Each
    /// `(interval, multiplicity)` goes to `to`, so a window's millions of
    /// them are stored once, where they are summarized.
    pub(crate) fn scaled_intervals(
        &self,
        scale: f64,
        keep: impl Fn(Timestamp) -> bool,
        mut to: impl FnMut(Timestamp, Duration, u64),
    ) {
        let scaled = |k: u64| -> u64 {
            if scale == 1.0 {
                k
            } else {
                ((k as f64 * scale).round() as u64).max(1)
            }
        };
        if let Some(first) = self.list.first().filter(|a| keep(a.at)) {
            to(first.at, Duration::ZERO, scaled(first.tokens) - 1);
        }
        for w in self.list.windows(2) {
            if keep(w[1].at) {
                for (d, n) in spread(w[1].at.saturating_since(w[0].at), scaled(w[1].tokens)) {
                    if n > 0 {
                        to(w[1].at, d, n);
                    }
                }
            }
        }
    }

    /// Gaps between consecutive token-bearing chunks that `keep` accepts, to `to`.
    pub(crate) fn chunk_gaps(
        &self,
        keep: impl Fn(Timestamp) -> bool,
        mut to: impl FnMut(Duration),
    ) {
        for w in self.list.windows(2) {
            if keep(w[1].at) {
                to(w[1].at.saturating_since(w[0].at));
            }
        }
    }
}

impl RequestTimeline {
    /// The stream ended normally (not cancelled, not failed).
    pub(crate) fn is_finished(&self) -> bool {
        matches!(self.outcome, Outcome::Finished { .. })
    }
}

fn text_chunks(t: &RequestTimeline) -> impl Iterator<Item = Chunk> + '_ {
    t.chunks.iter().filter(|c| c.has_text())
}

/// Whether `count` is on every chunk with text (and on at least one chunk)
/// and grows above zero on some chunk with text. Counts that stay at zero
/// beside text are not a running count: some servers (Ollama's completions)
/// put an all-zero `usage` on every chunk.
fn counts_every_text_chunk(t: &RequestTimeline, count: impl Fn(&Chunk) -> Option<Tokens>) -> bool {
    let mut grows = false;
    t.chunks.iter().any(|c| count(&c).is_some())
        && text_chunks(t).all(|c| {
            let n = count(&c);
            grows |= n.is_some_and(|n| n.get() > 0);
            n.is_some()
        })
        && grows
}

/// `(arrival, tokens)` of every chunk with text, when every one of them has
/// its tokenized-text count.
fn tokenized(t: &RequestTimeline) -> Option<Vec<(Timestamp, u64)>> {
    let mut any = false;
    let list = text_chunks(t)
        .map(|c| {
            any = true;
            c.text_tokens.map(|n| (c.at, u64::from(n)))
        })
        .collect::<Option<Vec<_>>>()?;
    any.then_some(list)
}

fn from_running_count(
    t: &RequestTimeline,
    source: TokenSource,
    count: impl Fn(&Chunk) -> Option<Tokens>,
) -> Result<Arrivals, MetricsError> {
    let mut list = Vec::new();
    let mut so_far = Tokens::ZERO;
    for (chunk, c) in t.chunks.iter().enumerate() {
        let Some(n) = count(&c) else { continue };
        if n < so_far {
            return Err(MetricsError::TokenCountDecreased {
                chunk,
                from: so_far,
                to: n,
            });
        }
        let tokens = n.get() - so_far.get();
        if tokens > 0 {
            list.push(Arrival { at: c.at, tokens });
        }
        so_far = n;
    }
    Ok(Arrivals { source, list })
}

/// Whether the request's headers and first byte lie between its send and its end.
fn edges_in_order(t: &RequestTimeline) -> bool {
    t.ended_at >= t.sent_at
        && [t.headers_at, t.first_byte_at]
            .iter()
            .flatten()
            .all(|at| *at >= t.sent_at && *at <= t.ended_at)
}

/// [`Arrivals::of`] for the usual timeline, cumulative usage on every chunk
/// with text, in a single pass that also checks the timeline: a window holds
/// millions of chunks, and each pass decodes them all. `None` for any other
/// timeline (a text chunk without usage, a bad order, a count going down):
/// the general path then decides, and words any error.
fn continuous_usage_in_one_pass(t: &RequestTimeline) -> Option<Arrivals> {
    if !edges_in_order(t) {
        return None;
    }
    let (mut list, mut so_far, mut previous, mut grows) = (Vec::new(), 0, t.sent_at, false);
    let mut any_usage = false;
    for c in &t.chunks {
        if c.at < previous || c.at > t.ended_at {
            return None;
        }
        previous = c.at;
        let Some(n) = c.usage.map(|u| u.completion_tokens.get()) else {
            if c.has_text() {
                return None;
            }
            continue;
        };
        any_usage = true;
        grows |= c.has_text() && n > 0;
        let tokens = n.checked_sub(so_far)?;
        if tokens > 0 {
            list.push(Arrival { at: c.at, tokens });
        }
        so_far = n;
    }
    (any_usage && grows).then_some(Arrivals {
        source: TokenSource::ContinuousUsage,
        list,
    })
}

/// [`Arrivals::of`] for a finished request whose server counted only at the
/// end (a final usage, no count beside any text, no engine count), in a
/// single pass that also checks the timeline: a cell against such a server
/// can hold thousands of them. `None` for any other timeline; the general
/// path then decides, and words any error.
fn final_usage_in_one_pass(t: &RequestTimeline) -> Option<Arrivals> {
    let total = t.final_usage.filter(|_| t.is_finished())?.completion_tokens;
    if !edges_in_order(t) {
        return None;
    }
    let mut weights: Vec<(Timestamp, u64)> = Vec::with_capacity(t.chunks.len());
    let (mut previous, mut tokenized, mut any_tokens) = (t.sent_at, true, false);
    for c in &t.chunks {
        if c.at < previous || c.at > t.ended_at || c.engine_count.is_some() {
            return None;
        }
        previous = c.at;
        if !c.has_text() {
            continue;
        }
        if c.usage.is_some() {
            return None;
        }
        let n = c.text_tokens.map_or(0, u64::from);
        tokenized &= c.text_tokens.is_some();
        any_tokens |= n > 0;
        weights.push((c.at, n));
    }
    // Tokenized text weighs each chunk; without it, every chunk weighs one.
    if !(tokenized && any_tokens) {
        for w in &mut weights {
            w.1 = 1;
        }
    }
    Some(Arrivals {
        source: TokenSource::FinalUsage,
        list: share_out(&weights, total.get()),
    })
}

/// Shares `n` whole tokens out over the chunks in proportion to their
/// weights: chunk `j` gets `⌊W_(j+1)·n/W⌋ − ⌊W_j·n/W⌋` where `W_j` is the sum
/// of the weights before it, so the shares sum to `n` and never differ from
/// the exact proportion by a whole token.
fn share_out(weights: &[(Timestamp, u64)], n: u64) -> Vec<Arrival> {
    let total: u128 = weights.iter().map(|(_, w)| u128::from(*w)).sum();
    // In 64 bits when the largest product fits (always, but for absurd
    // counts): a 128-bit division per chunk is a library call.
    let narrow = u64::try_from(total)
        .ok()
        .and_then(|t| t.checked_mul(n).map(|_| t.max(1)));
    let upto = |cum: u128| match narrow {
        Some(total) => cum as u64 * n / total,
        None => (cum * u128::from(n) / total.max(1)) as u64,
    };
    let mut cum = 0u128;
    weights
        .iter()
        .map(|&(at, w)| {
            let before = upto(cum);
            cum += u128::from(w);
            Arrival {
                at,
                tokens: upto(cum) - before,
            }
        })
        .filter(|a| a.tokens > 0)
        .collect()
}

/// Splits `gap` into `k` intervals that differ by at most a nanosecond and
/// sum to `gap` exactly, as `(interval, multiplicity)` pairs.
pub(crate) fn spread(gap: Duration, k: u64) -> [(Duration, u64); 2] {
    if let Ok(total) = u64::try_from(gap.as_nanos()) {
        // A 64-bit division: a 128-bit one is a library call, once per chunk.
        let k = k.max(1);
        let (base, longer) = (total / k, total % k);
        return [
            (Duration::from_nanos(base + 1), longer),
            (Duration::from_nanos(base), k - longer),
        ];
    }
    let total = gap.as_nanos();
    let k128 = u128::from(k.max(1));
    let base = total / k128;
    let longer = (total % k128) as u64;
    let ns = |n: u128| Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX));
    [(ns(base + 1), longer), (ns(base), k.max(1) - longer)]
}

#[cfg(test)]
mod tests;
