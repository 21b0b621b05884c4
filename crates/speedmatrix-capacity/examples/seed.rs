//! Predicts the seed matrix's KV pool (Agents-A1-4B-FP8 on an RTX 3090 under vLLM 0.32)
//! and prints the breakdown and the Valid / Over-capacity grid.
//!
//! `cargo run -p speedmatrix-capacity --example seed`
#![allow(clippy::print_stdout)]

use speedmatrix_capacity::{
    CapacityError, EngineFlags, Gpu, GridSpec, ModelConfig, Prediction, ServerLimits, VllmFlags,
    capacity_grid, predict,
};
use speedmatrix_units::{Concurrency, Tokens};

fn main() -> Result<(), CapacityError> {
    let model = ModelConfig::from_json(include_str!(
        "../tests/fixtures/agents-a1-4b-fp8.config.json"
    ))?;
    let flags = VllmFlags {
        gpu_memory_utilization: 0.94,
        max_model_len: Some(262_144),
        max_num_seqs: Some(128),
        enable_prefix_caching: true,
        language_model_only: true,
        ..VllmFlags::default()
    };
    let prediction = predict(&model, &Gpu::lookup("rtx3090")?, &EngineFlags::Vllm(flags))?;
    if let Prediction::Vllm(v) = &prediction {
        let b = &v.budget;
        println!(
            "requested {} = weights {} + activation {} + non-torch {} + graphs {} + KV {}",
            b.requested,
            b.weights.bytes,
            b.activation_peak.bytes,
            b.non_torch.bytes,
            b.cudagraph.bytes,
            b.available_kv
        );
        println!(
            "block size {}, {} B per block, {} blocks",
            v.layout.block_size, v.layout.bytes_per_block, v.num_blocks
        );
        println!(
            "GPU KV cache size: {} tokens; maximum concurrency for {} tokens per request: {:.2}x",
            v.kv_cache_size_tokens, v.max_model_len, v.max_concurrency
        );
    }
    let spec = GridSpec {
        contexts: [0u64, 16, 32, 64, 128, 248].map(Tokens::kibi).to_vec(),
        concurrencies: [1u32, 2, 4, 8, 16, 32, 64, 128]
            .iter()
            .filter_map(|n| Concurrency::new(*n))
            .collect(),
        max_output: Tokens::new(8_192),
    };
    let grid = capacity_grid(Some(&prediction), None, ServerLimits::default(), &spec)?;
    for row in grid.cells.chunks(spec.concurrencies.len()) {
        let marks: String = row
            .iter()
            .map(|c| if c.fits { " ok " } else { " -- " })
            .collect();
        println!("{:>5} |{marks}", row[0].context.to_string());
    }
    Ok(())
}
