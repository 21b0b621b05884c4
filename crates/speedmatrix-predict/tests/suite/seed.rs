//! The seed page (RTX 3090, Agents-A1-4B-FP8, vLLM 0.32) predicted from its
//! config.json and the catalog alone, with factors fitted on other rigs.

use std::time::Duration;

use speedmatrix_capacity::{Gpu, ModelConfig, VllmFlags};
use speedmatrix_predict::{CostModel, Factors};
use speedmatrix_units::{Concurrency, Tokens};

const K: u64 = 1_024;
const PREFILL: [(u64, f64); 5] = [
    (8 * K, 779.0),
    (16 * K, 1_639.0),
    (32 * K, 3_609.0),
    (64 * K, 8_616.0),
    (128 * K, 23_154.0),
];
const CONCURRENCY: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
#[rustfmt::skip]
const DECODE: [(u64, [Option<f64>; 8]); 6] = [
    (0, [Some(117.3), Some(225.7), Some(432.6), Some(788.5), Some(1_376.6), Some(2_124.5), None, None]),
    (16 * K, [Some(109.1), Some(201.2), Some(375.5), Some(635.9), Some(955.0), None, None, None]),
    (32 * K, [Some(102.5), Some(180.9), Some(328.2), Some(518.9), None, None, None, None]),
    (64 * K, [Some(91.4), Some(150.7), Some(260.4), None, None, None, None, None]),
    (128 * K, [Some(75.1), Some(113.2), None, None, None, None, None, None]),
    (248 * K, [Some(56.2), None, None, None, None, None, None, None]),
];

fn seed_model() -> CostModel {
    let model = ModelConfig::from_json(include_str!("agents-a1-4b-fp8.config.json")).unwrap();
    let flags = VllmFlags {
        gpu_memory_utilization: 0.94,
        max_model_len: Some(262_144),
        max_num_seqs: Some(128),
        enable_prefix_caching: true,
        language_model_only: true,
        ..VllmFlags::default()
    };
    CostModel::new(
        &model,
        &Gpu::lookup("rtx3090").unwrap(),
        &flags,
        Factors::builtin("vllm").unwrap(),
    )
    .unwrap()
}

/// Every error, printed; the worst returned.
fn errors() -> (f64, f64) {
    let cost = seed_model();
    let mut worst_prefill: f64 = 0.0;
    for (ctx, seed_ms) in PREFILL {
        let ms = cost.cold_ttft(ctx).as_secs_f64() * 1e3;
        let e = (ms / seed_ms - 1.0) * 100.0;
        eprintln!("prefill {ctx:>7}: seed {seed_ms:>7.0} ms, predicted {ms:>7.0} ms, {e:+.1} %");
        worst_prefill = worst_prefill.max(e.abs());
    }
    let mut worst_decode: f64 = 0.0;
    for (ctx, row) in DECODE {
        for (n, seed) in CONCURRENCY.into_iter().zip(row) {
            let Some(seed) = seed else { continue };
            let cell = cost.decode_cell(
                Tokens::new(ctx),
                Concurrency::new(n).unwrap(),
                Tokens::kibi(8),
                Duration::from_secs(30),
                528,
            );
            let e = (cell.total_tokens_per_s / seed - 1.0) * 100.0;
            eprintln!(
                "decode {ctx:>7} × {n:<3}: seed {seed:>7.1}, predicted {:>7.1} tok/s, {e:+.1} % ({:?})",
                cell.total_tokens_per_s, cell.bound
            );
            worst_decode = worst_decode.max(e.abs());
        }
    }
    (worst_prefill, worst_decode)
}

/// The factors come from other rigs (data/validation.json), never this page:
/// every Valid cell and prefill row within ±25 %.
#[test]
fn the_seed_page_is_predicted_from_config_and_catalog_within_25_percent() {
    let (prefill, decode) = errors();
    eprintln!("worst prefill {prefill:.1} %, worst decode {decode:.1} %");
    assert!(prefill <= 25.0, "worst prefill error {prefill:.1} %");
    assert!(decode <= 25.0, "worst decode error {decode:.1} %");
}
