//! Speculative decoding as the cost model prices it: a verifying pass of k + 1 tokens a
//! stream and the drafter's passes, emitting 1 + rate × k tokens a stream a step.

use std::time::Duration;

use proptest::prelude::*;
use speedmatrix_capacity::{Gpu, ModelConfig, SpeculativeConfig, VllmFlags};
use speedmatrix_predict::{CostModel, Drafter, Factors, Speculation};
use speedmatrix_units::{Concurrency, Tokens};

/// An 8B-class dense model with one MTP layer.
fn model() -> ModelConfig {
    ModelConfig::from_json(
        r#"{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "torch_dtype": "bfloat16", "vocab_size": 128256,
        "intermediate_size": 14336, "max_position_embeddings": 131072,
        "num_nextn_predict_layers": 1}"#,
    )
    .unwrap()
}

fn flags(config: &str) -> VllmFlags {
    let spec = SpeculativeConfig::parse(config).unwrap();
    VllmFlags {
        num_speculative_tokens: spec.num_speculative_tokens,
        speculative_method: Some(spec.method),
        ..VllmFlags::default()
    }
}

fn plain(flags: &VllmFlags) -> CostModel {
    CostModel::new(
        &model(),
        &Gpu::lookup("h100-sxm").unwrap(),
        flags,
        Factors::builtin("vllm").unwrap(),
    )
    .unwrap()
}

fn per_request(cost: &CostModel, n: u32) -> f64 {
    cost.decode_cell(
        Tokens::kibi(4),
        Concurrency::new(n).unwrap(),
        Tokens::kibi(1),
        Duration::from_secs(30),
        16,
    )
    .per_request_tokens_per_s
}

#[test]
fn acceptance_length_and_rate_are_vllms_two_readings_of_one_figure() {
    let x = Speculation {
        tokens: 3,
        acceptance_rate: 0.6,
        drafter: Drafter::None,
    };
    assert!((x.tokens_per_step() - 2.8).abs() < 1e-12);
    let rate = Speculation::rate_from_length(2.8, 3).unwrap();
    assert!((rate - 0.6).abs() < 1e-12);
    assert_eq!(
        Speculation::rate_from_length(4.5, 3),
        None,
        "more than k + 1"
    );
    assert_eq!(Speculation::rate_from_length(0.9, 3), None, "less than 1");
    assert_eq!(
        Speculation::rate_from_length(1.5, 0),
        None,
        "nothing drafted"
    );
}

#[test]
fn mtp_drafts_with_the_models_own_layer_and_costs_when_nothing_is_accepted() {
    let f = flags(r#"{"method": "mtp", "num_speculative_tokens": 2}"#);
    let base = per_request(&plain(&VllmFlags::default()), 1);
    let none = plain(&f).speculate(&model(), &f, 0.0).unwrap();
    assert!(matches!(
        none.speculation.unwrap().drafter,
        Drafter::TargetLayers { layers: 1 }
    ));
    // Nothing accepted: the same token a step, at the price of drafting and verifying.
    assert!(per_request(&none, 1) < base);
    // Most accepted: near 1 + 0.8 × 2 = 2.6 tokens a step for a little more than a step.
    let most = plain(&f).speculate(&model(), &f, 0.8).unwrap();
    let gain = per_request(&most, 1) / base;
    assert!(gain > 1.8 && gain < 2.6, "{gain}");
}

#[test]
fn speculation_needs_drafted_tokens_and_a_rate_in_range() {
    let f = flags(r#"{"method": "ngram", "num_speculative_tokens": 4}"#);
    let none = VllmFlags::default();
    assert!(plain(&none).speculate(&model(), &none, 0.5).is_err());
    assert!(plain(&f).speculate(&model(), &f, 1.5).is_err());
    assert!(plain(&f).speculate(&model(), &f, f64::NAN).is_err());
    let ngram = plain(&f).speculate(&model(), &f, 0.5).unwrap();
    assert_eq!(ngram.speculation.unwrap().drafter, Drafter::None);
}

proptest! {
    /// A higher acceptance rate never lowers decode throughput, at any batch.
    #[test]
    fn throughput_rises_with_the_acceptance_rate(a in 0.0f64..1.0, more in 0.01f64..0.5,
                                                 k in 1u64..6, n in 1u32..64) {
        let f = flags(&format!(r#"{{"method": "mtp", "num_speculative_tokens": {k}}}"#));
        let b = (a + more).min(1.0);
        let low = plain(&f).speculate(&model(), &f, a).unwrap();
        let high = plain(&f).speculate(&model(), &f, b).unwrap();
        prop_assert!(per_request(&high, n) >= per_request(&low, n) * (1.0 - 1e-9));
    }
}
