//! Real vLLM startup logs, re-derived from the engine's formulas. Each case cites its source.
//!
//! Logs print "Available KV cache memory" rounded to 0.01 GiB, so a case checks that the
//! logged `num_blocks` lies in the block range that rounding allows and that the predicted
//! blocks at the printed value do too; the log's token and concurrency figures are then
//! checked exactly from the logged block count.

use speedmatrix_capacity::{
    KvCacheDtype, LogFormula, MambaCacheMode, ModelConfig, SpeculativeConfig, SpeculativeMethod,
    VllmFlags, VllmLayout, VllmVersion, budget_from_available_gib, capacity_from_budget,
};

struct Case {
    source: &'static str,
    config: String,
    flags: VllmFlags,
    max_model_len: u64,
    available_gib: Option<f64>,
    num_blocks: u64,
    block_size: u64,
    bytes_per_block: u64,
    kv_cache_size_tokens: Option<u64>,
    max_concurrency_2dp: Option<f64>,
}

/// Qwen3.5/3.6 text config with `full` of every 4 layers full attention.
fn qwen35(layers: u64, hidden: u64, kv_heads: u64, v_heads: u64, context: u64) -> String {
    let types: Vec<String> = (0..layers)
        .map(|i| {
            if (i + 1) % 4 == 0 {
                "\"full_attention\""
            } else {
                "\"linear_attention\""
            }
            .to_string()
        })
        .collect();
    format!(
        r#"{{"architectures": ["Qwen3_5MoeForConditionalGeneration"], "text_config": {{
        "hidden_size": {hidden}, "num_hidden_layers": {layers}, "num_attention_heads": 16,
        "num_key_value_heads": {kv_heads}, "head_dim": 256, "torch_dtype": "bfloat16",
        "layer_types": [{}], "linear_num_key_heads": 16, "linear_key_head_dim": 128,
        "linear_num_value_heads": {v_heads}, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "float32", "vocab_size": 248320, "intermediate_size": 9216,
        "max_position_embeddings": {context}}}}}"#,
        types.join(",")
    )
}

fn dense(layers: u64, kv_heads: u64, head_dim: u64) -> String {
    format!(
        r#"{{"hidden_size": 4096, "num_hidden_layers": {layers}, "num_attention_heads": 32,
        "num_key_value_heads": {kv_heads}, "head_dim": {head_dim}, "torch_dtype": "bfloat16",
        "vocab_size": 151936, "intermediate_size": 12288, "max_position_embeddings": 131072}}"#
    )
}

fn version(v: &str) -> VllmVersion {
    VllmVersion::parse(v).unwrap()
}

fn cases() -> Vec<Case> {
    let fp8 = KvCacheDtype::Fp8;
    vec![
        Case {
            source: "kv-capacity.md §6: Agents-A1 (Qwen3.5-35B-A3B, NVFP4) on GB10, fp8 KV, L=4096, no prefix caching",
            config: qwen35(40, 2048, 2, 32, 262_144),
            flags: VllmFlags {
                kv_cache_dtype: fp8,
                ..VllmFlags::default()
            },
            max_model_len: 4096,
            available_gib: Some(61.55),
            num_blocks: 3079,
            block_size: 2096,
            bytes_per_block: 21_463_040,
            kv_cache_size_tokens: Some(2_522_316),
            max_concurrency_2dp: Some(615.80),
        },
        Case {
            source: "kv-capacity.md §6: Qwen3.6-35B-A3B NVFP4 on RTX 5090, fp8 KV, prefix caching, L=131072",
            config: qwen35(40, 2048, 2, 32, 262_144),
            flags: VllmFlags {
                kv_cache_dtype: fp8,
                enable_prefix_caching: true,
                ..VllmFlags::default()
            },
            max_model_len: 131_072,
            available_gib: Some(5.98),
            num_blocks: 299,
            block_size: 2096,
            bytes_per_block: 21_463_040,
            kv_cache_size_tokens: Some(567_978),
            max_concurrency_2dp: Some(4.33),
        },
        Case {
            source: "kv-capacity.md §6: same model and flags, second boot at 6.01 GiB",
            config: qwen35(40, 2048, 2, 32, 262_144),
            flags: VllmFlags {
                kv_cache_dtype: fp8,
                enable_prefix_caching: true,
                ..VllmFlags::default()
            },
            max_model_len: 131_072,
            available_gib: Some(6.01),
            num_blocks: 300,
            block_size: 2096,
            bytes_per_block: 21_463_040,
            kv_cache_size_tokens: Some(569_878),
            max_concurrency_2dp: Some(4.35),
        },
        Case {
            source: "mitchross/talos-argocd-proxmox#1995 boot log: Qwen3.8-27B-FP8, 2×RTX 3090 TP2, fp8 KV, \
                     prefix caching, L=131072: 'GPU KV cache size: 302,921 tokens', '2.31x', 4.99 GiB per card",
            config: qwen35(64, 5120, 4, 48, 262_144),
            flags: VllmFlags {
                kv_cache_dtype: fp8,
                enable_prefix_caching: true,
                tensor_parallel_size: 2,
                ..VllmFlags::default()
            },
            max_model_len: 131_072,
            available_gib: Some(4.99),
            num_blocks: 208,
            block_size: 1568,
            bytes_per_block: 16 * 1568 * 1024,
            kv_cache_size_tokens: Some(302_921),
            max_concurrency_2dp: Some(2.31),
        },
        Case {
            source: "kv-capacity.md §6: Qwen3.5-27B on H20, vLLM 0.19.0 (per-group log formula), bf16, L=32768",
            config: qwen35(64, 5120, 4, 48, 262_144),
            flags: VllmFlags {
                version: version("0.19.0"),
                ..VllmFlags::default()
            },
            max_model_len: 32_768,
            available_gib: None,
            num_blocks: 1487,
            block_size: 784,
            bytes_per_block: 16 * 784 * 4096,
            kv_cache_size_tokens: Some(290_864),
            max_concurrency_2dp: Some(33.04),
        },
        Case {
            source: "kv-capacity.md §6: Qwen3-8B on RTX A5000, vLLM 0.21.0, 6.37 GiB, L=16384",
            config: dense(36, 8, 128),
            flags: VllmFlags {
                version: version("0.21.0"),
                ..VllmFlags::default()
            },
            max_model_len: 16_384,
            available_gib: Some(6.37),
            num_blocks: 2898,
            block_size: 16,
            bytes_per_block: 16 * 147_456,
            kv_cache_size_tokens: Some(46_368),
            max_concurrency_2dp: Some(2.83),
        },
        Case {
            source: "vllm-project/vllm#10517 (V0 log): Llama-3.1-8B on RTX 3090, kv_cache_size=3.81GiB, \
                     'GPU blocks: 1952', 'Maximum concurrency for 20000 tokens per request: 1.56x'",
            config: dense(32, 8, 128),
            flags: VllmFlags {
                version: version("0.6.4"),
                ..VllmFlags::default()
            },
            max_model_len: 20_000,
            available_gib: Some(3.81),
            num_blocks: 1952,
            block_size: 16,
            bytes_per_block: 16 * 131_072,
            kv_cache_size_tokens: None,
            max_concurrency_2dp: Some(1.56),
        },
        Case {
            source: "vllm-project/vllm#10517 (V0 log): same, max-model-len 29000, kv_cache_size=2.89GiB, \
                     '# GPU blocks: 1478', '0.82x', 'can be stored in KV cache (23648)'",
            config: dense(32, 8, 128),
            flags: VllmFlags {
                version: version("0.6.4"),
                ..VllmFlags::default()
            },
            max_model_len: 29_000,
            available_gib: Some(2.89),
            num_blocks: 1478,
            block_size: 16,
            bytes_per_block: 16 * 131_072,
            kv_cache_size_tokens: Some(23_648),
            max_concurrency_2dp: Some(0.82),
        },
        Case {
            source: "kv-capacity.md §6: DeepSeek-V2-Lite (MLA 512+64), pipeline stage with 14 layers, 12.13 GiB",
            config: r#"{"hidden_size": 2048, "num_hidden_layers": 14, "num_attention_heads": 16,
                "num_key_value_heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                "qk_nope_head_dim": 128, "v_head_dim": 128, "torch_dtype": "bfloat16",
                "vocab_size": 102400, "max_position_embeddings": 163840}"#
                .into(),
            flags: VllmFlags::default(),
            max_model_len: 163_840,
            available_gib: Some(12.13),
            num_blocks: 50_487,
            block_size: 16,
            bytes_per_block: 16 * 1152 * 14,
            kv_cache_size_tokens: Some(807_792),
            max_concurrency_2dp: Some(4.93),
        },
        Case {
            source: "kv-capacity.md §6: gpt-oss-120b (18 sliding-window-128 + 18 full), per-group log formula, 5.38 GiB",
            config: format!(
                r#"{{"hidden_size": 2880, "num_hidden_layers": 36, "num_attention_heads": 64,
                "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128, "torch_dtype": "bfloat16",
                "layer_types": [{}], "vocab_size": 201088, "max_position_embeddings": 131072}}"#,
                (0..36)
                    .map(|i| if i % 2 == 0 {
                        "\"sliding_attention\""
                    } else {
                        "\"full_attention\""
                    })
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            flags: VllmFlags {
                version: version("0.10.1"),
                ..VllmFlags::default()
            },
            max_model_len: 131_072,
            available_gib: Some(5.38),
            num_blocks: 9798,
            block_size: 16,
            bytes_per_block: 18 * 16 * 2048,
            kv_cache_size_tokens: Some(78_384),
            max_concurrency_2dp: None,
        },
    ]
}

#[test]
fn logged_layouts_blocks_and_figures_are_reproduced() {
    for case in cases() {
        let model = ModelConfig::from_json(&case.config).unwrap();
        let layout = VllmLayout::plan(&model, &case.flags).unwrap();
        assert_eq!(layout.block_size, case.block_size, "{}", case.source);
        assert_eq!(
            layout.bytes_per_block, case.bytes_per_block,
            "{}",
            case.source
        );

        if let Some(gib) = case.available_gib {
            let bpb = case.bytes_per_block as f64;
            let lo = ((gib - 0.005) * (1u64 << 30) as f64 / bpb).floor() as u64;
            let hi = ((gib + 0.005) * (1u64 << 30) as f64 / bpb).floor() as u64;
            assert!(
                (lo..=hi).contains(&case.num_blocks),
                "{}: logged blocks outside rounding range",
                case.source
            );
            let p = capacity_from_budget(
                layout.clone(),
                budget_from_available_gib(gib),
                case.max_model_len,
                256,
                &case.flags,
            );
            assert!(
                (lo..=hi).contains(&p.num_blocks),
                "{}: predicted {} not in {lo}..={hi}",
                case.source,
                p.num_blocks
            );
        }

        let exact = VllmFlags {
            num_gpu_blocks_override: Some(case.num_blocks),
            ..case.flags.clone()
        };
        let p = capacity_from_budget(
            layout,
            budget_from_available_gib(0.0),
            case.max_model_len,
            256,
            &exact,
        );
        assert_eq!(p.num_blocks, case.num_blocks);
        if let Some(logged) = case.max_concurrency_2dp {
            assert!(
                (p.max_concurrency - logged).abs() <= 0.005 + 1e-9,
                "{}: concurrency {} vs logged {logged}",
                case.source,
                p.max_concurrency,
            );
        }
        if let Some(tokens) = case.kv_cache_size_tokens {
            let logged = if p.log_formula == LogFormula::ConcurrencyTimesMaxLen
                || case.flags.version >= version("0.9.0")
            {
                p.kv_cache_size_tokens
            } else {
                // V0 logged no token line; its "can be stored in KV cache" figure is blocks × block size.
                p.num_blocks * p.layout.block_size
            };
            assert_eq!(logged, tokens, "{}", case.source);
        }
    }
}

#[test]
fn hybrid_modes_follow_the_engine() {
    let model = ModelConfig::from_json(&qwen35(40, 2048, 2, 32, 262_144)).unwrap();
    let none = VllmLayout::plan(&model, &VllmFlags::default()).unwrap();
    assert_eq!(none.mamba_cache_mode, MambaCacheMode::None);
    let b = none.block_size;
    assert_eq!(b, 1056, "bf16: 16 · cdiv(2,146,304, 16 · 2,048)");
    assert_eq!(none.blocks_per_request(4096), 4096u64.div_ceil(b) + 3);
    let align = VllmLayout::plan(
        &model,
        &VllmFlags {
            enable_prefix_caching: true,
            ..VllmFlags::default()
        },
    )
    .unwrap();
    assert_eq!(align.blocks_per_request(4096), 4096u64.div_ceil(b) + 3 * 2);
    let all = VllmLayout::plan(
        &model,
        &VllmFlags {
            mamba_cache_mode: Some(MambaCacheMode::All),
            ..VllmFlags::default()
        },
    )
    .unwrap();
    assert_eq!(
        all.block_size % 64,
        0,
        "mode all aligns to the GDN chunk size"
    );
    assert!(all.blocks_per_request(100_000) > align.blocks_per_request(100_000));
    // fp8 KV halves the bytes per token: the block roughly doubles (re-rounded to 16).
    let fp8 = VllmLayout::plan(
        &model,
        &VllmFlags {
            kv_cache_dtype: KvCacheDtype::Fp8,
            ..VllmFlags::default()
        },
    )
    .unwrap();
    assert_eq!(fp8.block_size, 2096);
    assert_eq!(fp8.bytes_per_block, 10 * 2096 * 1024);
}

#[test]
fn padding_layers_with_an_mtp_style_extra_attention_layer() {
    // 17 full + 48 GDN: group size 17 (48 < 1.5·17 is false → min = 17), 3 GDN groups of 17 → 3 padding layers.
    let mut types: Vec<&str> = (0..64)
        .map(|i| {
            if (i + 1) % 4 == 0 {
                "\"full_attention\""
            } else {
                "\"linear_attention\""
            }
        })
        .collect();
    types.push("\"full_attention\"");
    let config = qwen35(64, 5120, 4, 48, 262_144)
        .replace("\"num_hidden_layers\": 64", "\"num_hidden_layers\": 65");
    let config = config.replacen(
        &format!("[{}]", types[..64].join(",")),
        &format!("[{}]", types.join(",")),
        1,
    );
    let model = ModelConfig::from_json(&config).unwrap();
    let layout = VllmLayout::plan(&model, &VllmFlags::default()).unwrap();
    assert_eq!(layout.padding_layers, 3);
    assert_eq!(layout.groups.len(), 4);
    assert_eq!(layout.bytes_per_block, 17 * layout.page_bytes);
}

#[test]
fn an_mtp_speculative_config_adds_the_drafter_layer_and_widens_gdn_conv_states() {
    // Qwen3.6-27B's shape (16 full + 48 GDN) with its one MTP layer: vLLM logs
    // "Add 3 padding layers" once MTP is on (../shared/reference/kv-capacity.md §5).
    let config = qwen35(64, 5120, 4, 48, 262_144).replace(
        "\"max_position_embeddings\"",
        "\"mtp_num_hidden_layers\": 1, \"max_position_embeddings\"",
    );
    let model = ModelConfig::from_json(&config).unwrap();
    let plain = VllmLayout::plan(&model, &VllmFlags::default()).unwrap();
    assert_eq!((plain.padding_layers, plain.groups.len()), (0, 4));
    assert_eq!(plain.bytes_per_block, 16 * plain.page_bytes);

    let spec =
        SpeculativeConfig::parse(r#"{"method": "mtp", "num_speculative_tokens": 2}"#).unwrap();
    let flags = VllmFlags {
        num_speculative_tokens: spec.num_speculative_tokens,
        speculative_method: Some(spec.method),
        ..VllmFlags::default()
    };
    let mtp = VllmLayout::plan(&model, &flags).unwrap();
    assert_eq!(mtp.padding_layers, 3);
    assert_eq!(mtp.groups.len(), 4);
    assert_eq!(mtp.bytes_per_block, 17 * mtp.page_bytes);
    // conv rows 3 → 5: 2 more rows of conv_dim = 2·16·128 + 48·128 = 10,240 bf16 values.
    let state = |l: &VllmLayout| l.layer_costs.iter().find_map(|c| c.state_bytes).unwrap();
    assert_eq!(state(&mtp) - state(&plain), 2 * 10_240 * 2);

    // n-gram drafting adds no layer, but the states still widen.
    let ngram = VllmFlags {
        speculative_method: Some(
            SpeculativeConfig::parse(r#"{"method": "ngram", "num_speculative_tokens": 2}"#)
                .unwrap()
                .method,
        ),
        ..flags.clone()
    };
    let ngram = VllmLayout::plan(&model, &ngram).unwrap();
    assert_eq!(ngram.padding_layers, 0);
    assert_eq!(state(&ngram), state(&mtp));
}

#[test]
fn speculative_configs_read_as_vllm_reads_them() {
    let method = |json: &str| SpeculativeConfig::parse(json).map(|s| s.method);
    assert_eq!(
        method(r#"{"method":"qwen3_next_mtp","num_speculative_tokens":1}"#),
        Ok(SpeculativeMethod::Mtp)
    );
    assert_eq!(
        method(r#"{"method":"eagle3","model":"x","num_speculative_tokens":3}"#),
        Ok(SpeculativeMethod::Eagle)
    );
    assert_eq!(
        method(r#"{"model":"yuhuili/EAGLE-LLaMA3-Instruct-8B","num_speculative_tokens":3}"#),
        Ok(SpeculativeMethod::Eagle)
    );
    assert_eq!(
        method(r#"{"model":"Qwen/Qwen3-0.6B","num_speculative_tokens":3}"#),
        Ok(SpeculativeMethod::DraftModel)
    );
    assert_eq!(
        method(r#"{"num_speculative_tokens":2}"#),
        Ok(SpeculativeMethod::Mtp)
    );
    assert_eq!(
        method(r#"{"method":"suffix","num_speculative_tokens":8}"#),
        Ok(SpeculativeMethod::NoDrafter)
    );
    assert!(SpeculativeConfig::parse(r#"{"method":"mtp"}"#).is_err());
    assert!(SpeculativeConfig::parse("[1]").is_err());
}
