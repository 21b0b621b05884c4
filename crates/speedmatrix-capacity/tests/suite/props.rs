//! Monotonicity properties of the predictor and the fit test.

use proptest::prelude::*;
use speedmatrix_capacity::{
    BlockPool, Gpu, KvPool, MambaCacheMode, ModelConfig, SlotPool, TokenPool, VllmFlags,
    VllmLayout, predict_vllm,
};
use speedmatrix_units::{ByteSize, Concurrency, Tokens};

const SEED_CONFIG: &str = include_str!("../fixtures/agents-a1-4b-fp8.config.json");

fn dense(layers: u64, kv_heads: u64, head_dim: u64) -> ModelConfig {
    ModelConfig::from_json(&format!(
        r#"{{"hidden_size": 2048, "num_hidden_layers": {layers}, "num_attention_heads": 16,
        "num_key_value_heads": {kv_heads}, "head_dim": {head_dim}, "vocab_size": 32000,
        "intermediate_size": 8192, "max_position_embeddings": 32768}}"#
    ))
    .unwrap()
}

/// Batch flags are pinned: vLLM's *defaults* grow at 70 GiB (2048→8192 batched tokens,
/// 256→1024 sequences), which raises the profiled overhead, so with implicit defaults a
/// 72 GiB card can get fewer blocks than a 68 GiB one — as the engine itself would.
fn blocks(model: &ModelConfig, gib: f64, util: f64) -> Option<u64> {
    let flags = VllmFlags {
        gpu_memory_utilization: util,
        max_num_seqs: Some(256),
        max_num_batched_tokens: Some(2048),
        ..VllmFlags::default()
    };
    predict_vllm(model, &Gpu::custom_gib(gib), &flags)
        .ok()
        .map(|p| p.num_blocks)
}

fn models() -> Vec<ModelConfig> {
    vec![
        dense(24, 8, 128),
        ModelConfig::from_json(SEED_CONFIG).unwrap(),
    ]
}

proptest! {
    #[test]
    fn capacity_grows_with_memory(a in 8.0f64..200.0, b in 8.0f64..200.0, util in 0.5f64..0.98) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        for m in models() {
            match (blocks(&m, lo, util), blocks(&m, hi, util)) {
                (Some(x), Some(y)) => prop_assert!(x <= y, "{lo} GiB → {x}, {hi} GiB → {y}"),
                (Some(_), None) => prop_assert!(false, "more memory must not fail"),
                _ => {}
            }
        }
    }

    #[test]
    fn capacity_grows_with_utilization(gib in 16.0f64..200.0, a in 0.3f64..1.0, b in 0.3f64..1.0) {
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        for m in models() {
            match (blocks(&m, gib, lo), blocks(&m, gib, hi)) {
                (Some(x), Some(y)) => prop_assert!(x <= y),
                (Some(_), None) => prop_assert!(false, "higher utilization must not fail"),
                _ => {}
            }
        }
    }

    #[test]
    fn capacity_shrinks_with_bytes_per_token(
        layers in 1u64..80, kv in 1u64..16, extra_kv in 0u64..16, hd in prop::sample::select(vec![64u64, 96, 128, 256]),
        gib in 1u64..64,
    ) {
        let flags = VllmFlags { kv_cache_memory_bytes: Some(ByteSize::gib(gib)), ..VllmFlags::default() };
        let gpu = Gpu::custom_gib(80.0);
        let small = predict_vllm(&dense(layers, kv, hd), &gpu, &flags).unwrap();
        let big = predict_vllm(&dense(layers, kv + extra_kv, hd), &gpu, &flags).unwrap();
        let tokens = |p: &speedmatrix_capacity::VllmPrediction| p.num_blocks * p.layout.block_size;
        prop_assert!(tokens(&big) <= tokens(&small));
        let deeper = predict_vllm(&dense(layers + 1, kv, hd), &gpu, &flags).unwrap();
        prop_assert!(tokens(&deeper) <= tokens(&small));
    }
}

fn pools() -> impl Strategy<Value = KvPool> {
    let seed = ModelConfig::from_json(SEED_CONFIG).unwrap();
    let layouts = vec![
        VllmLayout::single_full_attention(16),
        VllmLayout::plan(&seed, &VllmFlags { enable_prefix_caching: true, ..VllmFlags::default() }).unwrap(),
        VllmLayout::plan(&seed, &VllmFlags { mamba_cache_mode: Some(MambaCacheMode::All), ..VllmFlags::default() }).unwrap(),
        VllmLayout::plan(
            &ModelConfig::from_json(
                r#"{"hidden_size": 2880, "num_hidden_layers": 4, "num_attention_heads": 64, "num_key_value_heads": 8,
                "head_dim": 64, "sliding_window": 128,
                "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}"#,
            )
            .unwrap(),
            &VllmFlags::default(),
        )
        .unwrap(),
    ];
    prop_oneof![
        (
            prop::sample::select(layouts),
            1u64..50_000,
            prop::option::of(1u32..512),
            prop::option::of(1024u64..1_000_000)
        )
            .prop_map(
                |(layout, num_blocks, max_num_seqs, max_model_len)| KvPool::Blocks(BlockPool {
                    layout,
                    num_blocks,
                    max_num_seqs,
                    max_model_len,
                })
            ),
        (
            1u64..5_000_000,
            1u64..64,
            prop::option::of(1u32..512),
            prop::option::of(1u64..512)
        )
            .prop_map(|(tokens, page_size, max_running_requests, state_slots)| {
                KvPool::Tokens(TokenPool {
                    tokens,
                    page_size,
                    max_running_requests,
                    state_slots,
                    max_model_len: None,
                })
            }),
        (1u64..1_000_000, 1u32..64, any::<bool>()).prop_map(|(n_ctx, n_parallel, unified)| {
            KvPool::Slots(SlotPool {
                n_ctx,
                n_parallel,
                unified,
            })
        }),
    ]
}

proptest! {
    #[test]
    fn a_fitting_cell_still_fits_with_fewer_requests_or_a_shorter_context(
        pool in pools(), c in 0u64..300_000, n in 1u32..256, out in 0u64..16_384,
        smaller_c in 0u64..300_000, smaller_n in 1u32..256,
    ) {
        let out = Tokens::new(out);
        let conc = |x: u32| Concurrency::new(x).unwrap();
        let cell = pool.check(Tokens::new(c), conc(n), out);
        if cell.fits {
            let c2 = smaller_c.min(c);
            let n2 = smaller_n.min(n);
            prop_assert!(pool.check(Tokens::new(c2), conc(n), out).fits, "shorter context");
            prop_assert!(pool.check(Tokens::new(c), conc(n2), out).fits, "fewer requests");
            prop_assert!(pool.check(Tokens::new(c2), conc(n2), out).fits, "both");
            prop_assert!(cell.needed <= cell.limit);
        } else {
            prop_assert!(cell.needed > cell.limit);
        }
    }
}
