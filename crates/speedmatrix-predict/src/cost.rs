//! The cost model: a step costs the larger of its memory and compute time (a llama.cpp
//! decode step also part of the shorter: [`Factors::decode_overlap`]), plus overheads and
//! tensor-parallel communication (docs/predict.md).

use std::time::Duration;

use crate::factors::Factors;
use crate::machine::Machine;
use crate::shape::ModelShape;
use crate::speculation::{Drafter, Speculation};
use serde::Serialize;

/// Effective link bandwidth between tensor-parallel ranks, bytes/s: an
/// NVLink-class fabric, or PCIe 4.0 ×16 (both achieved, not peak).
const FAST_LINK_BYTES_S: f64 = 300e9;
const PCIE_LINK_BYTES_S: f64 = 20e9;

/// What bounds a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// Reading weights, KV and state.
    Memory,
    /// Matrix products.
    Compute,
}

/// One step's time and its parts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StepTime {
    /// The whole step.
    pub total: Duration,
    /// Bytes over achieved bandwidth.
    pub memory: Duration,
    /// FLOPs over achieved throughput.
    pub compute: Duration,
    /// Fixed and per-sequence overhead plus tensor-parallel communication.
    pub overhead: Duration,
    /// Which of memory and compute is larger.
    pub bound: Bound,
}

impl StepTime {
    /// This step with `1 − overlap` of the shorter of its memory time and `products` (its
    /// compute time at full clocks: a step bound by its reads draws too little power to be
    /// limited) no longer hidden under the longer (see [`Factors::decode_overlap`]).
    fn serialized(mut self, overlap: f64, products: f64) -> StepTime {
        let hidden = self.memory.as_secs_f64().min(products);
        self.total += secs((1.0 - overlap.clamp(0.0, 1.0)) * hidden);
        self
    }

    /// This step followed by `seconds` of memory-bound kernels that nothing overlaps.
    fn then_memory(mut self, seconds: f64) -> StepTime {
        if seconds > 0.0 {
            self.total += secs(seconds);
            self.memory += secs(seconds);
            if self.memory >= self.compute {
                self.bound = Bound::Memory;
            }
        }
        self
    }
}

/// A model on a machine with factors: step times.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostModel {
    /// What a step reads and computes.
    pub shape: ModelShape,
    /// The GPUs.
    pub machine: Machine,
    /// The efficiency factors.
    pub factors: Factors,
    /// Prefill chunk (the engine's token budget per step).
    pub chunk: u64,
    /// Speculative decoding, when it is priced (an acceptance rate is known).
    pub speculation: Option<Speculation>,
    /// How attention runs: fused (flash) kernels, or a score matrix in memory.
    pub attention: AttentionKernel,
    /// The weights stay in a GGUF block type through the products (see
    /// [`Factors::quantized_compute_ratio`]); set by [`CostModel::with_weight_bytes`].
    pub quantized_products: bool,
    /// Which steps replay a CUDA graph.
    pub graphs: Graphs,
}

/// How an engine computes attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKernel {
    /// Flash-attention style kernels: scores stay on chip, causal blocks are skipped (vLLM,
    /// SGLang, TensorRT-LLM always; llama.cpp with `--flash-attn on|auto`).
    #[default]
    Fused,
    /// llama.cpp with `--flash-attn off` (and llama-bench's default before `-fa` existed or
    /// when not given, as in mid-2024 results): `build_attn_mha` multiplies K by Q into an f32
    /// score tensor over the whole padded KV span (the causal mask is applied after, so no
    /// block is skipped), runs `soft_max_ext` over it, and multiplies V by it: every score is
    /// written and read through memory ([`SCORE_BYTES`] each).
    Materialized,
}

/// Which steps replay a CUDA graph (their kernels captured once and launched as one) and
/// which launch every kernel from the host, paying [`Factors::eager_layer_overhead_us`] a
/// layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Graphs {
    /// Decode steps replay one (vLLM, SGLang and TensorRT-LLM capture their decode batch
    /// sizes); prefill's fixed time is fitted as it runs.
    #[default]
    Decode,
    /// Only single-token steps: llama.cpp's CUDA backend turns graphs off when an addition's
    /// second operand has more than one row (`ggml-cuda.cu`: "disable CUDA graphs for batch
    /// size > 1"), so batched decode steps and every prefill ubatch launch eagerly.
    SingleToken,
    /// None: vLLM under `--enforce-eager`.
    Never,
}

/// Bytes each attention score moves when the score matrix goes through memory: the f32
/// product written (4) and read by the softmax (4), its f32 result written (4) and read
/// to convert it to f16 for the second product (4), the f16 copy written (2) and read by
/// the product (2).
pub const SCORE_BYTES: f64 = 20.0;

impl CostModel {
    fn bandwidth(&self) -> f64 {
        self.multiprocessor_cap()
            .map_or_else(|| self.uncapped_bandwidth(), |(capped, _)| capped)
    }

    /// Peak × η_bw (× AMD's ratio): the bandwidth before any multiprocessor cap.
    fn uncapped_bandwidth(&self) -> f64 {
        let vendor = if self.machine.amd {
            self.factors.amd_bandwidth_ratio
        } else {
            1.0
        };
        self.machine.bandwidth_bytes_s * self.factors.bandwidth_efficiency * vendor
    }

    /// Achieved bandwidth with and without the per-multiprocessor cap, bytes/s, when the
    /// cap applies (a fitted `multiprocessor_bandwidth_gb_s` and a known count).
    pub fn multiprocessor_cap(&self) -> Option<(f64, f64)> {
        let per_unit = self.factors.multiprocessor_bandwidth_gb_s * 1e9;
        let units = self.machine.multiprocessors.filter(|_| per_unit > 0.0)?;
        let achieved = self.uncapped_bandwidth();
        let cap = f64::from(units) * per_unit;
        // A soft minimum of the two limits: near either one alone when the other is far
        // above it, below both where they meet (latency and queueing add up).
        Some(((achieved.powi(-4) + cap.powi(-4)).powf(-0.25), achieved))
    }

    /// GeForce parts' FP16-accumulate rate over the catalog's figure (1 elsewhere).
    fn consumer_ratio(&self) -> f64 {
        if self.machine.consumer {
            self.factors.consumer_compute_ratio
        } else {
            1.0
        }
    }

    fn flops(&self) -> f64 {
        let ratio = self.consumer_ratio();
        let vendor = if self.machine.amd {
            self.factors.amd_compute_ratio
        } else {
            1.0
        };
        self.machine.peak_flops
            * self.factors.compute_efficiency
            * ratio
            * vendor
            * self.power_scale().unwrap_or(1.0)
    }

    /// The share of its peak tensor throughput the GPU sustains under its board power, when
    /// the limit is modelled (a fitted `power_tflops_per_watt` and a known board power): the
    /// soft minimum of 1 and `watts × power_tflops_per_watt / peak` (GeForce at its full
    /// FP16-accumulate rate).
    pub fn power_scale(&self) -> Option<f64> {
        let per_watt = self.factors.power_tflops_per_watt * 1e12;
        let watts = self.machine.board_power_w.filter(|_| per_watt > 0.0)?;
        let x = watts * per_watt / (self.machine.half_flops * self.consumer_ratio()).max(1.0);
        Some((1.0 + x.powi(-4)).powf(-0.25))
    }

    /// Time of a step's matrix products for `tokens` tokens: the decoder's non-expert FLOPs
    /// and the LM head's (`head_flops`) at the dense efficiency, the routed experts' (in a
    /// prefill chunk, `grouped`) at the grouped-GEMM efficiency of `tokens · k / E` rows per
    /// expert, attention at its own; the decoder's FP8 weights on a FNUZ part at
    /// [`Factors::amd_fp8_ratio`] (the LM head stays in the model dtype). A decode step's few
    /// rows per expert run as matrix-vector products bound by the experts' reads, which the
    /// memory time already prices.
    fn compute_time(
        &self,
        tokens: u64,
        decoder_flops: f64,
        head_flops: f64,
        attention_flops: f64,
        grouped: bool,
    ) -> f64 {
        let p = &self.shape.params;
        let n = tokens.max(1) as f64;
        let expert_flops = n * 2.0 * p.experts_per_token as f64 * p.expert_params;
        let dense_flops = (decoder_flops - expert_flops).max(0.0);
        let grouped = if !grouped || p.num_experts == 0 || self.factors.moe_half_tokens <= 0.0 {
            1.0
        } else {
            let per_expert = n * p.experts_per_token as f64 / p.num_experts as f64;
            per_expert / (per_expert + self.factors.moe_half_tokens)
        };
        let flops = self.flops();
        let weights = if self.quantized_products {
            flops * self.factors.quantized_compute_ratio * self.hopper_mma()
        } else {
            flops
        };
        let fp8 = self.fp8_ratio();
        dense_flops / (weights * fp8)
            + head_flops / weights
            + expert_flops / (weights * grouped * fp8)
            + attention_flops / (flops * self.attention_ratio())
    }

    /// Whether [`Factors::amd_fp8_ratio`] applies: an FP8 checkpoint on a FNUZ part, not
    /// read from a GGUF file.
    pub fn fp8_ratio_applies(&self) -> bool {
        self.machine.fnuz_fp8 && !self.quantized_products
    }

    /// What an FP8 checkpoint's kernels keep on a FNUZ part (1 elsewhere, and for GGUF
    /// weights, which are not the checkpoint's FP8).
    pub fn fp8_ratio(&self) -> f64 {
        if self.fp8_ratio_applies() {
            self.factors.amd_fp8_ratio
        } else {
            1.0
        }
    }

    /// A step's weight reads as bytes at the dense bandwidth: the decoder's non-expert
    /// weights (FP8 on a FNUZ part at [`Factors::amd_fp8_ratio`]), the LM head, and `touched`
    /// routed experts at [`Factors::expert_bandwidth_ratio`] (and the FP8 ratio).
    fn weight_read_bytes(&self, touched: f64) -> f64 {
        let p = &self.shape.params;
        let fp8 = self.fp8_ratio();
        (p.dense_bytes - p.lm_head_bytes) / fp8
            + p.lm_head_bytes
            + touched * self.expert_read_bytes() / fp8
    }

    /// Attention's throughput relative to the dense products' on this GPU.
    fn attention_ratio(&self) -> f64 {
        let vendor = if self.machine.amd {
            self.factors.amd_attention_ratio
        } else {
            1.0
        };
        self.factors.attention_compute_ratio * vendor * self.hopper_mma()
    }

    /// What `mma.sync` kernels keep of this GPU's throughput (below 1 on Hopper only).
    fn hopper_mma(&self) -> f64 {
        if self.machine.hopper {
            self.factors.hopper_mma_ratio
        } else {
            1.0
        }
    }

    /// The vendor's latency terms relative to NVIDIA's.
    fn vendor_overhead(&self) -> f64 {
        if self.machine.amd {
            self.factors.amd_overhead_ratio
        } else {
            1.0
        }
    }

    /// One routed expert's bytes (all MoE layers) as dense bytes at the dense bandwidth:
    /// expert reads run at [`Factors::expert_bandwidth_ratio`] of it.
    fn expert_read_bytes(&self) -> f64 {
        self.shape.params.expert_bytes / self.factors.expert_bandwidth_ratio.max(0.01)
    }

    /// Distinct routed experts per MoE layer a step of `tokens` tokens reads: as many as
    /// `tokens^γ` uniformly routed tokens touch (γ [`Factors::routing_independence`]).
    pub fn experts_touched(&self, tokens: u64) -> f64 {
        let gamma = self.factors.routing_independence.clamp(0.1, 1.0);
        self.shape
            .experts_touched_by((tokens.max(1) as f64).powf(gamma))
    }

    /// Routing's fixed time per MoE layer per step on this GPU, µs (the vendor's overhead
    /// ratio included).
    pub fn routing_us(&self) -> f64 {
        self.vendor_overhead() * self.factors.moe_layer_overhead_us
    }

    /// A latent-attention layer's extra fixed time per step on this GPU beyond a
    /// grouped-query layer's, µs (the vendor's overhead ratio included).
    pub fn mla_us(&self) -> f64 {
        self.vendor_overhead() * self.factors.mla_layer_overhead_us
    }

    /// What an FP8 checkpoint adds to each layer's fixed time on a FNUZ part, µs (0
    /// elsewhere; see [`Factors::amd_fp8_layer_overhead_us`]).
    pub fn fp8_layer_us(&self) -> f64 {
        if self.fp8_ratio_applies() {
            self.factors.amd_fp8_layer_overhead_us
        } else {
            0.0
        }
    }

    /// The fixed time of a step of `rows` query tokens: the engine's per-step work, each
    /// layer's (more when the step launches its kernels without a graph), each MoE layer's
    /// routing and each MLA layer's extra projections beyond it, and what an FP8 checkpoint's
    /// kernels add on a FNUZ part.
    fn fixed_step_s(&self, rows: u64) -> f64 {
        let eager = match self.graphs {
            Graphs::Decode => false,
            Graphs::SingleToken => rows > 1,
            Graphs::Never => true,
        };
        let layer_us = self.factors.layer_overhead_us
            + if eager {
                self.factors.eager_layer_overhead_us
            } else {
                0.0
            };
        self.vendor_overhead()
            * (self.factors.step_overhead_ms * 1e-3
                + self.shape.layers as f64 * layer_us * 1e-6
                + self.shape.moe_layers as f64 * self.factors.moe_layer_overhead_us * 1e-6
                + self.shape.mla_layers as f64 * self.factors.mla_layer_overhead_us * 1e-6)
            // Already an AMD figure: not scaled by the vendor's overhead ratio.
            + self.shape.layers as f64 * self.fp8_layer_us() * 1e-6
    }

    /// Two all-reduces of `tokens × hidden` bf16 values per layer.
    fn communication(&self, tokens: u64) -> f64 {
        let tp = f64::from(self.machine.tensor_parallel);
        if tp <= 1.0 {
            return 0.0;
        }
        let link = if self.machine.fast_link {
            FAST_LINK_BYTES_S
        } else {
            PCIE_LINK_BYTES_S
        };
        let payload = tokens as f64 * self.shape.hidden_size as f64 * 2.0;
        let latency = self.factors.allreduce_latency_us * 1e-6 * self.vendor_overhead();
        // A ring all-reduce moves 2(tp − 1)/tp of the payload per rank.
        let per = latency + payload * 2.0 * (tp - 1.0) / tp / link;
        2.0 * self.shape.layers as f64 * per
    }

    /// Time the score matrix of `queries` query tokens over `context` tokens takes through
    /// memory when attention materializes it (0 for fused kernels). The softmax and the
    /// conversion are kernels of their own between the two products: their time adds to
    /// the step's rather than hiding under its compute.
    fn score_time(&self, queries: u64, context: u64) -> f64 {
        match self.attention {
            AttentionKernel::Fused => 0.0,
            AttentionKernel::Materialized => {
                self.shape.scores(queries, context) * SCORE_BYTES
                    / (self.bandwidth() * self.factors.kv_bandwidth_ratio)
            }
        }
    }

    /// A step reading `weights` and `cache` (KV and recurrent state) bytes and computing
    /// `flops`, plus `overhead_s`.
    fn step(&self, weights: f64, cache: f64, compute: f64, overhead_s: f64) -> StepTime {
        let memory = weights / self.bandwidth()
            + cache / (self.bandwidth() * self.factors.kv_bandwidth_ratio);
        let total = memory.max(compute) + overhead_s;
        StepTime {
            total: secs(total),
            memory: secs(memory),
            compute: secs(compute),
            overhead: secs(overhead_s),
            bound: if memory >= compute {
                Bound::Memory
            } else {
                Bound::Compute
            },
        }
    }

    /// One decode step of `batch` sequences at `context` tokens each: with speculation, the
    /// drafter's passes and a verifying pass of `tokens + 1` query tokens a sequence.
    pub fn decode_step(&self, batch: u64, context: u64) -> StepTime {
        let s = &self.shape;
        let p = &s.params;
        let b = batch.max(1) as f64;
        let queries = self.speculation.map_or(1, |x| x.tokens + 1);
        let rows = batch.max(1) * queries;
        let q = rows as f64;
        let weights = self.weight_read_bytes(self.experts_touched(rows));
        let cache = (b + self.factors.kv_saturation_streams) * s.kv_bytes(context)
            + b * 2.0 * s.state_bytes_per_sequence;
        let compute = self.compute_time(
            rows,
            q * 2.0 * p.decoder_macs_per_token,
            q * 2.0 * p.lm_head_macs_per_token,
            q * s.attention_flops(context),
            false,
        );
        let overhead = self.fixed_step_s(rows)
            + b * self.factors.sequence_overhead_us * 1e-6
            + self.communication(rows);
        let target = self
            .step(weights, cache, compute, overhead)
            .serialized(
                self.factors.decode_overlap,
                compute * self.power_scale().unwrap_or(1.0),
            )
            .then_memory(self.score_time(rows, context));
        match self.speculation {
            Some(x) if x.tokens > 0 => self.with_drafter(target, &x, b),
            _ => target,
        }
    }

    /// `target` plus the drafter's `tokens` passes over `b` sequences, each reading the
    /// drafter's weights and computing its products, and paying its layers' fixed time.
    fn with_drafter(&self, target: StepTime, x: &Speculation, b: f64) -> StepTime {
        let p = &self.shape.params;
        // Bytes at the dense bandwidth, MACs at the dense throughput, layers and their
        // fixed time each.
        let (bytes, macs, layers, per_layer_us) = match x.drafter {
            Drafter::None => return target,
            Drafter::TargetLayers { layers } => {
                // The model's own MTP layers: the decoder's share, with its weights' dtype,
                // its routed experts and its MoE routing.
                let share = layers as f64 / self.shape.layers.max(1) as f64;
                let head = p.lm_head_bytes;
                let decoder = self.weight_read_bytes(self.experts_touched(b.max(1.0) as u64));
                let routing = if self.shape.moe_layers > 0 {
                    self.factors.moe_layer_overhead_us
                } else {
                    0.0
                };
                // MTP layers are the decoder's kind: latent attention where it has it.
                let latent = if self.shape.mla_layers > 0 {
                    self.factors.mla_layer_overhead_us
                } else {
                    0.0
                };
                (
                    share * (decoder - head) + head,
                    share * p.decoder_macs_per_token / self.fp8_ratio() + p.lm_head_macs_per_token,
                    layers,
                    self.factors.layer_overhead_us + routing + latent,
                )
            }
            Drafter::Model {
                bytes,
                macs_per_token,
                layers,
            } => (
                bytes,
                macs_per_token,
                layers,
                self.factors.layer_overhead_us,
            ),
        };
        let passes = x.tokens as f64;
        let memory = passes * bytes / self.bandwidth();
        let compute = passes * b * 2.0 * macs / self.flops();
        let overhead = passes * layers as f64 * per_layer_us * 1e-6;
        let add = |a: Duration, s: f64| a + secs(s);
        let drafter = memory.max(compute) + overhead;
        StepTime {
            total: add(target.total, drafter),
            memory: add(target.memory, memory),
            compute: add(target.compute, compute),
            overhead: add(target.overhead, overhead),
            bound: target.bound,
        }
    }

    /// Tokens a decode step emits per sequence (1 without speculation).
    pub fn tokens_per_step(&self) -> f64 {
        self.speculation.map_or(1.0, |x| x.tokens_per_step())
    }

    /// One prefill chunk of `tokens` new tokens after `cached` ones, the
    /// last chunk of its prompt when `last` (its LM head runs).
    pub fn prefill_chunk(&self, tokens: u64, cached: u64, last: bool) -> StepTime {
        let s = &self.shape;
        let p = &s.params;
        let n = tokens as f64;
        // Attention over the cached tokens and the causal half of the chunk; a materialized
        // score matrix spans the whole chunk (the mask comes after the product).
        let mid = match self.attention {
            AttentionKernel::Fused => cached + tokens / 2,
            AttentionKernel::Materialized => cached + tokens,
        };
        let weights = self.weight_read_bytes(self.experts_touched(tokens));
        let cache = s.kv_bytes(cached + tokens) + 2.0 * s.state_bytes_per_sequence;
        let head = if last {
            2.0 * p.lm_head_macs_per_token
        } else {
            0.0
        };
        let compute = self.compute_time(
            tokens,
            n * 2.0 * p.decoder_macs_per_token,
            head,
            n * s.attention_flops(mid),
            true,
        );
        let overhead = self.fixed_step_s(tokens) + self.communication(tokens);
        self.step(weights, cache, compute, overhead)
            .then_memory(self.score_time(tokens, cached + tokens))
    }

    /// Time to first token of one `prompt`-token request on an idle server
    /// with nothing cached: the request overhead and each chunk.
    pub fn cold_ttft(&self, prompt: u64) -> Duration {
        let chunk = self.chunk.max(1);
        let mut done = 0;
        let mut total = self.factors.request_overhead_ms * 1e-3;
        while done < prompt.max(1) {
            let n = chunk.min(prompt.max(1) - done);
            total += self
                .prefill_chunk(n, done, done + n >= prompt)
                .total
                .as_secs_f64();
            done += n;
        }
        secs(total)
    }

    /// Time to first token of a request whose prompt is cached but for its
    /// last partial block of `tail` tokens, joining `batch − 1` decoding ones.
    pub fn warm_ttft(&self, context: u64, tail: u64, batch: u64) -> Duration {
        let prefill = self.prefill_chunk(tail.max(1), context.saturating_sub(tail), true);
        let step = self.decode_step(batch, context);
        secs(
            self.factors.request_overhead_ms * 1e-3
                + prefill.total.as_secs_f64()
                + step.total.as_secs_f64(),
        )
    }
}

fn secs(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)
}
