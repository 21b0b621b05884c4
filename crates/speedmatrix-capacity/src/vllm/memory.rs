//! The memory budget on one rank: what vLLM's profiling run leaves for the KV
//! cache (`gpu_worker.py`, `cpu_worker.py`), with the non-KV terms that can only
//! be estimated labelled as estimates.

use super::*;

/// How a memory term was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TermKind {
    /// Read off the checkpoint or a log (safetensors headers, "Model loading took").
    Measured,
    /// Exact from the engine's rules and the inputs (e.g. no CUDA graphs under `--enforce-eager`).
    Derived,
    /// A model of the engine's behaviour, fitted or reasoned from its source.
    Estimated,
    /// Given by the caller.
    Given,
}

/// A memory term with how it was obtained.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Bytes (per rank).
    pub bytes: ByteSize,
    /// `true` when the figure is a model of the engine's behaviour, not a given.
    pub estimated: bool,
    /// Measured, derived, estimated or given.
    pub kind: TermKind,
    /// The assumptions behind it.
    pub basis: String,
}

impl Estimate {
    pub(super) fn given(bytes: ByteSize, basis: &str) -> Self {
        Estimate::of(TermKind::Given, bytes, basis)
    }

    pub(super) fn derived(bytes: ByteSize, basis: &str) -> Self {
        Estimate::of(TermKind::Derived, bytes, basis)
    }

    pub(super) fn measured(bytes: ByteSize, basis: &str) -> Self {
        Estimate::of(TermKind::Measured, bytes, basis)
    }

    fn of(kind: TermKind, bytes: ByteSize, basis: &str) -> Self {
        Estimate {
            bytes,
            estimated: kind == TermKind::Estimated,
            kind,
            basis: basis.to_owned(),
        }
    }

    pub(super) fn modelled(bytes: u64, basis: String) -> Self {
        Estimate {
            bytes: ByteSize::new(bytes),
            estimated: true,
            kind: TermKind::Estimated,
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

/// `(max_num_batched_tokens, max_num_seqs)`: the flags, else
/// `arg_utils.get_batch_defaults` for `vllm serve`: GPUs of 70 GiB and more
/// other than the A100 get the large defaults; from v0.28 those of 160 GiB and
/// more also 16,384 batched tokens. Unified-memory devices (GB10) report no
/// device memory through NVML and stay on the small defaults.
pub fn batch_defaults(gpu: &Gpu, flags: &VllmFlags) -> (u64, u32) {
    let on_gpu = matches!(flags.device, VllmDevice::Gpu) && !gpu.unified_memory;
    let big = gpu.memory.get() >= 70 << 30 && !gpu.is_a100 && on_gpu;
    let huge = gpu.memory.get() >= 160 << 30 && on_gpu && flags.version.has(BATCH_TIER_160);
    let (mnbt, mns) = match (huge, big) {
        (true, _) => (16384, 1024),
        (false, true) => (8192, 1024),
        _ => (2048, 256),
    };
    (
        flags.max_num_batched_tokens.unwrap_or(mnbt),
        flags.max_num_seqs.unwrap_or(mns),
    )
}

/// What one worker holds: its pipeline stage's layers and whether it has the
/// embedding (first stage) and the LM head and sampler (last stage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stage {
    pub(super) layers: std::ops::Range<usize>,
    pub(super) first: bool,
    pub(super) last: bool,
}

pub(super) fn memory_budget(
    model: &ModelConfig,
    gpu: &Gpu,
    flags: &VllmFlags,
    layout: &VllmLayout,
    stage: &Stage,
) -> Result<MemoryBudget, CapacityError> {
    let tp = flags.tensor_parallel_size.max(1);
    let weights = match flags.overhead.weights {
        Some(w) => Estimate::given(w, "given (per rank)"),
        None => {
            let placement = WeightPlacement {
                tensor_parallel: u64::from(tp),
                expert_parallel: if flags.enable_expert_parallel {
                    u64::from(tp) * u64::from(flags.data_parallel_size.max(1))
                } else {
                    1
                },
                layers: stage.layers.clone(),
                embedding: stage.first,
                lm_head: stage.last,
                language_model_only: flags.language_model_only,
            };
            match &flags.checkpoint {
                Some(c) => {
                    let mtp = matches!(flags.speculative_method, Some(SpeculativeMethod::Mtp));
                    let w = c.bytes_on(model, &placement, mtp);
                    Estimate::measured(w.per_rank, &w.basis)
                }
                None => {
                    let w = model.estimate_weights_on(&placement);
                    match flags.overhead.checkpoint_total {
                        Some(total) => {
                            let whole = model.estimate_weights(flags.language_model_only, 1).total;
                            let share = w.per_rank.get() as f64 / whole.get().max(1) as f64;
                            Estimate::modelled(
                                (total.get() as f64 * share).round() as u64,
                                format!(
                                    "the checkpoint's {total} (safetensors index), {:.1} % of it on \
                                     this rank as the counted weights split ({})",
                                    share * 100.0,
                                    w.basis
                                ),
                            )
                        }
                        None => Estimate::modelled(w.per_rank.get(), w.basis),
                    }
                }
            }
        }
    };
    // The drafter's weights load beside the last stage's.
    let weights = match flags.draft_model.as_deref() {
        Some(d) if stage.last && super::layout::drafts_with_own_layers(flags) => {
            let dw = d.estimate_weights(true, tp);
            Estimate::modelled(
                weights.bytes.get() + dw.per_rank.get(),
                format!("{}; + drafter {}", weights.basis, dw.basis),
            )
        }
        _ => weights,
    };
    if let VllmDevice::Cpu { kvcache_space } = flags.device {
        let zero = |why: &str| Estimate::derived(ByteSize::new(0), why);
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
        || activation_estimate(model, flags, stage.last),
        |b| Estimate::given(b, "given"),
    );
    let non_torch = flags.overhead.non_torch.map_or_else(
        || non_torch_estimate(gpu, flags),
        |b| Estimate::given(b, "given"),
    );
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

/// Bytes the sampler warm-up of `profile_run` holds per logit, by the path
/// the version takes (see [`VLLM_RULES`](super::VLLM_RULES)): FlashInfer's
/// sampler when installed (before v0.11, about 10 B from the source) and by
/// default (from v0.21, fitted); the
/// PyTorch sort path (v0.11 to v0.16: fp32 values and int64 indices of the
/// sort, softmax, cumulative sum, masks, noise); the Triton top-k/top-p kernel
/// (v0.17 to v0.20).
pub(super) fn sampler_bytes_per_logit(version: VllmVersion) -> (u64, &'static str) {
    if version.has(SAMPLER_FLASHINFER) {
        (
            SAMPLER_FLASHINFER_BYTES,
            "FlashInfer sampler path (default from v0.21; fitted on vllm#52872's RTX 5090 table)",
        )
    } else if version.has(SAMPLER_TRITON) {
        (
            SAMPLER_TRITON_BYTES,
            "Triton top-k/top-p (v0.17-v0.20; fitted on the llm-d planner's H100 table)",
        )
    } else if version.has(SAMPLER_NATIVE_SORT) {
        (
            SAMPLER_SORT_BYTES,
            "PyTorch sort path (v0.11-v0.16; fitted on four public profiling logs)",
        )
    } else {
        (
            10,
            "FlashInfer sampler when installed (before v0.11; not fitted)",
        )
    }
}

/// Fitted: 38.5-39.8 B per logit in four public profiling logs on the sort path.
pub(super) const SAMPLER_SORT_BYTES: u64 = 39;
/// Fitted: the 2.0 GiB a 256-row × 248,320-vocab warm-up leaves at zero
/// batched tokens in vllm#52872 (RTX 5090, v0.2x); the source alone would
/// suggest about 10 B (an fp32 copy and softmax).
pub(super) const SAMPLER_FLASHINFER_BYTES: u64 = 34;
/// Fitted: 15.2-15.5 B per logit in the llm-d planner's v0.17-v0.19 table.
pub(super) const SAMPLER_TRITON_BYTES: u64 = 15;

/// The transient torch peak of `profile_run`: the larger of the forward pass
/// over `max_num_batched_tokens` tokens and, on the last pipeline stage, the
/// sampler warm-up over `min(max_num_seqs, max_num_batched_tokens)` rows of
/// logits (`_dummy_run` / `_dummy_sampler_run` in gpu_model_runner.py: the
/// forward's activations are freed before the sampler runs).
pub(super) fn activation_estimate(model: &ModelConfig, flags: &VllmFlags, last: bool) -> Estimate {
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
    let (per_logit, path) = sampler_bytes_per_logit(flags.version);
    let sampler = if last {
        mnbt * model.hidden_size * dtype + rows * model.vocab_size * per_logit
    } else {
        0
    };
    Estimate::modelled(
        forward.max(sampler),
        format!(
            "estimate: the larger of the forward over max_num_batched_tokens={mnbt} tokens × \
             {per_token} activations × {dtype} B (6·hidden + (3·ffn + 2·qkv)/tp live at the peak) \
             and {}",
            if last {
                format!(
                    "the sampler warm-up: {rows} rows × vocab {} × {per_logit} B per logit, {path}",
                    model.vocab_size
                )
            } else {
                "no sampler (not the last pipeline stage)".to_owned()
            }
        ),
    )
}

/// Non-torch memory made after the profiling snapshot: allocator and library
/// workspaces on every rank, and under tensor parallelism the communication
/// buffers: all of NCCL's before v0.11 (the snapshot was taken before NCCL
/// started), and from v0.11 the lazily made ones, larger over NVLink-class
/// links (custom all-reduce, NVLS/symmetric memory) than over PCIe.
pub(super) fn non_torch_estimate(gpu: &Gpu, flags: &VllmFlags) -> Estimate {
    let tp = flags.tensor_parallel_size.max(1);
    let (unified, unified_why) = if gpu.unified_memory {
        (
            NON_TORCH_UNIFIED,
            "; + 2 GiB on unified memory, where free memory is the OS's available memory and \
             what the host takes while profiling counts too (fitted on three DGX Spark logs)",
        )
    } else {
        (0, "")
    };
    let (bytes, why) = if tp == 1 {
        (NON_TORCH_BASE, "no tensor parallelism")
    } else if !flags.version.has(SNAPSHOT_AFTER_NCCL) {
        (
            NON_TORCH_BASE + NON_TORCH_NCCL_INIT,
            "+ 0.5 GiB of NCCL buffers (made after the snapshot before v0.11; public logs: 0.1-1.4 GiB)",
        )
    } else if gpu.fast_interconnect {
        (
            NON_TORCH_BASE + NON_TORCH_TP_LINKED,
            "+ 1.25 GiB of communication buffers over NVLink-class links (public logs: 0.6-2.1 GiB)",
        )
    } else {
        (
            NON_TORCH_BASE + NON_TORCH_TP_PCIE,
            "+ 64 MiB of communication buffers over PCIe",
        )
    };
    Estimate::modelled(
        bytes + unified,
        format!("estimate: 160 MiB of library workspaces and allocator slack {why}{unified_why}"),
    )
}

pub(super) const NON_TORCH_BASE: u64 = 160 << 20;
pub(super) const NON_TORCH_NCCL_INIT: u64 = 512 << 20;
pub(super) const NON_TORCH_UNIFIED: u64 = 2 << 30;
pub(super) const NON_TORCH_TP_LINKED: u64 = 1280 << 20;
pub(super) const NON_TORCH_TP_PCIE: u64 = 64 << 20;
pub(super) const BYTES_PER_GRAPH: u64 = 6 << 20;

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
        return Estimate::derived(ByteSize::new(0), "--enforce-eager: no CUDA graphs");
    }
    if !flags.version.has(CUDAGRAPH_BUDGET) {
        return Estimate::derived(
            ByteSize::new(0),
            "not budgeted before v0.20.0: graphs are captured after the KV cache and use the 1−utilization headroom",
        );
    }
    let mns = u64::from(flags.max_num_seqs.unwrap_or(256));
    let piecewise = capture_sizes((2 * mns).min(512));
    let full = capture_sizes(mns.min(512));
    let graphs = piecewise + full;
    Estimate::modelled(
        graphs * BYTES_PER_GRAPH,
        format!(
            "estimate: {piecewise} piecewise + {full} full-decode graphs × 6 MiB (profiled since v0.20.0; \
             calibrated on 'Qwen3-8B: 51+35 graphs, 0.52 GiB'; can be much larger on some models, vllm#45178/#50780)"
        ),
    )
}
