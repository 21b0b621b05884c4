//! A predicted matrix as a result document: every Valid cell's figures from the cost model,
//! the cells the grid puts over capacity with their reason, and what the prediction assumed.

use std::collections::BTreeMap;
use std::time::Duration;

use speedmatrix_capacity::{CapacityGrid, CellVerdict, FitRule, SpeculativeMethod};
use speedmatrix_predict::{
    CostModel, DecodeEstimate, Drafter, EngineFactors, Graphs, PrefillEstimate, RigCalibration,
};
use speedmatrix_report::{
    Capacity, CellStatus, DecodeCell, DecodeMeasurements, EngineInfo, Hardware, KvCapacity,
    Percentiles, PredictionBand, PredictionInfo, PrefillRow, Report, RunSettings, SCHEMA_VERSION,
    TokenCountSource, Tool,
};
use speedmatrix_units::{Interval, PrefillMode, Tokens};

use crate::predicted::{MeasuredRun, PredictInputs, factor_map};

/// What the document is made from.
pub(crate) struct Sources<'a> {
    pub(crate) inputs: &'a PredictInputs,
    pub(crate) cost: &'a CostModel,
    pub(crate) factors: &'a EngineFactors,
    pub(crate) fell_back: bool,
    pub(crate) grid: &'a CapacityGrid,
    pub(crate) prefill: &'a [PrefillEstimate],
    pub(crate) decode: &'a [(DecodeEstimate, CellVerdict)],
    /// The calibration on a measured run, when there was one.
    pub(crate) calibration: Option<(&'a RigCalibration, &'a MeasuredRun)>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn flat(v: f64) -> Percentiles {
    Percentiles {
        p50: v,
        p90: v,
        p99: v,
    }
}

/// The document.
pub(crate) fn document(s: &Sources<'_>) -> Report {
    let inputs = s.inputs;
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let tp = s.cost.machine.tensor_parallel;
    Report {
        schema_version: SCHEMA_VERSION,
        hardware: Hardware {
            kind: Some("Predicted (no machine ran)".into()),
            gpus: vec![speedmatrix_report::Gpu {
                name: inputs.gpu.name.clone(),
                memory_bytes: Some(inputs.gpu.memory),
                count: tp,
            }],
            ..Hardware::default()
        },
        engine: EngineInfo {
            name: inputs.engine.name().to_owned(),
            quantization: Some(inputs.model.quantization.to_string()),
            ..EngineInfo::default()
        },
        run: RunSettings {
            model: inputs.model_name.clone(),
            served_model: inputs.model.architecture.clone(),
            revision: None,
            api: speedmatrix_report::Api::Completions,
            prompt_mode: "predicted".into(),
            tokenizer: None,
            tool: Tool {
                name: "speedmatrix predict".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                commit: None,
                build_profile: None,
            },
            contexts: inputs.contexts.clone(),
            concurrencies: inputs.concurrencies.clone(),
            prefill_contexts: inputs.prefill_contexts.clone(),
            prefill_repeats: 1,
            prefill_mode: PrefillMode::default(),
            window_s: inputs.window.as_secs_f64(),
            max_output_tokens: inputs.max_output,
            decode_cache_warmed: true,
            started_at: now.clone(),
            finished_at: now,
        },
        client: None,
        telemetry: None,
        capacity: Some(Capacity {
            measured: None,
            predicted: Some(KvCapacity {
                kv_cache_tokens: Tokens::new(s.grid.pool_tokens),
                source: format!("speedmatrix capacity's {} prediction", inputs.engine),
            }),
            rule: s.grid.cells.iter().find(|c| !c.fits).map_or_else(
                || "every cell fits".to_owned(),
                |c| c.rule.describe().to_owned(),
            ),
        }),
        prefill: prefill_rows(s),
        load: None,
        decode: decode_cells(s),
        notes: Vec::new(),
        provenance: None,
        prediction: Some(PredictionInfo {
            method: "speedmatrix's cost model (docs/predict.md)".into(),
            factors: factor_map(s.factors),
            fitted_on: s.factors.fitted_on.clone(),
            assumptions: assumptions(s),
        }),
    }
}

fn prefill_rows(s: &Sources<'_>) -> Vec<PrefillRow> {
    let max_len = decode_max_len(s.grid);
    s.prefill
        .iter()
        .map(|p| {
            let too_long = max_len.filter(|m| p.context.get() + 1 > *m);
            PrefillRow {
                context: p.context,
                // Too long for the server is not over capacity: the KV cache is not why.
                status: match too_long {
                    Some(m) => CellStatus::Skipped {
                        reason: format!(
                            "{} + 1 output token is longer than max_model_len ({m} tokens)",
                            p.context
                        ),
                    },
                    None => CellStatus::Valid,
                },
                prompt_tokens_per_s: too_long.is_none().then_some(p.prompt_tokens_per_s),
                ttft_ms: too_long.is_none().then(|| ms(p.ttft)),
                prompt_tokens_requested: p.context,
                prompt_tokens_reported: None,
                repeats: 1,
                prompt_tokens_per_s_band: too_long
                    .is_none()
                    .then(|| band(s.factors.bands.prefill, p.prompt_tokens_per_s))
                    .flatten(),
            }
        })
        .collect()
}

/// The 80 % band around a predicted figure, when the factors carry one for its phase.
fn band(band: Option<speedmatrix_predict::Band>, predicted: f64) -> Option<Interval> {
    let (low, high) = band?.around(predicted);
    Interval::new(low, high)
}

/// Why a predicted cell does not run: too long for `max_model_len`, or over the KV cache.
fn not_runnable(v: &CellVerdict) -> CellStatus {
    if v.rule == FitRule::MaxModelLen {
        return CellStatus::Skipped {
            reason: format!(
                "a request of {} tokens is longer than max_model_len ({} tokens)",
                v.request_tokens, v.limit
            ),
        };
    }
    CellStatus::OverCapacity {
        reason: format!(
            "{} × {} needs {} {} > {}",
            v.concurrency,
            v.request_tokens,
            v.needed,
            v.rule.unit(),
            v.limit
        ),
    }
}

fn decode_cells(s: &Sources<'_>) -> Vec<DecodeCell> {
    let window = s.inputs.window.as_secs_f64();
    s.decode
        .iter()
        .map(|(e, v)| DecodeCell {
            context: e.context,
            concurrency: e.concurrency,
            status: if v.fits {
                CellStatus::Valid
            } else {
                not_runnable(v)
            },
            measurements: v.fits.then(|| DecodeMeasurements {
                total_tokens_per_s: e.total_tokens_per_s,
                per_request_tokens_per_s: e.per_request_tokens_per_s,
                ttft_ms: flat(ms(e.ttft)),
                time_between_tokens_ms: flat(ms(e.time_between_tokens)),
                average_active_requests: f64::from(e.concurrency.get()),
                completed_requests: 0,
                output_tokens: Tokens::new((e.total_tokens_per_s * window).round() as u64),
                measured_s: window,
                queueing_detected: false,
                prompt_token_mismatches: 0,
                token_count_source: TokenCountSource::UsagePerChunk,
                token_count: None,
                finish_reasons: BTreeMap::new(),
                server_counter: None,
                client: None,
                telemetry: None,
                interference: None,
                intervals: None,
                repeats: None,
                band: decode_band(s, e),
            }),
        })
        .collect()
}

/// A decode cell's 80 % bands: its total and per-request tok/s move together.
fn decode_band(s: &Sources<'_>, e: &DecodeEstimate) -> Option<PredictionBand> {
    let b = s.factors.bands.decode;
    Some(PredictionBand {
        level: BAND_LEVEL,
        total_tokens_per_s: band(b, e.total_tokens_per_s)?,
        per_request_tokens_per_s: band(b, e.per_request_tokens_per_s)?,
    })
}

/// The probability a predicted band holds the measurement.
const BAND_LEVEL: f64 = 0.8;

/// How speculative decoding was priced, or that it was not.
fn speculation_line(s: &Sources<'_>) -> Option<String> {
    let drafted = s.inputs.vllm_flags.num_speculative_tokens;
    let Some(x) = s.cost.speculation else {
        return (drafted > 0).then(|| {
            format!(
                "Speculative decoding ({drafted} tokens drafted a step) is not priced: each \
                 decode step is one token a stream. Give --acceptance-rate (vLLM's \
                 \"Avg Draft acceptance rate\") to price it."
            )
        });
    };
    let drafter = match x.drafter {
        Drafter::None => "no drafter on the GPU (n-gram lookup)".to_owned(),
        Drafter::TargetLayers { layers }
            if s.inputs.vllm_flags.draft_model.is_none()
                && !matches!(
                    s.inputs.vllm_flags.speculative_method,
                    Some(SpeculativeMethod::Mtp) | None
                ) =>
        {
            format!(
                "the drafter's config was not given (--draft-config): each pass priced as \
                 {layers} layer shaped like the model's and its LM head"
            )
        }
        Drafter::TargetLayers { layers } => {
            format!("the model's own {layers} MTP layer(s) and its LM head a pass")
        }
        Drafter::Model { bytes, layers, .. } => format!(
            "the drafter's own {layers} layer(s), {:.2} GB a pass per rank",
            bytes / 1e9
        ),
    };
    Some(format!(
        "Speculative decoding: {} tokens drafted a step by {drafter}; the model verifies them \
         in one pass of {} tokens a stream; {:.0} % accepted gives {:.2} tokens a step a stream \
         (vLLM's mean acceptance length). The drafter's own KV reads are not priced.",
        x.tokens,
        x.tokens + 1,
        x.acceptance_rate * 100.0,
        x.tokens_per_step()
    ))
}

fn assumptions(s: &Sources<'_>) -> Vec<String> {
    let (cost, gpu, engine) = (s.cost, &s.inputs.gpu, s.inputs.engine);
    let m = &cost.machine;
    let mut assumptions = vec![
        format!(
            "GPU: {} × {}: {:.0} GB/s peak bandwidth, {:.0} TFLOPS dense {} ({}).",
            gpu.name,
            m.tensor_parallel,
            m.bandwidth_bytes_s / 1e9,
            m.peak_flops / 1e12,
            m.compute_dtype,
            gpu.spec_source
        ),
        format!(
            "Per rank: {:.2} GB of weights every step reads, {} routed experts of {:.1} MB, \
             {:.1} KB of KV per context token, {:.1} MB of recurrent state per sequence; \
             prefill in chunks of {} tokens.",
            cost.shape.params.dense_bytes / 1e9,
            cost.shape.params.num_experts,
            cost.shape.params.expert_bytes / 1e6,
            cost.shape.kv_bytes(1) / 1e3,
            cost.shape.state_bytes_per_sequence / 1e6,
            cost.chunk
        ),
        "Decode cells: each step's time integrated over the window as the context grows; \
         their TTFT is a warm-cache estimate (the last partial block prefilled plus one step)."
            .to_owned(),
        format!(
            "The grid: speedmatrix capacity's prediction for {engine} ({} tokens of KV cache).",
            s.grid.pool_tokens
        ),
        format!(
            "Not modelled: {}CPU offload, pipeline parallelism, queueing past max_num_seqs.",
            if cost.speculation.is_some() {
                ""
            } else {
                "speculative decoding, "
            }
        ),
    ];
    assumptions.extend(speculation_line(s));
    if cost.attention == speedmatrix_predict::AttentionKernel::Materialized {
        assumptions.push(format!(
            "Attention without flash kernels (--flash-attn off): every score of a chunk over \
             its whole KV span goes through memory, {} bytes each (product, softmax, f16 \
             copy), after the products.",
            speedmatrix_predict::SCORE_BYTES
        ));
    }
    assumptions.extend(kernel_lines(cost));
    let bands = &s.factors.bands;
    let calibrated = s.calibration.map(|(c, _)| c.bands).unwrap_or_default();
    if let Some((cal, run)) = s.calibration {
        assumptions.push(calibration_line(cal, run));
    }
    for (phase, b, own) in [
        ("decode", bands.decode, calibrated.decode.is_some()),
        ("prefill", bands.prefill, calibrated.prefill.is_some()),
    ] {
        if own && let Some(b) = b {
            let (low, high) = b.around(1.0);
            assumptions.push(format!(
                "Bands ({phase}): the range of the held-out errors when each of the {} measured \
                 {phase} figures was left out of the calibration in turn: {:.0} % to {:+.0} % \
                 (never narrower than ±3 %; each figure inside the others' range {:.0} % of the \
                 time). Too few for percentiles: read it as a plausible range, not an 80 % one.",
                b.figures,
                (low - 1.0) * 100.0,
                (high - 1.0) * 100.0,
                b.coverage * 100.0
            ));
            continue;
        }
        if let Some(b) = b {
            let (low, high) = b.around(1.0);
            assumptions.push(format!(
                "Bands ({phase}): 80 % of held-out measurements fell within {:.0} % to {:+.0} % of \
                 the prediction (leave-one-rig-out over {} public {} rigs, {} figures; each rig \
                 inside the others' band {:.0} % of the time).",
                (low - 1.0) * 100.0,
                (high - 1.0) * 100.0,
                b.rigs,
                s.factors.engine,
                b.figures,
                b.coverage * 100.0
            ));
        }
    }
    if s.fell_back {
        assumptions.push(format!(
            "{engine} has no fitted factors of its own: vLLM's are used."
        ));
    }
    assumptions
}

/// The terms fitted on one engine's kernels that bind on this GPU, with how far the data
/// behind them reaches.
fn kernel_lines(cost: &speedmatrix_predict::CostModel) -> Vec<String> {
    let f = &cost.factors;
    let mut lines = Vec::new();
    if let Some((capped, uncapped)) = cost.multiprocessor_cap()
        && capped < 0.95 * uncapped
    {
        lines.push(format!(
            "Bandwidth: {:.0} GB/s achieved, not {:.0}: mat-vec kernels keep at most {:.1} GB/s \
             in flight per multiprocessor (fitted on 2024-era llama.cpp builds on A100 and H100 \
             PCIe; newer builds reach more, and no H100 SXM, H200 or B200 rig checks it).",
            capped / 1e9,
            uncapped / 1e9,
            f.multiprocessor_bandwidth_gb_s
        ));
    }
    if cost.machine.hopper && f.hopper_mma_ratio < 1.0 {
        lines.push(format!(
            "Hopper: mma.sync kernels (quantized products, flash attention) at {:.2} of the \
             throughput they reach elsewhere (wgmma is needed for Hopper's peak).",
            f.hopper_mma_ratio
        ));
    }
    if let Some(scale) = cost.power_scale()
        && scale < 0.95
        && let Some(watts) = cost.machine.board_power_w
    {
        let peak = cost.machine.half_flops / 1e12;
        lines.push(format!(
            "Power: matrix products at {scale:.2} of the peak tensor throughput, about {:.0} of \
             its {peak:.0} dense FP16 TFLOPS under its {watts:.0} W board limit ({:.2} TFLOPS a \
             watt, fitted on llama.cpp's rigs, mostly Ampere and Ada parts: clocks under a long \
             GEMM; least certain on Hopper and Blackwell, not a measurement of this card).",
            scale * peak,
            f.power_tflops_per_watt
        ));
    }
    if f.decode_overlap < 1.0 {
        lines.push(format!(
            "Decode: {:.0} % of the shorter of a step's read and product times adds to the \
             longer (small-batch kernels that do not hide their arithmetic under the weight \
             reads): batched cells slow with each stream.",
            (1.0 - f.decode_overlap) * 100.0
        ));
    }
    if cost.shape.moe_layers > 0 {
        let mut parts = Vec::new();
        if cost.routing_us() > 0.0 {
            parts.push(format!(
                "routing adds {:.0} µs a step to each of the {} MoE layers",
                cost.routing_us(),
                cost.shape.moe_layers
            ));
        }
        if f.expert_bandwidth_ratio != 1.0 {
            parts.push(format!(
                "routed experts' weights are read at {:.2} of the dense weights' bandwidth \
                 (fused-MoE kernels over many small matrices)",
                f.expert_bandwidth_ratio
            ));
        }
        if f.routing_independence < 1.0 {
            parts.push(format!(
                "a batch of b tokens reads as many distinct experts as b^{:.2} uniformly routed \
                 tokens would (routing is skewed: popular experts are shared)",
                f.routing_independence
            ));
        }
        if !parts.is_empty() {
            lines.push(format!(
                "Experts: {} (fitted across this engine's MoE rigs, not per model).",
                parts.join("; ")
            ));
        }
    }
    if cost.shape.mla_layers > 0 && cost.mla_us() > 0.0 {
        lines.push(format!(
            "Latent attention (MLA): each of the {} MLA layers adds {:.0} µs a step for its \
             extra small kernels (query down and up projections, the latent's projection and \
             norms, the two absorption products; fitted across this engine's MLA rigs).",
            cost.shape.mla_layers,
            cost.mla_us()
        ));
    }
    if cost.fp8_ratio() != 1.0 || cost.fp8_layer_us() > 0.0 {
        lines.push(format!(
            "FP8 on AMD: the FP8 checkpoint's weights read and multiplied at {:.2} of what \
             16-bit weights reach on this part, and {:.0} µs more a layer a step (its FP8 is the \
             FNUZ variant: converted at load, block-FP8 kernels; fitted on few MI300X rigs).",
            cost.fp8_ratio(),
            cost.fp8_layer_us()
        ));
    }
    let eager = f.eager_layer_overhead_us;
    match cost.graphs {
        Graphs::SingleToken if eager > 0.0 => lines.push(format!(
            "CUDA graphs: one-stream decode steps replay one; batched steps and prefill ubatches \
             launch each kernel (llama.cpp turns graphs off above one token), {eager:.0} µs more \
             a layer a step over {} layers.",
            cost.shape.layers
        )),
        Graphs::Never => lines.push(format!(
            "--enforce-eager: every step launches each kernel without a CUDA graph, {eager:.0} µs \
             more a layer a step over {} layers (the family's factor; docs/predict.md says what \
             it rests on).",
            cost.shape.layers
        )),
        _ => {}
    }
    if cost.quantized_products && f.quantized_compute_ratio != 1.0 {
        lines.push(format!(
            "Quantized products (GGUF block types) at {:.2} of F16 weights' GEMM throughput.",
            f.quantized_compute_ratio
        ));
    }
    lines
}

/// What the calibration did: the factors moved and how well the run's own figures came out.
fn calibration_line(cal: &RigCalibration, run: &MeasuredRun) -> String {
    let worst = |rs: &[speedmatrix_predict::Residual]| {
        rs.iter().map(|r| r.error().abs()).fold(0.0f64, f64::max) * 100.0
    };
    format!(
        "Calibrated on {} measured figures of {}: the family's factors are the prior, the \
         run's cells pull them to this rig (a maximum a posteriori fit, docs/predict.md). The \
         run's own figures come out within ±{:.1} %; each predicted with it left out, within \
         ±{:.1} %.",
        cal.fitted.len(),
        run.name,
        worst(&cal.fitted),
        worst(&cal.held_out)
    )
}

/// The longest request the server takes, when the grid knows it.
fn decode_max_len(grid: &CapacityGrid) -> Option<u64> {
    grid.cells
        .iter()
        .find(|c| c.rule == FitRule::MaxModelLen && !c.fits)
        .map(|c| c.limit)
}
