//! vLLM's CPU backend: `VLLM_CPU_KVCACHE_SPACE` bytes go to the KV cache verbatim.

use speedmatrix_capacity::{Gpu, KvCacheDtype, ModelConfig, VllmDevice, VllmFlags, predict_vllm};
use speedmatrix_units::ByteSize;

const TINY: &str = r#"{"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "torch_dtype": "bfloat16", "vocab_size": 32000,
    "intermediate_size": 1024, "max_position_embeddings": 4096}"#;

fn cpu(space_gib: u64, kv: KvCacheDtype) -> VllmFlags {
    VllmFlags {
        device: VllmDevice::Cpu {
            kvcache_space: ByteSize::gib(space_gib),
        },
        kv_cache_dtype: kv,
        ..VllmFlags::default()
    }
}

#[test]
fn one_gib_holds_524_288_tokens_in_4096_blocks_of_128() {
    let model = ModelConfig::from_json(TINY).unwrap();
    let host = Gpu::custom_gib(64.0);
    let p = predict_vllm(&model, &host, &cpu(1, KvCacheDtype::Auto)).unwrap();
    assert_eq!(p.layout.block_size, 128);
    assert_eq!(p.num_blocks, 4096);
    assert_eq!(p.num_blocks * p.layout.block_size, 524_288);
    assert_eq!(p.kv_cache_size_tokens, 524_288);
    assert_eq!(p.budget.available_kv, ByteSize::gib(1));
}

#[test]
fn capacity_is_space_over_bytes_per_token() {
    let model = ModelConfig::from_json(TINY).unwrap();
    for space in [1u64, 2, 3, 5, 8, 13] {
        let p = predict_vllm(
            &model,
            &Gpu::custom_gib(64.0),
            &cpu(space, KvCacheDtype::Auto),
        )
        .unwrap();
        assert_eq!(
            p.num_blocks * p.layout.block_size,
            (space << 30) / 2048,
            "{space} GiB"
        );
    }
    // The CPU backend ignores KV quantization (falls back to auto).
    let fp8 = predict_vllm(&model, &Gpu::custom_gib(64.0), &cpu(1, KvCacheDtype::Fp8)).unwrap();
    assert_eq!(fp8.num_blocks, 4096);
}
