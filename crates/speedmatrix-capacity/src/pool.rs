//! The per-cell fit test and the grid, for every engine's notion of a KV pool.

use serde::Serialize;
use speedmatrix_units::{Concurrency, Tokens};

use crate::vllm::VllmLayout;

/// A vLLM block pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockPool {
    /// How requests consume blocks.
    pub layout: VllmLayout,
    /// `num_gpu_blocks` (block 0 is the null block and never handed out).
    pub num_blocks: u64,
    /// `max_num_seqs`, when known.
    pub max_num_seqs: Option<u32>,
    /// `max_model_len`, when known.
    pub max_model_len: Option<u64>,
}

/// A token pool (SGLang `max_total_num_tokens`, or any server that reports tokens).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenPool {
    /// Tokens the pool holds.
    pub tokens: u64,
    /// Allocation granularity in tokens (SGLang `--page-size`, default 1).
    pub page_size: u64,
    /// Cap on running requests (`--max-running-requests`), when known.
    pub max_running_requests: Option<u32>,
    /// Recurrent-state slots (SGLang hybrid `max_mamba_cache_size`), when the model has them.
    pub state_slots: Option<u64>,
    /// Context limit, when known.
    pub max_model_len: Option<u64>,
}

/// llama.cpp server slots.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlotPool {
    /// `n_ctx`: KV cells in total.
    pub n_ctx: u64,
    /// `n_parallel`: slots.
    pub n_parallel: u32,
    /// `--kv-unified`: all slots share the cells.
    pub unified: bool,
}

/// A KV pool that can decide cells.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "pool")]
#[non_exhaustive]
pub enum KvPool {
    /// vLLM.
    Blocks(BlockPool),
    /// SGLang or a plain token count.
    Tokens(TokenPool),
    /// llama.cpp.
    Slots(SlotPool),
}

/// The rule that decided a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FitRule {
    /// `context + max_output > max_model_len`: the server rejects the request.
    MaxModelLen,
    /// More requests than `max_num_seqs` / `--max-running-requests`.
    MaxNumSeqs,
    /// vLLM, full attention only: `N × cdiv(ℓ, B) ≤ num_blocks − 1`.
    AttentionBlocks,
    /// vLLM with sliding-window or recurrent groups: `N × Σ_g blocks_g(ℓ) ≤ num_blocks − 1`.
    HybridBlocks,
    /// Token pool: `N × roundup(ℓ, page) ≤ tokens`.
    TokenPool,
    /// SGLang hybrid: `N ≤ max_mamba_cache_size`.
    StateSlots,
    /// llama.cpp: `N ≤ n_parallel`.
    ParallelSlots,
    /// llama.cpp, per-slot cells: `ℓ ≤ n_ctx / n_parallel`.
    SlotContext,
    /// llama.cpp `--kv-unified`: `N × ℓ ≤ n_ctx`.
    UnifiedCells,
}

impl FitRule {
    /// Unit of `needed` / `limit` in a verdict decided by this rule.
    pub const fn unit(self) -> &'static str {
        match self {
            FitRule::AttentionBlocks | FitRule::HybridBlocks => "blocks",
            FitRule::MaxNumSeqs | FitRule::StateSlots | FitRule::ParallelSlots => "requests",
            FitRule::MaxModelLen
            | FitRule::TokenPool
            | FitRule::SlotContext
            | FitRule::UnifiedCells => "tokens",
        }
    }

    /// The rule as a short formula, for reports.
    pub const fn describe(self) -> &'static str {
        match self {
            FitRule::MaxModelLen => "context + max output ≤ max_model_len",
            FitRule::MaxNumSeqs => "N ≤ max_num_seqs",
            FitRule::AttentionBlocks => "N × cdiv(ℓ, block_size) ≤ num_blocks − 1",
            FitRule::HybridBlocks => "N × Σ groups blocks(ℓ) ≤ num_blocks − 1",
            FitRule::TokenPool => "N × ℓ ≤ pool tokens",
            FitRule::StateSlots => "N ≤ recurrent-state slots",
            FitRule::ParallelSlots => "N ≤ n_parallel",
            FitRule::SlotContext => "ℓ ≤ n_ctx / n_parallel",
            FitRule::UnifiedCells => "N × ℓ ≤ n_ctx",
        }
    }
}

/// The verdict on one (context, concurrency) cell.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellVerdict {
    /// Prompt tokens.
    pub context: Tokens,
    /// Requests at once.
    pub concurrency: Concurrency,
    /// `ℓ = context + max_output`: what one request may occupy.
    pub request_tokens: Tokens,
    /// Whether the cell fits.
    pub fits: bool,
    /// The rule that decided.
    pub rule: FitRule,
    /// What the cell needs, in `rule.unit()`.
    pub needed: u64,
    /// What the pool allows, in `rule.unit()`.
    pub limit: u64,
}

/// The cells to decide.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GridSpec {
    /// Prompt lengths (rows).
    pub contexts: Vec<Tokens>,
    /// Concurrency levels (columns).
    pub concurrencies: Vec<Concurrency>,
    /// Output tokens each request may generate.
    pub max_output: Tokens,
}

impl KvPool {
    /// Decides one cell.
    pub fn check(
        &self,
        context: Tokens,
        concurrency: Concurrency,
        max_output: Tokens,
    ) -> CellVerdict {
        let len = context.get().saturating_add(max_output.get());
        let n = u64::from(concurrency.get());
        let verdict = |fits: bool, rule: FitRule, needed: u64, limit: u64| CellVerdict {
            context,
            concurrency,
            request_tokens: Tokens::new(len),
            fits,
            rule,
            needed,
            limit,
        };
        let over = |rule: FitRule, needed: u64, limit: u64| verdict(false, rule, needed, limit);
        match self {
            KvPool::Blocks(p) => {
                if let Some(max) = p.max_model_len.filter(|m| len > *m) {
                    return over(FitRule::MaxModelLen, len, max);
                }
                if let Some(mns) = p.max_num_seqs.map(u64::from).filter(|m| n > *m) {
                    return over(FitRule::MaxNumSeqs, n, mns);
                }
                let rule = if p.layout.is_hybrid() {
                    FitRule::HybridBlocks
                } else {
                    FitRule::AttentionBlocks
                };
                let needed = n.saturating_mul(p.layout.blocks_per_request(len));
                let usable = p.num_blocks.saturating_sub(1);
                verdict(needed <= usable, rule, needed, usable)
            }
            KvPool::Tokens(p) => {
                if let Some(max) = p.max_model_len.filter(|m| len > *m) {
                    return over(FitRule::MaxModelLen, len, max);
                }
                if let Some(mrr) = p.max_running_requests.map(u64::from).filter(|m| n > *m) {
                    return over(FitRule::MaxNumSeqs, n, mrr);
                }
                if let Some(slots) = p.state_slots.filter(|s| n > *s) {
                    return over(FitRule::StateSlots, n, slots);
                }
                let page = p.page_size.max(1);
                let needed = n.saturating_mul(len.div_ceil(page) * page);
                verdict(needed <= p.tokens, FitRule::TokenPool, needed, p.tokens)
            }
            KvPool::Slots(p) => {
                let slots = u64::from(p.n_parallel.max(1));
                if n > slots {
                    return over(FitRule::ParallelSlots, n, slots);
                }
                if p.unified {
                    let needed = n.saturating_mul(len);
                    verdict(needed <= p.n_ctx, FitRule::UnifiedCells, needed, p.n_ctx)
                } else {
                    let per_slot = p.n_ctx / slots;
                    verdict(len <= per_slot, FitRule::SlotContext, len, per_slot)
                }
            }
        }
    }

    /// Decides every cell, row by row (contexts) then column by column (concurrencies).
    pub fn grid(&self, spec: &GridSpec) -> Vec<CellVerdict> {
        spec.contexts
            .iter()
            .flat_map(|c| spec.concurrencies.iter().map(move |n| (*c, *n)))
            .map(|(c, n)| self.check(c, n, spec.max_output))
            .collect()
    }

    /// The pool's size in tokens: vLLM `num_blocks × block_size` (what
    /// `cache_config_info` implies), SGLang `max_total_num_tokens`, llama.cpp `n_ctx`.
    pub fn pool_tokens(&self) -> u64 {
        match self {
            KvPool::Blocks(p) => p.num_blocks * p.layout.block_size,
            KvPool::Tokens(p) => p.tokens,
            KvPool::Slots(p) => p.n_ctx,
        }
    }

    /// Most requests of `len` tokens the pool holds at once (ignoring request caps).
    pub fn max_requests_of(&self, len: u64) -> u64 {
        match self {
            KvPool::Blocks(p) => {
                p.num_blocks.saturating_sub(1) / p.layout.blocks_per_request(len).max(1)
            }
            KvPool::Tokens(p) => {
                let page = p.page_size.max(1);
                let by_tokens = p.tokens / (len.div_ceil(page) * page).max(1);
                p.state_slots.map_or(by_tokens, |s| by_tokens.min(s))
            }
            KvPool::Slots(p) if p.unified => (p.n_ctx / len.max(1)).min(u64::from(p.n_parallel)),
            KvPool::Slots(p) => {
                if len <= p.n_ctx / u64::from(p.n_parallel.max(1)) {
                    u64::from(p.n_parallel)
                } else {
                    0
                }
            }
        }
    }
}
