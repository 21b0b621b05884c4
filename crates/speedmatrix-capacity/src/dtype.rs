//! Element types of weights, KV cache and recurrent state.

use serde::{Deserialize, Serialize};

use crate::CapacityError;

/// A tensor element type, as far as its size matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Dtype {
    /// 32-bit float.
    Float32,
    /// bfloat16.
    Bfloat16,
    /// IEEE half.
    Float16,
    /// One-byte float (e4m3 or e5m2) or int8.
    Fp8,
}

impl Dtype {
    /// Bytes per element.
    pub const fn bytes(self) -> u64 {
        match self {
            Dtype::Float32 => 4,
            Dtype::Bfloat16 | Dtype::Float16 => 2,
            Dtype::Fp8 => 1,
        }
    }

    /// Parses the spellings found in config.json (`torch_dtype`, `mamba_ssm_dtype`)
    /// and in engine flags.
    pub fn parse(text: &str) -> Result<Self, CapacityError> {
        let t = text
            .trim()
            .trim_start_matches("torch.")
            .to_ascii_lowercase();
        Ok(match t.as_str() {
            "float32" | "fp32" | "f32" | "float" => Dtype::Float32,
            "bfloat16" | "bf16" => Dtype::Bfloat16,
            "float16" | "fp16" | "f16" | "half" => Dtype::Float16,
            "fp8" | "fp8_e4m3" | "fp8_e5m2" | "float8_e4m3fn" | "float8_e5m2" | "int8"
            | "fp8_inc" => Dtype::Fp8,
            _ => return Err(CapacityError::UnknownDtype(text.to_owned())),
        })
    }
}

/// vLLM's `--kv-cache-dtype`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum KvCacheDtype {
    /// `auto`: the model's activation dtype.
    #[default]
    Auto,
    /// `fp8`, `fp8_e4m3`, `fp8_e5m2`: one byte per element, per-tensor scales.
    Fp8,
    /// `fp8_per_token_head` / `int8_per_token_head`: one byte per element plus one
    /// fp32 scale per token, head and K/V.
    PerTokenHead,
    /// `nvfp4`: packed 4-bit data plus one fp8 scale per 16 elements.
    Nvfp4,
    /// `fp8_ds_mla`: DeepSeek's sparse-MLA layout, fp8 latent with one fp32
    /// scale per 128 values and the RoPE part in bf16 (656 B per token for
    /// a 512 + 64 latent).
    Fp8DsMla,
}

impl KvCacheDtype {
    /// Parses the flag value.
    pub fn parse(text: &str) -> Result<Self, CapacityError> {
        let t = text.trim().to_ascii_lowercase();
        Ok(match t.as_str() {
            "auto" | "bfloat16" | "float16" | "bf16" | "fp16" | "half" => KvCacheDtype::Auto,
            "fp8" | "fp8_e4m3" | "fp8_e5m2" | "fp8_inc" | "int8" => KvCacheDtype::Fp8,
            "fp8_per_token_head" | "int8_per_token_head" => KvCacheDtype::PerTokenHead,
            "nvfp4" => KvCacheDtype::Nvfp4,
            "fp8_ds_mla" => KvCacheDtype::Fp8DsMla,
            _ => return Err(CapacityError::UnknownDtype(text.to_owned())),
        })
    }

    /// Bytes per element before packing or scales (`auto` resolves to `model`).
    pub const fn element_bytes(self, model: Dtype) -> u64 {
        match self {
            KvCacheDtype::Auto => model.bytes(),
            KvCacheDtype::Fp8
            | KvCacheDtype::PerTokenHead
            | KvCacheDtype::Nvfp4
            | KvCacheDtype::Fp8DsMla => 1,
        }
    }
}
