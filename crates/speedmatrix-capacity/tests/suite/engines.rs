//! Measured capacities, SGLang and llama.cpp pools.

use speedmatrix_capacity::{
    CapacitySource, EngineFlags, FitRule, Gpu, GridSpec, LlamaCppFlags, MeasuredCapacity,
    ModelConfig, ServerLimits, SglangFlags, VllmFlags, capacity_grid, predict, predict_llamacpp,
    predict_sglang,
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
