//! The memory budget on one rank: what vLLM's profiling run leaves for the KV
//! cache (`gpu_worker.py`, `cpu_worker.py`), with the non-KV terms that can only
//! be estimated labelled as estimates.

use super::*;

/// A memory term with how it was obtained.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Bytes (per rank).
    pub bytes: ByteSize,
    /// `true` when the figure is a model of the engine's behaviour, not a given.
    pub estimated: bool,
    /// The assumptions behind it.
    pub basis: String,
}

impl Estimate {
    pub(super) fn given(bytes: ByteSize, basis: &str) -> Self {
        Estimate {
            bytes,
            estimated: false,
            basis: basis.to_owned(),
        }
    }

    pub(super) fn modelled(bytes: u64, basis: String) -> Self {
        Estimate {
            bytes: ByteSize::new(bytes),
            estimated: true,
            basis,
        }
    }
}

/// Where the KV budget came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KvBudgetSource {
    /// `requested − weights − activation peak − non-torch − CUDA graphs`.
    Profiled,
    /// `--kv-cache-memory-bytes`, verbatim.
    KvCacheMemoryBytes,
    /// `VLLM_CPU_KVCACHE_SPACE`, verbatim.
    CpuKvCacheSpace,
}

/// The memory budget on one rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryBudget {
    /// Device memory as the runtime sees it.
    pub device_total: ByteSize,
    /// `--gpu-memory-utilization`.
    pub utilization: f64,
    /// `ceil(device_total × utilization)`.
    pub requested: ByteSize,
    /// Model weights on this rank.
    pub weights: Estimate,
    /// Transient torch peak of the profiling run.
    pub activation_peak: Estimate,
    /// Non-torch allocations made after the startup snapshot.
    pub non_torch: Estimate,
    /// CUDA-graph memory charged to the budget.
    pub cudagraph: Estimate,
    /// Memory left for the KV cache ("Available KV cache memory").
    pub available_kv: ByteSize,
    /// How `available_kv` was obtained.
    pub source: KvBudgetSource,
}

/// `arg_utils.get_batch_defaults` for `vllm serve`.
pub(super) fn batch_defaults(gpu: &Gpu, flags: &VllmFlags) -> (u64, u32) {
    let big =
        gpu.memory.get() >= 70 << 30 && !gpu.is_a100 && matches!(flags.device, VllmDevice::Gpu);
    let (mnbt, mns) = if big { (8192, 1024) } else { (2048, 256) };
    (
        flags.max_num_batched_tokens.unwrap_or(mnbt),
        flags.max_num_seqs.unwrap_or(mns),
    )
}

pub(super) fn memory_budget(
    model: &ModelConfig,
    gpu: &Gpu,
    flags: &VllmFlags,
    layout: &VllmLayout,
) -> Result<MemoryBudget, CapacityError> {
    let tp = flags.tensor_parallel_size.max(1);
    let weights = match flags.overhead.weights {
        Some(w) => Estimate::given(w, "given (per rank)"),
        None => {
            let w = model.estimate_weights(flags.language_model_only, tp);
            Estimate::modelled(w.per_rank.get(), w.basis)
        }
    };
    if let VllmDevice::Cpu { kvcache_space } = flags.device {
        let zero = |why: &str| Estimate::given(ByteSize::new(0), why);
        return Ok(MemoryBudget {
            device_total: gpu.memory,
            utilization: flags.gpu_memory_utilization,
            requested: kvcache_space,
            weights,
            activation_peak: zero("not part of the KV budget on the CPU backend"),
            non_torch: zero("not part of the KV budget on the CPU backend"),
            cudagraph: zero("no CUDA graphs on the CPU backend"),
            available_kv: kvcache_space,
            source: KvBudgetSource::CpuKvCacheSpace,
        });
    }
    let requested = (gpu.memory.get() as f64 * flags.gpu_memory_utilization).ceil() as u64;
    let activation = flags.overhead.activation_peak.map_or_else(
        || activation_estimate(model, flags),
        |b| Estimate::given(b, "given"),
    );
    let non_torch = flags
        .overhead
        .non_torch
        .map_or_else(|| non_torch_estimate(tp), |b| Estimate::given(b, "given"));
    let cudagraph = flags.overhead.cudagraph.map_or_else(
        || cudagraph_estimate(flags),
        |b| Estimate::given(b, "given"),
    );
    let (available, source) = match flags.kv_cache_memory_bytes {
        Some(b) => (b.get(), KvBudgetSource::KvCacheMemoryBytes),
        None => {
            let non_kv = weights.bytes.get()
                + activation.bytes.get()
                + non_torch.bytes.get()
                + cudagraph.bytes.get();
            if non_kv >= requested || requested - non_kv < layout.bytes_per_block {
                return Err(CapacityError::NoKvMemory {
                    requested_gib: ByteSize::new(requested).as_gib_f64(),
                    non_kv_gib: ByteSize::new(non_kv).as_gib_f64(),
                });
            }
            (requested - non_kv, KvBudgetSource::Profiled)
        }
    };
    Ok(MemoryBudget {
        device_total: gpu.memory,
        utilization: flags.gpu_memory_utilization,
        requested: ByteSize::new(requested),
        weights,
        activation_peak: activation,
        non_torch,
        cudagraph,
        available_kv: ByteSize::new(available),
        source,
    })
}

/// Profiling forward at `max_num_batched_tokens` plus the sampler warm-up.
pub(super) fn activation_estimate(model: &ModelConfig, flags: &VllmFlags) -> Estimate {
    let tp = u64::from(flags.tensor_parallel_size.max(1));
    let mnbt = flags.max_num_batched_tokens.unwrap_or(2048);
    let rows = u64::from(flags.max_num_seqs.unwrap_or(256)).min(mnbt);
    let dtype = model.dtype.bytes();
    let ffn = match model.moe {
        Some(m) => m.experts_per_token * m.expert_intermediate + m.shared_intermediate,
        None => model.intermediate_size,
    };
    let gate = if model.attn_output_gate { 2 } else { 1 };
    let qkv =
        model.num_attention_heads * model.head_dim * gate + 2 * model.num_kv_heads * model.head_dim;
    let per_token = 6 * model.hidden_size + (3 * ffn + 2 * qkv) / tp;
    let forward = mnbt * dtype * per_token;
    let sampler = rows * model.vocab_size * SAMPLER_BYTES_PER_LOGIT;
    Estimate::modelled(
        forward + sampler,
        format!(
            "estimate: forward over max_num_batched_tokens={mnbt} tokens × {per_token} activations × {dtype} B \
             (6·hidden + (3·ffn + 2·qkv)/tp live at the peak) + sampler warm-up {rows} rows × vocab {} × \
             {SAMPLER_BYTES_PER_LOGIT} B (fp32 logits, probs, sorted values and int64 indices)",
            model.vocab_size
        ),
    )
}

pub(super) const SAMPLER_BYTES_PER_LOGIT: u64 = 20;
pub(super) const NON_TORCH_BASE: u64 = 600 << 20;
pub(super) const NON_TORCH_TP: u64 = 256 << 20;
pub(super) const BYTES_PER_GRAPH: u64 = 6 << 20;

pub(super) fn non_torch_estimate(tp: u32) -> Estimate {
    let bytes = NON_TORCH_BASE + if tp > 1 { NON_TORCH_TP } else { 0 };
    Estimate::modelled(
        bytes,
        format!(
            "estimate: 600 MiB of cuBLAS/cuBLASLt and attention-backend workspaces and allocator slack{}",
            if tp > 1 {
                " + 256 MiB NCCL/custom all-reduce buffers"
            } else {
                ""
            }
        ),
    )
}

/// vLLM's capture sizes: 1, 2, 4, then steps of 8 up to 256, then steps of 16.
pub(super) fn capture_sizes(max: u64) -> u64 {
    let small = [1u64, 2, 4].iter().filter(|s| **s <= max).count() as u64;
    let by8 = if max >= 8 {
        (max.min(248) - 8) / 8 + 1
    } else {
        0
    };
    let by16 = if max >= 256 { (max - 256) / 16 + 1 } else { 0 };
    small + by8 + by16
}

pub(super) fn cudagraph_estimate(flags: &VllmFlags) -> Estimate {
    if flags.enforce_eager {
        return Estimate::given(ByteSize::new(0), "--enforce-eager: no CUDA graphs");
    }
    if !flags.version.has(super::version::CUDAGRAPH_BUDGET) {
        return Estimate::given(
            ByteSize::new(0),
            "not budgeted before v0.21.0: graphs are captured after the KV cache and use the 1−utilization headroom",
        );
    }
    let mns = u64::from(flags.max_num_seqs.unwrap_or(256));
    let piecewise = capture_sizes((2 * mns).min(512));
    let full = capture_sizes(mns.min(512));
    let graphs = piecewise + full;
    Estimate::modelled(
        graphs * BYTES_PER_GRAPH,
        format!(
            "estimate: {piecewise} piecewise + {full} full-decode graphs × 6 MiB (profiled since v0.21.0; \
             calibrated on 'Qwen3-8B: 51+35 graphs, 0.52 GiB'; can be much larger on some models, vllm#45178/#50780)"
        ),
    )
}
