//! Turning a run into words and the result document: the plan as text,
//! one-line step summaries, and the report assembled from the measured steps.

use std::time::{Duration, SystemTime};

use speedmatrix_capacity::KvPool;
use speedmatrix_report::{
    Capacity, CellStatus, DecodeCell, Engine, KvCapacity, PrefillRow, Report, RunSettings,
    SCHEMA_VERSION, Tool,
};
use speedmatrix_units::Tokens;

use crate::convert;
use crate::plan::{CapacityPlan, CapacitySourceKind, Exclusion, Plan, PlannedCell};
use crate::server::Server;
use crate::{MatrixSpec, RunConfig, Target};

/// The plan as text: capacity source, every step with its verdict, and the
/// estimated duration.
pub fn describe_plan(plan: &Plan, matrix: &MatrixSpec) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "{}", describe_capacity(&plan.capacity));
    match matrix.prefill_mode {
        crate::PrefillMode::Cold => {
            let _ = writeln!(
                out,
                "\nPrefill (cold, max_tokens 1, {} repeat(s)):",
                matrix.prefill_repeats
            );
        }
        crate::PrefillMode::Warmup => {
            let _ = writeln!(
                out,
                "\nPrefill (the first, cold warm-up request of each context's first decode cell; \
                 cold requests for contexts without a decode row):"
            );
        }
    }
    for (c, ex) in &plan.prefill {
        let verdict = ex.as_ref().map_or("run".to_owned(), exclusion_text);
        let _ = writeln!(out, "  {:>6}  {verdict}", c.to_string());
    }
    let _ = writeln!(
        out,
        "\nSustained decode ({} s window, max_tokens {}):",
        matrix.duration.as_secs_f64(),
        matrix.max_tokens
    );
    for cell in &plan.cells {
        let verdict = match &cell.excluded {
            None => "run".to_owned(),
            Some(Exclusion::OverCapacity(r)) => format!("Over capacity: {r}"),
            Some(Exclusion::TooLong(r)) => format!("Skipped: {r}"),
        };
        let _ = writeln!(
            out,
            "  {:>6} × {:<4} {verdict}",
            cell.context.to_string(),
            cell.concurrency.to_string()
        );
    }
    let runs = plan.cells.iter().filter(|c| c.excluded.is_none()).count();
    let _ = write!(
        out,
        "\n{runs} decode cells to run; estimated duration {}",
        humantime::format_duration(Duration::from_secs(plan.estimated.as_secs()))
    );
    out
}

/// The endpoint a measured pool of this kind was read from.
pub(crate) fn measured_source(pool: Option<&KvPool>) -> &'static str {
    match pool {
        Some(KvPool::Slots(_)) => "llama.cpp /props (n_ctx, total_slots)",
        Some(KvPool::Tokens(_)) => "SGLang /get_server_info (max_total_num_tokens)",
        _ => "/metrics vllm:cache_config_info (num_gpu_blocks × block_size)",
    }
}

pub(crate) fn describe_capacity(c: &CapacityPlan) -> String {
    let tokens = |t: Option<Tokens>| {
        t.map_or("unknown".into(), |t| {
            speedmatrix_units::group_thousands(t.get())
        })
    };
    match c.source {
        CapacitySourceKind::Measured => format!(
            "KV capacity {} tokens, read from the server's {}{}",
            tokens(c.pool_tokens),
            measured_source(c.pool.as_ref()),
            c.predicted_tokens
                .map(|p| format!("; the offline prediction was {} tokens", tokens(Some(p))))
                .unwrap_or_default()
        ),
        CapacitySourceKind::Predicted => format!(
            "KV capacity {} tokens, predicted offline from the model config, GPU and flags (the server does not report it)",
            tokens(c.pool_tokens)
        ),
        CapacitySourceKind::Given => format!(
            "KV capacity {} tokens, as given with --kv-capacity-tokens",
            tokens(c.pool_tokens)
        ),
        CapacitySourceKind::Unknown => "KV capacity unknown (the server does not report it and no prediction was given): every cell runs, and cells where the server queues requests are marked".into(),
    }
}

pub(crate) fn exclusion_text(ex: &Exclusion) -> String {
    match ex {
        Exclusion::OverCapacity(s) | Exclusion::TooLong(s) => s.clone(),
    }
}

pub(crate) fn excluded_prefill(context: Tokens, ex: &Exclusion) -> PrefillRow {
    let status = match ex {
        Exclusion::OverCapacity(reason) => CellStatus::OverCapacity {
            reason: reason.clone(),
        },
        Exclusion::TooLong(reason) => CellStatus::Skipped {
            reason: reason.clone(),
        },
    };
    PrefillRow {
        context,
        status,
        prompt_tokens_per_s: None,
        ttft_ms: None,
        prompt_tokens_requested: context,
        prompt_tokens_reported: None,
        repeats: 0,
    }
}

pub(crate) fn skipped_prefill(context: Tokens, reason: &str) -> PrefillRow {
    excluded_prefill(context, &Exclusion::TooLong(reason.to_owned()))
}

pub(crate) fn excluded_cell(planned: &PlannedCell, ex: &Exclusion) -> DecodeCell {
    let status = match ex {
        Exclusion::OverCapacity(reason) => CellStatus::OverCapacity {
            reason: reason.clone(),
        },
        Exclusion::TooLong(reason) => CellStatus::Skipped {
            reason: reason.clone(),
        },
    };
    DecodeCell {
        context: planned.context,
        concurrency: planned.concurrency,
        status,
        measurements: None,
    }
}

pub(crate) fn skipped_cell(planned: &PlannedCell, reason: &str) -> DecodeCell {
    excluded_cell(planned, &Exclusion::TooLong(reason.to_owned()))
}

pub(crate) fn prefill_summary(row: &PrefillRow) -> String {
    match (row.prompt_tokens_per_s, row.ttft_ms) {
        (Some(rate), Some(ttft)) => format!("{rate:.0} prompt tok/s, TTFT {ttft:.0} ms"),
        _ => format!("{}: {}", row.status.label(), row.status.detail()),
    }
}

pub(crate) fn decode_summary(cell: &DecodeCell) -> String {
    match &cell.measurements {
        Some(m) => {
            let label = cell.status_label();
            let status = if label == "Valid" {
                String::new()
            } else {
                format!(" [{label}]")
            };
            format!(
                "{:.1} tok/s total, {:.1} per request, TTFT {:.0} ms, {:.1} ms between tokens{status}",
                m.total_tokens_per_s,
                m.per_request_tokens_per_s,
                m.ttft_ms.p50,
                m.time_between_tokens_ms.p50
            )
        }
        None => format!("{}: {}", cell.status.label(), cell.status.detail()),
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn build_report(
    config: &RunConfig,
    server: &Server,
    the_plan: &Plan,
    prefill: Vec<PrefillRow>,
    decode: Vec<DecodeCell>,
    notes: Vec<String>,
    started_at: String,
) -> Report {
    let embedded = matches!(config.target, Target::Embedded(_));
    let engine_name = config.labels.engine.clone().unwrap_or_else(|| {
        let engine = server.info.engine();
        if embedded {
            "speedmatrix-sim".into()
        } else if engine != speedmatrix_engines::Engine::Unknown {
            engine.name().into()
        } else if server.has_gauges() {
            "vllm".into()
        } else {
            "unknown".into()
        }
    });
    let c = &the_plan.capacity;
    let capacity = Capacity {
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
                source: match c.source {
                    CapacitySourceKind::Given => "given with --kv-capacity-tokens".into(),
                    _ => "predicted offline from config.json, GPU and flags".into(),
                },
            }),
        rule: capacity_rule(c),
    };
    let m = &config.matrix;
    Report {
        schema_version: SCHEMA_VERSION,
        hardware: config.labels.hardware.clone(),
        engine: Engine {
            name: engine_name,
            version: server.info.version().map(str::to_owned),
            quantization: config.labels.quantization.clone(),
            launch_command: config.labels.launch_command.clone(),
            ..Engine::default()
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
            tool: Tool {
                name: "speedmatrix".into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            contexts: m.contexts.clone(),
            concurrencies: m.concurrencies.clone(),
            prefill_contexts: m.prefill_contexts.clone(),
            prefill_repeats: m.prefill_repeats,
            prefill_mode: convert::prefill_mode(m.prefill_mode),
            window_duration_s: m.duration.as_secs_f64(),
            max_output_tokens: m.max_tokens,
            decode_cache_warmed: true,
            started_at,
            finished_at: now_rfc3339(),
        },
        capacity: (c.source != CapacitySourceKind::Unknown).then_some(capacity),
        prefill,
        decode,
        notes,
    }
}

pub(crate) fn capacity_rule(c: &CapacityPlan) -> String {
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

pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}
