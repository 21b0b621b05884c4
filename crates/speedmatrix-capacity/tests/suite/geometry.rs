//! Per-layer KV geometry and parallelism, each case worked out by hand from
//! the vLLM source the rule cites (see `VLLM_RULES` and the layout code):
//! Gemma 4's global layers, Gemma 3n's shared KV, Llama 4's chunked layers,
//! Cohere 2's window, drafter layers, pipeline stages, expert-parallel and
//! checkpoint weights, quantization exclusions.

use speedmatrix_capacity::{
    CheckpointTensors, GroupKind, KvGroup, LayerKind, LlamaCppFlags, ModelConfig, SglangFlags,
    SpeculativeMethod, VllmFlags, VllmLayout, VllmVersion, WeightPlacement,
    budget_from_available_gib, capacity_from_stage_budgets, pipeline_partition, predict_llamacpp,
    sglang_tokens_from_memory,
};

fn flags(version: &str) -> VllmFlags {
    VllmFlags {
        version: VllmVersion::parse(version).unwrap(),
        max_num_batched_tokens: Some(2048),
        ..VllmFlags::default()
    }
}

/// Gemma 4 31B's shape: 60 layers, every 6th global (and the last), sliding
/// layers 16 KV heads × 256, global layers 4 × 512 with K = V weights.
fn gemma4_31b() -> ModelConfig {
    ModelConfig::from_json(
        r#"{"architectures": ["Gemma4ForConditionalGeneration"], "text_config": {
        "model_type": "gemma4_text", "hidden_size": 5376, "num_hidden_layers": 60,
        "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 256,
        "global_head_dim": 512, "num_global_key_value_heads": 4, "attention_k_eq_v": true,
        "sliding_window": 1024, "vocab_size": 262144, "intermediate_size": 21504,
        "max_position_embeddings": 262144, "torch_dtype": "bfloat16"}}"#,
    )
    .unwrap()
}

#[test]
fn gemma4_global_layers_get_their_own_heads_and_a_larger_block() {
    let model = gemma4_31b();
    let counts = model.layer_counts();
    assert!(
        counts.contains(&(LayerKind::FullAttention, 10)),
        "{counts:?}"
    );
    assert!(counts.contains(&(LayerKind::SlidingWindow { window: 1024 }, 50)));
    let layout = VllmLayout::plan(&model, &flags("0.21.0")).unwrap();
    // Sliding: 16 heads × 256 × (K+V) × 2 B = 16 KiB per token; global: 4 × 512 ×
    // 2 × 2 B = 8 KiB, so a global block of 32 tokens fills the same 256 KiB page.
    assert_eq!(layout.page_bytes, 16 * 16_384);
    let full: Vec<&KvGroup> = layout
        .groups
        .iter()
        .filter(|g| g.kind == GroupKind::Full)
        .collect();
    assert_eq!(full.len(), 1);
    assert_eq!(full[0].block_size, 32);
    assert_eq!(full[0].layers, 10);
    // 50 sliding layers ≥ 1.5 × 10 global: groups of 10, five sliding groups.
    let sliding = layout.groups.len() - 1;
    assert_eq!(sliding, 5);
    assert_eq!(layout.bytes_per_block, 10 * 16 * 16_384);
    // One 131,072-token request: 4,096 global blocks + 5 × (cdiv(1023 + 2048, 16) + 1).
    assert_eq!(
        layout.blocks_per_request(131_072),
        4096 + 5 * ((1023u64 + 2048).div_ceil(16) + 1)
    );
    // Before v0.12 vLLM could not put unequal pages in one pool.
    assert!(VllmLayout::plan(&model, &flags("0.11.2")).is_err());
}

#[test]
fn gemma3n_shared_kv_layers_keep_no_cache() {
    let model = ModelConfig::from_json(
        r#"{"text_config": {"model_type": "gemma3n_text", "hidden_size": 2048,
        "num_hidden_layers": 35, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 256, "sliding_window": 512, "num_kv_shared_layers": 15,
        "vocab_size": 262400, "intermediate_size": 16384, "max_position_embeddings": 32768}}"#,
    )
    .unwrap();
    let counts = model.layer_counts();
    // The first 20 layers own KV: full at 4, 9, 14, 19 (every 5th), 16 sliding.
    assert!(counts.contains(&(LayerKind::SharedKv, 15)), "{counts:?}");
    assert!(
        counts.contains(&(LayerKind::FullAttention, 4)),
        "{counts:?}"
    );
    assert!(counts.contains(&(LayerKind::SlidingWindow { window: 512 }, 16)));
    let layout = VllmLayout::plan(&model, &flags("0.21.0")).unwrap();
    let cached: u64 = layout.groups.iter().map(|g| g.layers).sum();
    assert_eq!(cached, 20);
    // 2 heads × 256 × 2 × 2 B × 16 tokens per page, four layers per group.
    assert_eq!(layout.bytes_per_block, 4 * 16 * 2048);
}

#[test]
fn llama4_chunked_layers_cost_full_attention_while_the_hybrid_manager_was_off() {
    let model = ModelConfig::from_json(
        r#"{"text_config": {"model_type": "llama4_text", "hidden_size": 5120,
        "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
        "head_dim": 128, "attention_chunk_size": 8192, "vocab_size": 202048,
        "intermediate_size": 8192, "max_position_embeddings": 262144}}"#,
    )
    .unwrap();
    let counts = model.layer_counts();
    assert!(
        counts.contains(&(LayerKind::FullAttention, 12)),
        "{counts:?}"
    );
    assert!(counts.contains(&(LayerKind::ChunkedLocal { chunk: 8192 }, 36)));
    let len = 131_072;
    let off = VllmLayout::plan(&model, &flags("0.12.0")).unwrap();
    assert_eq!(off.groups.len(), 1, "{:?}", off.groups);
    assert_eq!(off.blocks_per_request(len), len / 16);
    let on = VllmLayout::plan(&model, &flags("0.14.0")).unwrap();
    // Groups of 12: one global, three chunked of cdiv(8192 + 2048, 16) blocks.
    assert_eq!(on.groups.len(), 4, "{:?}", on.groups);
    assert_eq!(
        on.blocks_per_request(len),
        len / 16 + 3 * (8192u64 + 2048).div_ceil(16)
    );
}

#[test]
fn cohere2_sliding_layers_see_one_more_token_from_v0_29() {
    let model = ModelConfig::from_json(
        r#"{"model_type": "cohere2", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
        "sliding_window": 4096, "vocab_size": 256000, "intermediate_size": 14336,
        "max_position_embeddings": 131072}"#,
    )
    .unwrap();
    // Default pattern 4: every 4th layer global.
    assert!(
        model
            .layer_counts()
            .contains(&(LayerKind::FullAttention, 8))
    );
    let window = |v: &str| {
        VllmLayout::plan(&model, &flags(v))
            .unwrap()
            .groups
            .iter()
            .find_map(|g| match g.kind {
                GroupKind::SlidingWindow { window } => Some(window),
                _ => None,
            })
            .unwrap()
    };
    assert_eq!(window("0.28.0"), 4096);
    assert_eq!(window("0.29.0"), 4097);
}

#[test]
fn pipeline_stages_split_layers_as_get_pp_indices_does() {
    let sizes = |n, pp| -> Vec<usize> {
        pipeline_partition(n, pp)
            .unwrap()
            .iter()
            .map(|r| r.len())
            .collect()
    };
    assert_eq!(sizes(61, 4), [15, 15, 16, 15]);
    assert_eq!(sizes(62, 4), [15, 16, 16, 15]);
    assert_eq!(sizes(27, 2), [14, 13]);
    assert_eq!(sizes(32, 1), [32]);
    assert!(pipeline_partition(3, 4).is_err());
}

#[test]
fn the_stage_with_the_fewest_blocks_decides() {
    let model = ModelConfig::from_json(
        r#"{"hidden_size": 4096, "num_hidden_layers": 27, "num_attention_heads": 32,
        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 32000,
        "max_position_embeddings": 32768}"#,
    )
    .unwrap();
    let mut f = flags("0.21.0");
    f.pipeline_parallel_size = 2;
    let layout = VllmLayout::plan(&model, &f).unwrap();
    let page = 16 * 8 * 128 * 2 * 2;
    assert_eq!(layout.stages[0].bytes_per_block, 14 * page);
    assert_eq!(layout.stages[1].bytes_per_block, 13 * page);
    // The same memory on both stages: the 14-layer stage holds fewer blocks.
    let budgets = vec![
        budget_from_available_gib(10.0),
        budget_from_available_gib(10.0),
    ];
    let p = capacity_from_stage_budgets(layout.clone(), budgets, 32_768, 256, &f);
    assert_eq!(p.deciding_stage, 0);
    assert_eq!(p.num_blocks, (10u64 << 30) / (14 * page));
    // Less memory on the 13-layer stage can make it the one that decides.
    let budgets = vec![
        budget_from_available_gib(10.0),
        budget_from_available_gib(9.0),
    ];
    let p = capacity_from_stage_budgets(layout, budgets, 32_768, 256, &f);
    assert_eq!(p.deciding_stage, 1);
    assert_eq!(p.stage_blocks.len(), 2);
}

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

fn speculative(method: SpeculativeMethod, tokens: u64, draft: Option<ModelConfig>) -> VllmFlags {
    VllmFlags {
        num_speculative_tokens: tokens,
        speculative_method: Some(method),
        draft_model: draft.map(Box::new),
        ..flags("0.21.0")
    }
}

fn llama(layers: u64, kv_heads: u64) -> ModelConfig {
    ModelConfig::from_json(&format!(
        r#"{{"hidden_size": 4096, "num_hidden_layers": {layers}, "num_attention_heads": 32,
        "num_key_value_heads": {kv_heads}, "head_dim": 128, "intermediate_size": 14336,
        "vocab_size": 128256, "max_position_embeddings": 131072}}"#
    ))
    .unwrap()
}

#[test]
fn an_eagle_drafter_joins_the_targets_groups_with_its_own_heads() {
    let target = llama(32, 8);
    let page = 16 * 8 * 128 * 2 * 2;
    // Same geometry: one group of 33 layers (the draft flag does not split buckets).
    let same = VllmLayout::plan(
        &target,
        &speculative(SpeculativeMethod::Eagle, 3, Some(llama(1, 8))),
    )
    .unwrap();
    assert_eq!(same.groups.len(), 1);
    assert_eq!(same.bytes_per_block, 33 * page);
    // Other heads: still all full attention, one group whose block holds every page.
    let narrow = VllmLayout::plan(
        &target,
        &speculative(SpeculativeMethod::Eagle, 3, Some(llama(1, 4))),
    )
    .unwrap();
    assert_eq!(narrow.bytes_per_block, 32 * page + page / 2);
    // Without the drafter's config, or with n-gram drafting, no layer is added.
    for flags in [
        speculative(SpeculativeMethod::Eagle, 3, None),
        speculative(SpeculativeMethod::NoDrafter, 3, Some(llama(1, 8))),
    ] {
        assert_eq!(
            VllmLayout::plan(&target, &flags).unwrap().bytes_per_block,
            32 * page
        );
    }
}

#[test]
fn a_drafter_layer_on_a_hybrid_model_groups_by_release() {
    let gpt_oss = ModelConfig::from_json(
        r#"{"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 36,
        "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention",
          "sliding_attention", "full_attention", "sliding_attention", "full_attention",
          "sliding_attention", "full_attention", "sliding_attention", "full_attention",
          "sliding_attention", "full_attention", "sliding_attention", "full_attention",
          "sliding_attention", "full_attention", "sliding_attention", "full_attention",
          "sliding_attention", "full_attention", "sliding_attention", "full_attention",
          "sliding_attention", "full_attention", "sliding_attention", "full_attention",
          "sliding_attention", "full_attention", "sliding_attention", "full_attention",
          "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        "sliding_window": 128, "vocab_size": 201088, "max_position_embeddings": 131072}"#,
    )
    .unwrap();
    let draft = ModelConfig::from_json(
        r#"{"hidden_size": 2880, "num_hidden_layers": 1, "num_attention_heads": 64,
        "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 201088}"#,
    )
    .unwrap();
    let plan = |version: &str| {
        let mut f = speculative(SpeculativeMethod::Eagle, 3, Some(draft.clone()));
        f.version = VllmVersion::parse(version).unwrap();
        VllmLayout::plan(&gpt_oss, &f).unwrap()
    };
    // 18 sliding + 19 full: 19 < 1.25 × 18 from v0.12, one group size of 19.
    let now = plan("0.21.0");
    assert_eq!(now.groups.len(), 2);
    assert_eq!(now.padding_layers, 1);
    // Before v0.12 the smaller bucket sets the size: the full layers need two groups.
    let old = plan("0.11.0");
    assert_eq!(
        old.groups
            .iter()
            .filter(|g| g.kind == GroupKind::Full)
            .count(),
        2
    );
}

#[test]
fn llama_cpp_sliding_window_recurrent_and_mla_caches_follow_its_rules() {
    // Gemma 3 style: 5 sliding (window 1024) per global layer, 8 KV heads × 128.
    let gemma = ModelConfig::from_json(
        r#"{"model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 12,
        "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 128,
        "sliding_window": 1024, "vocab_size": 262144, "max_position_embeddings": 32768}"#,
    )
    .unwrap();
    // llama-server's default: 4 slots on one unified cache of the training context.
    let auto = predict_llamacpp(
        &gemma,
        &LlamaCppFlags {
            n_parallel: None,
            ..LlamaCppFlags::default()
        },
    )
    .unwrap();
    assert!(auto.unified);
    assert_eq!(auto.n_parallel, 4);
    assert_eq!(auto.n_ctx, 32_768);
    // Sliding layers: pad256(1024 × 4 slots + 512) = 4,608 cells.
    assert_eq!(auto.swa_cells, Some(4_608));
    let row = 8 * 128 * 2 * 2;
    assert_eq!(auto.kv_bytes.get(), row * (2 * 32_768 + 10 * 4_608));
    let full = predict_llamacpp(
        &gemma,
        &LlamaCppFlags {
            n_parallel: None,
            swa_full: true,
            ..LlamaCppFlags::default()
        },
    )
    .unwrap();
    assert_eq!(full.kv_bytes.get(), row * 12 * 32_768);
    // Explicit slots, not unified, --fit on and -c 0: each slot gets the training context.
    let slots = predict_llamacpp(
        &gemma,
        &LlamaCppFlags {
            n_parallel: Some(2),
            ..LlamaCppFlags::default()
        },
    )
    .unwrap();
    assert_eq!((slots.n_ctx_seq, slots.n_ctx), (32_768, 65_536));
    // A Mamba2 hybrid keeps one f32 state per slot in each recurrent layer.
    let hybrid = ModelConfig::from_json(
        r#"{"hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16,
        "num_key_value_heads": 4, "head_dim": 128, "layers_block_type": ["mamba", "mamba", "attention", "mamba"],
        "mamba_n_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "mamba_n_groups": 8,
        "mamba_d_conv": 4, "vocab_size": 32000, "max_position_embeddings": 8192}"#,
    )
    .unwrap();
    let h = predict_llamacpp(
        &hybrid,
        &LlamaCppFlags {
            n_ctx: 8192,
            n_parallel: Some(3),
            ..LlamaCppFlags::default()
        },
    )
    .unwrap();
    let d_inner = 64 * 64;
    let per_layer = 3 * (d_inner + 2 * 8 * 128) + 128 * d_inner;
    assert_eq!(h.recurrent_bytes.get(), 3 * 3 * 4 * per_layer);
    // Three streams of pad256(8192 / 3) = 2,816 cells.
    assert_eq!(h.n_ctx_seq, 2_816);
    assert_eq!(h.kv_bytes.get(), 4 * 128 * 2 * 2 * 3 * 2_816);
    // MLA: the latent only, no V.
    let mla = ModelConfig::from_json(
        r#"{"hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16,
        "kv_lora_rank": 512, "qk_rope_head_dim": 64, "vocab_size": 102400,
        "max_position_embeddings": 4096}"#,
    )
    .unwrap();
    let m = predict_llamacpp(
        &mla,
        &LlamaCppFlags {
            n_ctx: 4096,
            ..LlamaCppFlags::default()
        },
    )
    .unwrap();
    assert_eq!(m.kv_bytes.get(), 27 * 576 * 2 * 4096);
}

#[test]
fn sglang_splits_sliding_window_models_into_two_pools() {
    // 12 sliding + 12 full layers, 8 KV heads × 64, bf16: 2,048 B per layer per token.
    let types = ["\"sliding_attention\"", "\"full_attention\""]
        .repeat(12)
        .join(", ");
    let model = ModelConfig::from_json(&format!(
        r#"{{"hidden_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64,
        "num_key_value_heads": 8, "head_dim": 64, "layer_types": [{types}],
        "sliding_window": 128, "vocab_size": 201088, "max_position_embeddings": 131072}}"#
    ))
    .unwrap();
    let flags = SglangFlags {
        mem_fraction_static: Some(0.5),
        ..SglangFlags::default()
    };
    // rest = 30 − 40 × 0.5 = 10 GiB over 12 × 2,048 + 0.8 × 12 × 2,048 B per token.
    let tokens = sglang_tokens_from_memory(&model, &flags, 40.0, 30.0).unwrap();
    let cell = 12.0 * 2048.0 + 0.8 * 12.0 * 2048.0;
    assert_eq!(tokens, (10.0 * (1u64 << 30) as f64 / cell) as u64);
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

#[test]
fn deepseek_v3_2_caches_its_indexer_keys_beside_a_ds_mla_latent() {
    let model = ModelConfig::from_json(
        r#"{"model_type": "deepseek_v32", "hidden_size": 7168, "num_hidden_layers": 61,
        "num_attention_heads": 128, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128, "v_head_dim": 128, "q_lora_rank": 1536, "index_head_dim": 128,
        "vocab_size": 129280, "max_position_embeddings": 163840}"#,
    )
    .unwrap();
    let per_token = |kv: &str| {
        let mut f = flags("0.21.0");
        f.kv_cache_dtype = speedmatrix_capacity::KvCacheDtype::parse(kv).unwrap();
        let l = VllmLayout::plan(&model, &f).unwrap();
        l.bytes_per_block / l.block_size
    };
    // bf16 latent 576 × 2 B, plus 128 + 4 indexer bytes, on each of 61 layers.
    assert_eq!(per_token("auto"), 61 * (1152 + 132));
    // fp8: the sparse-MLA layout, 512 + 16 + 128 = 656 B.
    assert_eq!(per_token("fp8"), 61 * (656 + 132));
    assert_eq!(per_token("fp8_ds_mla"), 61 * (656 + 132));
}
