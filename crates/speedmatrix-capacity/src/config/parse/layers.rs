//! Which kind each decoder layer is: the dialects of layer lists, hybrid patterns, intervals
//! and sliding-window fields.

use serde_json::Value;

use super::{Fields, as_u64};
use crate::CapacityError;
use crate::config::LayerKind;

/// Layer kinds from, in order of preference: `layer_types`, `hybrid_override_pattern`,
/// `layers_block_type`, `full_attention_interval`, `attn_layer_period`,
/// sliding-window fields; otherwise all full attention.
pub(super) fn layer_kinds(
    f: &Fields<'_>,
    n: u64,
    model_type: &str,
) -> Result<Vec<LayerKind>, CapacityError> {
    let window = f.u64(&["sliding_window", "attention_window"]);
    // Llama 4: layers with RoPE use chunked attention, the NoPE ones (every
    // 4th by default) are global (llama4.py Llama4Attention; HF
    // Llama4TextConfig's default `no_rope_layers`).
    if let Some(chunk) = f.u64(&["attention_chunk_size"]).filter(|c| *c > 0) {
        let rope: Vec<bool> = match f.value(&["no_rope_layers"]).and_then(Value::as_array) {
            Some(v) => v.iter().map(|x| as_u64(x) != Some(0)).collect(),
            None => (0..n).map(|i| (i + 1) % 4 != 0).collect(),
        };
        let kinds = rope
            .into_iter()
            .map(|r| {
                if r {
                    LayerKind::ChunkedLocal { chunk }
                } else {
                    LayerKind::FullAttention
                }
            })
            .collect();
        return fit_len(
            kinds,
            usize::try_from(n).unwrap_or(usize::MAX),
            "no_rope_layers",
        );
    }
    let n_usize = usize::try_from(n).map_err(|_| CapacityError::BadField {
        field: "num_hidden_layers",
        value: n.to_string(),
        why: "too large",
    })?;
    if let Some(types) = f.value(&["layer_types", "layers_block_type", "block_types"]) {
        // A description in place of the list would otherwise be read as no list at all,
        // and every layer priced by the fallbacks below.
        let types = types.as_array().ok_or_else(|| CapacityError::BadField {
            field: "layer_types",
            value: types.to_string().chars().take(80).collect(),
            why: "expected a list with one kind per layer (\"full_attention\", \
                  \"sliding_attention\", \"linear_attention\", …)",
        })?;
        let kinds = types
            .iter()
            .map(|t| layer_kind_from_name(t.as_str().unwrap_or_default(), window))
            .collect::<Result<Vec<_>, _>>()?;
        return fit_len(kinds, n_usize, "layer_types");
    }
    if let Some(pattern) = f.str(&["hybrid_override_pattern"]) {
        // vLLM's nemotron_h.py: M Mamba2, * attention, - MLP, E MoE; nothing else.
        if let Some(c) = pattern
            .chars()
            .find(|c| !matches!(c, 'M' | '*' | '-' | 'E'))
        {
            return Err(CapacityError::BadField {
                field: "hybrid_override_pattern",
                value: format!("{c:?} in {}", pattern.chars().take(80).collect::<String>()),
                why: "one character per layer: M (Mamba2), * (attention), - (MLP) or E (MoE)",
            });
        }
        let kinds = pattern
            .chars()
            .map(|c| match c {
                'M' => LayerKind::Mamba,
                '*' => LayerKind::FullAttention,
                _ => LayerKind::NoCache,
            })
            .collect();
        return fit_len(kinds, n_usize, "hybrid_override_pattern");
    }
    if let Some(k) = f.u64(&["full_attention_interval"]).filter(|k| *k > 0) {
        return Ok((0..n)
            .map(|i| {
                if (i + 1) % k == 0 {
                    LayerKind::FullAttention
                } else {
                    LayerKind::LinearAttention
                }
            })
            .collect());
    }
    if let Some(period) = f.u64(&["attn_layer_period"]).filter(|p| *p > 0) {
        let offset = f.u64(&["attn_layer_offset"]).unwrap_or(0);
        return Ok((0..n)
            .map(|i| {
                if i % period == offset {
                    LayerKind::FullAttention
                } else {
                    LayerKind::Mamba
                }
            })
            .collect());
    }
    let all_full = vec![LayerKind::FullAttention; n_usize];
    let Some(w) = window.filter(|w| *w > 0) else {
        return Ok(all_full);
    };
    if f.bool(&["use_sliding_window"]) == Some(false) {
        return Ok(all_full);
    }
    // Gemma 2/3/3n/4 and Cohere 2: every `sliding_window_pattern`-th layer is
    // global; without the field, the pattern their Hugging Face config class
    // defaults to (Gemma 3 and 4: 6, Gemma 3n: 5, Cohere 2: 4), and Gemma 4's
    // last layer is always global.
    let default_pattern = match model_type {
        "gemma3" | "gemma3_text" | "gemma4" | "gemma4_text" => Some(6),
        "gemma3n" | "gemma3n_text" => Some(5),
        "cohere2" => Some(4),
        _ => None,
    };
    if let Some(p) = f
        .u64(&["sliding_window_pattern"])
        .or(default_pattern)
        .filter(|p| *p > 0)
    {
        let last_global = model_type.starts_with("gemma4");
        return Ok((0..n)
            .map(|i| {
                if (i + 1) % p == 0 || (last_global && i + 1 == n) {
                    LayerKind::FullAttention
                } else {
                    LayerKind::SlidingWindow { window: w }
                }
            })
            .collect());
    }
    // Qwen2 style: layers from `max_window_layers` on use the window.
    if let Some(m) = f.u64(&["max_window_layers"]) {
        return Ok((0..n)
            .map(|i| {
                if i >= m {
                    LayerKind::SlidingWindow { window: w }
                } else {
                    LayerKind::FullAttention
                }
            })
            .collect());
    }
    Ok(vec![LayerKind::SlidingWindow { window: w }; n_usize])
}

fn fit_len(
    mut kinds: Vec<LayerKind>,
    n: usize,
    field: &'static str,
) -> Result<Vec<LayerKind>, CapacityError> {
    if kinds.len() < n {
        return Err(CapacityError::BadField {
            field,
            value: format!("{} entries", kinds.len()),
            why: "fewer entries than num_hidden_layers",
        });
    }
    kinds.truncate(n);
    Ok(kinds)
}

fn layer_kind_from_name(name: &str, window: Option<u64>) -> Result<LayerKind, CapacityError> {
    let n = name.to_ascii_lowercase();
    Ok(match n.as_str() {
        "full_attention" | "attention" | "full" | "global" | "hybrid" | "attn" => {
            LayerKind::FullAttention
        }
        "sliding_attention" | "sliding_window" | "sliding" | "local" | "swa" => {
            LayerKind::SlidingWindow {
                window: window.ok_or(CapacityError::MissingField {
                    field: "sliding_window",
                })?,
            }
        }
        "chunked_attention" => LayerKind::ChunkedLocal {
            chunk: window.unwrap_or(8192),
        },
        "linear_attention" | "gated_deltanet" | "linear" => LayerKind::LinearAttention,
        "mamba" | "mamba2" | "m" => LayerKind::Mamba,
        "mlp" | "moe" | "-" | "conv" => LayerKind::NoCache,
        _ => {
            return Err(CapacityError::BadField {
                field: "layer_types",
                value: name.to_owned(),
                why: "unknown layer type (known: full_attention, sliding_attention, linear_attention, mamba)",
            });
        }
    })
}
