//! Lenient config.json parsing.

use speedmatrix_capacity::{
    CapacityError, Dtype, Gpu, LayerKind, ModelConfig, Quantization, weights_from_safetensors_index,
};

#[test]
fn head_dim_falls_back_to_hidden_over_heads_and_kv_heads_to_heads() {
    let m = ModelConfig::from_json(
        r#"{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32}"#,
    )
    .unwrap();
    assert_eq!(m.head_dim, 128);
    assert_eq!(m.num_kv_heads, 32);
    assert_eq!(m.dtype, Dtype::Bfloat16);
    assert!(m.layers.iter().all(|k| *k == LayerKind::FullAttention));
}

#[test]
fn nested_text_config_wins_over_the_outer_object() {
    let m = ModelConfig::from_json(
        r#"{"hidden_size": 1, "text_config": {"hidden_size": 2560, "num_hidden_layers": 2,
            "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256, "torch_dtype": "float16"}}"#,
    )
    .unwrap();
    assert_eq!(m.hidden_size, 2560);
    assert_eq!(m.dtype, Dtype::Float16);
}

#[test]
fn hybrid_layouts_from_every_spelling() {
    let gdn = r#""linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 32,
        "linear_value_head_dim": 128"#;
    let base = r#""hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256"#;
    let interval = ModelConfig::from_json(&format!(
        r#"{{{base}, {gdn}, "num_hidden_layers": 8, "full_attention_interval": 4}}"#
    ))
    .unwrap();
    assert_eq!(interval.layers[3], LayerKind::FullAttention);
    assert_eq!(interval.layers[0], LayerKind::LinearAttention);
    assert_eq!(
        interval.layer_counts(),
        vec![
            (LayerKind::LinearAttention, 6),
            (LayerKind::FullAttention, 2)
        ]
    );

    let nemotron = ModelConfig::from_json(&format!(
        r#"{{{base}, "num_hidden_layers": 6, "hybrid_override_pattern": "M-M*-M", "ssm_state_size": 128,
        "mamba_num_heads": 64, "mamba_head_dim": 64, "n_groups": 8, "conv_kernel": 4}}"#
    ))
    .unwrap();
    assert_eq!(
        nemotron
            .layers
            .iter()
            .filter(|k| **k == LayerKind::Mamba)
            .count(),
        3
    );
    assert_eq!(
        nemotron
            .layers
            .iter()
            .filter(|k| **k == LayerKind::NoCache)
            .count(),
        2
    );

    let gemma = ModelConfig::from_json(&format!(
        r#"{{{base}, "num_hidden_layers": 12, "sliding_window": 1024, "sliding_window_pattern": 6}}"#
    ))
    .unwrap();
    assert_eq!(
        gemma
            .layers
            .iter()
            .filter(|k| **k == LayerKind::FullAttention)
            .count(),
        2
    );
    assert_eq!(gemma.layers[0], LayerKind::SlidingWindow { window: 1024 });

    let missing_state = ModelConfig::from_json(&format!(
        r#"{{{base}, "num_hidden_layers": 8, "full_attention_interval": 4}}"#
    ));
    assert!(matches!(
        missing_state,
        Err(CapacityError::MissingField { .. })
    ));
}

#[test]
fn quantization_methods_are_recognised() {
    let q = |qc: &str| {
        ModelConfig::from_json(&format!(
            r#"{{"hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 1, "quantization_config": {qc}}}"#
        ))
        .unwrap()
        .quantization
    };
    assert_eq!(q(r#"{"quant_method": "fp8"}"#), Quantization::Fp8);
    assert_eq!(
        q(r#"{"quant_method": "awq", "bits": 4, "group_size": 128}"#),
        Quantization::Int {
            bits: 4,
            group_size: 128
        }
    );
    assert_eq!(
        q(r#"{"quant_method": "modelopt", "quant_algo": "NVFP4"}"#),
        Quantization::Nvfp4
    );
    assert_eq!(
        q(
            r#"{"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
             "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float"}}}}"#
        ),
        Quantization::Nvfp4
    );
    assert_eq!(
        q(r#"{"quant_method": "mxfp4"}"#),
        Quantization::Mxfp4Experts
    );
}

#[test]
fn bad_input_is_a_typed_error_not_a_panic() {
    assert!(matches!(
        ModelConfig::from_json("not json"),
        Err(CapacityError::NotJson(_))
    ));
    assert!(matches!(
        ModelConfig::from_json("[1, 2]"),
        Err(CapacityError::NotJson(_))
    ));
    assert!(matches!(
        ModelConfig::from_json("{}"),
        Err(CapacityError::MissingField { .. })
    ));
    assert!(matches!(
        ModelConfig::from_json(
            r#"{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 1, "layer_types": ["full_attention"]}"#
        ),
        Err(CapacityError::BadField { .. })
    ));
    // A description where the list belongs, or a note inside a hybrid pattern, is refused
    // rather than read as "no list" (every layer would then be priced as sliding).
    for bad in [
        r#""sliding_window": 128, "layer_types": "alternating sliding / full""#,
        r#""hybrid_override_pattern": "M*M*-E (M=Mamba2)""#,
    ] {
        let text = format!(
            r#"{{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 1, {bad}}}"#
        );
        let err = ModelConfig::from_json(&text).unwrap_err();
        assert!(
            matches!(err, CapacityError::BadField { .. }),
            "{bad}: {err}"
        );
    }
    assert!(matches!(
        Gpu::lookup("tpu-v9"),
        Err(CapacityError::UnknownGpu(_))
    ));
    assert_eq!(Gpu::lookup("RTX 3090").unwrap().key, "rtx3090");
    assert!((Gpu::lookup("23.5GiB").unwrap().memory.as_gib_f64() - 23.5).abs() < 1e-9);
    assert_eq!(
        weights_from_safetensors_index(r#"{"metadata": {"total_size": 123}}"#)
            .unwrap()
            .get(),
        123
    );
    assert!(weights_from_safetensors_index("{}").is_err());
}

/// MoE variants whose weights are counted from their own rules: Llama 4's interleaved MoE
/// layers with a shared expert, Nemotron-H's ungated (squared-ReLU) MLPs and experts, and
/// Nemotron 3 Super's latent experts. Each lands near its published total.
#[test]
fn moe_variants_count_to_their_published_totals() {
    let billions = |json: &str| {
        let m = ModelConfig::from_json(json).unwrap();
        let w = m.estimate_weights(true, 1);
        (w.linear_params + w.embedding_params) as f64 / 1e9
    };
    // meta-llama/Llama-4-Maverick-17B-128E-Instruct (text_config): 400 B.
    let maverick = billions(
        r#"{"model_type": "llama4_text", "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 202048,
        "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
        "torch_dtype": "bfloat16"}"#,
    );
    assert!((395.0..405.0).contains(&maverick), "{maverick}");
    // nvidia/NVIDIA-Nemotron-3-Super-120B-A12B: 120 B.
    let pattern =
        "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME";
    let super_ = billions(&format!(
        r#"{{"model_type": "nemotron_h", "hidden_size": 4096, "num_hidden_layers": 88,
        "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
        "vocab_size": 131072, "n_routed_experts": 512, "num_experts_per_tok": 22,
        "moe_intermediate_size": 2688, "moe_shared_expert_intermediate_size": 5376,
        "moe_latent_size": 1024, "hybrid_override_pattern": "{pattern}",
        "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
        "torch_dtype": "bfloat16"}}"#
    ));
    assert!((115.0..125.0).contains(&super_), "{super_}");
    // nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B: 31.6 B.
    let nano = billions(
        r#"{"model_type": "nemotron_h", "hidden_size": 2688, "num_hidden_layers": 52,
        "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
        "vocab_size": 131072, "n_routed_experts": 128, "num_experts_per_tok": 6,
        "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712,
        "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
        "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
        "torch_dtype": "bfloat16"}"#,
    );
    assert!((30.0..33.0).contains(&nano), "{nano}");
}

/// An absent `tie_word_embeddings` is read as Hugging Face saved it: tied (the key is left out
/// when it equals `PretrainedConfig`'s default, `True`), so the embedding is counted once.
#[test]
fn absent_tie_word_embeddings_means_tied() {
    let base = r#""hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 8, "intermediate_size": 4096, "vocab_size": 32000,
        "torch_dtype": "bfloat16""#;
    let embedding = |extra: &str| {
        let m = ModelConfig::from_json(&format!("{{{base}{extra}}}")).unwrap();
        m.estimate_weights(true, 1).embedding_params
    };
    let once = 32_000 * 1024;
    assert_eq!(embedding(""), once);
    assert_eq!(embedding(r#", "tie_word_embeddings": true"#), once);
    assert_eq!(embedding(r#", "tie_word_embeddings": false"#), 2 * once);
}
