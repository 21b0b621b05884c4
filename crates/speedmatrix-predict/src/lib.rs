//! Speed predictor: what a model would do on a GPU before the GPU is rented.
//!
//! The crate is pure (no I/O). From a Hugging Face `config.json`
//! ([`ModelConfig`]), a catalog GPU ([`Gpu`]) and the engine's flags it
//! builds a [`CostModel`]: a step costs the larger of its memory time
//! (weights every step reads, the routed experts its tokens touch, each
//! sequence's KV and recurrent state, over achieved bandwidth) and its
//! compute time (FLOPs over achieved dense throughput), plus per-step and
//! per-sequence overheads and, across tensor-parallel ranks, two
//! all-reduces per layer (a llama.cpp decode step adds part of the shorter
//! of memory and compute: [`Factors::decode_overlap`]; the board power
//! limits the compute: [`Factors::power_tflops_per_watt`]). Prefill runs in chunks of the engine's token
//! budget with attention growing with the context. The few efficiency
//! [`Factors`] are fitted on public measured results (`cargo xtask
//! fit-predict`); docs/predict.md has the formulas, the data and the errors.
//!
//! ```
//! use speedmatrix_capacity::{Gpu, ModelConfig, VllmFlags};
//! use speedmatrix_predict::{CostModel, Factors};
//! use speedmatrix_units::{Concurrency, Tokens};
//!
//! // An 8B-class dense model in bf16.
//! let config = r#"{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
//!     "num_key_value_heads": 8, "torch_dtype": "bfloat16", "vocab_size": 128256,
//!     "intermediate_size": 14336, "max_position_embeddings": 131072}"#;
//! let model = ModelConfig::from_json(config)?;
//! let gpu = Gpu::lookup("h100-sxm")?;
//! let cost = CostModel::new(&model, &gpu, &VllmFlags::default(), Factors::builtin("vllm")?)?;
//! let one = cost.decode_cell(Tokens::ZERO, Concurrency::ONE, Tokens::kibi(8),
//!     std::time::Duration::from_secs(30), 16);
//! // ~16 GB of weights a step over ~3.35 TB/s: on the order of 100–250 tok/s.
//! assert!(one.per_request_tokens_per_s > 80.0 && one.per_request_tokens_per_s < 300.0);
//! // More streams share the weight reads: more in all, less each.
//! let many = cost.decode_cell(Tokens::ZERO, Concurrency::new(32).unwrap(), Tokens::kibi(8),
//!     std::time::Duration::from_secs(30), 16);
//! assert!(many.total_tokens_per_s > 10.0 * one.total_tokens_per_s);
//! assert!(many.per_request_tokens_per_s < one.per_request_tokens_per_s);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod calibrate;
mod cost;
mod error;
mod factors;
mod machine;
mod matrix;
mod minimize;
mod shape;
mod speculation;

use serde::Deserialize;
use speedmatrix_capacity::{
    Gpu, LlamaCppFlags, ModelConfig, SpeculativeMethod, VllmFlags, batch_defaults,
};

pub use crate::calibrate::{
    DecodeProtocol, Observation, Residual, RigCalibration, calibrate, predict as predict_figure,
};
pub use crate::cost::{AttentionKernel, Bound, CostModel, Graphs, SCORE_BYTES, StepTime};
pub use crate::error::PredictError;
pub use crate::factors::Factors;
pub use crate::machine::Machine;
pub use crate::matrix::{DecodeEstimate, MatrixSpec, PrefillEstimate};
pub use crate::minimize::{Restarts, minimize};
pub use crate::shape::{AttentionGroup, ModelShape};
pub use crate::speculation::{Drafter, Speculation};

const BUILTIN_FACTORS: &str = include_str!("../data/factors.json");

/// The factors file: one set per engine.
#[derive(Debug, Clone, Deserialize)]
pub struct FactorsFile {
    /// One entry per engine.
    pub engines: Vec<EngineFactors>,
}

/// An engine's fitted factors and what they were fitted on.
#[derive(Debug, Clone, Deserialize)]
pub struct EngineFactors {
    /// `vllm`, `sglang` or `llamacpp`.
    pub engine: String,
    /// The measured results the factors come from.
    pub fitted_on: String,
    /// The factors.
    pub factors: Factors,
    /// The 80 % bands of predicted figures by phase, from held-out errors (absent in a
    /// file written before they were computed).
    #[serde(default)]
    pub bands: Bands,
}

/// An engine family's 80 % bands by phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub struct Bands {
    /// Of decode tok/s.
    pub decode: Option<Band>,
    /// Of prefill (prompt) tok/s.
    pub prefill: Option<Band>,
}

/// Where measurements fell around the predictions of rigs the factors were not fitted on
/// (`cargo xtask fit-predict --cross-validate`, leave-one-rig-out): the 10th and 90th
/// percentiles of `ln(predicted / measured)`, every rig weighing the same.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct Band {
    /// 10th percentile of `ln(predicted / measured)`.
    pub low_log_error: f64,
    /// 90th percentile.
    pub high_log_error: f64,
    /// Rigs behind it.
    pub rigs: usize,
    /// Figures behind it.
    pub figures: usize,
    /// Share of each rig's figures inside the band of the other rigs.
    pub coverage: f64,
}

impl Band {
    /// The range a measurement of the figure predicted at `predicted` falls in with about
    /// 80 % chance: `predicted / e^high` to `predicted / e^low`.
    pub fn around(&self, predicted: f64) -> (f64, f64) {
        (
            predicted / self.high_log_error.exp(),
            predicted / self.low_log_error.exp(),
        )
    }
}

impl FactorsFile {
    /// Parses a factors file.
    pub fn from_json(text: &str) -> Result<FactorsFile, PredictError> {
        let file: FactorsFile =
            serde_json::from_str(text).map_err(|e| PredictError::Factors(e.to_string()))?;
        for e in &file.engines {
            e.factors.check()?;
        }
        Ok(file)
    }

    /// The built-in file.
    pub fn builtin() -> Result<FactorsFile, PredictError> {
        FactorsFile::from_json(BUILTIN_FACTORS)
    }

    /// The set for `engine`, else vLLM's (the first), with whether it fell back.
    pub fn for_engine(&self, engine: &str) -> Option<(&EngineFactors, bool)> {
        match self.engines.iter().find(|e| e.engine == engine) {
            Some(e) => Some((e, false)),
            None => self.engines.first().map(|e| (e, true)),
        }
    }
}

impl Factors {
    /// The built-in factors for `engine` (vLLM's when it has none of its own).
    pub fn builtin(engine: &str) -> Result<Factors, PredictError> {
        FactorsFile::builtin()?
            .for_engine(engine)
            .map(|(e, _)| e.factors)
            .ok_or_else(|| PredictError::Factors("the built-in file has no engines".into()))
    }
}

/// Bytes per weight where a format the config cannot say (a GGUF file's
/// quantization) decides them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WeightBytes {
    /// Bytes per parameter of the decoder's non-expert linear layers.
    pub linear: f64,
    /// Bytes per parameter of the routed experts.
    pub expert: f64,
    /// Bytes per parameter of the LM head.
    pub lm_head: f64,
}

/// The GGUF file types [`WeightBytes::gguf`] knows, for error messages.
pub const GGUF_TYPES: &str = "f16, bf16, q8_0, q6_k, q5_k_m, q5_k_s, q5_1, q5_0, q4_k_m, q4_k_s, \
     q4_1, q4_0, iq4_xs, iq4_nl, q3_k_l, q3_k_m, q3_k_s, q2_k, mxfp4 (each also as Unsloth's \
     ud-… name)";

impl WeightBytes {
    /// A GGUF file type by name: llama.cpp's bits per weight for it, and the type its
    /// quantizer gives the output tensor (Q6_K for the k-quant mixes and 4-bit types).
    ///
    /// Block types are their exact sizes (ggml's block layouts: Q4_0 18 bytes per 32
    /// weights = 4.5 bits, Q4_1 5.0, Q5_0 5.5, Q5_1 6.0, Q8_0 8.5, IQ4_NL 4.5, IQ4_XS 4.25,
    /// Q6_K 6.5625, MXFP4 4.25); the k-quant mixes are llama.cpp's measured averages
    /// (tools/quantize/README.md, Llama 2 7B: Q2_K 3.35, Q3_K_S 3.50, Q3_K_M 3.91, Q3_K_L
    /// 4.27, Q4_K_S 4.58, Q4_K_M 4.84, Q5_K_S 5.52, Q5_K_M 5.68). `mxfp4` is the MoE file
    /// type of gpt-oss: MXFP4 experts, Q8_0 elsewhere (ggml-org's gpt-oss-20b file, 11.27 GiB
    /// for 20.9 B parameters, fits that split and not BF16 attention). Unsloth's dynamic
    /// `ud-q4_k_xl` and the like keep some tensors at more bits than the mix they are named
    /// after; they are priced as that mix (`_xl` as `_m`), a lower bound on their bytes.
    pub fn gguf(name: &str) -> Option<WeightBytes> {
        let lower = name.to_ascii_lowercase();
        let base = lower.strip_prefix("ud-").unwrap_or(&lower);
        let base = base
            .strip_suffix("_xl")
            .map_or_else(|| base.to_owned(), |b| format!("{b}_m"));
        let q6k = 6.5625;
        let (linear, expert, head) = match base.as_str() {
            "f16" | "bf16" => (16.0, 16.0, 16.0),
            "q8_0" => (8.5, 8.5, 8.5),
            "q6_k" | "q6_k_m" => (q6k, q6k, q6k),
            "q5_k_m" => (5.68, 5.68, q6k),
            "q5_k_s" => (5.52, 5.52, q6k),
            "q5_1" => (6.0, 6.0, q6k),
            "q5_0" => (5.5, 5.5, q6k),
            "q4_k_m" => (4.84, 4.84, q6k),
            "q4_k_s" => (4.58, 4.58, q6k),
            "q4_1" => (5.0, 5.0, q6k),
            "q4_0" => (4.5, 4.5, q6k),
            "iq4_xs" => (4.25, 4.25, q6k),
            "iq4_nl" => (4.5, 4.5, q6k),
            "q3_k_l" => (4.27, 4.27, q6k),
            "q3_k_m" => (3.91, 3.91, q6k),
            "q3_k_s" => (3.50, 3.50, q6k),
            "q2_k" | "q2_k_m" | "q2_k_s" => (3.35, 3.35, q6k),
            "mxfp4" | "mxfp4_moe" => (8.5, 4.25, 8.5),
            _ => return None,
        };
        let bytes = |bits: f64| bits / 8.0;
        Some(WeightBytes {
            linear: bytes(linear),
            expert: bytes(expert),
            lm_head: bytes(head),
        })
    }
}

impl CostModel {
    /// The same model with its weights stored at `bytes` per parameter. Under two bytes a
    /// weight the file is a GGUF block type, whose products run quantized.
    pub fn with_weight_bytes(mut self, bytes: WeightBytes) -> CostModel {
        self.quantized_products = bytes.linear < 2.0;
        // A GGUF file's weights are its own block types, not the checkpoint's FP8.
        self.machine.fnuz_fp8 = false;
        let p = &mut self.shape.params;
        p.lm_head_bytes = p.lm_head_macs_per_token * bytes.lm_head;
        p.dense_bytes = p.dense_params * bytes.linear + p.lm_head_bytes;
        p.expert_bytes = p.expert_params * bytes.expert;
        self
    }

    /// The same model with its sliding-window (and chunked) layers reading the cache
    /// llama.cpp keeps for them, not just the window: the cache holds
    /// [`LlamaCppFlags::swa_cells`] cells a stream, one ubatch beyond the window, used as a
    /// ring, and its attention reads every cell of the view (the cells outside the window
    /// are masked, not skipped). With `-ub 2048` a Gemma 3 layer's 1,024-token window reads
    /// 3,072 cells.
    pub fn with_window_cache(mut self, flags: &LlamaCppFlags) -> CostModel {
        for group in &mut self.shape.attention {
            if let Some(window) = group.window {
                group.window = flags.swa_cells(window);
            }
        }
        self
    }

    /// `model` on `gpu` under vLLM-style `flags` (tensor parallelism, KV
    /// dtype, token budget), with `factors`.
    pub fn new(
        model: &ModelConfig,
        gpu: &Gpu,
        flags: &VllmFlags,
        factors: Factors,
    ) -> Result<CostModel, PredictError> {
        factors.check()?;
        let (chunk, _) = batch_defaults(gpu, flags);
        Ok(CostModel {
            shape: ModelShape::new(model, flags)?,
            machine: Machine::new(gpu, model, flags.tensor_parallel_size)?,
            factors,
            chunk,
            speculation: None,
            attention: AttentionKernel::Fused,
            quantized_products: false,
            graphs: if flags.enforce_eager {
                Graphs::Never
            } else {
                Graphs::Decode
            },
        })
    }

    /// This model with `flags`' speculative decoding priced at `acceptance_rate` (vLLM's
    /// "Avg Draft acceptance rate": accepted / drafted tokens, 0–1). The drafter is `model`'s
    /// own MTP layers, the drafter config in `flags` (EAGLE, DFlash, draft model), nothing
    /// for n-gram lookup, or else one layer shaped like the target's (say so).
    ///
    /// # Errors
    /// [`PredictError::Speculation`] when `flags` draft no tokens or the rate is not in
    /// `[0, 1]`.
    pub fn speculate(
        mut self,
        model: &ModelConfig,
        flags: &VllmFlags,
        acceptance_rate: f64,
    ) -> Result<CostModel, PredictError> {
        let tokens = flags.num_speculative_tokens;
        if tokens == 0 {
            return Err(PredictError::Speculation(
                "no speculative tokens: give --speculative-config (or --num-speculative-tokens)"
                    .into(),
            ));
        }
        if !(acceptance_rate.is_finite() && (0.0..=1.0).contains(&acceptance_rate)) {
            return Err(PredictError::Speculation(format!(
                "acceptance rate {acceptance_rate} is not a share of drafted tokens in [0, 1]"
            )));
        }
        let tp = flags.tensor_parallel_size.max(1);
        let drafter = match (&flags.speculative_method, &flags.draft_model) {
            (Some(SpeculativeMethod::NoDrafter), _) => Drafter::None,
            (Some(SpeculativeMethod::Mtp) | None, _) => Drafter::TargetLayers {
                layers: model.mtp_layers.max(1),
            },
            (_, Some(draft)) => {
                let p = draft.parameter_split(tp);
                let routed = p.expert_bytes * p.experts_per_token as f64;
                Drafter::Model {
                    bytes: p.dense_bytes + routed,
                    macs_per_token: p.decoder_macs_per_token + p.lm_head_macs_per_token,
                    layers: draft.layers.len() as u64,
                }
            }
            (_, None) => Drafter::TargetLayers { layers: 1 },
        };
        self.speculation = Some(Speculation {
            tokens,
            acceptance_rate,
            drafter,
        });
        Ok(self)
    }
}
