//! Per-layer KV geometry and parallelism, each case worked out by hand from
//! the vLLM source the rule cites (see `VLLM_RULES` and the layout code):
//! Gemma 4's global layers, Gemma 3n's shared KV, Llama 4's chunked layers,
//! Cohere 2's window, drafter layers, DeepSeek V3.2's indexer, pipeline stages.

use speedmatrix_capacity::{
    GroupKind, KvGroup, LayerKind, ModelConfig, SpeculativeMethod, VllmFlags, VllmLayout,
    VllmVersion, budget_from_available_gib, capacity_from_stage_budgets, pipeline_partition,
};

pub(crate) fn flags(version: &str) -> VllmFlags {
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

fn speculative(method: SpeculativeMethod, tokens: u64, draft: Option<ModelConfig>) -> VllmFlags {
    VllmFlags {
        num_speculative_tokens: tokens,
        speculative_method: Some(method),
        draft_model: draft.map(Box::new),
        ..flags("0.21.0")
    }
}

pub(crate) fn llama(layers: u64, kv_heads: u64) -> ModelConfig {
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
