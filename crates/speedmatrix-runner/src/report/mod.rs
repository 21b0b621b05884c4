//! Every result document is built here: a run's, once, from its typed outcomes (this file);
//! a prediction's (`predicted.rs`); and the what-if marking of a run on a fitted or predicted
//! simulator profile (`what_if.rs`). `calibrate.rs` goes the other way, from a measured
//! document to a simulator profile.

pub(crate) mod predicted;
#[cfg(feature = "embedded")]
pub(crate) mod what_if;

use std::time::{Duration, SystemTime};

use crate::RunConfig;
use crate::config::{LoadMode, RateLength};
use crate::outcome::{
    CellOutcome, Latency, LoadOutcome, LoadPoint, Notice, PrefillOutcome, StepStatus, WindowResult,
};
use crate::plan::{CapacityPlan, CapacitySourceKind, Plan};
use crate::server::Server;
use crate::steps::Measured;
use speedmatrix_capacity::KvPool;
use speedmatrix_metrics::{EstimateMethod, TokenSource};
use speedmatrix_report::{
    ArrivalSetup, Capacity, CellStatus, DecodeCell, DecodeMeasurements, EngineInfo, KneeResult,
    KneeStep, KvCapacity, LoadCell, LoadMeasurements, LoadRun, Percentiles, PrefillRow, Report,
    RunSettings, SCHEMA_VERSION, ServerCounter, SloResult, SloTermResult, TokenCount,
    TokenCountSource, Tool,
};
use speedmatrix_workload::ArrivalProcess;

/// Builds the document from the run's outcomes; `notes` are the notices in
/// neutral words (the binary puts in its own).
pub(crate) fn build_report(
    config: &RunConfig,
    server: &Server,
    the_plan: &Plan,
    measured: &Measured,
    notices: &[Notice],
    started_at: String,
) -> Report {
    let (prefill, decode, load) = (&measured.prefill, &measured.decode, &measured.load);
    let m = &config.matrix;
    Report {
        schema_version: SCHEMA_VERSION,
        hardware: config.labels.hardware.clone(),
        engine: EngineInfo {
            name: engine_name(config, server),
            version: server.info.version().map(str::to_owned),
            quantization: config.labels.quantization.clone(),
            launch_command: config.labels.launch_command.clone(),
            ..EngineInfo::default()
        },
        run: RunSettings {
            model: config
                .labels
                .model
                .clone()
                .unwrap_or_else(|| server.model.clone()),
            served_model: server.model.clone(),
            revision: config.labels.revision.clone(),
            api: config.api,
            prompt_mode: config.prompt_sharing.as_str().to_owned(),
            tokenizer: config
                .labels
                .tokenizer
                .clone()
                .or_else(|| Some(config.tokenizer.name().to_owned())),
            tool: config.labels.tool.clone().unwrap_or_else(runner_tool),
            contexts: m.contexts.clone(),
            // A burst or rate run has no sustained-decode columns.
            concurrencies: match m.load {
                LoadMode::Sustained => m.concurrencies.clone(),
                _ => Vec::new(),
            },
            prefill_contexts: m.prefill_contexts.clone(),
            prefill_repeats: m.prefill_repeats,
            prefill_mode: m.prefill_mode,
            window_s: m.window.as_secs_f64(),
            max_output_tokens: m.max_output,
            decode_cache_warmed: true,
            started_at,
            finished_at: now_rfc3339(),
        },
        client: config.labels.client.clone(),
        telemetry: None,
        capacity: capacity(&the_plan.capacity),
        prefill: prefill.iter().map(prefill_row).collect(),
        load: load_run(m, load, &measured.knees, config.workload.as_ref()),
        decode: decode.iter().map(decode_cell).collect(),
        notes: notices.iter().map(Notice::describe).collect(),
        provenance: config.labels.provenance.clone(),
        prediction: None,
    }
}

/// The runner itself, for embedders that name no tool of their own.
fn runner_tool() -> Tool {
    Tool {
        name: "speedmatrix".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        commit: None,
        build_profile: None,
    }
}

/// The document's load section, in burst and rate runs.
fn load_run(
    m: &crate::MatrixSpec,
    cells: &[LoadOutcome],
    knees: &[crate::outcome::KneePath],
    workload: Option<&crate::Workload>,
) -> Option<LoadRun> {
    let (arrival, max_in_flight) = match &m.load {
        LoadMode::Sustained => return None,
        LoadMode::Burst(b) => (None, b.max_concurrency),
        LoadMode::Conversation(_) => (None, None),
        LoadMode::Rate(r) => (
            Some(ArrivalSetup {
                process: match r.arrival {
                    ArrivalProcess::Poisson => "poisson",
                    ArrivalProcess::Constant => "constant",
                    ArrivalProcess::Gamma { .. } => "gamma",
                }
                .into(),
                burstiness: match r.arrival {
                    ArrivalProcess::Gamma { burstiness } => Some(burstiness),
                    _ => None,
                },
                seed: r.seed,
                duration_s: match r.length {
                    RateLength::Duration(d) => Some(d.as_secs_f64()),
                    RateLength::Requests(_) => None,
                },
                requests: match r.length {
                    RateLength::Requests(n) => Some(n),
                    RateLength::Duration(_) => None,
                },
            }),
            r.max_in_flight,
        ),
    };
    Some(LoadRun {
        mode: m.load.kind(),
        arrival,
        max_in_flight: max_in_flight.map(|n| n.get()),
        slo: m.slo.as_ref().map(ToString::to_string),
        workload: workload.map(|w| w.record.clone()),
        cells: cells.iter().map(load_cell).collect(),
        searches: knees.iter().map(knee_result).collect(),
    })
}

fn load_value(p: LoadPoint) -> f64 {
    match p {
        LoadPoint::Burst { requests } => f64::from(requests.get()),
        LoadPoint::Rate { rate } => rate.get(),
        LoadPoint::Conversations { count } => f64::from(count.get()),
    }
}

fn knee_result(k: &crate::outcome::KneePath) -> KneeResult {
    let floor = match k.goal {
        crate::SearchGoal::MostLoadMeetingSlo => None,
        crate::SearchGoal::PerRequestAtFloor { floor } => Some(floor.get()),
    };
    KneeResult {
        context: k.context,
        goal: Some(
            if floor.is_some() {
                "per_request_at_floor"
            } else {
                "most_load_meeting_slo"
            }
            .to_owned(),
        ),
        floor_tokens_per_s: floor,
        path: k
            .path
            .iter()
            .map(|t| KneeStep {
                load: load_value(t.point),
                met: t.met,
                total_tokens_per_s: t.total_tokens_per_s,
                per_request_tokens_per_s: t.per_request_tokens_per_s,
            })
            .collect(),
        knee: k.knee.map(load_value),
        end: k.end.map(|e| {
            match (e, floor.is_some()) {
                (crate::SearchEnd::Converged, _) => "converged",
                (crate::SearchEnd::MaxMet, false) => "max_met",
                (crate::SearchEnd::MaxMet, true) => "floor_not_reached",
                // A floor reached at the lowest load: that load is the answer.
                (crate::SearchEnd::NothingMet, true) => "converged",
                (crate::SearchEnd::NothingMet, false) => "nothing_met",
                (crate::SearchEnd::StepLimit, _) => "step_limit",
            }
            .to_owned()
        }),
    }
}

/// A burst or rate outcome as the report document shows it.
pub fn load_cell(c: &LoadOutcome) -> LoadCell {
    let (requests, rate_per_s) = match c.point {
        LoadPoint::Burst { requests } => (Some(u64::from(requests.get())), None),
        LoadPoint::Rate { rate } => (None, Some(rate.get())),
        LoadPoint::Conversations { count } => (Some(u64::from(count.get())), None),
    };
    LoadCell {
        context: c.context,
        requests,
        rate_per_s,
        status: status(&c.status),
        measurements: c.result.as_ref().map(|r| LoadMeasurements {
            sent: r.sent,
            completed: r.completed,
            failed: r.failed,
            unfinished: r.unfinished,
            duration_s: r.span.as_secs_f64(),
            intended_rate_per_s: r.intended_rate_per_s,
            achieved_rate_per_s: r.achieved_rate_per_s,
            max_in_flight: r.max_in_flight,
            output_tokens: r.output_tokens,
            output_tokens_per_s: r.output_tokens_per_s,
            ttft_ms: r.ttft.map(percentiles),
            e2e_ms: r.e2e.map(percentiles),
            itl_ms: r.itl.map(percentiles),
            tpot_ms: r.tpot.map(percentiles),
            send_lag_ms: r.send_lag.map(percentiles),
            token_count_source: r.token_source.map(source),
            shared_prefix_tokens: r
                .prefix_cache
                .map(|p| p.shared_tokens)
                .filter(|t| t.get() > 0),
            turns: r
                .turns
                .iter()
                .map(|t| speedmatrix_report::TurnStats {
                    turn: t.turn,
                    completed: t.completed,
                    ttft_ms: t.ttft.map(percentiles),
                    prompt_tokens_mean: t.prompt_tokens_mean,
                })
                .collect(),
            prefix_cache_intended_pct: r
                .prefix_cache
                .and_then(|p| p.intended_hit_rate)
                .map(|h| h * 100.0),
            prefix_cache_measured_pct: r
                .prefix_cache
                .and_then(|p| p.measured_hit_rate)
                .map(|h| h * 100.0),
            repeats: r.repeats.clone(),
            ttfc_ms: r.ttfc.map(percentiles),
            output_tokens_per_request: r.output_lengths.clone(),
            input_tokens_per_request: r.input_lengths.clone(),
            reasoning_tokens_per_request: r.reasoning_lengths.clone(),
            reasoning_tokens_per_s: r.reasoning_rates,
            answer_tokens_per_s: r.answer_rates,
            slo: r.slo.as_ref().map(|v| SloResult {
                met: v.met,
                attainment_pct: if v.requests > 0 {
                    v.good_requests as f64 / v.requests as f64 * 100.0
                } else {
                    0.0
                },
                goodput_per_s: v.goodput_per_s,
                terms: v
                    .terms
                    .iter()
                    .map(|t| SloTermResult {
                        term: t.term.clone(),
                        limit_ms: ms(t.limit),
                        value_ms: t.value.map(ms),
                        met: t.met,
                    })
                    .collect(),
            }),
        }),
    }
}

fn engine_name(config: &RunConfig, server: &Server) -> String {
    if let Some(name) = &config.labels.engine {
        return name.clone();
    }
    let engine = server.info.engine();
    if config.target.is_embedded() {
        "speedmatrix-sim".into()
    } else if engine != speedmatrix_engines::Engine::Unknown {
        engine.name().into()
    } else if server.has_gauges() {
        "vllm".into()
    } else {
        "unknown".into()
    }
}

fn capacity(c: &CapacityPlan) -> Option<Capacity> {
    if c.source == CapacitySourceKind::Unknown {
        return None;
    }
    Some(Capacity {
        measured: c.measured_tokens.map(|t| KvCapacity {
            kv_cache_tokens: t,
            source: format!("server {}", measured_source(c.pool.as_ref())),
        }),
        predicted: c
            .predicted_tokens
            .or(if c.source == CapacitySourceKind::Given {
                c.pool_tokens
            } else {
                None
            })
            .map(|t| KvCapacity {
                kv_cache_tokens: t,
                source: match (&c.source, &c.predicted_for) {
                    (CapacitySourceKind::Given, _) => "given by the user".into(),
                    (_, Some(rules)) => {
                        format!("predicted offline from config.json, GPU and flags, by {rules}")
                    }
                    _ => "predicted offline from config.json, GPU and flags".into(),
                },
            }),
        rule: capacity_rule(c),
    })
}

/// The endpoint a measured pool of this kind was read from.
pub fn measured_source(pool: Option<&KvPool>) -> &'static str {
    match pool {
        Some(KvPool::Slots(_)) => "llama.cpp /props (n_ctx, total_slots)",
        Some(KvPool::Tokens(_)) => "SGLang /get_server_info (max_total_num_tokens)",
        _ => "/metrics vllm:cache_config_info (num_gpu_blocks × block_size)",
    }
}

/// The rule that marks cells over capacity, in words.
pub fn capacity_rule(c: &CapacityPlan) -> String {
    match &c.pool {
        Some(KvPool::Blocks(_)) => {
            "vLLM block rule: N × blocks(context + max output) ≤ num_gpu_blocks − 1".into()
        }
        Some(KvPool::Tokens(_)) => {
            "token rule: N × (context + max output) ≤ KV cache tokens".into()
        }
        Some(KvPool::Slots(_)) => {
            "llama.cpp slot rule: N ≤ n_parallel and context + max output fits a slot".into()
        }
        Some(_) => "the engine's KV-cache rule".into(),
        None => "unknown".into(),
    }
}

/// The report's status of a step.
fn status(s: &StepStatus) -> CellStatus {
    match s {
        StepStatus::Measured => CellStatus::Valid,
        StepStatus::Partial {
            failed,
            good,
            kinds,
            first,
        } => CellStatus::Partial {
            failed_requests: *failed,
            good_requests: *good,
            error_kinds: kinds
                .iter()
                .map(|(k, n)| (k.as_str().to_owned(), *n))
                .collect(),
            message: first.message.clone(),
        },
        StepStatus::Failed {
            failure,
            failed,
            good,
        } => CellStatus::Error {
            error_kind: failure.kind.as_str().to_owned(),
            message: failure.message.clone(),
            failed_requests: (*failed).max(1),
            good_requests: *good,
        },
        StepStatus::Excluded(ex @ crate::outcome::Exclusion::OverCapacity { .. }) => {
            CellStatus::OverCapacity {
                reason: ex.to_string(),
            }
        }
        StepStatus::Excluded(ex) => CellStatus::Skipped {
            reason: ex.to_string(),
        },
        StepStatus::Skipped(why) => CellStatus::Skipped {
            reason: why.to_string(),
        },
    }
}

/// A prefill outcome as the report document shows it.
pub fn prefill_row(p: &PrefillOutcome) -> PrefillRow {
    PrefillRow {
        context: p.context,
        status: status(&p.status),
        prompt_tokens_per_s: p.prompt_tokens_per_s,
        ttft_ms: p.ttft.map(ms),
        prompt_tokens_requested: p.context,
        prompt_tokens_reported: p.prompt_tokens_reported,
        repeats: p.repeats,
        prompt_tokens_per_s_band: None,
    }
}

/// A decode cell's outcome as the report document shows it.
pub fn decode_cell(c: &CellOutcome) -> DecodeCell {
    DecodeCell {
        context: c.context,
        concurrency: c.concurrency,
        status: status(&c.status),
        measurements: c.window.as_ref().map(measurements),
    }
}

fn measurements(w: &WindowResult) -> DecodeMeasurements {
    DecodeMeasurements {
        total_tokens_per_s: w.total_tokens_per_s,
        per_request_tokens_per_s: w.per_request_tokens_per_s,
        ttft_ms: percentiles(w.ttft),
        time_between_tokens_ms: percentiles(w.time_between_tokens),
        average_active_requests: w.average_active_requests,
        completed_requests: w.completed_requests,
        output_tokens: w.output_tokens,
        measured_s: w.measured.as_secs_f64(),
        queueing_detected: w.queueing_detected,
        prompt_token_mismatches: w.prompt_token_mismatches,
        token_count_source: w
            .token_count
            .weakest
            .map_or(TokenCountSource::ChunkCount, source),
        token_count: Some(token_count(w)),
        finish_reasons: w.finish_reasons.clone(),
        server_counter: w.server_counter.map(|c| ServerCounter {
            generation_tokens: c.tokens,
            between_scrapes_s: c.between_scrapes.as_secs_f64(),
        }),
        client: w.client.map(|l| speedmatrix_report::ClientCpu {
            cpu_cores: l.cores(),
            runtime_threads: l.threads,
            client_bound: l.is_client_bound(),
        }),
        telemetry: w.telemetry.clone(),
        intervals: w.intervals,
        repeats: w.repeats.clone(),
        band: None,
        interference: w
            .interference
            .as_ref()
            .map(|i| speedmatrix_report::Interference {
                prompt_tokens: i.prompt_tokens,
                ttft_alone_ms: i.ttft_alone.map(ms),
                ttft_under_load_ms: i.ttft_under_load.map(ms),
                tokens_per_s_before: i.rate_before,
                tokens_per_s_during: i.rate_during,
                tokens_per_s_after: i.rate_after,
                itl_during_ms: i.itl_during.map(percentiles),
                tokens_lost: i.tokens_lost,
                stall_ms: ms(i.stall),
                timeline: i
                    .timeline
                    .iter()
                    .map(|&(t_ms, tokens_per_s)| speedmatrix_report::TimelinePoint {
                        t_ms,
                        tokens_per_s,
                    })
                    .collect(),
                failure: i
                    .failure
                    .as_ref()
                    .map(|f| format!("{}: {}", f.kind.as_str(), f.message)),
            }),
    }
}

fn token_count(w: &WindowResult) -> TokenCount {
    let t = &w.token_count;
    let c = t.calibration.as_ref();
    TokenCount {
        requests_by_source: t
            .requests_by_source
            .iter()
            .map(|(s, n)| (source(*s).as_str().to_owned(), *n))
            .collect(),
        estimated: t.is_estimated(),
        estimated_share_pct: t.estimated_share * 100.0,
        estimate_method: c.map(|c| source(c.method.source())),
        calibration_factor: c.filter(|c| c.requests > 0).map(|c| c.factor),
        calibration_requests: c.map_or(0, |c| c.requests),
        uncertainty_pct: t.relative_uncertainty.map(|u| u * 100.0),
    }
}

fn source(s: TokenSource) -> TokenCountSource {
    match s {
        TokenSource::ContinuousUsage => TokenCountSource::UsagePerChunk,
        TokenSource::EngineCount => TokenCountSource::EngineCount,
        TokenSource::FinalUsage => TokenCountSource::FinalUsage,
        TokenSource::Tokenizer => TokenCountSource::Tokenizer,
        TokenSource::ChunkCount => TokenCountSource::ChunkCount,
    }
}

fn percentiles(l: Latency) -> Percentiles {
    Percentiles {
        p50: ms(l.p50),
        p90: ms(l.p90),
        p99: ms(l.p99),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

impl Notice {
    /// The notice in neutral words: no command-line flags, since an embedder
    /// has none (the binary has its own wording for those).
    pub fn describe(&self) -> String {
        match self {
            Notice::NeverReady { step } => format!(
                "{step}: the server never reported every stream running with none waiting; the window opened anyway and the cell is marked as queueing"
            ),
            Notice::QueueingDuringWindow { step } => format!(
                "{step}: the server reported fewer running requests than streams, or some waiting, during the window"
            ),
            Notice::Retried {
                step,
                times,
                per_request,
            } => format!(
                "{step}: the server turned requests away with HTTP 429/503 {times} times; each was sent again after its Retry-After delay (at most {per_request} times)"
            ),
            Notice::PromptMismatch {
                step,
                requests,
                sent,
            } => format!(
                "{step}: {requests} requests were counted by the server with a prompt length other than the {sent} tokens sent"
            ),
            Notice::DatasetReused { step, records } => format!(
                "{step}: the run needed more requests than the dataset sample's {records} records, so it sent them again from the first; the server may have found those prompts in its prefix cache (give a larger --dataset-sample, or fewer requests)"
            ),
            Notice::ProbeWarning { warning } => format!(
                "The server's probe answered badly: {warning}; the run went on without that answer"
            ),
            Notice::FieldRefused { field, instead } => format!(
                "The server refuses the request field `{field}` (it answered 400/422 naming it): every request was sent without it; {instead}"
            ),
            Notice::IgnoreEosIgnored { step } => format!(
                "{step}: some requests stopped early (finish_reason \"stop\") although ignore_eos was set; the server seems to ignore it (send min_tokens as well)"
            ),
            Notice::ClientBound { step, load } => format!(
                "{step}: the client was busy {:.0} % of the time of its {} runtime thread(s) during the window ({:.2} cores): it may have limited the numbers; give it more threads or cores",
                100.0 * load.busy_share(),
                load.threads,
                load.cores()
            ),
            Notice::StillBusyAfterDrain { step, waited } => format!(
                "{step}: the server still reported running requests {} s after the window closed",
                waited.as_secs()
            ),
            Notice::Estimated {
                step,
                share,
                method,
                calibration_requests,
                finished_requests,
                factor,
                uncertainty,
                sample_widening,
            } => {
                let how = match method {
                    EstimateMethod::Tokenizer => "re-tokenizing each stream's whole text",
                    EstimateMethod::ChunkCount => "counting chunks",
                };
                let calibration = if *calibration_requests > 0
                    && finished_requests > calibration_requests
                {
                    let widening = sample_widening.map_or_else(String::new, |w| {
                        format!(
                            "; the interval is {w:.2}× as wide as all {finished_requests} would give at the same spread"
                        )
                    });
                    format!(
                        "calibrated on a random sample of {calibration_requests} of the {finished_requests} finished requests (× {factor:.3}{widening})"
                    )
                } else if *calibration_requests > 0 {
                    format!(
                        "calibrated on {calibration_requests} finished requests (× {factor:.3})"
                    )
                } else {
                    "uncalibrated: no finished request reported its usage".to_owned()
                };
                let uncertainty = uncertainty
                    .map_or_else(|| "unknown".to_owned(), |u| format!("±{:.1} %", u * 100.0));
                format!(
                    "{step}: the server sent no token count for streams cancelled at the window's end; {:.0} % of the window's tokens were estimated by {how}, {calibration}; uncertainty {uncertainty}",
                    share * 100.0
                )
            }
            Notice::ZeroContextPrompt { tokens } => format!(
                "The context 0 row sends a {tokens}-token prompt (a unique cache marker) so that no two streams share a KV block."
            ),
            Notice::ExtraBody { fields } => format!(
                "Every request carried these extra body fields: {}",
                serde_json::Value::Object(fields.clone())
            ),
            Notice::EngineFields { engine, fields } => format!(
                "Every request to this {engine} server carried {} so that it reports its running output-token count on every chunk.",
                serde_json::Value::Object(fields.clone())
            ),
            Notice::UnexpectedContentType { content_type } => {
                let sent = if content_type.is_empty() {
                    "no Content-Type".to_owned()
                } else {
                    format!("Content-Type `{content_type}`")
                };
                format!(
                    "The server answered streaming requests with {sent} instead of text/event-stream; the bodies were event streams and were read as such."
                )
            }
            Notice::Insecure => "TLS certificate verification was disabled.".to_owned(),
            Notice::Stopped { why } => match why {
                crate::StopReason::Cancelled => {
                    "The run was interrupted before every step ran.".to_owned()
                }
                crate::StopReason::ServerGone(detail) => {
                    format!("The run stopped early: the server stopped answering ({detail}).")
                }
            },
        }
    }
}
