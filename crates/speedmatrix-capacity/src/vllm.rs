//! vLLM (v1 engine): block size, KV groups, memory budget, number of blocks and the
//! two startup log figures, following `kv_cache_interface.py`, `kv_cache_planning.py`,
//! `Platform._align_hybrid_block_size`, `gpu_worker.py` and `cpu_worker.py`.

use serde::Serialize;
use speedmatrix_units::ByteSize;

use crate::config::{LayerKind, ModelConfig};
use crate::gpu::{Gpu, gib_bytes};
use crate::{CapacityError, Dtype, KvCacheDtype};

/// How vLLM keeps recurrent (Mamba/GDN) states for prefix caching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MambaCacheMode {
    /// One state per running request (no prefix caching).
    None,
    /// States at block boundaries; the default with `--enable-prefix-caching`.
    Align,
    /// A state per block for every cached block.
    All,
}

/// A vLLM release, for the behaviours that changed between releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct VllmVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl VllmVersion {
    /// The newest behaviour this crate models (v0.32.0 ≈ main at the time of writing).
    pub const LATEST: VllmVersion = VllmVersion {
        major: 0,
        minor: 32,
        patch: 0,
    };

    /// Parses `0.32.0`, `v0.20.1rc1`, `0.19`.
    pub fn parse(text: &str) -> Result<Self, CapacityError> {
        let bad = || CapacityError::BadFlag {
            flag: "vllm version",
            value: text.to_owned(),
            why: "expected e.g. 0.32.0",
        };
        let mut parts = text.trim().trim_start_matches('v').split('.').map(|p| {
            p.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<u32>()
                .ok()
        });
        let major = parts.next().flatten().ok_or_else(bad)?;
        let minor = parts.next().flatten().ok_or_else(bad)?;
        let patch = parts.next().flatten().unwrap_or(0);
        Ok(VllmVersion {
            major,
            minor,
            patch,
        })
    }

    const fn at_least(self, minor: u32, patch: u32) -> bool {
        self.major > 0 || self.minor > minor || (self.minor == minor && self.patch >= patch)
    }
}

impl Default for VllmVersion {
    fn default() -> Self {
        VllmVersion::LATEST
    }
}

/// Where vLLM runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VllmDevice {
    /// A CUDA/ROCm GPU: the budget comes from utilization and profiling.
    Gpu,
    /// The CPU backend with `VLLM_CPU_KVCACHE_SPACE` set: the KV cache gets exactly
    /// that many bytes, the block size defaults to 128 and KV quantization is off.
    Cpu {
        /// `VLLM_CPU_KVCACHE_SPACE` in bytes (the variable is in GiB).
        kvcache_space: ByteSize,
    },
}

/// Overrides for the non-KV terms that cannot be derived from a config (calibrate
/// them from one boot log of the same GPU, model and version).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct OverheadOverrides {
    /// Transient torch peak of the profiling forward + sampler warm-up.
    pub activation_peak: Option<ByteSize>,
    /// Non-torch allocations (cuBLAS/attention workspaces, NCCL, allocator slack).
    pub non_torch: Option<ByteSize>,
    /// CUDA-graph memory estimate.
    pub cudagraph: Option<ByteSize>,
    /// Exact weight bytes per rank (e.g. from the safetensors index / 'Model loading took').
    pub weights: Option<ByteSize>,
}

/// The vLLM flags that change KV capacity. `Default` is `vllm serve` with no flags.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VllmFlags {
    /// `--gpu-memory-utilization` (default 0.9).
    pub gpu_memory_utilization: f64,
    /// `--max-model-len`; default: the config's `max_position_embeddings`.
    pub max_model_len: Option<u64>,
    /// `--max-num-seqs`; default 256, or 1024 on GPUs ≥ 70 GiB other than A100.
    pub max_num_seqs: Option<u32>,
    /// `--max-num-batched-tokens`; default 2048, or 8192 on GPUs ≥ 70 GiB other than A100.
    pub max_num_batched_tokens: Option<u64>,
    /// `--kv-cache-dtype`.
    pub kv_cache_dtype: KvCacheDtype,
    /// `--block-size` (default 16 on GPU, 128 on CPU; hybrid models raise it).
    pub block_size: Option<u64>,
    /// `--mamba-block-size` (only with mamba cache mode `all`).
    pub mamba_block_size: Option<u64>,
    /// `--enable-prefix-caching`.
    pub enable_prefix_caching: bool,
    /// `--mamba-cache-mode`; default: `align` with prefix caching, else `none`.
    pub mamba_cache_mode: Option<MambaCacheMode>,
    /// `--enforce-eager`: no CUDA graphs.
    pub enforce_eager: bool,
    /// `--kv-cache-memory-bytes`: the KV budget verbatim.
    pub kv_cache_memory_bytes: Option<ByteSize>,
    /// `--num-gpu-blocks-override`.
    pub num_gpu_blocks_override: Option<u64>,
    /// `--tensor-parallel-size`.
    pub tensor_parallel_size: u32,
    /// Speculative tokens (MTP/EAGLE): extra state blocks per recurrent group.
    pub num_speculative_tokens: u64,
    /// `--language-model-only` (or all multimodal limits 0): no vision tower.
    pub language_model_only: bool,
    /// `--disable-hybrid-kv-cache-manager`.
    pub disable_hybrid_kv_cache_manager: bool,
    /// Engine release.
    pub version: VllmVersion,
    /// GPU or CPU backend.
    pub device: VllmDevice,
    /// Calibrated non-KV terms.
    pub overhead: OverheadOverrides,
}

impl Default for VllmFlags {
    fn default() -> Self {
        VllmFlags {
            gpu_memory_utilization: 0.9,
            max_model_len: None,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            kv_cache_dtype: KvCacheDtype::Auto,
            block_size: None,
            mamba_block_size: None,
            enable_prefix_caching: false,
            mamba_cache_mode: None,
            enforce_eager: false,
            kv_cache_memory_bytes: None,
            num_gpu_blocks_override: None,
            tensor_parallel_size: 1,
            num_speculative_tokens: 0,
            language_model_only: false,
            disable_hybrid_kv_cache_manager: false,
            version: VllmVersion::LATEST,
            device: VllmDevice::Gpu,
            overhead: OverheadOverrides::default(),
        }
    }
}

/// What one KV-cache group holds per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum GroupKind {
    /// Full attention / MLA: a block per `block_size` tokens.
    Full,
    /// Sliding window of `window` tokens.
    SlidingWindow {
        /// Window.
        window: u64,
    },
    /// Chunked local attention.
    ChunkedLocal {
        /// Chunk.
        chunk: u64,
    },
    /// Recurrent state pages.
    Mamba,
}

/// One KV-cache group: layers sharing a block table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KvGroup {
    /// What the group stores.
    pub kind: GroupKind,
    /// Real layers in the group.
    pub layers: u64,
    /// Tokens per block of this group.
    pub block_size: u64,
}

/// Bytes one layer kind costs, per TP rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerCost {
    /// Layer kind.
    pub kind: LayerKind,
    /// Layers of this kind.
    pub layers: u64,
    /// KV bytes per token per layer (attention kinds).
    pub bytes_per_token: Option<u64>,
    /// State bytes per sequence per layer before padding (recurrent kinds).
    pub state_bytes: Option<u64>,
}

/// How vLLM lays the KV pool out for a model and flags (no memory involved).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VllmLayout {
    /// Attention block size in tokens after hybrid alignment.
    pub block_size: u64,
    /// Why the block size is what it is.
    pub block_size_reason: String,
    /// Bytes of one layer's page (uniform across groups for hybrids).
    pub page_bytes: u64,
    /// Bytes one block id costs in the shared pool.
    pub bytes_per_block: u64,
    /// The groups.
    pub groups: Vec<KvGroup>,
    /// Padding layers added to equalise group sizes.
    pub padding_layers: u64,
    /// Per layer-kind costs.
    pub layer_costs: Vec<LayerCost>,
    /// Mamba cache mode in effect.
    pub mamba_cache_mode: MambaCacheMode,
    /// Extra state blocks per recurrent group (speculative tokens).
    pub num_speculative_blocks: u64,
    /// `max_num_batched_tokens` (sliding-window groups hold window + one chunk).
    pub max_num_batched_tokens: u64,
}

/// One layer's spec during planning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spec {
    kind: GroupKind,
    page: u64,
    block_size: u64,
}

impl VllmLayout {
    /// Plans the layout the way vLLM does at startup.
    pub fn plan(model: &ModelConfig, flags: &VllmFlags) -> Result<Self, CapacityError> {
        let tp = u64::from(flags.tensor_parallel_size.max(1));
        let kv_dtype = match flags.device {
            VllmDevice::Cpu { .. } => KvCacheDtype::Auto,
            VllmDevice::Gpu => flags.kv_cache_dtype,
        };
        let attn_1tok = attention_bytes_per_token(model, kv_dtype, tp);
        let state = recurrent_state_bytes(model, tp);
        let mode = flags
            .mamba_cache_mode
            .unwrap_or(if flags.enable_prefix_caching {
                MambaCacheMode::Align
            } else {
                MambaCacheMode::None
            });
        let default_block = match flags.device {
            VllmDevice::Cpu { .. } => 128,
            VllmDevice::Gpu => 16,
        };
        let base = flags.block_size.unwrap_or(default_block).max(1);
        let has_attention = model.layers.iter().any(|k| k.is_attention());
        let (block_size, reason) = match (state, has_attention) {
            (Some(state), true) if attn_1tok > 0 => {
                let aligned = hybrid_block_size(model, flags, mode, base, attn_1tok, state);
                if aligned > base {
                    (
                        aligned,
                        format!(
                            "raised from {base} so one attention page ({attn_1tok} B/token) holds a recurrent state of {state} B (mamba cache mode {mode:?})"
                        ),
                    )
                } else {
                    (
                        base,
                        format!("{base} (already holds a recurrent state of {state} B)"),
                    )
                }
            }
            _ if flags.block_size.is_some() => (base, format!("{base} (--block-size)")),
            _ => (base, format!("{base} (engine default)")),
        };
        let mnbt = flags.max_num_batched_tokens.unwrap_or(2048);
        let specs = layer_specs(model, flags, block_size, attn_1tok, state.unwrap_or(0));
        if specs.is_empty() {
            return Err(CapacityError::Unplannable(
                "the model has no layer that keeps a KV cache".into(),
            ));
        }
        let (groups, page_bytes, bytes_per_block, padding_layers) = group_layers(&specs)?;
        Ok(VllmLayout {
            block_size,
            block_size_reason: reason,
            page_bytes,
            bytes_per_block,
            groups,
            padding_layers,
            layer_costs: layer_costs(model, attn_1tok, state),
            mamba_cache_mode: mode,
            num_speculative_blocks: flags.num_speculative_tokens,
            max_num_batched_tokens: mnbt,
        })
    }

    /// A single full-attention group of `block_size`: what a measured
    /// `num_gpu_blocks` × `block_size` means when the model's layers are unknown.
    pub fn single_full_attention(block_size: u64) -> Self {
        VllmLayout {
            block_size,
            block_size_reason: format!("{block_size} (reported by the server)"),
            page_bytes: 0,
            bytes_per_block: 0,
            groups: vec![KvGroup {
                kind: GroupKind::Full,
                layers: 1,
                block_size,
            }],
            padding_layers: 0,
            layer_costs: Vec::new(),
            mamba_cache_mode: MambaCacheMode::None,
            num_speculative_blocks: 0,
            max_num_batched_tokens: 2048,
        }
    }

    /// Blocks one request of `len` tokens needs from the shared pool: the sum over
    /// groups of `cdiv(max_memory_usage_bytes(len), page)`, the quantity vLLM uses
    /// for its concurrency figure and its startup admission check.
    pub fn blocks_per_request(&self, len: u64) -> u64 {
        self.groups.iter().map(|g| self.group_blocks(g, len)).sum()
    }

    fn group_blocks(&self, g: &KvGroup, len: u64) -> u64 {
        let b = g.block_size.max(1);
        match g.kind {
            GroupKind::Full => len.div_ceil(b),
            GroupKind::SlidingWindow { window } => {
                (window.saturating_sub(1) + self.max_num_batched_tokens)
                    .min(len)
                    .div_ceil(b)
                    + 1
            }
            GroupKind::ChunkedLocal { chunk } => {
                (chunk + self.max_num_batched_tokens).min(len).div_ceil(b)
            }
            GroupKind::Mamba => match self.mamba_cache_mode {
                MambaCacheMode::All => len.div_ceil(b),
                MambaCacheMode::Align => 2 + self.num_speculative_blocks,
                MambaCacheMode::None => 1 + self.num_speculative_blocks,
            },
        }
    }

    /// Whether any group is not plain full attention.
    pub fn is_hybrid(&self) -> bool {
        self.groups.iter().any(|g| g.kind != GroupKind::Full)
    }

    /// Smallest block size across groups (the old log formula uses it).
    fn min_block_size(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| g.block_size)
            .min()
            .unwrap_or(self.block_size)
    }
}

/// K+V bytes per token per attention layer on one rank (0 when the model has no attention).
fn attention_bytes_per_token(model: &ModelConfig, kv: KvCacheDtype, tp: u64) -> u64 {
    let elt = kv.element_bytes(model.dtype);
    if let Some(mla) = model.mla {
        // The latent is not split across TP ranks.
        return mla.latent_dim() * elt;
    }
    let heads = (model.num_kv_heads / tp).max(1);
    match kv {
        KvCacheDtype::Nvfp4 => {
            let packed = |h: u64| h / 2 + h / 16;
            heads * (packed(model.head_dim) + packed(model.head_dim_v))
        }
        KvCacheDtype::PerTokenHead => heads * (model.head_dim + model.head_dim_v) + 2 * heads * 4,
        _ => heads * (model.head_dim + model.head_dim_v) * elt,
    }
}

/// Recurrent state bytes per sequence per layer on one rank; `None` without recurrent layers.
fn recurrent_state_bytes(model: &ModelConfig, tp: u64) -> Option<u64> {
    let conv_bytes = model.dtype.bytes();
    let ssm_bytes = model.ssm_dtype.bytes();
    if model
        .layers
        .iter()
        .any(|k| matches!(k, LayerKind::LinearAttention))
    {
        let g = model.gdn?;
        let conv_dim = 2 * g.num_key_heads * g.key_head_dim + g.num_value_heads * g.value_head_dim;
        let conv = g.conv_kernel.saturating_sub(1) * (conv_dim / tp) * conv_bytes;
        let ssm = (g.num_value_heads / tp).max(1) * g.key_head_dim * g.value_head_dim * ssm_bytes;
        return Some(conv + ssm);
    }
    if model.layers.iter().any(|k| matches!(k, LayerKind::Mamba)) {
        let m = model.mamba?;
        let conv = m.conv_kernel.saturating_sub(1)
            * ((m.d_inner + 2 * m.n_groups * m.state_size) / tp)
            * conv_bytes;
        let ssm = (m.num_heads / tp).max(1) * m.head_dim * m.state_size * ssm_bytes;
        return Some(conv + ssm);
    }
    None
}

/// `Platform._align_hybrid_block_size`.
fn hybrid_block_size(
    model: &ModelConfig,
    flags: &VllmFlags,
    mode: MambaCacheMode,
    base: u64,
    attn_1tok: u64,
    state: u64,
) -> u64 {
    // Smallest kernel block size of the CUDA attention backends is 16.
    let align = base.max(16);
    match mode {
        MambaCacheMode::All => {
            let model_chunk = if model.gdn.is_some() { 64 } else { 256 };
            let chunk = lcm(flags.mamba_block_size.unwrap_or(model_chunk), align);
            chunk * state.div_ceil(attn_1tok).div_ceil(chunk)
        }
        MambaCacheMode::None | MambaCacheMode::Align => align * state.div_ceil(align * attn_1tok),
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn lcm(a: u64, b: u64) -> u64 {
    if a == 0 || b == 0 {
        a.max(b)
    } else {
        a / gcd(a, b) * b
    }
}

fn layer_specs(
    model: &ModelConfig,
    flags: &VllmFlags,
    block: u64,
    attn_1tok: u64,
    state: u64,
) -> Vec<Spec> {
    let has_full = model
        .layers
        .iter()
        .any(|k| matches!(k, LayerKind::FullAttention));
    let promote = flags.disable_hybrid_kv_cache_manager && has_full;
    let has_attention = model.layers.iter().any(|k| k.is_attention());
    let attn_page = block * attn_1tok;
    model
        .layers
        .iter()
        .filter_map(|k| {
            let kind = match *k {
                LayerKind::FullAttention => GroupKind::Full,
                LayerKind::SlidingWindow { .. } | LayerKind::ChunkedLocal { .. } if promote => {
                    GroupKind::Full
                }
                LayerKind::SlidingWindow { window } => GroupKind::SlidingWindow { window },
                LayerKind::ChunkedLocal { chunk } => GroupKind::ChunkedLocal { chunk },
                LayerKind::LinearAttention | LayerKind::Mamba => GroupKind::Mamba,
                LayerKind::NoCache => return None,
            };
            let page = match kind {
                // Aligned hybrids pad the state to one attention page.
                GroupKind::Mamba if has_attention => attn_page.max(state),
                GroupKind::Mamba => state,
                _ => attn_page,
            };
            Some(Spec {
                kind,
                page,
                block_size: block,
            })
        })
        .collect()
}

/// `get_kv_cache_groups` for the cases this crate models:
/// returns (groups, page bytes, bytes per block, padding layers).
fn group_layers(specs: &[Spec]) -> Result<(Vec<KvGroup>, u64, u64, u64), CapacityError> {
    let first = specs[0];
    let n = specs.len() as u64;
    if specs.iter().all(|s| *s == first) {
        let g = KvGroup {
            kind: first.kind,
            layers: n,
            block_size: first.block_size,
        };
        return Ok((vec![g], first.page, first.page * n, 0));
    }
    let same_type = specs
        .iter()
        .all(|s| s.kind == first.kind && s.block_size == first.block_size);
    if same_type {
        let sum: u64 = specs.iter().map(|s| s.page).sum();
        let g = KvGroup {
            kind: first.kind,
            layers: n,
            block_size: first.block_size,
        };
        return Ok((
            vec![g],
            specs.iter().map(|s| s.page).max().unwrap_or(0),
            sum,
            0,
        ));
    }
    // Hybrid: unify page sizes (attention pages that divide the largest page get a
    // proportionally larger block size; others and recurrent pages are padded).
    let max_page = specs.iter().map(|s| s.page).max().unwrap_or(0);
    if max_page == 0 {
        return Err(CapacityError::Unplannable(
            "a layer has a zero-byte page".into(),
        ));
    }
    let mut buckets: Vec<(GroupKind, u64, u64)> = Vec::new();
    for s in specs {
        let block_size =
            if s.kind != GroupKind::Mamba && s.page < max_page && max_page % s.page == 0 {
                s.block_size * (max_page / s.page)
            } else {
                s.block_size
            };
        match buckets
            .iter_mut()
            .find(|(k, b, _)| *k == s.kind && *b == block_size)
        {
            Some((_, _, count)) => *count += 1,
            None => buckets.push((s.kind, block_size, 1)),
        }
    }
    let min_n = buckets.iter().map(|b| b.2).min().unwrap_or(1);
    let max_n = buckets.iter().map(|b| b.2).max().unwrap_or(1);
    // 1.5 since vLLM ~0.11 (1.25 before).
    let group_size = if 2 * max_n < 3 * min_n { max_n } else { min_n };
    let mut groups = Vec::new();
    let mut padding = 0;
    for (kind, block_size, count) in buckets {
        let num_groups = count.div_ceil(group_size);
        padding += num_groups * group_size - count;
        for i in 0..num_groups {
            // layers[i::num_groups]
            let layers = (count - i).div_ceil(num_groups);
            groups.push(KvGroup {
                kind,
                layers,
                block_size,
            });
        }
    }
    Ok((groups, max_page, group_size * max_page, padding))
}

fn layer_costs(model: &ModelConfig, attn_1tok: u64, state: Option<u64>) -> Vec<LayerCost> {
    model
        .layer_counts()
        .into_iter()
        .filter(|(k, _)| !matches!(k, LayerKind::NoCache))
        .map(|(kind, layers)| LayerCost {
            kind,
            layers,
            bytes_per_token: kind.is_attention().then_some(attn_1tok),
            state_bytes: if kind.is_recurrent() { state } else { None },
        })
        .collect()
}

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
    fn given(bytes: ByteSize, basis: &str) -> Self {
        Estimate {
            bytes,
            estimated: false,
            basis: basis.to_owned(),
        }
    }

    fn modelled(bytes: u64, basis: String) -> Self {
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

/// Which formula produced the "GPU KV cache size: N tokens" line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormula {
    /// v1 ≤ 0.8: `num_blocks × block_size`.
    BlocksTimesBlockSize,
    /// 0.9 … 0.20.0: `num_blocks // num_groups × min block size`.
    PerGroupBlocks,
    /// ≥ 0.20.1: `int(max_concurrency × max_model_len)`.
    ConcurrencyTimesMaxLen,
}

/// Whether vLLM would start: one request of `max_model_len` must fit in the usable blocks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StartupCheck {
    /// One max-length request fits.
    pub fits: bool,
    /// Bytes that request needs.
    pub needed: ByteSize,
    /// Bytes available after the null block.
    pub usable: ByteSize,
    /// Longest `max_model_len` that would fit.
    pub estimated_max_model_len: u64,
}

/// What vLLM would report at startup.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VllmPrediction {
    /// Memory budget.
    pub budget: MemoryBudget,
    /// Pool layout.
    pub layout: VllmLayout,
    /// `num_gpu_blocks`.
    pub num_blocks: u64,
    /// `max_model_len` in effect.
    pub max_model_len: u64,
    /// `max_num_seqs` in effect.
    pub max_num_seqs: u32,
    /// Blocks one `max_model_len` request needs.
    pub blocks_per_request_at_max_len: u64,
    /// "Maximum concurrency for L tokens per request: X x".
    pub max_concurrency: f64,
    /// "GPU KV cache size: N tokens".
    pub kv_cache_size_tokens: u64,
    /// Formula used for that figure.
    pub log_formula: LogFormula,
    /// Startup admission check.
    pub startup: StartupCheck,
}

/// Predicts vLLM's KV pool for a model on a device.
pub fn predict_vllm(
    model: &ModelConfig,
    gpu: &Gpu,
    flags: &VllmFlags,
) -> Result<VllmPrediction, CapacityError> {
    check_flags(flags)?;
    let (mnbt, mns) = batch_defaults(gpu, flags);
    let flags = VllmFlags {
        max_num_batched_tokens: Some(mnbt),
        max_num_seqs: Some(mns),
        ..flags.clone()
    };
    let layout = VllmLayout::plan(model, &flags)?;
    let budget = memory_budget(model, gpu, &flags, &layout)?;
    let max_model_len = flags
        .max_model_len
        .or(model.max_position_embeddings)
        .ok_or(CapacityError::MissingField {
            field: "max_position_embeddings (or pass max_model_len)",
        })?;
    Ok(capacity_from_budget(
        layout,
        budget,
        max_model_len,
        mns,
        &flags,
    ))
}

/// Finishes a prediction from a known KV budget (e.g. "Available KV cache memory: X GiB"
/// read from a log): number of blocks, concurrency and the logged token figure.
pub fn capacity_from_budget(
    layout: VllmLayout,
    budget: MemoryBudget,
    max_model_len: u64,
    max_num_seqs: u32,
    flags: &VllmFlags,
) -> VllmPrediction {
    let bpb = layout.bytes_per_block.max(1);
    let num_blocks = flags
        .num_gpu_blocks_override
        .unwrap_or(budget.available_kv.get() / bpb);
    let bpr = layout.blocks_per_request(max_model_len).max(1);
    let max_concurrency = num_blocks as f64 / bpr as f64;
    let (kv_cache_size_tokens, log_formula) = log_tokens(
        &layout,
        num_blocks,
        max_concurrency,
        max_model_len,
        flags.version,
    );
    let usable = (num_blocks.saturating_sub(1)) * bpb;
    let needed = bpr * bpb;
    let startup = StartupCheck {
        fits: needed <= usable,
        needed: ByteSize::new(needed),
        usable: ByteSize::new(usable),
        estimated_max_model_len: longest_fitting(&layout, usable, max_model_len),
    };
    VllmPrediction {
        budget,
        layout,
        num_blocks,
        max_model_len,
        max_num_seqs,
        blocks_per_request_at_max_len: bpr,
        max_concurrency,
        kv_cache_size_tokens,
        log_formula,
        startup,
    }
}

fn log_tokens(
    layout: &VllmLayout,
    num_blocks: u64,
    conc: f64,
    max_len: u64,
    v: VllmVersion,
) -> (u64, LogFormula) {
    if v.at_least(20, 1) {
        (
            (conc * max_len as f64).floor() as u64,
            LogFormula::ConcurrencyTimesMaxLen,
        )
    } else if v.at_least(9, 0) {
        let groups = layout.groups.len().max(1) as u64;
        (
            num_blocks / groups * layout.min_block_size(),
            LogFormula::PerGroupBlocks,
        )
    } else {
        (
            num_blocks * layout.min_block_size(),
            LogFormula::BlocksTimesBlockSize,
        )
    }
}

fn longest_fitting(layout: &VllmLayout, usable: u64, max_len: u64) -> u64 {
    let fits = |l: u64| layout.blocks_per_request(l) * layout.bytes_per_block <= usable;
    if !fits(1) {
        return 0;
    }
    let (mut lo, mut hi) = (1, max_len);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) { lo = mid } else { hi = mid - 1 }
    }
    lo
}

fn check_flags(flags: &VllmFlags) -> Result<(), CapacityError> {
    let u = flags.gpu_memory_utilization;
    if !(u > 0.0 && u <= 1.0) {
        return Err(CapacityError::BadFlag {
            flag: "--gpu-memory-utilization",
            value: u.to_string(),
            why: "must be in (0, 1]",
        });
    }
    if flags.block_size == Some(0) {
        return Err(CapacityError::BadFlag {
            flag: "--block-size",
            value: "0".into(),
            why: "must be at least 1",
        });
    }
    if flags.max_model_len == Some(0) {
        return Err(CapacityError::BadFlag {
            flag: "--max-model-len",
            value: "0".into(),
            why: "must be at least 1",
        });
    }
    Ok(())
}

/// `arg_utils.get_batch_defaults` for `vllm serve`.
fn batch_defaults(gpu: &Gpu, flags: &VllmFlags) -> (u64, u32) {
    let big =
        gpu.memory.get() >= 70 << 30 && !gpu.is_a100 && matches!(flags.device, VllmDevice::Gpu);
    let (mnbt, mns) = if big { (8192, 1024) } else { (2048, 256) };
    (
        flags.max_num_batched_tokens.unwrap_or(mnbt),
        flags.max_num_seqs.unwrap_or(mns),
    )
}

fn memory_budget(
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
fn activation_estimate(model: &ModelConfig, flags: &VllmFlags) -> Estimate {
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

const SAMPLER_BYTES_PER_LOGIT: u64 = 20;
const NON_TORCH_BASE: u64 = 600 << 20;
const NON_TORCH_TP: u64 = 256 << 20;
const BYTES_PER_GRAPH: u64 = 6 << 20;

fn non_torch_estimate(tp: u32) -> Estimate {
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
fn capture_sizes(max: u64) -> u64 {
    let small = [1u64, 2, 4].iter().filter(|s| **s <= max).count() as u64;
    let by8 = if max >= 8 {
        (max.min(248) - 8) / 8 + 1
    } else {
        0
    };
    let by16 = if max >= 256 { (max - 256) / 16 + 1 } else { 0 };
    small + by8 + by16
}

fn cudagraph_estimate(flags: &VllmFlags) -> Estimate {
    if flags.enforce_eager {
        return Estimate::given(ByteSize::new(0), "--enforce-eager: no CUDA graphs");
    }
    if !flags.version.at_least(21, 0) {
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

/// Convenience for tests and callers that read "Available KV cache memory: X GiB" from a log.
pub fn budget_from_available_gib(gib: f64) -> MemoryBudget {
    let bytes = gib_bytes(gib);
    let none = |why: &str| Estimate::given(ByteSize::new(0), why);
    MemoryBudget {
        device_total: bytes,
        utilization: 1.0,
        requested: bytes,
        weights: none("not needed: KV budget given"),
        activation_peak: none("not needed: KV budget given"),
        non_torch: none("not needed: KV budget given"),
        cudagraph: none("not needed: KV budget given"),
        available_kv: bytes,
        source: KvBudgetSource::KvCacheMemoryBytes,
    }
}

/// The element dtype vLLM would store KV in, for display.
pub fn kv_element_dtype(model: &ModelConfig, kv: KvCacheDtype) -> Dtype {
    match kv {
        KvCacheDtype::Auto => model.dtype,
        _ => Dtype::Fp8,
    }
}
