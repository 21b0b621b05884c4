//! KV-cache capacity predictor: which (context, concurrency) cells of a speed test
//! matrix fit a server's KV cache, predicted offline from a model's `config.json`,
//! a GPU and the engine's flags — or decided from the capacity the server reports.
//!
//! The crate is pure: it parses text the caller has read, and does no I/O.
//!
//! * [`ModelConfig::from_json`] reads a Hugging Face config leniently (nested
//!   `text_config`, `layer_types` / `full_attention_interval` hybrids with Gated
//!   DeltaNet or Mamba state, sliding windows, MLA, quantization).
//! * [`Gpu::lookup`] gives memory as the runtime sees it (`rtx3090` → 23.58 GiB).
//! * [`predict`] follows the engine's own sizing: for vLLM the hybrid block-size
//!   alignment, KV-cache grouping, memory budget, `num_gpu_blocks`, and the
//!   "GPU KV cache size" / "Maximum concurrency" log figures; SGLang's
//!   `profile_max_num_token`; llama.cpp's cells and slots.
//! * [`KvPool::check`] decides a cell with the engine's block rule and names the
//!   [`FitRule`] that decided it; [`capacity_grid`] decides a whole grid, from a
//!   [`MeasuredCapacity`] when the server reported one, recording measured vs
//!   predicted.
//!
//! Terms that cannot be derived from a config (activation peak, non-torch
//! allocations, CUDA-graph memory) are [`Estimate`]s with their assumptions
//! spelled out, and can be overridden with calibrated values
//! ([`OverheadOverrides`]).
//!
//! ```
//! use speedmatrix_capacity::{
//!     capacity_grid, predict, EngineFlags, GridSpec, Gpu, ModelConfig, Prediction,
//!     ServerLimits, MeasuredCapacity, VllmFlags,
//! };
//! use speedmatrix_units::{Concurrency, Tokens};
//!
//! // A small dense model: 4 layers, 2 KV heads of 64, bf16.
//! let config = r#"{"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
//!     "num_key_value_heads": 2, "head_dim": 64, "torch_dtype": "bfloat16",
//!     "vocab_size": 32000, "intermediate_size": 1024, "max_position_embeddings": 32768}"#;
//! let model = ModelConfig::from_json(config)?;
//! let flags = VllmFlags { kv_cache_memory_bytes: Some(speedmatrix_units::ByteSize::gib(1)), ..VllmFlags::default() };
//! let prediction = predict(&model, &Gpu::lookup("rtx3090")?, &EngineFlags::Vllm(flags))?;
//! let Prediction::Vllm(v) = &prediction else { unreachable!() };
//! // 2 KV heads × 64 × (K+V) × 2 B × 4 layers = 2,048 B per token; 1 GiB / 2,048 B.
//! assert_eq!(v.num_blocks * v.layout.block_size, 524_288);
//!
//! let spec = GridSpec {
//!     contexts: vec![Tokens::kibi(16), Tokens::kibi(128)],
//!     concurrencies: vec![Concurrency::ONE, Concurrency::new(8).unwrap()],
//!     max_output: Tokens::kibi(8),
//! };
//! let grid = capacity_grid(Some(&prediction), None, ServerLimits::default(), &spec)?;
//! assert!(grid.cells[0].fits); // 16K + 8K, one request
//! assert!(!grid.cells[3].fits); // 128K + 8K × 8 > 524,288 tokens
//!
//! // When the server says how big its pool is, that decides, and the difference is kept.
//! let measured = MeasuredCapacity::Vllm { num_gpu_blocks: 30_000, block_size: 16 };
//! let grid = capacity_grid(Some(&prediction), Some(&measured), ServerLimits::default(), &spec)?;
//! assert_eq!(grid.comparison.unwrap().difference_tokens, 480_000 - 524_288);
//! # Ok::<(), speedmatrix_capacity::CapacityError>(())
//! ```

mod config;
mod dtype;
mod error;
mod gpu;
mod llamacpp;
mod log_text;
mod pool;
mod report;
mod sglang;
mod sglang_log;
pub mod text;
mod vllm;
mod weights;

pub use config::{
    GdnShape, HeadShape, LayerKind, Mamba2Shape, MlaShape, ModelConfig, MoeShape, Quantization,
    VisionShape,
};
pub use dtype::{Dtype, KvCacheDtype};
pub use error::CapacityError;
pub use gpu::{Architecture, DenseTflops, Gpu, GpuCatalog};
pub use llamacpp::{GgmlKvType, LlamaCppFlags, LlamaCppPrediction, predict_llamacpp};
pub use pool::{BlockPool, CellVerdict, FitRule, GridSpec, KvPool, SlotPool, TokenPool};
pub use report::{
    CapacityComparison, CapacityGrid, CapacitySource, EngineFlags, MeasuredCapacity, Prediction,
    ServerLimits, capacity_grid, predict,
};
pub use sglang::{
    SglangFlags, SglangPrediction, default_mem_fraction_static, predict_sglang,
    sglang_tokens_from_memory,
};
pub use sglang_log::SglangStartupLog;
pub use vllm::{
    Estimate, GroupKind, KvBudgetSource, KvGroup, LayerCost, LogFormula, LoggedFigure,
    MambaCacheMode, MemoryBudget, OverheadOverrides, PipelineStage, PreRelease, RuleUse,
    SpeculativeConfig, SpeculativeMethod, StartupCheck, TermKind, VLLM_RULES, VllmDevice,
    VllmFlags, VllmLayout, VllmPrediction, VllmRule, VllmStartupLog, VllmVersion, batch_defaults,
    budget_from_available_gib, capacity_from_budget, capacity_from_stage_budgets, kv_element_dtype,
    pipeline_partition, predict_vllm, rules_for,
};
pub use weights::{
    CheckpointTensors, ParameterSplit, WeightEstimate, WeightPlacement,
    weights_from_safetensors_index,
};
