//! The counters and gauges of a `/metrics` page that explain a window:
//! KV usage, preemptions, prefix-cache lookups and hits, speculative
//! drafts and acceptances, prompt and output tokens, under each engine's
//! own names (each engine module cites where they are defined).

use crate::{ServerMetrics, llamacpp, sglang, vllm};

/// One reading of a server's explanatory metrics; what the page lacks is `None`.
/// Counters only make sense as differences between two readings.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct ServerCounters {
    /// Requests running (gauge).
    pub running: Option<f64>,
    /// Requests waiting (gauge).
    pub waiting: Option<f64>,
    /// Share of the KV cache in use, 0–1 (gauge).
    pub kv_usage: Option<f64>,
    /// Requests preempted (vLLM) or retracted (SGLang) so far (counter).
    pub preemptions: Option<f64>,
    /// Prompt tokens looked up in the prefix cache so far (counter).
    pub prefix_cache_queries: Option<f64>,
    /// Of those, tokens found (counter).
    pub prefix_cache_hits: Option<f64>,
    /// Speculative drafts proposed so far (counter).
    pub spec_drafts: Option<f64>,
    /// Draft tokens proposed so far (counter).
    pub spec_draft_tokens: Option<f64>,
    /// Draft tokens accepted so far (counter).
    pub spec_accepted_tokens: Option<f64>,
    /// Prompt tokens processed so far (counter).
    pub prompt_tokens: Option<f64>,
    /// Output tokens generated so far (counter).
    pub generation_tokens: Option<f64>,
    /// The token, cache and speculative counters move only when a request
    /// ends (llama.cpp; SGLang before 0.5.7), so a window's deltas cover the
    /// requests that finished in it, not the tokens it served.
    pub counted_at_finish: bool,
}

/// The first of `names` the page has, summed over its label sets.
fn first(metrics: &ServerMetrics, names: &[&str]) -> Option<f64> {
    names.iter().find_map(|n| metrics.sum(n))
}

/// `a + b`, or whichever of them the page has.
fn plus(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    }
}

impl ServerCounters {
    /// Reads the page under vLLM's, SGLang's or llama.cpp's names, by the
    /// prefix its samples carry (a proxy may relay any of them). Series are
    /// summed over their labels: vLLM's `engine` and SGLang's `dp_rank` are
    /// data-parallel ranks.
    pub fn from_metrics(metrics: &ServerMetrics) -> ServerCounters {
        let state = crate::SchedulerState::from_metrics(metrics);
        let mut counters = if metrics.has_prefix("vllm:") {
            vllm_counters(metrics)
        } else if metrics.has_prefix("sglang:") {
            sglang_counters(metrics)
        } else if metrics.has_prefix("llamacpp:") {
            llamacpp_counters(metrics)
        } else {
            ServerCounters::default()
        };
        counters.running = state.map(|s| s.running);
        counters.waiting = state.map(|s| s.waiting);
        counters
    }
}

fn vllm_counters(m: &ServerMetrics) -> ServerCounters {
    ServerCounters {
        kv_usage: first(m, &[vllm::KV_CACHE_USAGE, vllm::GPU_CACHE_USAGE]),
        preemptions: m.sum(vllm::PREEMPTIONS),
        prefix_cache_queries: first(
            m,
            &[vllm::PREFIX_CACHE_QUERIES, vllm::GPU_PREFIX_CACHE_QUERIES],
        ),
        prefix_cache_hits: first(m, &[vllm::PREFIX_CACHE_HITS, vllm::GPU_PREFIX_CACHE_HITS])
            .map(|local| local + m.sum(vllm::EXTERNAL_PREFIX_CACHE_HITS).unwrap_or(0.0)),
        spec_drafts: m.sum(vllm::SPEC_DRAFTS),
        spec_draft_tokens: m.sum(vllm::SPEC_DRAFT_TOKENS),
        spec_accepted_tokens: m.sum(vllm::SPEC_ACCEPTED_TOKENS),
        prompt_tokens: m.sum(vllm::PROMPT_TOKENS),
        generation_tokens: m.sum(vllm::GENERATION_TOKENS),
        ..ServerCounters::default()
    }
}

/// SGLang's cache counters from the most live source the version has:
/// per-prefill-batch tiers (0.5.20), per-batch modes (0.5.7), then the
/// per-finished-request totals.
fn sglang_prefix_cache(m: &ServerMetrics) -> (Option<f64>, Option<f64>, bool) {
    let tiers = ["device_hit", "host_hit", "storage_hit"];
    if let Some(hits) = m.sum_where(sglang::PREFILL_EFFECTIVE_TOKENS, "mode", &tiers) {
        let all = m.sum(sglang::PREFILL_EFFECTIVE_TOKENS);
        return (all, Some(hits), false);
    }
    let cache = m.sum_where(sglang::REALTIME_TOKENS, "mode", &["prefill_cache"]);
    let compute = m.sum_where(sglang::REALTIME_TOKENS, "mode", &["prefill_compute"]);
    if cache.is_some() {
        return (plus(cache, compute), cache, false);
    }
    (
        m.sum(sglang::PROMPT_TOKENS),
        m.sum(sglang::CACHED_TOKENS),
        true,
    )
}

fn sglang_counters(m: &ServerMetrics) -> ServerCounters {
    let (queries, hits, at_finish) = sglang_prefix_cache(m);
    let generation = m.sum(sglang::GENERATION_TOKENS);
    let verify_calls = m.sum(sglang::SPEC_VERIFY_CALLS);
    ServerCounters {
        kv_usage: m.sum(sglang::TOKEN_USAGE),
        preemptions: m.sum(sglang::RETRACTIONS),
        prefix_cache_queries: queries,
        prefix_cache_hits: hits,
        // SGLang counts verification steps, not drafts: each step yields the
        // accepted tokens plus one, so accepted = output − steps.
        spec_drafts: verify_calls,
        spec_accepted_tokens: verify_calls.zip(generation).map(|(v, g)| g - v),
        prompt_tokens: m.sum(sglang::PROMPT_TOKENS),
        generation_tokens: generation,
        counted_at_finish: at_finish || verify_calls.is_some(),
        ..ServerCounters::default()
    }
}

fn llamacpp_counters(m: &ServerMetrics) -> ServerCounters {
    let computed = m.sum(llamacpp::PROMPT_TOKENS);
    let cached = m.sum(llamacpp::PROMPT_TOKENS_CACHED);
    ServerCounters {
        kv_usage: m.sum(llamacpp::KV_CACHE_USAGE),
        prefix_cache_queries: cached.and(plus(computed, cached)),
        prefix_cache_hits: cached,
        spec_drafts: m.sum(llamacpp::SPEC_DRAFTS),
        spec_draft_tokens: m.sum(llamacpp::SPEC_DRAFT_TOKENS),
        spec_accepted_tokens: m.sum(llamacpp::SPEC_ACCEPTED_TOKENS),
        prompt_tokens: plus(computed, cached),
        generation_tokens: m.sum(llamacpp::GENERATION_TOKENS),
        counted_at_finish: true,
        ..ServerCounters::default()
    }
}

/// What happened between two readings.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct CounterDeltas {
    /// Preemptions.
    pub preemptions: Option<f64>,
    /// Prefix-cache lookups (tokens).
    pub prefix_cache_queries: Option<f64>,
    /// Prefix-cache hits (tokens).
    pub prefix_cache_hits: Option<f64>,
    /// Speculative drafts.
    pub spec_drafts: Option<f64>,
    /// Draft tokens proposed.
    pub spec_draft_tokens: Option<f64>,
    /// Draft tokens accepted.
    pub spec_accepted_tokens: Option<f64>,
    /// Prompt tokens.
    pub prompt_tokens: Option<f64>,
    /// Output tokens.
    pub generation_tokens: Option<f64>,
    /// Whether either reading's counters move only when a request ends.
    pub counted_at_finish: bool,
}

impl CounterDeltas {
    /// `after − before` per counter; a counter missing from either, or
    /// that went back (the server restarted), is `None`.
    pub fn between(before: &ServerCounters, after: &ServerCounters) -> CounterDeltas {
        let d = |a: Option<f64>, b: Option<f64>| {
            let (a, b) = (a?, b?);
            let d = b - a;
            (d >= 0.0).then_some(d)
        };
        CounterDeltas {
            preemptions: d(before.preemptions, after.preemptions),
            prefix_cache_queries: d(before.prefix_cache_queries, after.prefix_cache_queries),
            prefix_cache_hits: d(before.prefix_cache_hits, after.prefix_cache_hits),
            spec_drafts: d(before.spec_drafts, after.spec_drafts),
            spec_draft_tokens: d(before.spec_draft_tokens, after.spec_draft_tokens),
            spec_accepted_tokens: d(before.spec_accepted_tokens, after.spec_accepted_tokens),
            prompt_tokens: d(before.prompt_tokens, after.prompt_tokens),
            generation_tokens: d(before.generation_tokens, after.generation_tokens),
            counted_at_finish: before.counted_at_finish || after.counted_at_finish,
        }
    }

    /// Hits / lookups, when there were lookups.
    pub fn prefix_cache_hit_rate(&self) -> Option<f64> {
        let q = self.prefix_cache_queries.filter(|q| *q > 0.0)?;
        Some(self.prefix_cache_hits? / q)
    }

    /// Accepted / proposed draft tokens (vLLM's "draft acceptance rate").
    pub fn spec_acceptance_rate(&self) -> Option<f64> {
        let proposed = self.spec_draft_tokens.filter(|t| *t > 0.0)?;
        Some(self.spec_accepted_tokens? / proposed)
    }

    /// Tokens a verification step yields: 1 + accepted / drafts (vLLM's
    /// "mean acceptance length").
    pub fn spec_mean_accepted_length(&self) -> Option<f64> {
        let drafts = self.spec_drafts.filter(|d| *d > 0.0)?;
        Some(1.0 + self.spec_accepted_tokens? / drafts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(text: &str) -> ServerMetrics {
        ServerMetrics::parse(text)
    }

    #[test]
    fn vllm_counters_read_and_their_deltas_give_rates() {
        let before = ServerCounters::from_metrics(&page(
            "vllm:num_requests_running{engine=\"0\"} 4\nvllm:num_requests_waiting 0\n\
             vllm:kv_cache_usage_perc 0.25\nvllm:num_preemptions_total 1\n\
             vllm:prefix_cache_queries_total 1000\nvllm:prefix_cache_hits_total 900\n\
             vllm:spec_decode_num_drafts_total 10\nvllm:spec_decode_num_draft_tokens_total 30\n\
             vllm:spec_decode_num_accepted_tokens_total 15\n\
             vllm:generation_tokens_total{engine=\"0\"} 500\nvllm:generation_tokens_total{engine=\"1\"} 500\n",
        ));
        assert_eq!(before.running, Some(4.0));
        assert_eq!(before.kv_usage, Some(0.25));
        assert_eq!(before.generation_tokens, Some(1000.0));
        let after = ServerCounters::from_metrics(&page(
            "vllm:num_requests_running 4\nvllm:num_requests_waiting 0\nvllm:num_preemptions_total 1\n\
             vllm:prefix_cache_queries_total 3000\nvllm:prefix_cache_hits_total 2500\n\
             vllm:spec_decode_num_drafts_total 110\nvllm:spec_decode_num_draft_tokens_total 330\n\
             vllm:spec_decode_num_accepted_tokens_total 195\nvllm:generation_tokens_total 1800\n",
        ));
        let d = CounterDeltas::between(&before, &after);
        assert_eq!(d.preemptions, Some(0.0));
        assert_eq!(d.prefix_cache_hit_rate(), Some(1600.0 / 2000.0));
        assert_eq!(d.spec_acceptance_rate(), Some(180.0 / 300.0));
        assert_eq!(d.spec_mean_accepted_length(), Some(1.0 + 180.0 / 100.0));
        assert_eq!(d.generation_tokens, Some(800.0));
        // A counter that went back is a restart, not a negative delta.
        let restarted = CounterDeltas::between(&after, &before);
        assert_eq!(restarted.generation_tokens, None);
    }

    #[test]
    fn sglang_and_llamacpp_names_read_too() {
        let s = ServerCounters::from_metrics(&page(
            "sglang:num_running_reqs 2\nsglang:num_queue_reqs 1\nsglang:token_usage 0.5\n\
             sglang:prompt_tokens_total 100\nsglang:cached_tokens_total 60\n\
             sglang:generation_tokens_total 40\n",
        ));
        assert_eq!(
            (s.running, s.waiting, s.kv_usage),
            (Some(2.0), Some(1.0), Some(0.5))
        );
        assert_eq!(
            (s.prefix_cache_queries, s.prefix_cache_hits),
            (Some(100.0), Some(60.0))
        );
        assert!(
            s.counted_at_finish,
            "the per-request totals are the fallback"
        );
        let l = ServerCounters::from_metrics(&page(
            "llamacpp:requests_processing 1\nllamacpp:requests_deferred 0\n\
             llamacpp:kv_cache_usage_ratio 0.1\nllamacpp:tokens_predicted_total 7\n",
        ));
        assert_eq!((l.kv_usage, l.generation_tokens), (Some(0.1), Some(7.0)));
        assert_eq!(l.prefix_cache_hits, None);
        assert!(l.counted_at_finish);
    }

    #[test]
    fn sglang_reads_the_most_live_cache_counters_it_has() {
        let tiers = ServerCounters::from_metrics(&page(
            "sglang:prefill_effective_tokens_total{mode=\"input\",dp_rank=\"0\"} 100\n\
             sglang:prefill_effective_tokens_total{mode=\"device_hit\",dp_rank=\"0\"} 700\n\
             sglang:prefill_effective_tokens_total{mode=\"host_hit\",dp_rank=\"0\"} 200\n\
             sglang:realtime_tokens_total{mode=\"prefill_cache\"} 1\n\
             sglang:prompt_tokens_total 5\nsglang:cached_tokens_total 4\n\
             sglang:num_retracted_requests_total 3\nsglang:num_retracted_reqs 0\n",
        ));
        assert_eq!(
            (tiers.prefix_cache_queries, tiers.prefix_cache_hits),
            (Some(1000.0), Some(900.0))
        );
        assert_eq!(tiers.preemptions, Some(3.0));
        assert!(!tiers.counted_at_finish);
        let modes = ServerCounters::from_metrics(&page(
            "sglang:realtime_tokens_total{mode=\"prefill_cache\"} 300\n\
             sglang:realtime_tokens_total{mode=\"prefill_compute\"} 100\n\
             sglang:realtime_tokens_total{mode=\"decode\"} 9999\n",
        ));
        assert_eq!(
            (modes.prefix_cache_queries, modes.prefix_cache_hits),
            (Some(400.0), Some(300.0))
        );
    }

    #[test]
    fn sglang_verify_steps_give_the_mean_accepted_length() {
        let at = |output: f64, calls: f64| {
            ServerCounters::from_metrics(&page(&format!(
                "sglang:generation_tokens_total {output}\nsglang:spec_verify_calls_total {calls}\n"
            )))
        };
        let d = CounterDeltas::between(&at(100.0, 50.0), &at(1100.0, 450.0));
        assert_eq!(d.spec_mean_accepted_length(), Some(1000.0 / 400.0));
        assert_eq!(
            d.spec_acceptance_rate(),
            None,
            "drafted tokens are not counted"
        );
        assert!(d.counted_at_finish);
    }

    #[test]
    fn llamacpp_hits_are_cached_over_cached_plus_computed() {
        let at = |computed: f64, cached: f64| {
            ServerCounters::from_metrics(&page(&format!(
                "llamacpp:prompt_tokens_total {computed}\n\
                 llamacpp:prompt_tokens_cached_total {cached}\n"
            )))
        };
        // Six significant digits, as llama-server prints them.
        let d = CounterDeltas::between(&at(1000.0, 0.0), &at(1500.0, 1.5e+03));
        assert_eq!(d.prefix_cache_hit_rate(), Some(1500.0 / 2000.0));
    }

    #[test]
    fn vllm_old_names_and_connector_hits_count() {
        let old = ServerCounters::from_metrics(&page(
            "vllm:gpu_cache_usage_perc 0.5\nvllm:gpu_prefix_cache_queries_total 10\n\
             vllm:gpu_prefix_cache_hits_total 4\n",
        ));
        assert_eq!(
            (
                old.kv_usage,
                old.prefix_cache_queries,
                old.prefix_cache_hits
            ),
            (Some(0.5), Some(10.0), Some(4.0))
        );
        let connector = ServerCounters::from_metrics(&page(
            "vllm:prefix_cache_queries_total 10\nvllm:prefix_cache_hits_total 4\n\
             vllm:external_prefix_cache_hits_total 5\n",
        ));
        assert_eq!(connector.prefix_cache_hits, Some(9.0));
    }
}
