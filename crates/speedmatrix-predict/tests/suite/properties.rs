//! Properties of the cost model that any GPU and model must keep.

use std::time::Duration;

use proptest::prelude::*;
use speedmatrix_capacity::{Gpu, LlamaCppFlags, ModelConfig, VllmFlags};
use speedmatrix_predict::{CostModel, Factors, Graphs};
use speedmatrix_units::{Concurrency, Tokens};

/// A Llama-shaped dense model in bf16 with 8 KV heads.
fn llama_shaped(hidden: u64, layers: u64, heads: u64, intermediate: u64) -> ModelConfig {
    ModelConfig::from_json(&format!(
        r#"{{"hidden_size": {hidden}, "num_hidden_layers": {layers},
        "num_attention_heads": {heads}, "num_key_value_heads": 8, "torch_dtype": "bfloat16",
        "vocab_size": 128256, "intermediate_size": {intermediate},
        "max_position_embeddings": 131072}}"#
    ))
    .unwrap()
}

/// An 8B-class dense model.
fn dense() -> ModelConfig {
    llama_shaped(4096, 32, 32, 14336)
}

fn moe() -> ModelConfig {
    ModelConfig::from_json(
        r#"{"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
        "torch_dtype": "bfloat16", "vocab_size": 151936, "intermediate_size": 6144,
        "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
        "max_position_embeddings": 262144}"#,
    )
    .unwrap()
}

fn cost(model: &ModelConfig, gpu: &Gpu) -> CostModel {
    CostModel::new(
        model,
        gpu,
        &VllmFlags::default(),
        Factors::builtin("vllm").unwrap(),
    )
    .unwrap()
}

fn gpu_with_bandwidth(gb_s: f64) -> Gpu {
    let mut g = Gpu::lookup("h100-sxm").unwrap();
    g.bandwidth_gb_s = Some(gb_s);
    g
}

proptest! {
    /// More bandwidth never makes a step slower, and a memory-bound step faster.
    #[test]
    fn steps_are_monotone_in_bandwidth(bw in 100.0f64..8_000.0, more in 1.01f64..4.0,
                                       batch in 1u64..256, ctx in 0u64..200_000) {
        let (slow, fast) = (cost(&dense(), &gpu_with_bandwidth(bw)),
                            cost(&dense(), &gpu_with_bandwidth(bw * more)));
        let (a, b) = (slow.decode_step(batch, ctx), fast.decode_step(batch, ctx));
        prop_assert!(b.total <= a.total);
        prop_assert!(b.memory < a.memory);
    }

    /// Under llama.cpp's factors (a fitted per-multiprocessor bandwidth), more
    /// multiprocessors never make a step slower, and a memory-bound step with few of them
    /// is slower than with none known (no cap).
    #[test]
    fn steps_are_monotone_in_multiprocessors(units in 1u32..200, more in 1u32..200,
                                             batch in 1u64..8, ctx in 0u64..8_192) {
        let llama = |sms: Option<u32>| {
            let mut g = Gpu::lookup("h100-pcie").unwrap();
            g.multiprocessors = sms;
            CostModel::new(&dense(), &g, &VllmFlags::default(),
                           Factors::builtin("llamacpp").unwrap()).unwrap()
        };
        let (few, many, uncapped) = (llama(Some(units)), llama(Some(units + more)), llama(None));
        let (a, b, c) = (few.decode_step(batch, ctx), many.decode_step(batch, ctx),
                         uncapped.decode_step(batch, ctx));
        prop_assert!(b.total <= a.total);
        prop_assert!(b.memory < a.memory);
        prop_assert!(c.memory < b.memory);
    }

    /// A longer context never makes a step or a prefill faster.
    #[test]
    fn steps_are_monotone_in_context(batch in 1u64..128, ctx in 0u64..200_000, extra in 1u64..50_000) {
        let c = cost(&dense(), &Gpu::lookup("rtx4090").unwrap());
        prop_assert!(c.decode_step(batch, ctx + extra).total >= c.decode_step(batch, ctx).total);
        prop_assert!(c.cold_ttft(ctx + extra) >= c.cold_ttft(ctx));
    }

    /// More sequences: a longer step, more tokens in all, fewer for each.
    #[test]
    fn steps_are_monotone_in_batch(batch in 1u64..512, more in 1u64..64, ctx in 0u64..100_000) {
        let c = cost(&moe(), &Gpu::lookup("a100-80gb-sxm").unwrap());
        let (a, b) = (c.decode_step(batch, ctx).total, c.decode_step(batch + more, ctx).total);
        prop_assert!(b >= a);
        let per_token = |n: u64, t: Duration| n as f64 / t.as_secs_f64();
        prop_assert!(per_token(batch + more, b) >= per_token(batch, a) * 0.999);
    }

    /// A batch touches more distinct experts than a smaller one, never more
    /// than there are, and one token exactly its top-k.
    #[test]
    fn moe_batches_touch_more_experts(batch in 1u64..4_096, more in 1u64..512) {
        let c = cost(&moe(), &Gpu::lookup("h100-sxm").unwrap());
        let (a, b) = (c.shape.experts_touched(batch), c.shape.experts_touched(batch + more));
        prop_assert!(b >= a);
        prop_assert!(b <= 128.0 + 1e-9);
        prop_assert!((c.shape.experts_touched(1) - 8.0).abs() < 1e-9);
    }
}

#[test]
fn a_dense_models_experts_cost_nothing_and_a_moe_reads_less_than_all_at_batch_one() {
    let d = cost(&dense(), &Gpu::lookup("h100-sxm").unwrap());
    assert_eq!(d.shape.experts_touched(64), 0.0);
    let m = cost(&moe(), &Gpu::lookup("h100-sxm").unwrap());
    let all = m.shape.params.dense_bytes + 128.0 * m.shape.params.expert_bytes;
    let one = m.decode_step(1, 0).memory.as_secs_f64()
        * m.machine.bandwidth_bytes_s
        * m.factors.bandwidth_efficiency;
    assert!(one < 0.25 * all, "{one} of {all} bytes");
}

/// A 70B-class dense model: its weight reads dominate a step at one stream.
fn dense_70b() -> ModelConfig {
    llama_shaped(8192, 80, 64, 28672)
}

/// Tensor parallelism splits the reads and adds all-reduces; for a model whose reads
/// dominate (70B-class) it is faster per stream. (For an 8B model at one stream the
/// fitted all-reduce latency, which lumps every per-layer cost of the family's TP rigs,
/// can make TP4 slower: docs/predict.md.)
#[test]
fn tensor_parallel_splits_the_reads_and_adds_all_reduces() {
    let gpu = Gpu::lookup("h100-sxm").unwrap();
    let one = cost(&dense_70b(), &gpu);
    let flags = VllmFlags {
        tensor_parallel_size: 4,
        ..VllmFlags::default()
    };
    let four = CostModel::new(
        &dense_70b(),
        &gpu,
        &flags,
        Factors::builtin("vllm").unwrap(),
    )
    .unwrap();
    let (a, b) = (one.decode_step(1, 1024), four.decode_step(1, 1024));
    assert!(b.memory.as_secs_f64() < a.memory.as_secs_f64() / 3.9);
    assert!(b.overhead > a.overhead, "all-reduces cost time");
    let cell = |c: &CostModel| {
        c.decode_cell(
            Tokens::kibi(1),
            Concurrency::ONE,
            Tokens::kibi(8),
            Duration::from_secs(30),
            16,
        )
    };
    assert!(cell(&four).per_request_tokens_per_s > cell(&one).per_request_tokens_per_s);
}

/// Every factor out of its range (or not a number) is refused, by name; the fitted sets pass.
#[test]
fn factors_out_of_range_are_refused_by_name() {
    let good = Factors::builtin("vllm").unwrap();
    good.check().unwrap();
    let names = [
        "bandwidth_efficiency",
        "compute_efficiency",
        "step_overhead_ms",
        "sequence_overhead_us",
        "allreduce_latency_us",
        "request_overhead_ms",
        "consumer_compute_ratio",
        "kv_bandwidth_ratio",
        "kv_saturation_streams",
        "moe_half_tokens",
        "attention_compute_ratio",
        "amd_bandwidth_ratio",
        "amd_compute_ratio",
        "layer_overhead_us",
        "amd_overhead_ratio",
        "amd_attention_ratio",
        "multiprocessor_bandwidth_gb_s",
        "quantized_compute_ratio",
        "hopper_mma_ratio",
        "power_tflops_per_watt",
        "decode_overlap",
        "moe_layer_overhead_us",
        "expert_bandwidth_ratio",
        "amd_fp8_ratio",
        "eager_layer_overhead_us",
        "routing_independence",
        "mla_layer_overhead_us",
        "amd_fp8_layer_overhead_us",
    ];
    assert_eq!(names.len(), Factors::COUNT);
    for (i, name) in names.iter().enumerate() {
        for bad in [f64::NAN, -1.0, 1e9] {
            let mut v = good.to_vec();
            v[i] = bad;
            let Err(e) = Factors::from_vec(v).check() else {
                // The four times may be large: only a negative or NaN one is refused.
                assert!(bad == 1e9 && (2..6).contains(&i), "{name} = {bad} accepted");
                continue;
            };
            assert!(e.to_string().contains(name), "{name} = {bad}: {e}");
        }
    }
}

/// llama.cpp without flash attention writes every score of a chunk to memory: the chunk's
/// memory time and its total grow by those bytes' time, and prefill at long context falls further
/// behind the fused kernels' than at short context.
#[test]
fn materialized_scores_cost_their_bytes() {
    use speedmatrix_predict::{AttentionKernel, SCORE_BYTES};
    let gpu = Gpu::lookup("rtx4090").unwrap();
    let fused = cost(&dense(), &gpu);
    let mut materialized = fused.clone();
    materialized.attention = AttentionKernel::Materialized;
    let (tokens, cached) = (512, 7_680);
    let (m, f) = (
        materialized.prefill_chunk(tokens, cached, false),
        fused.prefill_chunk(tokens, cached, false),
    );
    let extra = m.memory - f.memory;
    // The softmax runs between the products: its time adds to the step's.
    assert!(m.total - f.total >= extra, "{m:?} vs {f:?}");
    // 32 layers × 32 heads × 512 queries × 8,192 keys, each score SCORE_BYTES.
    let scores = 32.0 * 32.0 * 512.0 * 8_192.0;
    let f = &fused.factors;
    let bandwidth =
        gpu.bandwidth_gb_s.unwrap() * 1e9 * f.bandwidth_efficiency * f.kv_bandwidth_ratio;
    let want = scores * SCORE_BYTES / bandwidth;
    assert!(
        (extra.as_secs_f64() / want - 1.0).abs() < 1e-6,
        "extra memory time {extra:?}, want {want} s"
    );
    let ratio = |prompt: u64| {
        materialized.cold_ttft(prompt).as_secs_f64() / fused.cold_ttft(prompt).as_secs_f64()
    };
    assert!(ratio(512) >= 1.0);
    assert!(
        ratio(8_192) > ratio(512) * 1.2,
        "{} vs {}",
        ratio(8_192),
        ratio(512)
    );
}

/// A GGUF block type's products run at `quantized_compute_ratio` of F16 weights': the
/// weights' compute time is theirs over the ratio, attention's is untouched, and F16 GGUF
/// weights are not quantized products.
#[test]
fn quantized_products_cost_their_ratio() {
    use speedmatrix_predict::WeightBytes;
    let gpu = Gpu::lookup("rtx4090").unwrap();
    let q4 = cost(&dense(), &gpu).with_weight_bytes(WeightBytes::gguf("q4_k_m").unwrap());
    assert!(q4.quantized_products);
    let f16 = cost(&dense(), &gpu).with_weight_bytes(WeightBytes::gguf("f16").unwrap());
    assert!(!f16.quantized_products);
    let mut plain = q4.clone();
    plain.quantized_products = false;
    let compute = |c: &CostModel, ratio: f64, cached: u64| {
        let mut c = c.clone();
        c.factors.quantized_compute_ratio = ratio;
        c.prefill_chunk(512, cached, false).compute.as_secs_f64()
    };
    let (slow, fast) = (compute(&q4, 0.5, 0), compute(&plain, 0.5, 0));
    assert!(slow > fast * 1.5, "{slow} vs {fast}");
    assert_eq!(compute(&q4, 1.0, 0), compute(&plain, 1.0, 0));
    // Attention's share (long cached context) is the same under either ratio.
    let attention = |ratio: f64| compute(&q4, ratio, 16_384) - compute(&q4, ratio, 0);
    // (to the nanosecond a step time is kept in)
    assert!((attention(0.5) / attention(1.0) - 1.0).abs() < 1e-6);
}

/// On a Hopper part, llama.cpp's `mma.sync` kernels (quantized products, attention) run at
/// `hopper_mma_ratio` of the throughput; F16 weights' cuBLAS products and other generations
/// keep theirs.
#[test]
fn hopper_slows_only_mma_sync_kernels() {
    use speedmatrix_capacity::Architecture;
    use speedmatrix_predict::WeightBytes;
    let prefill = |arch: Option<Architecture>, gguf: &str, ratio: f64| {
        let mut gpu = Gpu::lookup("h100-pcie").unwrap();
        gpu.architecture = arch;
        let mut c = cost(&dense(), &gpu).with_weight_bytes(WeightBytes::gguf(gguf).unwrap());
        c.factors.hopper_mma_ratio = ratio;
        c.prefill_chunk(512, 0, false).compute.as_secs_f64()
    };
    let hopper = Some(Architecture::Hopper);
    assert_eq!(
        Gpu::lookup("h100-pcie").unwrap().architecture,
        hopper,
        "the catalog names the H100's generation"
    );
    let (slow, fast) = (
        prefill(hopper, "q4_k_m", 0.5),
        prefill(hopper, "q4_k_m", 1.0),
    );
    assert!(slow > fast * 1.8, "{slow} vs {fast}");
    let ampere = Some(Architecture::Ampere);
    assert_eq!(
        prefill(ampere, "q4_k_m", 0.5),
        prefill(ampere, "q4_k_m", 1.0)
    );
    // F16 weights: only attention's share slows, far less than the products'.
    let (f16_slow, f16_fast) = (prefill(hopper, "f16", 0.5), prefill(hopper, "f16", 1.0));
    assert!(
        f16_slow > f16_fast && f16_slow < f16_fast * 1.2,
        "{f16_slow} vs {f16_fast}"
    );
}

/// Under a board power limit a GPU's products slow by the share of its peak the watts
/// sustain: more watts never slow them, a limit far above the peak leaves them (almost) at
/// it, and a memory-bound step (one stream's decode) does not move; no figure, no limit.
#[test]
fn the_board_power_limit_slows_products_not_reads() {
    let with = |watts: Option<f64>, per_watt: f64| {
        let mut gpu = Gpu::lookup("h100-sxm").unwrap();
        gpu.board_power_w = watts;
        let mut c = cost(&dense(), &gpu);
        c.factors.power_tflops_per_watt = per_watt;
        c
    };
    assert_eq!(
        Gpu::lookup("h100-sxm").unwrap().board_power_w,
        Some(700.0),
        "the catalog has the H100 SXM's 700 W"
    );
    let prefill = |c: &CostModel| c.prefill_chunk(4096, 0, false).compute.as_secs_f64();
    let free = with(Some(700.0), 0.0);
    assert_eq!(free.power_scale(), None);
    assert_eq!(with(None, 1.0).power_scale(), None);
    let mut last = 0.0;
    for watts in [100.0, 300.0, 700.0, 2000.0, 1e6] {
        let scale = with(Some(watts), 1.0).power_scale().unwrap();
        assert!(scale > last && scale <= 1.0, "{watts} W: {scale}");
        last = scale;
    }
    assert!(last > 0.999, "{last}");
    // 700 W × 1 TFLOPS/W against 989 TFLOPS: the products take 1 / scale as long.
    let limited = with(Some(700.0), 1.0);
    let scale = limited.power_scale().unwrap();
    assert!((0.6..0.75).contains(&scale), "{scale}");
    assert!((prefill(&limited) * scale / prefill(&free) - 1.0).abs() < 1e-6);
    let decode = |c: &CostModel| c.decode_step(1, 1024).total;
    assert_eq!(decode(&limited), decode(&free));
    // Nor when part of the products adds to the reads (llama.cpp's decode): a step bound by
    // its reads draws too little power to be limited.
    let (mut limited, mut free) = (limited, free);
    limited.factors.decode_overlap = 0.5;
    free.factors.decode_overlap = 0.5;
    assert_eq!(
        limited.decode_step(1, 1024).bound,
        speedmatrix_predict::Bound::Memory
    );
    assert_eq!(decode(&limited), decode(&free));
}

/// A decode step whose products do not hide under its reads takes their sum: never less
/// than the overlapped step, more by `1 − overlap` of the shorter part.
#[test]
fn decode_overlap_adds_the_shorter_part() {
    let gpu = Gpu::lookup("gb10").unwrap();
    let step = |overlap: f64, batch: u64| {
        let mut c = cost(&dense(), &gpu);
        c.factors.decode_overlap = overlap;
        c.decode_step(batch, 512)
    };
    for batch in [1, 8, 32, 256] {
        let (hidden, serial, half) = (step(1.0, batch), step(0.0, batch), step(0.5, batch));
        let shorter = hidden.memory.min(hidden.compute).as_secs_f64();
        let grew = serial.total.as_secs_f64() - hidden.total.as_secs_f64();
        assert!(
            (grew - shorter).abs() < 1e-9,
            "batch {batch}: {grew} vs {shorter}"
        );
        let half_grew = half.total.as_secs_f64() - hidden.total.as_secs_f64();
        assert!((half_grew - shorter / 2.0).abs() < 1e-8, "batch {batch}");
    }
}

/// Routing's fixed time lands on MoE layers only: a MoE model's step grows by exactly its MoE
/// layers times the term (first dense layers excluded), a dense model's not at all.
#[test]
fn moe_layer_overhead_costs_each_moe_layer() {
    let gpu = Gpu::lookup("h100-sxm").unwrap();
    // DeepSeek-style: the first 3 of 12 layers keep a dense MLP.
    let mut config = moe();
    config.layers.truncate(12);
    config.moe.as_mut().unwrap().first_dense_layers = 3;
    for (model, moe_layers) in [(config, 9u64), (dense(), 0)] {
        let step = |t: f64, prefill: bool| {
            let mut c = cost(&model, &gpu);
            c.factors.moe_layer_overhead_us = t;
            assert_eq!(c.shape.moe_layers, moe_layers);
            let s = if prefill {
                c.prefill_chunk(512, 0, true)
            } else {
                c.decode_step(4, 1024)
            };
            s.total.as_secs_f64()
        };
        for prefill in [false, true] {
            let grew = step(100.0, prefill) - step(0.0, prefill);
            let want = moe_layers as f64 * 100e-6;
            assert!(
                (grew - want).abs() < 1e-8,
                "{moe_layers} MoE layers: {grew} s vs {want} s"
            );
        }
    }
}

/// Experts read at a lower share of the bandwidth slow a memory-bound MoE decode step by
/// exactly those bytes' extra time, and leave a dense model's step alone.
#[test]
fn expert_reads_cost_their_bandwidth_ratio() {
    let gpu = Gpu::lookup("h100-sxm").unwrap();
    let step = |model: &ModelConfig, ratio: f64| {
        let mut c = cost(model, &gpu);
        c.factors.expert_bandwidth_ratio = ratio;
        (c.decode_step(1, 0), c)
    };
    let (full, c) = step(&moe(), 1.0);
    let (half, _) = step(&moe(), 0.5);
    let experts = c.shape.experts_touched(1) * c.shape.params.expert_bytes;
    let bandwidth = c.machine.bandwidth_bytes_s * c.factors.bandwidth_efficiency;
    let grew = half.memory.as_secs_f64() - full.memory.as_secs_f64();
    assert!(
        (grew - experts / bandwidth).abs() < 1e-6 * full.memory.as_secs_f64().max(1e-3),
        "{grew} s vs {} s",
        experts / bandwidth
    );
    assert_eq!(step(&dense(), 1.0).0, step(&dense(), 0.5).0);
    // A prefill chunk reads every expert its tokens touch at the same ratio.
    let chunk = |ratio: f64| {
        let mut c = cost(&moe(), &gpu);
        c.factors.expert_bandwidth_ratio = ratio;
        c.prefill_chunk(512, 0, true).memory.as_secs_f64()
    };
    let experts = c.shape.experts_touched(512) * c.shape.params.expert_bytes;
    let grew = chunk(0.5) - chunk(1.0);
    assert!(
        (grew - experts / bandwidth).abs() < 1e-6 * grew,
        "{grew} s vs {} s",
        experts / bandwidth
    );
}

/// The AMD FP8 ratio slows an FP8 checkpoint on a FNUZ part (MI300X) only: a decode step's
/// decoder weight reads (not its LM head, kept in the model dtype, nor its KV) and products
/// by exactly their extra time; neither an FP8 model on an H100 or an MI355X (OCP FP8), a
/// BF16 model on the MI300X, nor a GGUF file of the FP8 model.
#[test]
fn amd_fp8_ratio_touches_fp8_checkpoints_on_fnuz_parts_only() {
    let fp8 = {
        let mut m = dense();
        m.quantization = speedmatrix_capacity::Quantization::Fp8;
        m
    };
    let step = |model: &ModelConfig, gpu: &str, ratio: f64| {
        let mut c = cost(model, &Gpu::lookup(gpu).unwrap());
        c.factors.amd_fp8_ratio = ratio;
        (c.decode_step(1, 4096), c)
    };
    let (full, c) = step(&fp8, "mi300x", 1.0);
    let (half, _) = step(&fp8, "mi300x", 0.5);
    let p = &c.shape.params;
    let bandwidth = c.machine.bandwidth_bytes_s
        * c.factors.bandwidth_efficiency
        * c.factors.amd_bandwidth_ratio;
    let read = (p.dense_bytes - p.lm_head_bytes) / bandwidth;
    let grew = half.memory.as_secs_f64() - full.memory.as_secs_f64();
    // Step times are whole nanoseconds: 2 ns of slack.
    assert!(
        (grew - read).abs() < 1e-6 * read + 2e-9,
        "{grew} s vs {read} s"
    );
    let flops = c.machine.peak_flops * c.factors.compute_efficiency * c.factors.amd_compute_ratio;
    let products = 2.0 * p.decoder_macs_per_token / flops;
    let grew = half.compute.as_secs_f64() - full.compute.as_secs_f64();
    assert!(
        (grew - products).abs() < 1e-6 * products + 2e-9,
        "{grew} s vs {products} s"
    );
    for gpu in ["h100-sxm", "mi355x"] {
        assert_eq!(step(&fp8, gpu, 1.0).0, step(&fp8, gpu, 0.5).0, "{gpu}");
    }
    assert_eq!(
        step(&dense(), "mi300x", 1.0).0,
        step(&dense(), "mi300x", 0.5).0
    );
    let gguf = |ratio: f64| {
        let (_, c) = step(&fp8, "mi300x", ratio);
        let c = c.with_weight_bytes(speedmatrix_predict::WeightBytes {
            linear: 4.5 / 8.0,
            expert: 4.5 / 8.0,
            lm_head: 1.0,
        });
        c.decode_step(1, 4096)
    };
    assert_eq!(gguf(1.0), gguf(0.5));
}

/// A factors file written before the MoE and AMD FP8 terms loads with them neutral: no
/// routing time, experts at the dense bandwidth, FP8 on AMD as 16-bit.
#[test]
fn factors_files_without_the_newer_terms_load_neutral() {
    let mut json = serde_json::to_value(Factors::builtin("sglang").unwrap()).unwrap();
    let map = json.as_object_mut().unwrap();
    for key in [
        "moe_layer_overhead_us",
        "expert_bandwidth_ratio",
        "amd_fp8_ratio",
        "eager_layer_overhead_us",
        "routing_independence",
        "mla_layer_overhead_us",
        "amd_fp8_layer_overhead_us",
    ] {
        assert!(map.remove(key).is_some(), "{key}");
    }
    let old: Factors = serde_json::from_value(json).unwrap();
    assert_eq!(old.moe_layer_overhead_us, 0.0);
    assert_eq!(old.expert_bandwidth_ratio, 1.0);
    assert_eq!(old.amd_fp8_ratio, 1.0);
    assert_eq!(old.eager_layer_overhead_us, 0.0);
    assert_eq!(old.routing_independence, 1.0);
    assert_eq!(old.mla_layer_overhead_us, 0.0);
    assert_eq!(old.amd_fp8_layer_overhead_us, 0.0);
    old.check().unwrap();
}

/// A DeepSeek-shaped MLA model of `layers` layers.
fn mla(layers: u64) -> ModelConfig {
    ModelConfig::from_json(&format!(
        r#"{{"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": {layers},
        "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
        "q_lora_rank": 1536, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1,
        "first_k_dense_replace": 3, "vocab_size": 129280, "torch_dtype": "bfloat16",
        "max_position_embeddings": 163840}}"#
    ))
    .unwrap()
}

/// How much `step`'s time grows when the factor `set` writes goes from 0 to `value`.
fn time_added(
    c: &CostModel,
    set: fn(&mut Factors, f64),
    value: f64,
    step: &dyn Fn(&CostModel) -> Duration,
) -> f64 {
    let mut c = c.clone();
    set(&mut c.factors, 0.0);
    let base = step(&c).as_secs_f64();
    set(&mut c.factors, value);
    step(&c).as_secs_f64() - base
}

/// Every latent-attention layer pays the MLA term once a step, decode and prefill alike,
/// and a grouped-query model pays nothing.
#[test]
fn mla_layers_pay_their_extra_projections() {
    let gpu = Gpu::lookup("b200").unwrap();
    let flags = VllmFlags {
        tensor_parallel_size: 8,
        ..VllmFlags::default()
    };
    for (model, latent) in [(mla(12), 12u64), (mla(61), 61), (dense(), 0)] {
        let c = CostModel::new(&model, &gpu, &flags, Factors::builtin("sglang").unwrap()).unwrap();
        assert_eq!(c.shape.mla_layers, latent);
        let grew = |step: &dyn Fn(&CostModel) -> Duration| {
            time_added(&c, |f, v| f.mla_layer_overhead_us = v, 50.0, step)
        };
        let want = latent as f64 * 50e-6;
        let decode = grew(&|c| c.decode_step(4, 2048).total);
        let prefill = grew(&|c| c.prefill_chunk(512, 0, true).total);
        assert!((decode - want).abs() < 1e-9, "decode {decode} != {want}");
        assert!((prefill - want).abs() < 1e-9, "prefill {prefill} != {want}");
    }
}

/// An FP8 checkpoint on a CDNA3 part pays the FP8 layer term on every layer of every step;
/// the same checkpoint on an H100, and 16-bit weights on the MI300X, pay nothing.
#[test]
fn fp8_checkpoints_on_cdna3_pay_their_layers_fp8_kernels() {
    let fp8 = ModelConfig::from_json(
        r#"{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "torch_dtype": "bfloat16", "vocab_size": 128256,
        "intermediate_size": 14336, "max_position_embeddings": 131072,
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}"#,
    )
    .unwrap();
    let mi300x = Gpu::lookup("mi300x").unwrap();
    let h100 = Gpu::lookup("h100-sxm").unwrap();
    for (model, gpu, paid) in [
        (&fp8, &mi300x, true),
        (&fp8, &h100, false),
        (&dense(), &mi300x, false),
    ] {
        let c = cost(model, gpu);
        let grew = |step: &dyn Fn(&CostModel) -> Duration| {
            time_added(&c, |f, v| f.amd_fp8_layer_overhead_us = v, 100.0, step)
        };
        let want = if paid { 32.0 * 100e-6 } else { 0.0 };
        let decode = grew(&|c| c.decode_step(8, 2048).total);
        let prefill = grew(&|c| c.prefill_chunk(512, 0, true).total);
        assert!(
            (decode - want).abs() < 1e-9,
            "{}: decode {decode} != {want}",
            gpu.key
        );
        assert!(
            (prefill - want).abs() < 1e-9,
            "{}: prefill {prefill} != {want}",
            gpu.key
        );
    }
}

/// Which steps pay the eager layer time: none under graphs for decode; llama.cpp's steps of
/// more than one token (batched decode, prefill ubatches) but not its one-stream decode;
/// every step under `--enforce-eager`. Each pays exactly its layers times the term.
#[test]
fn eager_steps_pay_their_layers_launches() {
    let gpu = Gpu::lookup("h100-sxm").unwrap();
    let model = dense();
    let layers = model.layers.len() as f64;
    let grew = |graphs: Graphs, step: &dyn Fn(&CostModel) -> Duration| {
        let mut c = cost(&model, &gpu);
        c.graphs = graphs;
        c.factors.eager_layer_overhead_us = 0.0;
        let base = step(&c).as_secs_f64();
        c.factors.eager_layer_overhead_us = 100.0;
        step(&c).as_secs_f64() - base
    };
    let one: &dyn Fn(&CostModel) -> Duration = &|c| c.decode_step(1, 4096).total;
    let two: &dyn Fn(&CostModel) -> Duration = &|c| c.decode_step(2, 4096).total;
    let chunk: &dyn Fn(&CostModel) -> Duration = &|c| c.prefill_chunk(512, 0, true).total;
    let want = layers * 100e-6;
    for (graphs, step, paid) in [
        (Graphs::Decode, one, 0.0),
        (Graphs::Decode, two, 0.0),
        (Graphs::Decode, chunk, 0.0),
        (Graphs::SingleToken, one, 0.0),
        (Graphs::SingleToken, two, want),
        (Graphs::SingleToken, chunk, want),
        (Graphs::Never, one, want),
        (Graphs::Never, chunk, want),
    ] {
        let got = grew(graphs, step);
        assert!((got - paid).abs() < 1e-9, "{graphs:?}: {got} s vs {paid} s");
    }
    // `--enforce-eager` in the flags is what sets it.
    let eager = CostModel::new(
        &model,
        &gpu,
        &VllmFlags {
            enforce_eager: true,
            ..VllmFlags::default()
        },
        Factors::builtin("vllm").unwrap(),
    )
    .unwrap();
    assert_eq!(eager.graphs, Graphs::Never);
    assert_eq!(cost(&model, &gpu).graphs, Graphs::Decode);
}

/// llama.cpp's sliding-window layers read their whole cache (window plus one ubatch, padded
/// to 256 cells), not the window: the same as vLLM's up to the window, more beyond it up to
/// the cache, flat after; full-attention layers are untouched; `--swa-full` reads it all.
#[test]
fn llamacpp_window_caches_read_one_ubatch_beyond_the_window() {
    let gpu = Gpu::lookup("h100-sxm").unwrap();
    // Gemma 3's pattern: five sliding layers of 1,024 tokens, then a global one.
    let gemma = ModelConfig::from_json(
        r#"{"model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 12,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "intermediate_size": 10240, "vocab_size": 262208, "sliding_window": 1024,
        "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
        "max_position_embeddings": 131072}"#,
    )
    .unwrap();
    let base = cost(&gemma, &gpu);
    let flags = |ubatch: u64, swa_full: bool| LlamaCppFlags {
        n_ubatch: ubatch,
        swa_full,
        ..LlamaCppFlags::default()
    };
    let windowed = cost(&gemma, &gpu).with_window_cache(&flags(2048, false));
    let full = cost(&gemma, &gpu).with_window_cache(&flags(2048, true));
    let per_token = |c: &CostModel| c.shape.kv_bytes(1);
    assert_eq!(per_token(&base), per_token(&windowed));
    // 10 sliding layers, 2 global: at 3,072 cells and beyond, the sliding ones stop growing.
    let row = per_token(&base) / 12.0;
    for (ctx, sliding) in [(1000u64, 1000u64), (2000, 2000), (3072, 3072), (9000, 3072)] {
        let want = row * (2 * ctx + 10 * sliding) as f64;
        let got = windowed.shape.kv_bytes(ctx);
        assert!((got - want).abs() < 1e-6 * want, "{ctx}: {got} vs {want}");
        let vllm = row * (2 * ctx + 10 * ctx.min(1024)) as f64;
        assert!(
            (base.shape.kv_bytes(ctx) - vllm).abs() < 1e-6 * vllm,
            "{ctx}"
        );
        assert!((full.shape.kv_bytes(ctx) - row * 12.0 * ctx as f64).abs() < 1e-6 * want);
    }
    // The default ubatch of 512 pads 1,536 cells.
    let small = cost(&gemma, &gpu).with_window_cache(&flags(512, false));
    assert!((small.shape.kv_bytes(9000) - row * (2 * 9000 + 10 * 1536) as f64).abs() < 1.0);
}

proptest! {
    /// Under γ = 1 a step reads uniform routing's expected experts; below 1 a batch reads
    /// fewer (never fewer than one token's `k`), one token exactly `k`, and more tokens never
    /// fewer experts.
    #[test]
    fn routing_independence_shares_experts_within_a_batch(gamma in 0.1f64..1.0, batch in 2u64..4_096,
                                                          more in 1u64..512) {
        let gpu = Gpu::lookup("h100-sxm").unwrap();
        let mut c = cost(&moe(), &gpu);
        c.factors.routing_independence = 1.0;
        let uniform = c.experts_touched(batch);
        prop_assert!((uniform - c.shape.experts_touched(batch)).abs() < 1e-9);
        c.factors.routing_independence = gamma;
        let shared = c.experts_touched(batch);
        prop_assert!(shared <= uniform + 1e-9 && shared >= 8.0 - 1e-9, "{shared} vs {uniform}");
        prop_assert!((c.experts_touched(1) - 8.0).abs() < 1e-9);
        prop_assert!(c.experts_touched(batch + more) >= shared - 1e-9);
        // The bytes follow: a memory-bound decode step reads no more than under uniform routing.
        let skewed = c.decode_step(batch.min(64), 1024).memory;
        c.factors.routing_independence = 1.0;
        prop_assert!(skewed <= c.decode_step(batch.min(64), 1024).memory);
    }
}
