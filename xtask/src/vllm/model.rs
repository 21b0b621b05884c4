//! The tiny Qwen3 model served in end-to-end runs, made by `xtask/assets/make_tiny_model.py`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;

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

/// What the KV cache of a full-attention model needs per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KvShape {
    /// Decoder layers, each with its own K and V.
    pub(crate) layers: u64,
    /// Key/value heads per layer.
    pub(crate) kv_heads: u64,
    /// Elements per head.
    pub(crate) head_dim: u64,
    /// Bytes per element of the KV cache (2 for bf16).
    pub(crate) dtype_bytes: u64,
}

impl KvShape {
    /// Reads the shape from a Hugging Face `config.json`.
    pub(crate) fn from_config(config: &Value) -> anyhow::Result<Self> {
        let field = |name: &str| {
            config
                .get(name)
                .and_then(Value::as_u64)
                .with_context(|| format!("config.json has no integer `{name}`"))
        };
        let head_dim = match field("head_dim") {
            Ok(d) => d,
            Err(_) => field("hidden_size")? / field("num_attention_heads")?.max(1),
        };
        let dtype = config
            .get("torch_dtype")
            .or_else(|| config.get("dtype"))
            .and_then(Value::as_str)
            .unwrap_or("bfloat16");
        let dtype_bytes = match dtype {
            "bfloat16" | "float16" => 2,
            "float32" => 4,
            other => bail!("config.json dtype `{other}` is not one this check knows"),
        };
        Ok(Self {
            layers: field("num_hidden_layers")?,
            kv_heads: field("num_key_value_heads")?,
            head_dim,
            dtype_bytes,
        })
    }

    /// Bytes of K and V for one token across all layers.
    pub(crate) fn bytes_per_token(self) -> u64 {
        self.layers * 2 * self.kv_heads * self.head_dim * self.dtype_bytes
    }
}

/// The tokens vLLM 0.32 reports as its KV-cache size for a single-group full-attention model.
///
/// vLLM splits the pool into blocks of `block_size` tokens and reports
/// `int(num_blocks / blocks_per_request × max_model_len)`, blocks per request being
/// `ceil(max_model_len / block_size)`.
pub(crate) fn expected_kv_tokens(
    kv_bytes: u64,
    shape: KvShape,
    block_size: u64,
    max_model_len: u64,
) -> (u64, u64) {
    let per_block = shape.bytes_per_token() * block_size;
    let num_blocks = kv_bytes.checked_div(per_block).unwrap_or(0);
    let blocks_per_request = max_model_len.div_ceil(block_size.max(1)).max(1);
    let tokens = num_blocks * max_model_len / blocks_per_request;
    (num_blocks, tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> KvShape {
        KvShape {
            layers: 4,
            kv_heads: 2,
            head_dim: 64,
            dtype_bytes: 2,
        }
    }

    #[test]
    fn the_tiny_model_needs_2048_bytes_per_token() {
        let config = serde_json::json!({
            "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 64,
            "hidden_size": 256, "num_attention_heads": 4, "torch_dtype": "bfloat16"
        });
        let shape = KvShape::from_config(&config).unwrap();
        assert_eq!(shape, tiny());
        assert_eq!(shape.bytes_per_token(), 2048);
    }

    #[test]
    fn head_dim_defaults_to_hidden_over_heads() {
        let config = serde_json::json!({
            "num_hidden_layers": 2, "num_key_value_heads": 1,
            "hidden_size": 512, "num_attention_heads": 8, "dtype": "float32"
        });
        let shape = KvShape::from_config(&config).unwrap();
        assert_eq!((shape.head_dim, shape.dtype_bytes), (64, 4));
    }

    #[test]
    fn one_gib_holds_524288_tokens_whatever_the_context_length() {
        for len in [8192, 16_384, 32_768, 65_536] {
            assert_eq!(
                expected_kv_tokens(1 << 30, tiny(), 128, len),
                (4096, 524_288)
            );
        }
    }

    #[test]
    fn a_length_off_the_block_grid_loses_the_partial_block() {
        // 4096 blocks, 2 blocks per 200-token request: 2048 requests of 200 tokens.
        assert_eq!(expected_kv_tokens(1 << 30, tiny(), 128, 200).1, 409_600);
    }
}
