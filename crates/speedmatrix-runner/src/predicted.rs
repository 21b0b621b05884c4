//! The whole matrix predicted before the GPU is rented: the capacity grid by the engine's KV
//! rules, each prefill row and decode cell priced by `speedmatrix-predict`'s cost model, as a
//! result document marked predicted (built in `report/predicted.rs`).

use std::time::Duration;

use speedmatrix_capacity::{
    CapacityGrid, CellVerdict, EngineFlags, Gpu, GridSpec, ModelConfig, Prediction, ServerLimits,
    VllmFlags,
};
use speedmatrix_predict::{
    CostModel, DecodeEstimate, EngineFactors, FactorsFile, PrefillEstimate, WeightBytes,
};
use speedmatrix_report::Report;
use speedmatrix_units::{Concurrency, Engine, Tokens};

use crate::RunnerError;

/// What a prediction is made from.
#[derive(Debug, Clone)]
pub struct PredictInputs {
    /// The model's config.json.
    pub model: ModelConfig,
    /// The model's name in the report.
    pub model_name: String,
    /// The GPU.
    pub gpu: Gpu,
    /// The engine: its KV rules decide the grid, its factors the speed (llama.cpp has its
    /// own; every other engine uses vLLM's).
    pub engine: Engine,
    /// The engine's flags, for the grid.
    pub flags: EngineFlags,
    /// vLLM's reading of the same flags, for the cost model's KV layout.
    pub vllm_flags: VllmFlags,
    /// Decode contexts (rows).
    pub contexts: Vec<Tokens>,
    /// Decode concurrencies (columns).
    pub concurrencies: Vec<Concurrency>,
    /// Cold prefill prompt lengths.
    pub prefill_contexts: Vec<Tokens>,
    /// Output tokens each request may generate.
    pub max_output: Tokens,
    /// The window each decode cell is predicted over.
    pub window: Duration,
    /// The GGUF file type, when the weights are a GGUF (`q4_k_m`, …).
    pub gguf_type: Option<String>,
    /// The efficiency factors.
    pub factors: FactorsFile,
}

/// A predicted matrix: the document and what it was computed from.
#[derive(Debug, Clone)]
pub struct PredictedMatrix {
    /// The result document, marked predicted.
    pub report: Report,
    /// The cost model that priced it.
    pub cost: CostModel,
    /// The KV capacity prediction.
    pub capacity: Prediction,
    /// Which cells fit.
    pub grid: CapacityGrid,
    /// Each prefill row.
    pub prefill: Vec<PrefillEstimate>,
    /// Each decode cell, with its capacity verdict.
    pub decode: Vec<(DecodeEstimate, CellVerdict)>,
}

/// Predicts the matrix of `inputs`.
pub fn predict_matrix(inputs: &PredictInputs) -> Result<PredictedMatrix, RunnerError> {
    let bad = |e: String| RunnerError::BadOption(e);
    let capacity = speedmatrix_capacity::predict(&inputs.model, &inputs.gpu, &inputs.flags)
        .map_err(|e| bad(e.to_string()))?;
    let spec = GridSpec {
        contexts: inputs.contexts.clone(),
        concurrencies: inputs.concurrencies.clone(),
        max_output: inputs.max_output,
    };
    let grid =
        speedmatrix_capacity::capacity_grid(Some(&capacity), None, ServerLimits::default(), &spec)
            .map_err(|e| bad(e.to_string()))?;
    let family = match inputs.engine {
        Engine::LlamaCpp => "llamacpp",
        _ => "vllm",
    };
    let (set, fell_back) = inputs
        .factors
        .for_engine(family)
        .ok_or_else(|| bad("the factors file names no engine".into()))?;
    let mut cost = CostModel::new(&inputs.model, &inputs.gpu, &inputs.vllm_flags, set.factors)
        .map_err(|e| bad(e.to_string()))?;
    if let Some(t) = &inputs.gguf_type {
        let bytes = WeightBytes::gguf(t).ok_or_else(|| {
            bad(format!(
                "--gguf-type {t}: give q4_0, q4_k_m, q5_k_m, q6_k, q8_0, iq4_xs or f16"
            ))
        })?;
        cost = cost.with_weight_bytes(bytes);
    }
    if inputs.engine == Engine::LlamaCpp {
        cost.chunk = 512;
    }
    let prefill: Vec<PrefillEstimate> = inputs
        .prefill_contexts
        .iter()
        .map(|&c| cost.prefill_row(c))
        .collect();
    let decode: Vec<(DecodeEstimate, CellVerdict)> = grid
        .cells
        .iter()
        .map(|v| {
            let e = cost.decode_cell(
                v.context,
                v.concurrency,
                inputs.max_output,
                inputs.window,
                block_size(&capacity),
            );
            (e, v.clone())
        })
        .collect();
    let report = crate::report::predicted::document(&crate::report::predicted::Sources {
        inputs,
        cost: &cost,
        factors: set,
        fell_back,
        grid: &grid,
        prefill: &prefill,
        decode: &decode,
    });
    report.validate().map_err(RunnerError::Report)?;
    Ok(PredictedMatrix {
        report,
        cost,
        capacity,
        grid,
        prefill,
        decode,
    })
}

/// The KV block size a decode cell's blocks are counted in.
fn block_size(p: &Prediction) -> u64 {
    match p {
        Prediction::Vllm(v) => v.layout.block_size,
        _ => 16,
    }
}

/// The factor set the prediction used, for the report.
pub(crate) fn factor_map(set: &EngineFactors) -> std::collections::BTreeMap<String, f64> {
    let f = set.factors;
    std::collections::BTreeMap::from([
        ("bandwidth_efficiency".to_owned(), f.bandwidth_efficiency),
        ("compute_efficiency".to_owned(), f.compute_efficiency),
        ("step_overhead_ms".to_owned(), f.step_overhead_ms),
        ("sequence_overhead_us".to_owned(), f.sequence_overhead_us),
        ("allreduce_latency_us".to_owned(), f.allreduce_latency_us),
        ("request_overhead_ms".to_owned(), f.request_overhead_ms),
        (
            "consumer_compute_ratio".to_owned(),
            f.consumer_compute_ratio,
        ),
    ])
}
