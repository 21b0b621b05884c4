//! The whole matrix predicted before the GPU is rented: the capacity grid by the engine's KV
//! rules, each prefill row and decode cell priced by `speedmatrix-predict`'s cost model, as a
//! result document marked predicted (built in `report/predicted.rs`).

use std::time::Duration;

use speedmatrix_capacity::{
    CapacityGrid, CellVerdict, EngineFlags, Gpu, GridSpec, LlamaCppFlags, ModelConfig, Prediction,
    ServerLimits, VllmFlags,
};
use speedmatrix_predict::{
    AttentionKernel, CostModel, DecodeEstimate, DecodeProtocol, EngineFactors, FactorsFile, Graphs,
    Observation, PrefillEstimate, RigCalibration, WeightBytes,
};
use speedmatrix_report::Report;
use speedmatrix_units::{Concurrency, Engine, Tokens};

use crate::RunnerError;

mod summary;

pub use summary::calibration_summary;

/// What a prediction is made from.
#[derive(Debug, Clone)]
pub struct PredictInputs {
    /// The model's config.json.
    pub model: ModelConfig,
    /// The model's name in the report.
    pub model_name: String,
    /// The GPU.
    pub gpu: Gpu,
    /// The engine: its KV rules decide the grid, its family's factors the speed (llama.cpp's
    /// for llama.cpp and Ollama, SGLang's own, vLLM's for the rest).
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
    /// How attention runs (llama.cpp's `--flash-attn off` materializes the scores).
    pub attention: AttentionKernel,
    /// The efficiency factors.
    pub factors: FactorsFile,
    /// Speculative decoding's acceptance rate (accepted / drafted tokens, vLLM's "Avg Draft
    /// acceptance rate"): when set, `vllm_flags`' speculation is priced (see
    /// [`CostModel::speculate`]).
    pub acceptance_rate: Option<f64>,
    /// A measured (partial) run of the same model on the same GPU and engine: the family's
    /// factors are calibrated on its cells before the rest is predicted.
    pub calibrate_from: Option<MeasuredRun>,
}

/// A measured run a prediction is calibrated on.
#[derive(Debug, Clone)]
pub struct MeasuredRun {
    /// Where it came from (for the report).
    pub name: String,
    /// The run's document.
    pub report: Report,
}

impl MeasuredRun {
    /// Its Valid decode cells' total tok/s and prefill rows' TTFTs.
    pub fn observations(&self) -> Vec<Observation> {
        let prefill = self.report.prefill.iter().filter_map(|r| {
            let ttft = r.ttft_ms.filter(|ms| ms.is_finite() && *ms > 0.0)?;
            r.status.is_valid().then(|| Observation::Prefill {
                prompt: r.context,
                ttft: Duration::from_secs_f64(ttft / 1e3),
            })
        });
        let decode = self.report.decode.iter().filter_map(|c| {
            let m = c.measurements.as_ref()?;
            (c.status.is_valid() && m.total_tokens_per_s > 0.0).then_some(Observation::Decode {
                context: c.context,
                concurrency: c.concurrency,
                total_tokens_per_s: m.total_tokens_per_s,
            })
        });
        prefill.chain(decode).collect()
    }
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
    /// The calibration, when the prediction was calibrated on a measured run.
    pub calibration: Option<RigCalibration>,
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
        // Ollama serves through llama.cpp's ggml kernels.
        Engine::LlamaCpp | Engine::Ollama => "llamacpp",
        Engine::Sglang => "sglang",
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
                "--gguf-type {t}: give one of {}",
                speedmatrix_predict::GGUF_TYPES
            ))
        })?;
        cost = cost.with_weight_bytes(bytes);
    }
    // llama.cpp prefills in micro-batches of --ubatch-size (Ollama's runner in 512s).
    match (&inputs.flags, inputs.engine) {
        (EngineFlags::LlamaCpp(f), _) => {
            cost.chunk = f.n_ubatch.max(1);
            cost.graphs = Graphs::SingleToken;
            cost = cost.with_window_cache(f);
        }
        (_, Engine::LlamaCpp | Engine::Ollama) => {
            cost.chunk = 512;
            cost.graphs = Graphs::SingleToken;
            cost = cost.with_window_cache(&LlamaCppFlags::default());
        }
        _ => {}
    }
    cost.attention = inputs.attention;
    if let Some(rate) = inputs.acceptance_rate {
        cost = cost
            .speculate(&inputs.model, &inputs.vllm_flags, rate)
            .map_err(|e| bad(e.to_string()))?;
    }
    let mut set = set.clone();
    let calibration = match &inputs.calibrate_from {
        Some(run) => {
            let cal = calibrate_on(&cost, run, block_size(&capacity))?;
            cost.factors = cal.factors;
            set = calibrated_set(&set, &cal, run);
            Some(cal)
        }
        None => None,
    };
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
        factors: &set,
        fell_back,
        calibration: calibration.as_ref().zip(inputs.calibrate_from.as_ref()),
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
        calibration,
    })
}

/// Calibrates `cost` on `run`'s measured cells, run under its own window and output cap.
fn calibrate_on(
    cost: &CostModel,
    run: &MeasuredRun,
    block_size: u64,
) -> Result<RigCalibration, RunnerError> {
    let bad = |e: String| RunnerError::BadOption(format!("--calibrate-from {}: {e}", run.name));
    if run.report.prediction.is_some() {
        return Err(bad(
            "it is a prediction, not a measurement: give a run.json that `speedmatrix run` wrote"
                .into(),
        ));
    }
    let window = Duration::try_from_secs_f64(run.report.run.window_s)
        .ok()
        .filter(|w| !w.is_zero())
        .ok_or_else(|| {
            bad(format!(
                "its window ({} s) is not a duration",
                run.report.run.window_s
            ))
        })?;
    let protocol = DecodeProtocol {
        max_output: run.report.run.max_output_tokens,
        window,
        block_size,
    };
    speedmatrix_predict::calibrate(cost, &run.observations(), &protocol)
        .map_err(|e| bad(e.to_string()))
}

/// The family's set with the calibrated factors, and the bands of the calibration where it
/// has them (a phase with fewer than two measured figures keeps the family's).
fn calibrated_set(
    family: &EngineFactors,
    cal: &RigCalibration,
    run: &MeasuredRun,
) -> EngineFactors {
    let decode = cal
        .fitted
        .iter()
        .filter(|r| matches!(r.observation, Observation::Decode { .. }))
        .count();
    EngineFactors {
        engine: family.engine.clone(),
        fitted_on: format!(
            "{} measured figures of {} ({decode} decode cells, {} prefill rows), from the {} \
             family's factors ({})",
            cal.fitted.len(),
            run.name,
            cal.fitted.len() - decode,
            family.engine,
            family.fitted_on
        ),
        factors: cal.factors,
        bands: speedmatrix_predict::Bands {
            decode: cal.bands.decode.or(family.bands.decode),
            prefill: cal.bands.prefill.or(family.bands.prefill),
        },
    }
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
    set.factors
        .named()
        .map(|(name, v)| (name.to_owned(), v))
        .collect()
}
