//! What a vLLM startup log says about its KV cache, read from its text.
//!
//! The lines are vLLM's own (`gpu_worker.py`, `kv_cache_utils.py`,
//! `gpu_model_runner.py`, the engine's config line), matched by their
//! fixed words wherever the logger's prefix puts them; numbers may carry
//! thousands separators. Absent lines leave their figure `None`: a log that
//! was cut, or printed by another version, says less, never something wrong.

use serde::Serialize;

use super::VllmPrediction;
use crate::log_text::{Beside, after, amount, count, gib};

/// The KV figures of one vLLM startup log.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct VllmStartupLog {
    /// The engine's version, from `Initializing a V1 LLM engine (v0.21.0)`
    /// or `vLLM API server version 0.21.0`.
    pub version: Option<String>,
    /// `Available KV cache memory: 14.09 GiB`.
    pub available_kv_gib: Option<f64>,
    /// `GPU KV cache size: 131,072 tokens`.
    pub kv_cache_size_tokens: Option<u64>,
    /// `Maximum concurrency for 32,768 tokens per request: 4.00x`: (tokens, ×).
    pub max_concurrency: Option<(u64, f64)>,
    /// `Setting attention block size to 528 tokens`.
    pub block_size: Option<u64>,
    /// `Add 3 padding layers`.
    pub padding_layers: Option<u64>,
    /// `Model loading took 7.55 GiB` (memory of the weights on one GPU).
    pub weights_gib: Option<f64>,
    /// `max_seq_len=32768` in the engine's config line.
    pub max_model_len: Option<u64>,
}

impl VllmStartupLog {
    /// Reads every figure the log holds; the last line of each kind wins
    /// (a log of several starts describes the last).
    pub fn parse(text: &str) -> VllmStartupLog {
        let mut log = VllmStartupLog::default();
        for line in text.lines() {
            if let Some(v) =
                after(line, "Initializing a V1 LLM engine (v").and_then(|r| r.split(')').next())
            {
                log.version = Some(v.trim().to_owned());
            }
            if let Some(v) = after(line, "vLLM API server version ") {
                log.version = v.split_whitespace().next().map(str::to_owned);
            }
            if let Some(n) =
                after(line, "Available KV cache memory: ").and_then(|r| amount(r, "GiB"))
            {
                log.available_kv_gib = Some(n);
            }
            if let Some(n) = after(line, "KV cache size: ").and_then(count) {
                log.kv_cache_size_tokens = Some(n);
            }
            if let Some(rest) = after(line, "Maximum concurrency for ") {
                let tokens = count(rest);
                let times = rest.split("per request: ").nth(1).and_then(|r| {
                    r.trim()
                        .trim_end_matches('.')
                        .trim_end_matches('x')
                        .parse()
                        .ok()
                });
                if let (Some(t), Some(x)) = (tokens, times) {
                    log.max_concurrency = Some((t, x));
                }
            }
            if let Some(n) = after(line, "Setting attention block size to ").and_then(count) {
                log.block_size = Some(n);
            }
            if let Some(n) = after(line, "Add ")
                .filter(|r| r.contains("padding layer"))
                .and_then(count)
            {
                log.padding_layers = Some(n);
            }
            if let Some(n) = after(line, "Model loading took ").and_then(|r| amount(r, "GiB")) {
                log.weights_gib = Some(n);
            }
            if let Some(n) = after(line, "max_seq_len=").and_then(count) {
                log.max_model_len = Some(n);
            }
        }
        log
    }

    /// Each layout figure the log has beside vLLM's arithmetic from the log's own
    /// "Available KV cache memory" (the weights and the budget left out): a check of the
    /// layout apart from the memory estimate. `None` when the log has no such line.
    pub fn compare_given_memory(
        &self,
        p: &VllmPrediction,
        flags: &super::VllmFlags,
    ) -> Option<Vec<LoggedFigure>> {
        let gib = self.available_kv_gib?;
        let max_len = self.max_model_len.unwrap_or(p.max_model_len);
        let given = super::capacity_from_budget(
            p.layout.clone(),
            super::budget_from_available_gib(gib),
            max_len,
            p.max_num_seqs,
            flags,
        );
        Some(
            self.compare(&given)
                .into_iter()
                .filter(|f| !f.figure.starts_with("weights") && !f.figure.starts_with("available"))
                .collect(),
        )
    }

    /// Each figure the log has beside the prediction's.
    pub fn compare(&self, p: &VllmPrediction) -> Vec<LoggedFigure> {
        let mut out = Beside::default();
        out.push(
            "weights (GiB)",
            gib(p.budget.weights.bytes.get()),
            self.weights_gib,
        );
        out.push(
            "available KV cache memory (GiB)",
            gib(p.budget.available_kv.get()),
            self.available_kv_gib,
        );
        out.push(
            "attention block size (tokens)",
            p.layout.block_size as f64,
            self.block_size.map(|b| b as f64),
        );
        out.push(
            "padding layers",
            p.layout.padding_layers as f64,
            self.padding_layers.map(|n| n as f64),
        );
        out.push(
            "GPU KV cache size (tokens)",
            p.kv_cache_size_tokens as f64,
            self.kv_cache_size_tokens.map(|n| n as f64),
        );
        // The concurrency line is for the log's max_model_len; compare like with like.
        if self
            .max_concurrency
            .is_some_and(|(t, _)| t == p.max_model_len)
        {
            out.push(
                "maximum concurrency (×)",
                p.max_concurrency,
                self.max_concurrency.map(|(_, x)| x),
            );
        }
        out.0
    }
}

/// One startup-log figure beside its prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoggedFigure {
    /// What it is, with its unit.
    pub figure: &'static str,
    /// The prediction.
    pub predicted: f64,
    /// The log's.
    pub logged: f64,
}

impl LoggedFigure {
    /// (predicted − logged) / logged, in percent; `None` when the log says 0.
    pub fn error_pct(&self) -> Option<f64> {
        (self.logged != 0.0).then(|| 100.0 * (self.predicted - self.logged) / self.logged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The KV lines of a vLLM 0.21-style start, as its logger prints them.
    const LOG: &str = "\
INFO 11-30 07:00:01 [core.py:75] Initializing a V1 LLM engine (v0.21.0) with config: model='Qwen/Qwen3-8B', speculative_config=None, tokenizer='Qwen/Qwen3-8B', max_seq_len=16384, download_dir=None
(EngineCore_DP0 pid=42) INFO 11-30 07:00:20 [gpu_model_runner.py:2000] Model loading took 15.27 GiB memory and 9.1 seconds
(EngineCore_DP0 pid=42) INFO 11-30 07:00:40 [gpu_worker.py:300] Available KV cache memory: 6.37 GiB
(EngineCore_DP0 pid=42) INFO 11-30 07:00:40 [kv_cache_utils.py:1100] GPU KV cache size: 46,368 tokens
(EngineCore_DP0 pid=42) INFO 11-30 07:00:40 [kv_cache_utils.py:1104] Maximum concurrency for 16,384 tokens per request: 2.83x
";

    #[test]
    fn the_kv_lines_are_read_wherever_the_prefix_puts_them() {
        let log = VllmStartupLog::parse(LOG);
        assert_eq!(log.version.as_deref(), Some("0.21.0"));
        assert_eq!(log.max_model_len, Some(16_384));
        assert_eq!(log.weights_gib, Some(15.27));
        assert_eq!(log.available_kv_gib, Some(6.37));
        assert_eq!(log.kv_cache_size_tokens, Some(46_368));
        assert_eq!(log.max_concurrency, Some((16_384, 2.83)));
        assert_eq!(log.block_size, None);
        let hybrid = "INFO [config.py:1] Setting attention block size to 528 tokens to ensure that attention page size is >= mamba page size.\nINFO [kv_cache_utils.py:2] Add 3 padding layers, may waste at most 6.25% KV cache memory\n";
        let log = VllmStartupLog::parse(hybrid);
        assert_eq!((log.block_size, log.padding_layers), (Some(528), Some(3)));
    }

    #[test]
    fn other_text_reads_as_nothing() {
        assert_eq!(
            VllmStartupLog::parse("hello\nAvailable KV cache memory: lots\n"),
            VllmStartupLog::default()
        );
        // The CPU backend says "CPU KV cache size".
        let cpu = "INFO 11-30 07:50:01 [kv_cache_utils.py:1] CPU KV cache size: 524,288 tokens
";
        assert_eq!(
            VllmStartupLog::parse(cpu).kv_cache_size_tokens,
            Some(524_288)
        );
    }
}
