//! The factors: the few fitted numbers that turn a GPU's peak figures into what an engine
//! family achieves (docs/predict.md), and the ranges a factors file must keep.

use serde::{Deserialize, Serialize};

use crate::PredictError;

/// The few numbers that turn peak figures into achieved ones, fitted on
/// public measured results (`cargo xtask fit-predict`, data/validation.json).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Factors {
    /// Share of the GPU's peak memory bandwidth a decode step achieves.
    pub bandwidth_efficiency: f64,
    /// Share of the GPU's peak dense tensor throughput matrix products achieve.
    pub compute_efficiency: f64,
    /// Fixed time of every engine step (scheduling, launches, sampling), ms.
    pub step_overhead_ms: f64,
    /// Time per running sequence per step beyond its bytes and FLOPs, µs.
    pub sequence_overhead_us: f64,
    /// Latency of one all-reduce between tensor-parallel ranks (two per layer), µs.
    pub allreduce_latency_us: f64,
    /// Time from request to the start of its prefill (HTTP, tokenizing, scheduling), ms.
    pub request_overhead_ms: f64,
    /// Achieved tensor throughput of GeForce parts relative to what
    /// `compute_efficiency` gives on the catalog's figure (which is their
    /// FP32-accumulate rate; FP16-accumulate kernels and boost clocks above
    /// the rated one go past it). Fitted on llama.cpp's GeForce rigs.
    #[serde(default = "one")]
    pub consumer_compute_ratio: f64,
    /// Achieved bandwidth of KV-cache and recurrent-state reads relative to
    /// the weights' (`bandwidth_efficiency`): attention kernels over many
    /// sequences' blocks run at their own efficiency. 1 in the families'
    /// fitted sets; `predict --calibrate-from` fits it per rig.
    #[serde(default = "one")]
    pub kv_bandwidth_ratio: f64,
    /// Streams at which decode attention reaches half its full-batch bandwidth: one long
    /// sequence's attention runs on too few thread blocks to fill the GPU (the reason for
    /// split-KV "Flash-Decoding" kernels), so a step's cache reads cost as if
    /// `streams + kv_saturation_streams` sequences were read. 0 in the families' fitted
    /// sets; `predict --calibrate-from` fits it per rig.
    #[serde(default)]
    pub kv_saturation_streams: f64,
    /// Routed tokens per expert at which an expert's matrix products reach half the dense
    /// efficiency: a step's grouped GEMMs over E experts give each only `tokens · k / E` rows,
    /// too few to fill the tensor cores (vLLM's fused-MoE and llama.cpp's `mul_mat_id`
    /// alike), so expert compute runs at `t / (t + this)` of `compute_efficiency`. 0: as dense.
    #[serde(default)]
    pub moe_half_tokens: f64,
    /// Achieved throughput of attention (scores and weighted sums over the context)
    /// relative to the dense matrix products': flash-attention kernels reach less of the
    /// peak, and much less on some backends (llama.cpp's ROCm and Vulkan at long context).
    #[serde(default = "one")]
    pub attention_compute_ratio: f64,
    /// Achieved bandwidth on AMD GPUs relative to `bandwidth_efficiency` (ROCm and Vulkan
    /// kernels reach a lower share of the peak than CUDA's).
    #[serde(default = "one")]
    pub amd_bandwidth_ratio: f64,
    /// Achieved tensor throughput on AMD GPUs relative to `compute_efficiency`.
    #[serde(default = "one")]
    pub amd_compute_ratio: f64,
    /// Time per decoder layer per step beyond its bytes and FLOPs, µs: the kernels a layer
    /// launches and waits on (norms, rotary, routing, quantizing activations), which CUDA
    /// graphs replay but cannot remove. 0: all in `step_overhead_ms`.
    #[serde(default)]
    pub layer_overhead_us: f64,
    /// The fixed step, layer and all-reduce times on AMD GPUs relative to NVIDIA's (HIP graph
    /// replay, ROCm kernel launches and RCCL's small all-reduces cost more than CUDA's).
    #[serde(default = "one")]
    pub amd_overhead_ratio: f64,
    /// Achieved attention throughput on AMD GPUs relative to NVIDIA's
    /// (`attention_compute_ratio` × `amd_compute_ratio`): llama.cpp's ROCm flash attention
    /// without rocWMMA runs its vector kernels, far from the matrix cores.
    #[serde(default = "one")]
    pub amd_attention_ratio: f64,
    /// Bandwidth one NVIDIA streaming multiprocessor sustains, GB/s (0: no such cap). A
    /// kernel whose blocks each stream one slice of a matrix keeps only so many reads in
    /// flight per multiprocessor; by Little's law that caps its bandwidth at the bytes in
    /// flight over the memory latency, per multiprocessor, below an HBM part's peak when
    /// the part has few multiprocessors for its bandwidth (A100, H100 PCIe).
    #[serde(default)]
    pub multiprocessor_bandwidth_gb_s: f64,
    /// Throughput of the weights' products when they stay in a GGUF block type (llama.cpp's
    /// `mul_mat_q`: activations quantized to 8 bits, int8 tensor-core products over
    /// dequantized tiles) relative to F16/BF16 weights' cuBLAS GEMMs. Attention is not such
    /// a product and keeps its own ratio.
    #[serde(default = "one")]
    pub quantized_compute_ratio: f64,
    /// Throughput of Ampere-style `mma.sync` kernels on Hopper GPUs relative to what the
    /// family reaches elsewhere: Hopper's peak needs `wgmma`. llama.cpp's quantized products
    /// and its flash attention are such kernels (its F16 products go through cuBLAS, which
    /// uses `wgmma`); the server engines' Hopper kernels use `wgmma` (1).
    #[serde(default = "one")]
    pub hopper_mma_ratio: f64,
    /// Dense FP16/BF16 tensor TFLOPS a GPU's hardware sustains per watt of its board power
    /// (0: no power limit). A long run of matrix products draws the board's limit and the
    /// clocks drop to stay under it: a part whose peak (at boost clock) needs more than
    /// `board watts × this` runs its products at about `board watts × this / peak` of it
    /// (soft minimum; FP8 and FP4 FLOPs scale with their peaks). Bandwidth-bound steps draw
    /// less and are not limited.
    #[serde(default)]
    pub power_tflops_per_watt: f64,
    /// How much of a decode step's matrix-product time hides under its reads: 1, the step
    /// takes the longer of the two (kernels that stream weights while the tensor cores
    /// work: the server engines' GEMMs); 0, their sum. llama.cpp's small-batch products
    /// (`mul_mat_vec_q` up to 8 rows: dot products on the CUDA cores inside the pass that
    /// streams the weights; `mul_mat_q` tiles staged through shared memory beyond) add
    /// each extra stream's arithmetic to the step: on a GB10 a 7B Q8_0 model's step grows
    /// 34 → 54 ms from 1 to 32 streams, where max(reads, FLOPs) would keep it near 36.
    #[serde(default = "one")]
    pub decode_overlap: f64,
    /// Time per mixture-of-experts layer per step beyond a dense layer's, µs: the kernels
    /// routing adds (the router's product, top-k, sorting tokens by expert, the grouped
    /// GEMMs' launches and the weighted combine), each a short launch-bound kernel at decode
    /// batch sizes. 0: as a dense layer.
    #[serde(default)]
    pub moe_layer_overhead_us: f64,
    /// Achieved bandwidth of routed experts' weight reads relative to the dense weights'
    /// (`bandwidth_efficiency`): a fused-MoE kernel at decode batch sizes streams many small
    /// expert matrices (a few MB each), a handful of rows per expert, and keeps fewer bytes
    /// in flight than one long dense matrix-vector product.
    #[serde(default = "one")]
    pub expert_bandwidth_ratio: f64,
    /// Achieved bandwidth and throughput of FP8 weights' products on AMD GPUs relative to
    /// the family's AMD figures for 16-bit weights: CDNA3 runs the FNUZ FP8 variant, so an
    /// OCP FP8 checkpoint's block-scaled weights are converted and go through the engine's
    /// block-FP8 kernels rather than the vendor's tuned 16-bit GEMMs.
    #[serde(default = "one")]
    pub amd_fp8_ratio: f64,
    /// Time per decoder layer per step beyond `layer_overhead_us` when the step launches its
    /// kernels one by one instead of replaying a CUDA graph, µs (see [`crate::Graphs`]): each
    /// launch's host call and the gap before the next kernel starts, which a graph replay
    /// removes. On a GB10 under llama.cpp a dense model's step grows by ~90 µs a layer from
    /// one stream (graph) to two (no graph) where its reads barely grow. 0: as a graph.
    #[serde(default)]
    pub eager_layer_overhead_us: f64,
    /// How independently a step's tokens pick their experts, γ in (0, 1]: `b` tokens touch
    /// as many distinct experts as `b^γ` tokens routed uniformly at random would. Real
    /// routing is skewed (popular experts are shared within a batch), so a batch reads fewer
    /// distinct experts than uniform routing's expectation; one token is exact either way.
    #[serde(default = "one")]
    pub routing_independence: f64,
    /// Time per multi-head latent attention (MLA) layer per step beyond `layer_overhead_us`,
    /// µs: absorbed MLA decode runs the query's down and up projections, the latent's
    /// projection, two extra norms and the two absorption products around its attention
    /// kernel, about six more launch-bound kernels than a grouped-query layer. 0: as GQA.
    #[serde(default)]
    pub mla_layer_overhead_us: f64,
    /// Time per decoder layer per step an FP8 checkpoint adds on a FNUZ part (CDNA3), µs:
    /// its block-scaled FP8 weights run through the engine's block-FP8 GEMM and fused-MoE
    /// kernels, whose fixed cost at decode batch sizes the vendor's tuned 16-bit kernels do
    /// not pay. Beside [`Factors::amd_fp8_ratio`] (what such weights' bytes and products
    /// cost), this is what a step pays whatever its size. 0: none.
    #[serde(default)]
    pub amd_fp8_layer_overhead_us: f64,
}

fn one() -> f64 {
    1.0
}

impl Factors {
    /// Each factor's name, in declaration order (as in [`Factors::to_vec`] and the JSON).
    pub const NAMES: [&'static str; Factors::COUNT] = [
        "bandwidth_efficiency",
        "compute_efficiency",
        "step_overhead_ms",
        "sequence_overhead_us",
        "allreduce_latency_us",
        "request_overhead_ms",
        "consumer_compute_ratio",
        "kv_bandwidth_ratio",
        "kv_saturation_streams",
        "moe_half_tokens",
        "attention_compute_ratio",
        "amd_bandwidth_ratio",
        "amd_compute_ratio",
        "layer_overhead_us",
        "amd_overhead_ratio",
        "amd_attention_ratio",
        "multiprocessor_bandwidth_gb_s",
        "quantized_compute_ratio",
        "hopper_mma_ratio",
        "power_tflops_per_watt",
        "decode_overlap",
        "moe_layer_overhead_us",
        "expert_bandwidth_ratio",
        "amd_fp8_ratio",
        "eager_layer_overhead_us",
        "routing_independence",
        "mla_layer_overhead_us",
        "amd_fp8_layer_overhead_us",
    ];

    /// Each factor with its name, in declaration order.
    pub fn named(self) -> impl Iterator<Item = (&'static str, f64)> {
        Factors::NAMES.into_iter().zip(self.to_vec())
    }

    /// Every factor must be finite, efficiencies in (0, 1.5], times ≥ 0.
    pub fn check(&self) -> Result<(), PredictError> {
        // Efficiencies above 0 (a zero one would divide by zero), times not negative, the
        // rest within what a kernel or an engine can plausibly show; in declaration order.
        let efficiency = (f64::MIN_POSITIVE, 1.5);
        let time = (0.0, f64::MAX);
        let ratio = (0.01, 4.0);
        let ranges: [(f64, f64); Factors::COUNT] = [
            efficiency,
            efficiency,
            time,
            time,
            time,
            time,
            (0.25, 4.0),
            (0.25, 4.0),
            (0.0, 64.0),
            (0.0, 4096.0),
            ratio,
            ratio,
            ratio,
            (0.0, 10_000.0),
            (0.1, 20.0),
            ratio,
            (0.0, 1000.0),
            ratio,
            ratio,
            (0.0, 100.0),
            (0.0, 1.0),
            (0.0, 10_000.0),
            ratio,
            ratio,
            (0.0, 10_000.0),
            (0.1, 1.0),
            (0.0, 10_000.0),
            (0.0, 10_000.0),
        ];
        match self
            .named()
            .zip(ranges)
            .find(|((_, v), (lo, hi))| !(v.is_finite() && (*lo..=*hi).contains(v)))
        {
            Some(((what, v), _)) => Err(PredictError::Factors(format!("{what} = {v}"))),
            None => Ok(()),
        }
    }

    /// The factors as a vector, in declaration order (for fitting).
    pub fn to_vec(self) -> [f64; Factors::COUNT] {
        [
            self.bandwidth_efficiency,
            self.compute_efficiency,
            self.step_overhead_ms,
            self.sequence_overhead_us,
            self.allreduce_latency_us,
            self.request_overhead_ms,
            self.consumer_compute_ratio,
            self.kv_bandwidth_ratio,
            self.kv_saturation_streams,
            self.moe_half_tokens,
            self.attention_compute_ratio,
            self.amd_bandwidth_ratio,
            self.amd_compute_ratio,
            self.layer_overhead_us,
            self.amd_overhead_ratio,
            self.amd_attention_ratio,
            self.multiprocessor_bandwidth_gb_s,
            self.quantized_compute_ratio,
            self.hopper_mma_ratio,
            self.power_tflops_per_watt,
            self.decode_overlap,
            self.moe_layer_overhead_us,
            self.expert_bandwidth_ratio,
            self.amd_fp8_ratio,
            self.eager_layer_overhead_us,
            self.routing_independence,
            self.mla_layer_overhead_us,
            self.amd_fp8_layer_overhead_us,
        ]
    }

    /// How many factors there are.
    pub const COUNT: usize = 28;

    /// Factors from a vector in declaration order.
    pub fn from_vec(v: [f64; Factors::COUNT]) -> Factors {
        Factors {
            bandwidth_efficiency: v[0],
            compute_efficiency: v[1],
            step_overhead_ms: v[2],
            sequence_overhead_us: v[3],
            allreduce_latency_us: v[4],
            request_overhead_ms: v[5],
            consumer_compute_ratio: v[6],
            kv_bandwidth_ratio: v[7],
            kv_saturation_streams: v[8],
            moe_half_tokens: v[9],
            attention_compute_ratio: v[10],
            amd_bandwidth_ratio: v[11],
            amd_compute_ratio: v[12],
            layer_overhead_us: v[13],
            amd_overhead_ratio: v[14],
            amd_attention_ratio: v[15],
            multiprocessor_bandwidth_gb_s: v[16],
            quantized_compute_ratio: v[17],
            hopper_mma_ratio: v[18],
            power_tflops_per_watt: v[19],
            decode_overlap: v[20],
            moe_layer_overhead_us: v[21],
            expert_bandwidth_ratio: v[22],
            amd_fp8_ratio: v[23],
            eager_layer_overhead_us: v[24],
            routing_independence: v[25],
            mla_layer_overhead_us: v[26],
            amd_fp8_layer_overhead_us: v[27],
        }
    }
}
