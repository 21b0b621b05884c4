//! The GPU figures a prediction uses: peaks in the model's compute dtype, the links between
//! ranks, and the traits of a part that some factors apply to.

use serde::Serialize;
use speedmatrix_capacity::{Architecture, Dtype, Gpu, ModelConfig, Quantization};

use crate::PredictError;
#[cfg(doc)]
use crate::factors::Factors;

/// The GPU figures a prediction uses.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    /// Catalog key.
    pub gpu: String,
    /// Peak memory bandwidth per GPU, bytes/s.
    pub bandwidth_bytes_s: f64,
    /// Peak dense tensor FLOP/s per GPU in the dtype the model computes in.
    pub peak_flops: f64,
    /// That dtype (`bf16`, `fp16`, `fp8`, `fp4`).
    pub compute_dtype: &'static str,
    /// Tensor-parallel ranks (GPUs).
    pub tensor_parallel: u32,
    /// Whether the ranks talk over an NVLink-class fabric.
    pub fast_link: bool,
    /// A GeForce part (see [`Factors::consumer_compute_ratio`]).
    pub consumer: bool,
    /// An AMD part (see [`Factors::amd_bandwidth_ratio`]).
    pub amd: bool,
    /// Streaming multiprocessors per GPU, when the catalog knows them (NVIDIA; see
    /// [`Factors::multiprocessor_bandwidth_gb_s`]).
    pub multiprocessors: Option<u32>,
    /// A Hopper part (see [`Factors::hopper_mma_ratio`]).
    pub hopper: bool,
    /// An FP8 checkpoint on a part whose FP8 is the FNUZ variant (CDNA3: MI300X, MI300A,
    /// MI325X; see [`Factors::amd_fp8_ratio`]).
    pub fnuz_fp8: bool,
    /// The vendor's maximum board power, watts, when the catalog knows it (see
    /// [`Factors::power_tflops_per_watt`]).
    pub board_power_w: Option<f64>,
    /// Peak dense FP16/BF16 tensor FLOP/s per GPU: what the power limit is weighed against
    /// (`peak_flops` is in the compute dtype, FP8 and FP4 at twice and four times it).
    pub half_flops: f64,
}

impl Machine {
    /// `tp` of `gpu` running `model`: the compute dtype is the weights' when
    /// the GPU has tensor cores for it (FP8 on Ada/Hopper/Blackwell, FP4 on
    /// Blackwell), else the activations' (weight-only kernels).
    pub fn new(gpu: &Gpu, model: &ModelConfig, tp: u32) -> Result<Machine, PredictError> {
        let missing = |what| PredictError::MissingGpuFigure {
            gpu: gpu.key.clone(),
            what,
        };
        let bandwidth = gpu.bandwidth_gb_s.ok_or_else(|| missing("bandwidth"))?;
        let t = gpu.dense_tflops;
        let half = match model.dtype {
            Dtype::Float16 => t.fp16.or(t.bf16).map(|v| (v, "fp16")),
            _ => t.bf16.or(t.fp16).map(|v| (v, "bf16")),
        };
        let peak = match model.quantization {
            Quantization::Fp8 => t.fp8.map(|v| (v, "fp8")).or(half),
            Quantization::Nvfp4 => t
                .fp4
                .map(|v| (v, "fp4"))
                .or(t.fp8.map(|v| (v, "fp8")))
                .or(half),
            _ => half,
        };
        let (tflops, dtype) = peak
            .or(t.fp8.map(|v| (v, "fp8")))
            .or(t.fp4.map(|v| (v, "fp4")))
            .ok_or_else(|| missing("dense bf16/fp16 throughput"))?;
        // The half-precision rate, or the dtype's over the usual 2× ladder per halving.
        let ladder = match dtype {
            "fp8" => 2.0,
            "fp4" => 4.0,
            _ => 1.0,
        };
        let half = half.map_or(tflops / ladder, |(v, _)| v);
        Ok(Machine {
            gpu: gpu.key.clone(),
            bandwidth_bytes_s: bandwidth * 1e9,
            peak_flops: tflops * 1e12,
            compute_dtype: dtype,
            tensor_parallel: tp.max(1),
            fast_link: gpu.fast_interconnect,
            consumer: gpu.vendor == "nvidia" && gpu.name.contains("GeForce"),
            amd: gpu.vendor == "amd",
            multiprocessors: gpu.multiprocessors.filter(|_| gpu.vendor == "nvidia"),
            hopper: gpu.architecture == Some(Architecture::Hopper),
            fnuz_fp8: gpu.architecture == Some(Architecture::Cdna3)
                && model.quantization == Quantization::Fp8,
            board_power_w: gpu.board_power_w,
            half_flops: half * 1e12,
        })
    }
}
