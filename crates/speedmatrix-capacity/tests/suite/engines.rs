//! Measured capacities, SGLang and llama.cpp pools (sliding-window,
//! recurrent and MLA caches included).

use speedmatrix_capacity::{
    CapacitySource, EngineFlags, FitRule, Gpu, GridSpec, LlamaCppFlags, MeasuredCapacity,
    ModelConfig, ServerLimits, SglangFlags, VllmFlags, capacity_grid, predict, predict_llamacpp,
    predict_sglang, sglang_tokens_from_memory,
};
use speedmatrix_units::{Concurrency, Tokens};

const SEED_CONFIG: &str = include_str!("../fixtures/agents-a1-4b-fp8.config.json");
const DENSE: &str = r#"{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "intermediate_size": 14336,
    "max_position_embeddings": 131072}"#;

fn spec(contexts: &[u64], conc: &[u32], out: u64) -> GridSpec {
    GridSpec {
        contexts: contexts.iter().map(|c| Tokens::new(*c)).collect(),
        concurrencies: conc.iter().map(|n| Concurrency::new(*n).unwrap()).collect(),
        max_output: Tokens::new(out),
    }
}

#[test]
fn measured_vllm_blocks_decide_and_the_difference_is_recorded() {
    let model = ModelConfig::from_json(SEED_CONFIG).unwrap();
    let flags = VllmFlags {
        gpu_memory_utilization: 0.94,
        max_model_len: Some(262_144),
        max_num_seqs: Some(128),
        enable_prefix_caching: true,
        language_model_only: true,
        ..VllmFlags::default()
    };
    let predicted = predict(
        &model,
        &Gpu::lookup("rtx3090").unwrap(),
        &EngineFlags::Vllm(flags),
    )
    .unwrap();
    // A server that reports 800 blocks of 528: 16K × 16 needs 848 blocks and no longer fits,
    // although the naive token view (800/503 × 262,144 = 416,928 ≥ 16 × 24,576) says it does.
    let measured = MeasuredCapacity::Vllm {
        num_gpu_blocks: 800,
        block_size: 528,
    };
    let grid = capacity_grid(
        Some(&predicted),
        Some(&measured),
        ServerLimits::default(),
        &spec(&[16_384], &[8, 16], 8192),
    )
    .unwrap();
    assert_eq!(grid.source, CapacitySource::Measured);
    assert!(grid.cells[0].fits);
    assert!(!grid.cells[1].fits);
    assert_eq!(grid.cells[1].needed, 16 * 53);
    assert_eq!(grid.cells[1].rule, FitRule::HybridBlocks);
    let c = grid.comparison.unwrap();
    assert_eq!(c.measured_tokens, 800 * 528);
    assert_eq!(c.measured_blocks, Some(800));
    assert_eq!(
        c.difference_tokens,
        c.measured_tokens as i64 - c.predicted_tokens as i64
    );
    assert!(c.difference_pct < 0.0);
}

#[test]
fn measured_without_a_prediction_uses_plain_blocks_and_server_limits() {
    let m = MeasuredCapacity::Vllm {
        num_gpu_blocks: 1001,
        block_size: 16,
    };
    let limits = ServerLimits {
        max_num_seqs: Some(4),
        max_model_len: Some(32_768),
    };
    let grid = capacity_grid(None, Some(&m), limits, &spec(&[1000, 40_000], &[1, 8], 0)).unwrap();
    assert!(grid.cells[0].fits); // 63 blocks
    assert_eq!(grid.cells[1].rule, FitRule::MaxNumSeqs);
    assert_eq!(grid.cells[2].rule, FitRule::MaxModelLen);
    assert!(grid.comparison.is_none());
    assert!(
        capacity_grid(
            None,
            Some(&MeasuredCapacity::Vllm {
                num_gpu_blocks: 0,
                block_size: 16
            }),
            limits,
            &spec(&[1], &[1], 1)
        )
        .is_err()
    );
}

#[test]
fn sglang_token_pool_and_llamacpp_slots() {
    let model = ModelConfig::from_json(DENSE).unwrap();
    let gpu = Gpu::lookup("h100").unwrap();
    let s = predict_sglang(&model, &gpu, &SglangFlags::default()).unwrap();
    // cell size = 8 heads × 128 × 32 layers × 2 × 2 B = 131,072 B per token.
    assert_eq!(s.cell_bytes, 131_072);
    assert_eq!(s.max_total_num_tokens, s.rest.get() / 131_072);
    let hybrid = predict_sglang(
        &ModelConfig::from_json(SEED_CONFIG).unwrap(),
        &gpu,
        &SglangFlags::default(),
    )
    .unwrap();
    assert!(hybrid.mamba_slots.unwrap() > 0);

    let measured = MeasuredCapacity::Sglang {
        max_total_num_tokens: 100_000,
        max_running_requests: Some(64),
    };
    let grid = capacity_grid(
        None,
        Some(&measured),
        ServerLimits::default(),
        &spec(&[10_000], &[8, 16, 128], 2_000),
    )
    .unwrap();
    assert!(grid.cells[0].fits);
    assert!(!grid.cells[1].fits && grid.cells[1].rule == FitRule::TokenPool);
    assert_eq!(grid.cells[2].rule, FitRule::MaxNumSeqs);

    let l = predict_llamacpp(
        &model,
        &LlamaCppFlags {
            n_ctx: 65_000,
            n_parallel: Some(4),
            ..LlamaCppFlags::default()
        },
    )
    .unwrap();
    // 65,000 → 65,024 (256s); a quarter each, 16,256, padded again: 16,384 per stream.
    assert_eq!(l.n_ctx_seq, 16_384);
    assert_eq!(l.n_ctx, 4 * 16_384);
    assert_eq!(l.kv_bytes.get(), 65_536 * 131_072);
    let grid = capacity_grid(
        Some(&speedmatrix_capacity::Prediction::LlamaCpp(l)),
        None,
        ServerLimits::default(),
        &spec(&[8_000, 16_200], &[4, 5], 256),
    )
    .unwrap();
    assert!(grid.cells[0].fits);
    assert_eq!(grid.cells[1].rule, FitRule::ParallelSlots);
    assert_eq!(grid.cells[2].rule, FitRule::SlotContext);
    assert!(!grid.cells[2].fits);
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
