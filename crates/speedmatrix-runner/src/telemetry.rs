//! The run's telemetry: the GPU and host sampler beside the run, and each
//! decode cell's summary of what the GPUs, the host and the server did in
//! its window, with the verdicts the metrics crate's rules give.

use std::time::Instant;

use speedmatrix_engines::{CounterDeltas, ServerCounters};
use speedmatrix_metrics::{
    CellSignals, VerdictKind, VerdictRules, binned_levels, intended_hit_rate, verdicts,
};
use speedmatrix_report::{
    CellSeries, CellTelemetry, CellVerdict, GpuDetail, GpuUse, HostUse, ServerStats,
    TelemetrySetup, ThrottledSeconds, VerdictThresholds,
};
use speedmatrix_telemetry::{
    EnergySource, Recorded, Sampler, SamplerConfig, TelemetryMode, summarize_gpus, summarize_host,
};
use speedmatrix_units::Tokens;

use crate::TelemetryConfig;
use crate::client_load::ClientLoad;
use crate::server::Gauges;

/// The sampler of one run.
pub(crate) struct RunTelemetry {
    sampler: Option<Sampler>,
    config: TelemetryConfig,
}

/// What one cell's window was, for its telemetry.
pub(crate) struct CellWindow<'a> {
    pub(crate) start: Instant,
    pub(crate) end: Instant,
    pub(crate) output_tokens: Tokens,
    pub(crate) concurrency: u32,
    pub(crate) gauges: &'a [Gauges],
    pub(crate) open: Option<&'a ServerCounters>,
    pub(crate) close: Option<&'a ServerCounters>,
    /// The counters read after the warm-up, before the cell's streams started.
    pub(crate) streams_start: Option<&'a ServerCounters>,
    pub(crate) client: Option<ClientLoad>,
    pub(crate) prompt_tokens: u64,
    /// The server's KV block size, for the hit rate a warm cache should give.
    pub(crate) block_tokens: Option<u64>,
    /// Our total tok/s per equal part of the window.
    pub(crate) output_rate_series: &'a [f64],
}

impl RunTelemetry {
    /// Starts sampling the GPUs (as `config.gpu` says) and the host, unless telemetry is off.
    pub(crate) fn start(config: TelemetryConfig) -> RunTelemetry {
        let sampler = (config.gpu != TelemetryMode::Off && !config.interval.is_zero()).then(|| {
            Sampler::start(SamplerConfig {
                mode: config.gpu,
                interval: config.interval,
                host: true,
            })
        });
        RunTelemetry { sampler, config }
    }

    /// What the GPUs, the host and the server did in one window.
    pub(crate) fn cell(&self, w: &CellWindow<'_>) -> CellTelemetry {
        let recorded = self
            .sampler
            .as_ref()
            .map(|s| s.between(w.start, w.end))
            .unwrap_or_default();
        let gpus: Vec<GpuUse> = summarize_gpus(&recorded.gpu_samples, w.start, w.end)
            .into_iter()
            .map(gpu_use)
            .collect();
        let energy_j = (!gpus.is_empty() && gpus.iter().all(|g| g.energy_j.is_some()))
            .then(|| gpus.iter().filter_map(|g| g.energy_j).sum::<f64>());
        let host = summarize_host(&recorded.host, w.start, w.end).map(|h| HostUse {
            cpu_mean_pct: h.cpu_mean_pct,
            cpu_busiest_core_pct: h.cpu_busiest_core_pct,
            memory_used_peak_bytes: h.memory_used_peak,
        });
        let deltas = match (w.open, w.close) {
            (Some(a), Some(b)) => Some(CounterDeltas::between(a, b)),
            _ => None,
        };
        // The prefix cache is judged on every request of the cell after its
        // warm-up (the N first ones start before the window opens), the
        // rest of the counters on the window alone.
        let cache = match (w.streams_start, w.close) {
            (Some(a), Some(b)) => Some(CounterDeltas::between(a, b)),
            _ => deltas,
        };
        let deltas = deltas.map(|mut d| {
            if let Some(c) = cache {
                d.prefix_cache_queries = c.prefix_cache_queries;
                d.prefix_cache_hits = c.prefix_cache_hits;
            }
            d
        });
        let server = server_stats(w.gauges, deltas.as_ref());
        let window_s = (w.end - w.start).as_secs_f64();
        let signals = CellSignals {
            window_s,
            throttled_s: gpus
                .iter()
                .filter_map(|g| g.throttled.map(|t| t.any_s))
                .reduce(f64::max),
            client_busy_share: w.client.map(|c| c.busy_share()),
            mean_running: mean_of(w.gauges, |g| g.running),
            mean_waiting: mean_of(w.gauges, |g| g.waiting),
            concurrency: w.concurrency,
            preemptions: deltas.and_then(|d| d.preemptions),
            hit_rate: deltas.and_then(|d| d.prefix_cache_hit_rate()),
            intended_hit_rate: intended_hit_rate(w.prompt_tokens, w.block_tokens.unwrap_or(16)),
        };
        let rules = VerdictRules::default();
        let verdicts = verdicts(&signals, &rules)
            .into_iter()
            .map(|k| CellVerdict {
                kind: k.name().to_owned(),
                why: why(k, &signals, &rules, &gpus),
            })
            .collect();
        let mut missing = Vec::new();
        if gpus.is_empty() {
            missing.push(match &recorded.unavailable {
                Some(why) => format!("GPU: {why}"),
                None if self.sampler.is_none() => "GPU: --telemetry off".to_owned(),
                None => "GPU: no sample in the window".to_owned(),
            });
        }
        if host.is_none() {
            missing.push(match &recorded.host_unavailable {
                Some(why) => format!("host: {why}"),
                None => "host: no reading around the window".to_owned(),
            });
        }
        if deltas.is_none() {
            missing.push("server: no /metrics counters at the window's edges".to_owned());
        }
        let series = series(w, &recorded);
        CellTelemetry {
            series,
            joules_per_output_token: energy_j
                .filter(|_| w.output_tokens.get() > 0)
                .map(|e| e / w.output_tokens.get() as f64),
            energy_j,
            gpus,
            host,
            server,
            verdicts,
            missing,
        }
    }

    /// Stops sampling: the run's setup for the report and every raw sample.
    pub(crate) fn finish(self) -> (TelemetrySetup, Option<Recorded>) {
        let recorded = self.sampler.map(Sampler::finish);
        let setup = TelemetrySetup {
            gpu_source: recorded
                .as_ref()
                .and_then(|r| r.source)
                .map(|s| s.name().to_owned()),
            gpu_unavailable: match &recorded {
                Some(r) => r.unavailable.clone(),
                None => Some("--telemetry off".into()),
            },
            interval_ms: self.config.interval.as_millis() as u64,
            metrics_interval_ms: self.config.metrics_interval.as_millis() as u64,
            gpus: recorded
                .as_ref()
                .map(|r| {
                    r.gpus
                        .iter()
                        .map(|g| GpuDetail {
                            index: g.index,
                            name: g.name.clone(),
                            memory_bytes: g.memory_total,
                            driver_version: g.driver_version.clone(),
                            runtime_version: g.runtime_version.clone(),
                            power_limit_w: g.power_limit_w,
                            pcie_generation: g.pcie_generation,
                            pcie_width: g.pcie_width,
                        })
                        .collect()
                })
                .unwrap_or_default(),
            samples_file: None,
            verdict_rules: thresholds(&VerdictRules::default()),
        };
        (setup, recorded)
    }
}

fn gpu_use(g: speedmatrix_telemetry::GpuWindow) -> GpuUse {
    GpuUse {
        index: g.index,
        samples: g.samples,
        utilization_mean_pct: g.utilization_mean_pct,
        utilization_max_pct: g.utilization_max_pct,
        power_mean_w: g.power_mean_w,
        power_max_w: g.power_max_w,
        energy_j: g.energy_j,
        energy_source: g.energy_source.map(|s| {
            match s {
                EnergySource::Counter => "counter",
                EnergySource::IntegratedPower => "integrated_power",
            }
            .to_owned()
        }),
        memory_peak_bytes: g.memory_peak,
        sm_clock_min_mhz: g.sm_clock_min_mhz,
        throttled: g.throttled.map(|t| ThrottledSeconds {
            power_cap_s: t.power_cap_s,
            thermal_s: t.thermal_s,
            hw_slowdown_s: t.hw_slowdown_s,
            any_s: t.any_s,
        }),
    }
}

/// The window's time series: our rate per part, and the server's gauges
/// and the GPUs' readings put on the same parts.
fn series(w: &CellWindow<'_>, recorded: &Recorded) -> Option<CellSeries> {
    let parts = w.output_rate_series.len();
    if parts == 0 {
        return None;
    }
    let length_s = (w.end - w.start).as_secs_f64();
    let offset = |at: Instant| {
        if at >= w.start {
            (at - w.start).as_secs_f64()
        } else {
            -(w.start - at).as_secs_f64()
        }
    };
    let levels = |points: Vec<(f64, f64)>| {
        if points.is_empty() {
            Vec::new()
        } else {
            binned_levels(&points, length_s, parts)
                .into_iter()
                .map(|v| v.map(round2))
                .collect()
        }
    };
    let gauge = |f: &dyn Fn(&Gauges) -> Option<f64>| {
        levels(
            w.gauges
                .iter()
                .filter_map(|g| Some((offset(g.at), f(g)?)))
                .collect(),
        )
    };
    let mut indices: Vec<u32> = recorded.gpu_samples.iter().map(|s| s.value.index).collect();
    indices.sort_unstable();
    indices.dedup();
    let per_gpu = |f: &dyn Fn(&speedmatrix_telemetry::GpuSample) -> Option<f64>| {
        indices
            .iter()
            .map(|&i| {
                let points: Vec<(f64, f64)> = recorded
                    .gpu_samples
                    .iter()
                    .filter(|s| s.value.index == i)
                    .filter_map(|s| Some((offset(s.at), f(&s.value)?)))
                    .collect();
                binned_levels(&points, length_s, parts)
            })
            .collect::<Vec<_>>()
    };
    let across = |gpus: Vec<Vec<Option<f64>>>, mean: bool| -> Vec<Option<f64>> {
        if gpus.is_empty() {
            return Vec::new();
        }
        (0..parts)
            .map(|k| {
                let values: Option<Vec<f64>> = gpus.iter().map(|g| g[k]).collect();
                let values = values?;
                let sum: f64 = values.iter().sum();
                Some(round2(if mean { sum / values.len() as f64 } else { sum }))
            })
            .collect()
    };
    Some(CellSeries {
        part_s: length_s / parts as f64,
        output_tokens_per_s: w.output_rate_series.iter().map(|&r| round2(r)).collect(),
        running: gauge(&|g| Some(g.running)),
        waiting: gauge(&|g| Some(g.waiting)),
        kv_usage_pct: gauge(&|g| g.kv_usage.map(|u| u * 100.0)),
        gpu_utilization_pct: across(per_gpu(&|s| s.utilization_pct), true),
        gpu_power_w: across(per_gpu(&|s| s.power_w), false),
    })
}

/// Two decimals: the series are for charts, the summaries keep full precision.
fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// The rules' thresholds in the report's units.
fn thresholds(rules: &VerdictRules) -> VerdictThresholds {
    VerdictThresholds {
        throttled_pct: rules.throttled_share * 100.0,
        client_busy_pct: rules.client_busy_share * 100.0,
        running_pct: rules.running_share * 100.0,
        waiting_mean: rules.waiting_mean,
        cache_gap_points: rules.cache_gap * 100.0,
    }
}

/// The mean of a gauge over the window's scrapes (periodic, so a time average).
fn mean_of(gauges: &[Gauges], f: fn(&Gauges) -> f64) -> Option<f64> {
    (!gauges.is_empty()).then(|| gauges.iter().map(f).sum::<f64>() / gauges.len() as f64)
}

fn server_stats(gauges: &[Gauges], deltas: Option<&CounterDeltas>) -> Option<ServerStats> {
    if gauges.is_empty() && deltas.is_none() {
        return None;
    }
    Some(ServerStats {
        scrapes: gauges.len() as u32,
        kv_usage_max_pct: gauges
            .iter()
            .filter_map(|g| g.kv_usage)
            .reduce(f64::max)
            .map(|u| u * 100.0),
        preemptions: deltas.and_then(|d| d.preemptions),
        prefix_cache_queries: deltas.and_then(|d| d.prefix_cache_queries),
        prefix_cache_hits: deltas.and_then(|d| d.prefix_cache_hits),
        prefix_cache_hit_rate: deltas.and_then(CounterDeltas::prefix_cache_hit_rate),
        spec_drafts: deltas.and_then(|d| d.spec_drafts),
        spec_draft_tokens: deltas.and_then(|d| d.spec_draft_tokens),
        spec_accepted_tokens: deltas.and_then(|d| d.spec_accepted_tokens),
        spec_acceptance_rate: deltas.and_then(CounterDeltas::spec_acceptance_rate),
        spec_mean_accepted_length: deltas.and_then(CounterDeltas::spec_mean_accepted_length),
        counted_at_finish: deltas.is_some_and(|d| d.counted_at_finish),
    })
}

/// The numbers behind a verdict, in words.
fn why(kind: VerdictKind, s: &CellSignals, rules: &VerdictRules, gpus: &[GpuUse]) -> String {
    let pct = |share: f64| share * 100.0;
    match kind {
        VerdictKind::Throttled => {
            let worst = gpus
                .iter()
                .filter_map(|g| Some((g.index, g.throttled?)))
                .max_by(|a, b| a.1.any_s.total_cmp(&b.1.any_s));
            match worst {
                Some((i, t)) => format!(
                    "GPU {i} throttled {:.1} s of {:.1} s (power cap {:.1} s, thermal {:.1} s, \
                     hardware {:.1} s); rule: ≥ {:.0} % of the window",
                    t.any_s,
                    s.window_s,
                    t.power_cap_s,
                    t.thermal_s,
                    t.hw_slowdown_s,
                    pct(rules.throttled_share)
                ),
                None => "a GPU throttled".to_owned(),
            }
        }
        VerdictKind::ClientBound => format!(
            "the client was busy {:.0} % of its runtime threads' time; rule: ≥ {:.0} %",
            pct(s.client_busy_share.unwrap_or(0.0)),
            pct(rules.client_busy_share)
        ),
        VerdictKind::ServerQueued => format!(
            "the server ran {:.1} requests on average of the {} kept in flight, {:.1} waiting; \
             rule: running < {:.0} % of them or waiting ≥ {}",
            s.mean_running.unwrap_or(0.0),
            s.concurrency,
            s.mean_waiting.unwrap_or(0.0),
            pct(rules.running_share),
            rules.waiting_mean
        ),
        VerdictKind::Preempted => format!(
            "{:.0} preemptions during the window; rule: any",
            s.preemptions.unwrap_or(0.0)
        ),
        VerdictKind::CacheCold => format!(
            "prefix-cache hit rate {:.0} % where the prompts should give {:.0} %; \
             rule: {:.0} points below",
            pct(s.hit_rate.unwrap_or(0.0)),
            pct(s.intended_hit_rate.unwrap_or(0.0)),
            pct(rules.cache_gap)
        ),
    }
}
