//! One rank's weights, each case worked out by hand: expert and pipeline
//! parallelism, quantization exclusion lists, a checkpoint's safetensors
//! headers and a safetensors index's total.

use speedmatrix_capacity::{CheckpointTensors, ModelConfig, WeightPlacement};

use crate::geometry::{flags, llama};

#[test]
fn expert_parallelism_spreads_whole_experts_and_keeps_attention_on_every_rank() {
    let model = ModelConfig::from_json(
        r#"{"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "moe_intermediate_size": 768,
        "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
        "max_position_embeddings": 40960}"#,
    )
    .unwrap();
    let all = |ep: u64| WeightPlacement {
        tensor_parallel: 1,
        expert_parallel: ep,
        layers: 0..48,
        embedding: true,
        lm_head: true,
        language_model_only: true,
    };
    let one = model.estimate_weights_on(&all(1));
    let eight = model.estimate_weights_on(&all(8));
    let experts = 48 * 128 * 3 * 2048 * 768 * 2;
    // Data parallel 8 with expert parallelism: each rank keeps an eighth of
    // the experts and all of the rest.
    let diff = one.per_rank.get() - eight.per_rank.get();
    assert!(diff.abs_diff(experts * 7 / 8) < 1 << 20, "{diff}");
    // A pipeline stage holds its layers, and the embedding only on the first.
    let stage = WeightPlacement {
        layers: 24..48,
        embedding: false,
        ..all(1)
    };
    let half = model.estimate_weights_on(&stage);
    assert!(half.per_rank.get() < one.per_rank.get() / 2 + (1 << 30));
    assert!(half.per_rank.get() > one.per_rank.get() / 2 - (1 << 30));
}

#[test]
fn quantization_exclusions_keep_those_modules_in_the_model_dtype() {
    let config = |ignore: &str| {
        ModelConfig::from_json(&format!(
            r#"{{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 14336,
            "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
            "quantization_config": {{"quant_method": "fp8", "ignore": [{ignore}]}}}}"#
        ))
        .unwrap()
    };
    let bytes = |m: &ModelConfig| m.estimate_weights(true, 1).total.get();
    let plain = bytes(&config(r#""lm_head""#));
    // Attention: 4096 × (32·128 + 2·8·128 + 32·128) per layer, one more byte each at bf16.
    let attention = 32 * 4096 * (4096 + 2048 + 4096);
    assert_eq!(
        bytes(&config(r#""lm_head", "re:.*self_attn.*""#)) - plain,
        attention
    );
    // One whole layer (attention and MLP) left unquantized.
    let layer = attention / 32 + 3 * 4096 * 14336;
    assert_eq!(bytes(&config(r#""model.layers.0""#)) - plain, layer);
}

/// One safetensors header with `tensors` of (name, bytes), laid end to end.
fn header(tensors: &[(&str, u64)]) -> String {
    let mut at = 0;
    let fields: Vec<String> = tensors
        .iter()
        .map(|(name, bytes)| {
            let f = format!(
                r#""{name}": {{"dtype": "BF16", "shape": [1], "data_offsets": [{at}, {}]}}"#,
                at + bytes
            );
            at += bytes;
            f
        })
        .collect();
    format!(
        r#"{{"__metadata__": {{"format": "pt"}}, {}}}"#,
        fields.join(", ")
    )
}

#[test]
fn safetensors_headers_give_exact_bytes_placed_on_ranks() {
    let model = ModelConfig::from_json(
        r#"{"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 8, "vocab_size": 1000, "tie_word_embeddings": true,
        "max_position_embeddings": 4096, "num_experts": 8, "moe_intermediate_size": 64,
        "num_experts_per_tok": 2}"#,
    )
    .unwrap();
    let shard1 = header(&[
        ("model.embed_tokens.weight", 1000),
        ("model.layers.0.self_attn.q_proj.weight", 100),
        ("model.layers.0.mlp.experts.0.up_proj.weight", 80),
        ("model.layers.1.self_attn.q_proj.weight", 100),
    ]);
    let shard2 = header(&[
        ("model.layers.2.self_attn.q_proj.weight", 100),
        ("model.layers.3.self_attn.q_proj.weight", 100),
        ("model.layers.3.mlp.experts.7.up_proj.weight", 80),
        ("model.layers.4.self_attn.q_proj.weight", 40), // past the decoder: MTP
        ("model.visual.blocks.0.attn.qkv.weight", 500),
        ("model.norm.weight", 4),
    ]);
    let c = CheckpointTensors::from_headers([shard1.as_str(), shard2.as_str()]).unwrap();
    assert_eq!(c.total().get(), 2104);
    let whole = WeightPlacement::tensor_parallel(&model, 1, true);
    // Everything but the vision tower and the MTP layer.
    assert_eq!(
        c.bytes_on(&model, &whole, false).per_rank.get(),
        2104 - 500 - 40
    );
    assert_eq!(c.bytes_on(&model, &whole, true).per_rank.get(), 2104 - 500);
    let with_vision = WeightPlacement {
        language_model_only: false,
        ..whole.clone()
    };
    assert_eq!(
        c.bytes_on(&model, &with_vision, false).per_rank.get(),
        2104 - 40
    );
    // Two pipeline stages: the tied embedding is on both, layers split 2 + 2.
    let first = WeightPlacement {
        layers: 0..2,
        lm_head: false,
        ..whole.clone()
    };
    let last = WeightPlacement {
        layers: 2..4,
        embedding: false,
        ..whole.clone()
    };
    assert_eq!(c.bytes_on(&model, &first, false).per_rank.get(), 1000 + 280);
    assert_eq!(
        c.bytes_on(&model, &last, false).per_rank.get(),
        1000 + 280 + 4
    );
    // Expert parallelism over 2 ranks halves the experts; tensor parallelism 2 the rest.
    let ep = WeightPlacement {
        tensor_parallel: 2,
        expert_parallel: 2,
        ..whole
    };
    assert_eq!(
        c.bytes_on(&model, &ep, false).per_rank.get(),
        (1000 + 400) / 2 + 160 / 2 + 4
    );
    assert!(CheckpointTensors::from_headers(["[1]"]).is_err());
    assert!(CheckpointTensors::from_headers([r#"{"x": {"dtype": "F16"}}"#]).is_err());
}

#[test]
fn a_safetensors_index_total_is_split_as_the_counted_weights_are() {
    let model = llama(32, 8);
    let gpu = speedmatrix_capacity::Gpu::lookup("h100").unwrap();
    let weights = |total: Option<u64>, pp: u32| {
        let mut f = flags("0.21.0");
        f.pipeline_parallel_size = pp;
        f.max_model_len = Some(8192);
        f.overhead.checkpoint_total = total.map(speedmatrix_units::ByteSize::new);
        match speedmatrix_capacity::predict(
            &model,
            &gpu,
            &speedmatrix_capacity::EngineFlags::Vllm(f),
        )
        .unwrap()
        {
            speedmatrix_capacity::Prediction::Vllm(p) => p.budget.weights.bytes.get(),
            _ => unreachable!(),
        }
    };
    let counted = weights(None, 1);
    let total = model.estimate_weights(true, 1).total.get();
    assert_eq!(weights(Some(2 * total), 1), 2 * counted);
    // Two stages: the deciding stage holds its share of the doubled total.
    let stage = weights(None, 2);
    let doubled = weights(Some(2 * total), 2);
    assert!(doubled.abs_diff(2 * stage) <= 2, "{doubled} vs 2 × {stage}");
}

/// MoE layers as each family's modelling code decides them: DeepSeek's leading dense layers,
/// Llama 4's interleaving, ERNIE 4.5's start index and interval (`(i + 1) % interval == 0`
/// from the start index on); a dense model has none.
#[test]
fn moe_layers_follow_each_familys_rule() {
    let moe = |extra: &str| {
        ModelConfig::from_json(&format!(
            r#"{{"hidden_size": 2048, "num_hidden_layers": 28, "num_attention_heads": 16,
            "num_key_value_heads": 4, "torch_dtype": "bfloat16", "vocab_size": 32000,
            "intermediate_size": 8192, "num_experts": 64, "num_experts_per_tok": 6,
            "moe_intermediate_size": 1024, "max_position_embeddings": 4096{extra}}}"#
        ))
        .unwrap()
        .moe_layers()
    };
    assert_eq!(moe(""), 28);
    assert_eq!(moe(r#", "first_k_dense_replace": 3"#), 25);
    assert_eq!(moe(r#", "interleave_moe_layer_step": 2"#), 14);
    assert_eq!(
        moe(r#", "moe_layer_start_index": 1, "moe_layer_interval": 1"#),
        27
    );
    assert_eq!(
        moe(r#", "moe_layer_start_index": 1, "moe_layer_interval": 2"#),
        14
    );
    assert_eq!(
        moe(r#", "moe_layer_start_index": 1, "moe_layer_end_index": 20"#),
        20
    );
    // ERNIE-VL gives the end index per modality: the largest bounds the layers.
    assert_eq!(moe(r#", "moe_layer_end_index": [10, 15]"#), 16);
    let dense = ModelConfig::from_json(
        r#"{"hidden_size": 2048, "num_hidden_layers": 28, "num_attention_heads": 16,
        "num_key_value_heads": 4, "torch_dtype": "bfloat16", "vocab_size": 32000,
        "intermediate_size": 8192, "max_position_embeddings": 4096}"#,
    )
    .unwrap();
    assert_eq!(dense.moe_layers(), 0);
}
