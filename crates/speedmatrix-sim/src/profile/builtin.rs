//! The built-in profiles: the seed-matrix RTX 3090 profile, `tiny` for tests, `free-running`.

use super::{CapacityApi, Dialect, Profile, ProfileModel, StepCost, TextStyle, one_token_per_step};

/// Name of the built-in profile calibrated to the seed matrix (RTX 3090, 4B FP8 model, vLLM 0.32).
pub const RTX3090_QWEN35_4B_FP8: &str = "rtx3090-qwen3.5-4b-fp8";
/// Name of the small, fast built-in profile for tests (millisecond steps, small KV cache).
pub const TINY: &str = "tiny";
/// Name of the built-in profile whose steps take no time at all, for client throughput benchmarks.
pub const FREE_RUNNING: &str = "free-running";

/// The seed page's model: Agents-A1-4B-FP8's config.json (a Qwen3.5 hybrid).
const SEED_CONFIG: &str = include_str!("../../data/agents-a1-4b-fp8.config.json");

impl Profile {
    /// The names of the built-in profiles.
    pub const BUILTIN_NAMES: [&'static str; 3] = [RTX3090_QWEN35_4B_FP8, TINY, FREE_RUNNING];

    /// A built-in profile by name, or `None`.
    ///
    /// - `rtx3090-qwen3.5-4b-fp8`: calibrated to the seed matrix (RTX 3090 24 GB, vLLM 0.32,
    ///   `--max-model-len 262144 --max-num-seqs 128`, prefix caching on; the seed's hybrid model
    ///   laid out as vLLM does: 1,003 blocks of 528 tokens, six of state per request).
    /// - `tiny`: 2,048-token context, 65,536 KV tokens, 2–3 ms steps, for tests.
    /// - `free-running`: `tiny` whose steps take no time, for client throughput benchmarks.
    pub fn builtin(name: &str) -> Option<Profile> {
        match name {
            RTX3090_QWEN35_4B_FP8 => Some(rtx3090()),
            TINY => Some(tiny()),
            FREE_RUNNING => Some(Profile {
                name: FREE_RUNNING.to_owned(),
                free_running: true,
                ..tiny()
            }),
            _ => None,
        }
    }
}

fn rtx3090() -> Profile {
    Profile {
        name: RTX3090_QWEN35_4B_FP8.to_owned(),
        served_model_name: "bench".to_owned(),
        max_model_len: 262_144,
        max_num_seqs: 128,
        // vLLM's default for `vllm serve` on GPUs under 70 GiB.
        max_num_batched_tokens: 2_048,
        // The seed's model is a hybrid (24 Gated DeltaNet and 8 full-attention layers): vLLM
        // raises the attention block to 528 tokens so one page holds a layer's recurrent state,
        // and lays the layers out as three state groups and one attention group of eight
        // (`speedmatrix capacity --config … --gpu rtx3090 --gpu-memory-utilization 0.94
        // --max-model-len 262144 --language-model-only --enable-prefix-caching`).
        block_size: 528,
        num_gpu_blocks: 1_003,
        enable_prefix_caching: true,
        // Prefix caching puts the state groups in `align` mode: two blocks each.
        state_blocks_per_request: 6,
        attention_groups: 1,
        sliding_groups: 0,
        sliding_window: 0,
        eos_after_tokens: Some(1_000),
        // `speedmatrix calibrate` on the seed page (tests/fixtures/seed-run.json of the report
        // crate); `calibration.rs` checks every cell.
        cost: StepCost {
            step_base_us: 8_272.5,
            prefill_per_token_us: 80.90,
            prefill_per_token_context_ns: 1.376,
            decode_per_seq_us: 191.16,
            decode_per_context_token_ns: 37.575,
            decode_batch_exponent: 0.27,
            frontend_per_request_us: 31_332.0,
            frontend_per_prompt_token_ns: 1_324.2,
        },
        time_scale: 1.0,
        free_running: false,
        tokenizer: None,
        faults: None,
        capacity_api: CapacityApi::Vllm,
        dialect: Dialect::Vllm,
        tokens_per_step: one_token_per_step(),
        num_speculative_tokens: None,
        origin: None,
        model: serde_json::from_str(SEED_CONFIG)
            .ok()
            .map(|config| ProfileModel {
                config,
                capacity: serde_json::json!({
                    "gpu": "rtx3090",
                    "gpu-memory-utilization": 0.94,
                    "max-model-len": 262_144,
                    "max-num-seqs": 128,
                    "language-model-only": true,
                    "enable-prefix-caching": true,
                    "vllm-version": "0.32.0",
                })
                .as_object()
                .cloned()
                .unwrap_or_default(),
            }),
        text_style: TextStyle::Words,
        hold_open_after_done_ms: None,
        stream_content_type: None,
        refused_fields: Vec::new(),
        models_status: None,
        anonymous: false,
        reasoning_tokens: 0,
        reasoning_inline: false,
        request_log: None,
    }
}

fn tiny() -> Profile {
    Profile {
        name: TINY.to_owned(),
        served_model_name: "tiny".to_owned(),
        max_model_len: 2_048,
        max_num_seqs: 256,
        max_num_batched_tokens: 1_024,
        block_size: 16,
        num_gpu_blocks: 4_097,
        enable_prefix_caching: true,
        state_blocks_per_request: 0,
        attention_groups: 1,
        sliding_groups: 0,
        sliding_window: 0,
        eos_after_tokens: Some(100),
        cost: StepCost {
            step_base_us: 2_000.0,
            prefill_per_token_us: 1.0,
            prefill_per_token_context_ns: 0.5,
            decode_per_seq_us: 5.0,
            decode_per_context_token_ns: 2.0,
            decode_batch_exponent: 0.0,
            frontend_per_request_us: 0.0,
            frontend_per_prompt_token_ns: 0.0,
        },
        time_scale: 1.0,
        free_running: false,
        tokenizer: None,
        faults: None,
        capacity_api: CapacityApi::Vllm,
        dialect: Dialect::Vllm,
        tokens_per_step: one_token_per_step(),
        num_speculative_tokens: None,
        origin: None,
        model: None,
        text_style: TextStyle::Words,
        hold_open_after_done_ms: None,
        stream_content_type: None,
        refused_fields: Vec::new(),
        models_status: None,
        anonymous: false,
        reasoning_tokens: 0,
        reasoning_inline: false,
        request_log: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_valid_and_round_trip_through_json() {
        for name in Profile::BUILTIN_NAMES {
            let p = Profile::builtin(name).unwrap();
            p.validate().unwrap();
            let back = Profile::from_json(&serde_json::to_string(&p).unwrap()).unwrap();
            assert_eq!(back, p);
        }
        assert!(Profile::builtin("nope").is_none());
    }
}
