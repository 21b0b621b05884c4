//! What an SGLang startup log says about its KV pool, read from its text:
//! the lines of `model_runner.py` ("Load weight end"), the memory pools
//! ("KV Cache is allocated", "Mamba Cache is allocated") and the scheduler
//! ("max_total_num_tokens=…"). SGLang's "GB" is 2³⁰ bytes.

use serde::Serialize;

use crate::SglangPrediction;
use crate::log_text::{Beside, after, amount, count, gib};
use crate::vllm::LoggedFigure;

/// The KV figures of one SGLang startup log (the first TP rank's lines
/// where each rank prints its own; the last start's where several).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SglangStartupLog {
    /// `Load weight end. … mem usage=15.54 GB`: the weights on one rank.
    pub weights_gib: Option<f64>,
    /// `KV Cache is allocated. #tokens: 46611`.
    pub kv_tokens: Option<u64>,
    /// `K size: 1.42 GB, V size: 1.42 GB` (or `KV size: 2.84 GB`), summed.
    pub kv_gib: Option<f64>,
    /// `max_total_num_tokens=46611`.
    pub max_total_num_tokens: Option<u64>,
    /// `max_running_requests=48`.
    pub max_running_requests: Option<u64>,
    /// `context_len=16384`.
    pub context_len: Option<u64>,
    /// `Mamba Cache is allocated. max_mamba_cache_size: 48`.
    pub mamba_slots: Option<u64>,
}

impl SglangStartupLog {
    /// Reads every figure the log holds.
    pub fn parse(text: &str) -> SglangStartupLog {
        let mut log = SglangStartupLog::default();
        let mut seen_kv = false;
        for line in text.lines() {
            if let Some(n) = after(line, "Load weight end.")
                .and_then(|r| after(r, "mem usage="))
                .and_then(|r| amount(r, "GB"))
            {
                log.weights_gib.get_or_insert(n);
            }
            if let Some(rest) = after(line, "KV Cache is allocated. #tokens: ") {
                // Every TP rank prints the same pool; a later start replaces it.
                if !seen_kv || !line.contains("TP") || line.contains("TP0") {
                    log.kv_tokens = count(rest);
                    let k = after(rest, "K size: ").and_then(|r| amount(r, "GB"));
                    let v = after(rest, "V size: ").and_then(|r| amount(r, "GB"));
                    let kv = after(rest, "KV size: ").and_then(|r| amount(r, "GB"));
                    log.kv_gib = match (k, v, kv) {
                        (Some(k), Some(v), _) => Some(k + v),
                        (_, _, Some(kv)) => Some(kv),
                        _ => None,
                    };
                    seen_kv = true;
                }
            }
            if let Some(n) = after(line, "max_total_num_tokens=").and_then(count) {
                log.max_total_num_tokens = Some(n);
            }
            if let Some(n) = after(line, "max_running_requests=").and_then(count) {
                log.max_running_requests = Some(n);
            }
            if let Some(n) = after(line, "context_len=").and_then(count) {
                log.context_len = Some(n);
            }
            if let Some(n) = after(line, "max_mamba_cache_size: ").and_then(count) {
                log.mamba_slots = Some(n);
            }
        }
        log
    }

    /// Each figure the log has beside the prediction's; the bytes per token
    /// from the log's own pool size and tokens check the layout arithmetic.
    pub fn compare(&self, p: &SglangPrediction) -> Vec<LoggedFigure> {
        let mut out = Beside::default();
        out.push("weights (GiB)", gib(p.weights.get()), self.weights_gib);
        out.push(
            "max_total_num_tokens",
            p.max_total_num_tokens as f64,
            self.max_total_num_tokens
                .or(self.kv_tokens)
                .map(|n| n as f64),
        );
        out.push(
            "KV bytes per token (from the log's pool size / tokens)",
            p.cell_bytes as f64,
            self.kv_gib
                .zip(self.kv_tokens.filter(|n| *n > 0))
                .map(|(g, n)| g * f64::from(1u32 << 30) / n as f64),
        );
        if let Some(slots) = p.mamba_slots {
            out.push(
                "recurrent-state slots",
                slots as f64,
                self.mamba_slots.map(|n| n as f64),
            );
        }
        out.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_lines_are_read_from_any_rank_prefix() {
        // Lines as SGLang prints them (format of model_runner.py, memory_pool.py, scheduler.py).
        let text = "\
[2025-03-08 12:29:21 TP1] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=6.09 GB, mem usage=15.54 GB.
[2025-03-08 12:29:21 TP0] Load weight end. type=Qwen2ForCausalLM, dtype=torch.bfloat16, avail mem=6.09 GB, mem usage=15.54 GB.
[2025-03-08 12:29:21 TP0] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB
[2025-03-08 12:29:21 TP1] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB
[2025-03-08 12:29:27 TP0] max_total_num_tokens=46611, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2049, context_len=32768, available_gpu_mem=3.05 GB
";
        let log = SglangStartupLog::parse(text);
        assert_eq!(log.weights_gib, Some(15.54));
        assert_eq!(log.kv_tokens, Some(46_611));
        assert!((log.kv_gib.unwrap() - 2.84).abs() < 1e-9);
        assert_eq!(log.max_total_num_tokens, Some(46_611));
        assert_eq!(log.max_running_requests, Some(2_049));
        assert_eq!(log.context_len, Some(32_768));
        let hybrid = "[x] Mamba Cache is allocated. max_mamba_cache_size: 48, conv_state size: 0.09GB, ssm_state size: 6.46GB\n";
        assert_eq!(SglangStartupLog::parse(hybrid).mamba_slots, Some(48));
        assert_eq!(
            SglangStartupLog::parse("nothing here"),
            SglangStartupLog::default()
        );
    }
}
