//! Inputs `cargo xtask fuzz` found to panic the config reader or the
//! predictors (arithmetic overflow), kept so they never come back.

use speedmatrix_capacity::{
    CapacityError, EngineFlags, Gpu, LlamaCppFlags, ModelConfig, SglangFlags, VllmFlags, predict,
};

/// Every engine's prediction on a few GPUs: errors are fine, panics are not.
fn predict_everywhere(model: &ModelConfig) {
    for gpu in ["rtx3090", "b200", "4096GiB"] {
        let gpu = Gpu::lookup(gpu).unwrap();
        for flags in [
            EngineFlags::Vllm(VllmFlags::default()),
            EngineFlags::Vllm(VllmFlags {
                max_num_seqs: Some(u32::MAX),
                ..VllmFlags::default()
            }),
            EngineFlags::Sglang(SglangFlags::default()),
            EngineFlags::LlamaCpp(LlamaCppFlags::default()),
        ] {
            let _ = predict(model, &gpu, &flags);
        }
    }
}

#[test]
fn a_hidden_size_beyond_u64_is_an_error_not_a_panic() {
    // finding-0: a mutated digit string larger than u64::MAX.
    let text = r#"{"hidden_size": 401844674407370955161696, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16"}"#;
    assert!(ModelConfig::from_json(text).is_err());
}

#[test]
fn a_huge_head_dim_in_text_config_is_an_error_not_a_panic() {
    // finding-1: the Qwen3.5 fixture with head_dim 25618446744073709551616.
    let text = r#"{"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": {"hidden_size": 2560,
        "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 25618446744073709551616,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 32,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}}"#;
    match ModelConfig::from_json(text) {
        Ok(model) => predict_everywhere(&model),
        Err(e) => assert!(
            e.to_string().contains("head_dim") || e.to_string().contains("num_attention_heads"),
            "{e}"
        ),
    }
}

#[test]
fn many_large_fields_together_are_refused_with_the_field_named() {
    let m = 1u64 << 24;
    let text = format!(
        r#"{{"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": {m}, "head_dim": {m}}}"#
    );
    match ModelConfig::from_json(&text) {
        Err(CapacityError::BadField { field, .. }) => assert_eq!(field, "num_key_value_heads"),
        other => panic!("expected a BadField error, got {other:?}"),
    }
}

#[test]
fn configs_at_every_limit_predict_without_overflow() {
    let dense = r#"{"hidden_size": 131072, "num_hidden_layers": 2048, "num_attention_heads": 1024,
        "num_key_value_heads": 1024, "head_dim": 8192, "intermediate_size": 1048576, "vocab_size": 4194304,
        "num_experts": 2048, "moe_intermediate_size": 65536, "shared_expert_intermediate_size": 65536,
        "num_experts_per_tok": 1024, "max_position_embeddings": 16777216, "mtp_num_hidden_layers": 256,
        "torch_dtype": "float32"}"#;
    let mla = r#"{"hidden_size": 131072, "num_hidden_layers": 2048, "num_attention_heads": 1024,
        "kv_lora_rank": 8192, "qk_rope_head_dim": 8192, "qk_nope_head_dim": 8192, "v_head_dim": 8192,
        "q_lora_rank": 8192, "intermediate_size": 1048576, "vocab_size": 4194304,
        "max_position_embeddings": 16777216, "torch_dtype": "float32"}"#;
    for text in [dense, mla] {
        predict_everywhere(&ModelConfig::from_json(text).unwrap());
    }
}
