//! Verdicts on a decode cell: what the window's own numbers say limited it.
//! Each rule is a threshold on one signal (docs/metrics.md, "Verdicts");
//! a signal nobody measured gives no verdict, never a guess.

use serde::{Deserialize, Serialize};

/// A verdict's kind, as reports name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// A GPU held its clocks down (power cap, thermal, hardware slowdown)
    /// for a share of the window.
    Throttled,
    /// The client was busy most of its runtime threads' time.
    ClientBound,
    /// The server ran fewer requests than the cell kept in flight, or kept
    /// some waiting.
    ServerQueued,
    /// The server preempted (or retracted) requests during the window.
    Preempted,
    /// The prefix cache hit far less than the workload should.
    CacheCold,
}

impl VerdictKind {
    /// The name reports print.
    pub fn name(self) -> &'static str {
        match self {
            VerdictKind::Throttled => "throttled",
            VerdictKind::ClientBound => "client_bound",
            VerdictKind::ServerQueued => "server_queued",
            VerdictKind::Preempted => "preempted",
            VerdictKind::CacheCold => "cache_cold",
        }
    }
}

/// The thresholds of the rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VerdictRules {
    /// Throttled when any reason held this share of the window or more.
    pub throttled_share: f64,
    /// Client-bound at this share of the runtime threads' time or more.
    pub client_busy_share: f64,
    /// Queued when the server's mean running requests fall below this share of N
    /// (a finished stream's replacement is a short dip, a queue a lasting one).
    pub running_share: f64,
    /// Queued when the server's mean waiting requests reach this many.
    pub waiting_mean: f64,
    /// Cache cold when the hit rate is this far or more below the intended one.
    pub cache_gap: f64,
}

impl Default for VerdictRules {
    fn default() -> Self {
        VerdictRules {
            throttled_share: 0.10,
            client_busy_share: 0.80,
            running_share: 0.90,
            waiting_mean: 0.5,
            cache_gap: 0.20,
        }
    }
}

/// What a cell measured that the rules look at; `None` where nothing measured it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CellSignals {
    /// The window's length, seconds.
    pub window_s: f64,
    /// The most seconds any GPU spent throttled for any reason.
    pub throttled_s: Option<f64>,
    /// The client's CPU over the window / its runtime threads (0–1).
    pub client_busy_share: Option<f64>,
    /// The server's time-weighted mean of running requests.
    pub mean_running: Option<f64>,
    /// The server's time-weighted mean of waiting requests.
    pub mean_waiting: Option<f64>,
    /// Requests the cell kept in flight.
    pub concurrency: u32,
    /// Preemptions over the window.
    pub preemptions: Option<f64>,
    /// Prefix-cache hits / queries over the window.
    pub hit_rate: Option<f64>,
    /// The hit rate the workload's prompts should give.
    pub intended_hit_rate: Option<f64>,
}

/// The verdicts `rules` give on `signals`, in [`VerdictKind`] order.
pub fn verdicts(signals: &CellSignals, rules: &VerdictRules) -> Vec<VerdictKind> {
    let mut out = Vec::new();
    if signals.window_s > 0.0
        && signals
            .throttled_s
            .is_some_and(|t| t / signals.window_s >= rules.throttled_share)
    {
        out.push(VerdictKind::Throttled);
    }
    if signals
        .client_busy_share
        .is_some_and(|b| b >= rules.client_busy_share)
    {
        out.push(VerdictKind::ClientBound);
    }
    let short = signals.concurrency > 0
        && signals
            .mean_running
            .is_some_and(|r| r < rules.running_share * f64::from(signals.concurrency));
    let waiting = signals
        .mean_waiting
        .is_some_and(|w| w >= rules.waiting_mean);
    if short || waiting {
        out.push(VerdictKind::ServerQueued);
    }
    if signals.preemptions.is_some_and(|p| p > 0.0) {
        out.push(VerdictKind::Preempted);
    }
    if let (Some(hit), Some(intended)) = (signals.hit_rate, signals.intended_hit_rate)
        && intended - hit >= rules.cache_gap
    {
        out.push(VerdictKind::CacheCold);
    }
    out
}

/// The hit rate a prompt of `prompt_tokens` should get from a warm prefix
/// cache of `block_tokens`-token blocks: every full block hits, the partial
/// last block (and the token that must be computed) does not.
pub fn intended_hit_rate(prompt_tokens: u64, block_tokens: u64) -> Option<f64> {
    intended_prefix_hit_rate(prompt_tokens, prompt_tokens, block_tokens)
}

/// The hit rate a prompt of `prompt_tokens` whose first `shared_tokens` are
/// already cached should get: the full blocks of the shared part, never the
/// prompt's last token (vLLM computes at least one).
///
/// ```
/// use speedmatrix_metrics::intended_prefix_hit_rate;
/// assert_eq!(intended_prefix_hit_rate(512, 256, 16), Some(0.5));
/// assert_eq!(intended_prefix_hit_rate(512, 200, 16), Some(192.0 / 512.0));
/// assert_eq!(intended_prefix_hit_rate(512, 512, 16), Some(496.0 / 512.0));
/// ```
pub fn intended_prefix_hit_rate(
    prompt_tokens: u64,
    shared_tokens: u64,
    block_tokens: u64,
) -> Option<f64> {
    if prompt_tokens == 0 || block_tokens == 0 {
        return None;
    }
    let cacheable =
        shared_tokens.min(prompt_tokens.saturating_sub(1)) / block_tokens * block_tokens;
    Some(cacheable as f64 / prompt_tokens as f64)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn all_signals() -> CellSignals {
        CellSignals {
            window_s: 30.0,
            throttled_s: Some(6.0),
            client_busy_share: Some(0.9),
            mean_running: Some(12.0),
            mean_waiting: Some(4.0),
            concurrency: 16,
            preemptions: Some(3.0),
            hit_rate: Some(0.1),
            intended_hit_rate: Some(0.99),
        }
    }

    #[test]
    fn each_rule_fires_on_its_signal_and_not_without_it() {
        let v = verdicts(&all_signals(), &VerdictRules::default());
        assert_eq!(
            v,
            [
                VerdictKind::Throttled,
                VerdictKind::ClientBound,
                VerdictKind::ServerQueued,
                VerdictKind::Preempted,
                VerdictKind::CacheCold
            ]
        );
        let none = CellSignals {
            window_s: 30.0,
            concurrency: 16,
            ..CellSignals::default()
        };
        assert!(verdicts(&none, &VerdictRules::default()).is_empty());
        let healthy = CellSignals {
            throttled_s: Some(1.0),
            client_busy_share: Some(0.3),
            mean_running: Some(15.9),
            mean_waiting: Some(0.1),
            preemptions: Some(0.0),
            hit_rate: Some(0.95),
            ..all_signals()
        };
        assert!(verdicts(&healthy, &VerdictRules::default()).is_empty());
        // All N running but some waiting too (the server admits more than N).
        let waiting = CellSignals {
            mean_waiting: Some(0.6),
            ..healthy
        };
        assert_eq!(
            verdicts(&waiting, &VerdictRules::default()),
            [VerdictKind::ServerQueued]
        );
    }

    #[test]
    fn intended_hit_rate_counts_full_blocks_before_the_last_token() {
        assert_eq!(intended_hit_rate(16, 16), Some(0.0));
        assert_eq!(intended_hit_rate(17, 16), Some(16.0 / 17.0));
        assert_eq!(intended_hit_rate(32_768, 16), Some(32_752.0 / 32_768.0));
        assert_eq!(intended_hit_rate(0, 16), None);
    }

    fn signals() -> impl Strategy<Value = CellSignals> {
        (
            1.0f64..100.0,
            prop::option::of(0.0f64..100.0),
            prop::option::of(0.0f64..1.5),
            prop::option::of(0.0f64..200.0),
            prop::option::of(0.0f64..3.0),
            1u32..200,
            prop::option::of(0.0f64..5.0),
            prop::option::of(0.0f64..1.0),
            prop::option::of(0.0f64..1.0),
        )
            .prop_map(|(w, t, c, r, q, n, p, h, i)| CellSignals {
                window_s: w,
                throttled_s: t,
                client_busy_share: c,
                mean_running: r,
                mean_waiting: q,
                concurrency: n,
                preemptions: p,
                hit_rate: h,
                intended_hit_rate: i,
            })
    }

    proptest! {
        #[test]
        fn stricter_thresholds_give_fewer_verdicts(
            s in signals(),
            a in (0.0f64..1.0, 0.0f64..1.0, 0.0f64..1.2, 0.0f64..1.0, 0.0f64..3.0),
            d in (0.0f64..0.5, 0.0f64..0.5, 0.0f64..0.5, 0.0f64..0.5, 0.0f64..2.0),
        ) {
            let loose = VerdictRules {
                throttled_share: a.0,
                client_busy_share: a.1,
                running_share: a.2,
                cache_gap: a.3,
                waiting_mean: a.4,
            };
            // Stricter: higher shares to reach, a lower running share, a wider gap.
            let strict = VerdictRules {
                throttled_share: a.0 + d.0,
                client_busy_share: a.1 + d.1,
                running_share: (a.2 - d.2).max(0.0),
                cache_gap: a.3 + d.3,
                waiting_mean: a.4 + d.4,
            };
            let l = verdicts(&s, &loose);
            for v in verdicts(&s, &strict) {
                prop_assert!(l.contains(&v), "{v:?} under stricter rules only");
            }
        }
    }
}
