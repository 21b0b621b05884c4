//! Where a family's fit starts, and which factors it frees: only those its rigs can show.

use speedmatrix_predict::{Factors, Graphs};

use crate::fit_predict::{Figure, Rig};

/// What a family's fit frees: the factors its rigs can show. The all-reduce latency is
/// held where no fitted rig has tensor parallelism, the MoE terms (grouped-GEMM half rows,
/// routing time per MoE layer, experts' read bandwidth) where none is MoE, the AMD ratios
/// where none is AMD.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fixed {
    pub(crate) start: Factors,
    pub(crate) allreduce_us: Option<f64>,
    pub(crate) moe: bool,
    pub(crate) amd: bool,
    /// FP8 checkpoints on FNUZ parts: at least two fitted rigs run them (one rig's model
    /// would set the ratio for every AMD prediction of its family).
    pub(crate) amd_fp8: bool,
    /// The multiprocessor bandwidth cap is fitted: llama.cpp rigs (its mat-vec kernels are
    /// where the cap was seen), some with a known multiprocessor count. The server engines'
    /// GEMV kernels do not show it: freed for them, it lands where it no longer binds (vLLM)
    /// or trades against the bandwidth efficiency on noisy rigs (SGLang), and their
    /// held-out error grows.
    pub(crate) multiprocessors: bool,
    /// Some rigs run GGUF block types and some F16/BF16 weights, so the ratio of their
    /// products' throughputs can be told from the compute efficiency.
    pub(crate) quantized: bool,
    /// The mma.sync ratio on Hopper is fitted: llama.cpp rigs (the server engines' Hopper
    /// kernels use wgmma), some on Hopper parts.
    pub(crate) hopper: bool,
    /// llama-bench times the model's evaluation alone: no request reaches a server.
    pub(crate) no_requests: bool,
    /// The board power limit is fitted: llama.cpp rigs (one build and one model across 25
    /// GPU kinds is where it was seen), some with a known board power. Freed for the server
    /// engines, whose rigs are mostly datacenter parts at high concurrency, it trades against
    /// their compute efficiency (vLLM 2.5 TFLOPS a watt, held-out decode worse; SGLang 0.8,
    /// a B200 at 0.35 of its peak): 0 there, not modelled.
    pub(crate) power: bool,
    /// The decode overlap is fitted: llama.cpp rigs with several streams decoding at once
    /// (llama-batched-bench); the server engines' GEMMs overlap their reads (1).
    pub(crate) batched_llamacpp: bool,
    /// Routing's independence γ is fitted: llama.cpp rigs decoding several streams of a MoE
    /// model (a few to 32 tokens a step, where uniform and skewed routing part). The server
    /// engines' MoE rigs run at concurrencies where nearly every expert is touched either
    /// way: freed there, γ trades against the expert and routing terms and their held-out
    /// decode error grows (vLLM's median 20 → 29 %).
    pub(crate) routing: bool,
    /// The eager layer time is fitted: some rigs have steps that launch their kernels
    /// without a CUDA graph and steps that replay one (llama.cpp's batched decode beside its
    /// single-stream decode; vLLM under `--enforce-eager`). Held at the prior otherwise: it
    /// prices `--enforce-eager` where no rig shows it.
    pub(crate) eager: bool,
    /// The MLA layer time is fitted: some rigs run a multi-head latent attention model
    /// (DeepSeek-V3, Kimi, GLM-4.7-Flash). Held at the prior otherwise.
    pub(crate) mla: bool,
}

impl Fixed {
    /// What `rigs` can show, from `start`.
    pub(crate) fn for_rigs<'a>(
        start: Factors,
        rigs: impl Iterator<Item = &'a Rig> + Clone,
    ) -> Fixed {
        let tp = rigs.clone().any(|r| r.cost.machine.tensor_parallel > 1);
        let llamacpp = rigs.clone().all(|r| r.engine == "llamacpp");
        Fixed {
            start,
            allreduce_us: (!tp).then_some(start.allreduce_latency_us),
            moe: rigs.clone().any(|r| r.cost.shape.params.num_experts > 0),
            amd: rigs.clone().any(|r| r.cost.machine.amd),
            amd_fp8: rigs.clone().filter(|r| r.cost.fp8_ratio_applies()).count() >= 2,
            multiprocessors: llamacpp
                && rigs
                    .clone()
                    .any(|r| r.cost.machine.multiprocessors.is_some()),
            hopper: llamacpp && rigs.clone().any(|r| r.cost.machine.hopper),
            quantized: rigs.clone().any(|r| r.cost.quantized_products)
                && rigs.clone().any(|r| !r.cost.quantized_products),
            no_requests: llamacpp,
            power: llamacpp && rigs.clone().any(|r| r.cost.machine.board_power_w.is_some()),
            batched_llamacpp: llamacpp
                && rigs.clone().any(|r| {
                    r.figures
                        .iter()
                        .any(|f| matches!(f, Figure::Decode { n, .. } if *n > 1))
                }),
            routing: llamacpp
                && rigs.clone().any(|r| {
                    r.cost.shape.params.num_experts > 0
                        && r.figures
                            .iter()
                            .any(|f| matches!(f, Figure::Decode { n, .. } if *n > 1))
                }),
            eager: rigs.clone().any(|r| {
                r.cost.graphs == Graphs::Never
                    || (r.cost.graphs == Graphs::SingleToken
                        && r.figures
                            .iter()
                            .any(|f| matches!(f, Figure::Decode { n, .. } if *n > 1)))
            }),
            mla: rigs.clone().any(|r| r.cost.shape.mla_layers > 0),
        }
    }

    /// The kernel terms a family frees only where its rigs show them: each one's index in
    /// [`Factors::to_vec`], whether it is free, the value it holds otherwise (no effect),
    /// and the range the fit keeps it in.
    pub(crate) fn kernel_terms(&self) -> [(usize, bool, f64, (f64, f64)); 6] {
        [
            (16, self.multiprocessors, 0.0, (5.0, 500.0)),
            (17, self.quantized, 1.0, (0.25, 2.0)),
            (18, self.hopper, 1.0, (0.2, 1.0)),
            (19, self.power, 0.0, (0.05, 10.0)),
            (20, self.batched_llamacpp, 1.0, (0.01, 1.0)),
            (25, self.routing, 1.0, (0.3, 1.0)),
        ]
    }

    /// The free factors: their index in [`Factors::to_vec`] and log offset.
    pub(crate) fn free(&self) -> Vec<(usize, f64)> {
        let mut free = vec![
            (0, 0.0),
            (1, 0.0),
            (2, 0.05),
            (3, 1.0),
            (10, 0.0),
            (13, 1.0),
        ];
        if !self.no_requests {
            free.push((5, 0.5));
        }
        if self.allreduce_us.is_none() {
            free.push((4, 1.0));
        }
        if self.moe {
            free.extend([(9, 1.0), (21, 1.0), (22, 0.0)]);
        }
        if self.amd {
            free.extend([(11, 0.0), (12, 0.0), (14, 0.0), (15, 0.0)]);
        }
        if self.amd_fp8 {
            free.extend([(23, 0.0), (27, 1.0)]);
        }
        if self.eager {
            free.push((24, 1.0));
        }
        if self.mla {
            free.push((26, 1.0));
        }
        free.extend(
            self.kernel_terms()
                .into_iter()
                .filter(|&(_, free, _, _)| free)
                .map(|(index, ..)| (index, 0.0)),
        );
        free
    }
}

/// Where every family's fit starts and what its weak prior pulls toward: round figures from
/// what the kernels are known to do, never a previous fit's output, so that a fit (and each
/// cross-validation fold) depends on the data alone and reruns give the same factors.
pub(crate) const START: Factors = Factors {
    // Bandwidth-bound kernels reach ~80 % of the peak, GEMMs ~half of the dense peak.
    bandwidth_efficiency: 0.8,
    compute_efficiency: 0.5,
    // A scheduler step, a running sequence and an NVLink-class small all-reduce.
    step_overhead_ms: 0.3,
    sequence_overhead_us: 10.0,
    allreduce_latency_us: 10.0,
    request_overhead_ms: 5.0,
    consumer_compute_ratio: CONSUMER_RATIO,
    kv_bandwidth_ratio: 1.0,
    kv_saturation_streams: 0.0,
    moe_half_tokens: 16.0,
    // FlashAttention-2 reaches 50–73 % of an A100's peak (Dao, 2023), GEMMs ~70–85 %.
    attention_compute_ratio: 0.8,
    amd_bandwidth_ratio: 1.0,
    amd_compute_ratio: 1.0,
    // A decoder layer's ten-odd small kernels and their waits: single-stream decode on
    // 8×B200 under SGLang spends 65–150 µs a layer beyond its reads (gpt-oss-120b 36 layers
    // in 2.3 ms, Qwen3-235B 94 layers in 10 ms), llama.cpp's un-graphed CUDA ~15 launches.
    layer_overhead_us: 80.0,
    amd_overhead_ratio: 1.0,
    amd_attention_ratio: 1.0,
    // Little's law: a multiprocessor's 32-odd resident warps each keeping one 16-byte load
    // per thread in flight hold ~16 KB against ~700 ns of HBM latency: ~20 GB/s.
    multiprocessor_bandwidth_gb_s: 20.0,
    // llama.cpp's quantized products against cuBLAS on F16 weights: no prior either way.
    quantized_compute_ratio: 1.0,
    // FlashAttention-2's mma.sync kernels reach 35 % of an H100's peak where FlashAttention-3's
    // wgmma reaches 75 % (Shah et al., 2024), and 50–73 % of an A100's (Dao, 2023).
    hopper_mma_ratio: 0.6,
    // An H100 SXM's 989 dense TFLOPS at its 700 W and a 4090's 330 at 450 W: under a long
    // GEMM both run below their boost clocks, the former more; ~1 TFLOPS a watt binds there.
    power_tflops_per_watt: 1.0,
    // GEMMs stream their weights while the tensor cores work: no prior for llama.cpp's
    // small-batch kernels either way, so the overlapped (server) form.
    decode_overlap: 1.0,
    // A MoE layer's routing kernels beyond a dense MLP's (router product, top-k, sorting
    // tokens by expert, the grouped GEMMs' extra launches, the weighted combine): about
    // four more launch-bound kernels of ~5 µs each.
    moe_layer_overhead_us: 20.0,
    // Fused-MoE kernels at decode batch sizes reach a lower share of the peak than a dense
    // matrix-vector product: no measured prior, so none either way.
    expert_bandwidth_ratio: 1.0,
    // No prior either way for FP8 on AMD parts.
    amd_fp8_ratio: 1.0,
    // A decoder layer's ~15 kernels launched from the host at ~5 µs each, where a graph
    // replay launches them back to back.
    eager_layer_overhead_us: 75.0,
    // Uniform routing: no prior for how much a batch's tokens share their experts.
    routing_independence: 1.0,
    // Absorbed MLA's ~six extra small kernels a layer (q down/up, latent projection, two
    // norms, the two absorption products) at ~5 µs each.
    mla_layer_overhead_us: 30.0,
    // Block-FP8 linears quantize their activations per token group first: about four more
    // kernels a layer (~10 µs each on CDNA3).
    amd_fp8_layer_overhead_us: 40.0,
};

/// GeForce tensor cores run FP16 with FP16 accumulate at twice the
/// FP32-accumulate rate the catalog lists (GA102 and AD102 whitepapers):
/// a property of the parts, fixed rather than fitted.
pub(crate) const CONSUMER_RATIO: f64 = 2.0;
