//! The seed matrix (vLLM 0.32.0, RTX 3090, Agents-A1-4B-FP8) reproduced from a config.

use speedmatrix_capacity::{
    EngineFlags, FitRule, Gpu, GridSpec, GroupKind, MambaCacheMode, ModelConfig, Prediction,
    ServerLimits, VllmFlags, VllmPrediction, capacity_grid, predict,
};
use speedmatrix_units::{Concurrency, Tokens};

const CONFIG: &str = include_str!("../fixtures/agents-a1-4b-fp8.config.json");

/// The seed's launch: `--max-model-len 262144 --gpu-memory-utilization 0.94
/// --max-num-seqs 128 --enable-prefix-caching --language-model-only`.
fn seed_flags() -> VllmFlags {
    VllmFlags {
        gpu_memory_utilization: 0.94,
        max_model_len: Some(262_144),
        max_num_seqs: Some(128),
        enable_prefix_caching: true,
        language_model_only: true,
        ..VllmFlags::default()
    }
}

fn seed_prediction() -> (Prediction, VllmPrediction) {
    let model = ModelConfig::from_json(CONFIG).unwrap();
    let gpu = Gpu::lookup("rtx3090").unwrap();
    let p = predict(&model, &gpu, &EngineFlags::Vllm(seed_flags())).unwrap();
    let Prediction::Vllm(v) = p.clone() else {
        panic!("not a vLLM prediction")
    };
    (p, *v)
}

fn seed_grid_spec() -> GridSpec {
    GridSpec {
        contexts: [0u64, 16, 32, 64, 128, 248]
            .iter()
            .map(|k| Tokens::kibi(*k))
            .collect(),
        concurrencies: [1u32, 2, 4, 8, 16, 32, 64, 128]
            .iter()
            .map(|n| Concurrency::new(*n).unwrap())
            .collect(),
        max_output: Tokens::new(8_192),
    }
}

#[test]
fn layout_matches_the_reference_derivation() {
    let (_, v) = seed_prediction();
    let l = &v.layout;
    assert_eq!(l.block_size, 528, "16 · cdiv(2,146,304, 16 · 4,096)");
    assert_eq!(l.page_bytes, 528 * 4_096);
    assert_eq!(l.bytes_per_block, 8 * 2_162_688);
    assert_eq!(l.mamba_cache_mode, MambaCacheMode::Align);
    assert_eq!(l.groups.len(), 4);
    assert_eq!(
        l.groups
            .iter()
            .filter(|g| g.kind == GroupKind::Mamba)
            .count(),
        3
    );
    assert!(l.groups.iter().all(|g| g.layers == 8));
    assert_eq!(l.padding_layers, 0);
    assert_eq!(v.blocks_per_request_at_max_len, 497 + 3 * 2);
    let state = l.layer_costs.iter().find_map(|c| c.state_bytes).unwrap();
    assert_eq!(state, 49_152 + 2_097_152);
}

#[test]
fn weights_are_about_4_5_gib_text_only() {
    let model = ModelConfig::from_json(CONFIG).unwrap();
    let w = model.estimate_weights(true, 1);
    let gib = w.total.as_gib_f64();
    assert!((4.4..4.7).contains(&gib), "{gib} GiB; {}", w.basis);
    assert!(
        model.estimate_weights(false, 1).total > w.total,
        "the vision tower adds weights"
    );
}

#[test]
fn predicted_blocks_land_in_the_measured_bracket() {
    // The seed's grid implies 393,216 ≤ "GPU KV cache size" ≤ 524,287 ⇔ 755 ≤ num_blocks ≤ 1005.
    let (_, v) = seed_prediction();
    assert!(
        (755..=1005).contains(&v.num_blocks),
        "num_blocks {}",
        v.num_blocks
    );
    assert!(
        (393_216..=524_287).contains(&v.kv_cache_size_tokens),
        "{}",
        v.kv_cache_size_tokens
    );
    assert_eq!(
        v.kv_cache_size_tokens,
        (v.num_blocks as f64 / 503.0 * 262_144.0) as u64
    );
    assert!(v.startup.fits);
    assert!(
        v.budget.activation_peak.estimated
            && v.budget.cudagraph.estimated
            && v.budget.non_torch.estimated
    );
}

#[test]
fn seed_grid_is_reproduced_exactly() {
    let (p, _) = seed_prediction();
    let grid = capacity_grid(Some(&p), None, ServerLimits::default(), &seed_grid_spec()).unwrap();
    // Largest valid concurrency per context row in the seed.
    let valid_up_to = [32u32, 16, 8, 4, 2, 1];
    for (row, cells) in grid.cells.chunks(8).enumerate() {
        for cell in cells {
            let expect = cell.concurrency.get() <= valid_up_to[row];
            assert_eq!(
                cell.fits, expect,
                "context {} × {}: {:?}",
                cell.context, cell.concurrency, cell
            );
            assert_eq!(
                cell.rule,
                FitRule::HybridBlocks,
                "the hybrid block rule decides every seed cell"
            );
        }
    }
}

#[test]
fn naive_token_rule_and_block_rule_agree_on_the_seed() {
    let (p, v) = seed_prediction();
    let grid = capacity_grid(Some(&p), None, ServerLimits::default(), &seed_grid_spec()).unwrap();
    for cell in &grid.cells {
        let naive =
            u64::from(cell.concurrency.get()) * cell.request_tokens.get() <= v.kv_cache_size_tokens;
        assert_eq!(naive, cell.fits, "{cell:?}");
    }
}
