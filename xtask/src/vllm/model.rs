//! The tiny Qwen3 model served in end-to-end runs, made by `xtask/assets/make_tiny_model.py`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use speedmatrix_capacity::{
    EngineFlags, Gpu, ModelConfig, Prediction, VllmDevice, VllmFlags, VllmPrediction, predict,
};
use speedmatrix_units::ByteSize;

use super::install::Venv;
use crate::util::run as sh;

/// The script that makes the model; it writes the same bytes on every run.
const SCRIPT: &str = include_str!("../../assets/make_tiny_model.py");

/// Returns the model folder, making the model unless the cached one came from this script.
pub(crate) fn ensure(cache: &Path, venv: &Venv) -> anyhow::Result<PathBuf> {
    let dir = cache.join("tiny-qwen3");
    let made_by = dir.join("made_by.py");
    if std::fs::read_to_string(&made_by).is_ok_and(|s| s == SCRIPT) {
        eprintln!("vllm-e2e: using cached {}", dir.display());
        return Ok(dir);
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let script = cache.join("make_tiny_model.py");
    std::fs::write(&script, SCRIPT).with_context(|| format!("writing {}", script.display()))?;
    sh(Command::new(venv.python()).arg(&script).arg(&dir))?;
    // Written last: its presence means the model is complete.
    std::fs::write(&made_by, SCRIPT).with_context(|| format!("writing {}", made_by.display()))?;
    Ok(dir)
}

/// What `speedmatrix-capacity` predicts vLLM's CPU backend makes of `model_dir`'s config with
/// `VLLM_CPU_KVCACHE_SPACE=kv_cache_gib` and `--max-model-len max_model_len`.
pub(crate) fn predict_capacity(
    model_dir: &Path,
    kv_cache_gib: u64,
    max_model_len: u64,
) -> anyhow::Result<VllmPrediction> {
    let path = model_dir.join("config.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let model =
        ModelConfig::from_json(&text).with_context(|| format!("parsing {}", path.display()))?;
    let flags = VllmFlags {
        max_model_len: Some(max_model_len),
        device: VllmDevice::Cpu {
            kvcache_space: ByteSize::gib(kv_cache_gib),
        },
        ..VllmFlags::default()
    };
    // The CPU backend sizes the cache from VLLM_CPU_KVCACHE_SPACE alone; the
    // device size only has to hold it.
    let host = Gpu::custom_gib((kv_cache_gib * 4) as f64);
    match predict(&model, &host, &EngineFlags::Vllm(flags))? {
        Prediction::Vllm(p) => Ok(*p),
        other => bail!("the predictor answered for another engine: {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tiny_model_holds_524288_tokens_in_one_gib() {
        let dir = std::env::temp_dir().join(format!("xtask-tiny-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config.json"),
            r#"{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
                "num_key_value_heads": 2, "head_dim": 64, "torch_dtype": "bfloat16",
                "intermediate_size": 512, "vocab_size": 2048,
                "max_position_embeddings": 65536}"#,
        )
        .unwrap();
        let p = predict_capacity(&dir, 1, 32_768).unwrap();
        // 4 layers × 2 KV heads × 64 × (K+V) × 2 B = 2,048 B per token.
        assert_eq!(p.layout.block_size, 128);
        assert_eq!(p.num_blocks, 4_096);
        assert_eq!(p.kv_cache_size_tokens, 524_288);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
