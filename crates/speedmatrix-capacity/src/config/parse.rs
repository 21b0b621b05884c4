//! Reading the fields: a JSON object with the text model's fields first and
//! the outer config as fallback, every dialect of layer-type and quantization
//! fields, and the envelope that keeps products from overflowing.

use serde_json::{Map, Value};

use super::{
    GdnShape, HeadShape, LayerKind, Mamba2Shape, MlaShape, ModelConfig, MoeShape, Quantization,
    VisionShape,
};
use crate::{CapacityError, Dtype};

mod layers;

use self::layers::layer_kinds;

/// A JSON object with the text model's fields first and the outer config as fallback.
pub(super) struct Fields<'a> {
    pub(super) inner: Option<&'a Map<String, Value>>,
    pub(super) outer: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    fn value(&self, keys: &[&str]) -> Option<&'a Value> {
        let look = |m: &'a Map<String, Value>| {
            keys.iter().find_map(|k| m.get(*k).filter(|v| !v.is_null()))
        };
        self.inner.and_then(look).or_else(|| look(self.outer))
    }

    fn u64(&self, keys: &[&str]) -> Option<u64> {
        self.value(keys).and_then(as_u64)
    }

    fn req(&self, keys: &'static [&'static str], name: &'static str) -> Result<u64, CapacityError> {
        self.u64(keys)
            .ok_or(CapacityError::MissingField { field: name })
    }

    fn bool(&self, keys: &[&str]) -> Option<bool> {
        self.value(keys).and_then(Value::as_bool)
    }

    fn str(&self, keys: &[&str]) -> Option<&'a str> {
        self.value(keys).and_then(Value::as_str)
    }
}

/// Largest integer a config field may hold (2^24, above every real model's
/// dimensions and context lengths); larger values are treated as unusable so
/// that no product of them can overflow (found by `cargo xtask fuzz`).
pub(super) const MAX_CONFIG_INT: u64 = 1 << 24;

/// Integers also arrive as floats (`4.0`) or strings in hand-edited configs.
pub(super) fn as_u64(v: &Value) -> Option<u64> {
    let n = match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    };
    n.filter(|n| *n <= MAX_CONFIG_INT)
}

pub(super) fn parse(
    f: &Fields<'_>,
    outer: &Map<String, Value>,
) -> Result<ModelConfig, CapacityError> {
    let hidden_size = f.req(&["hidden_size", "d_model", "n_embd", "dim"], "hidden_size")?;
    let num_layers = f.req(
        &["num_hidden_layers", "num_layers", "n_layer", "n_layers"],
        "num_hidden_layers",
    )?;
    let num_attention_heads = f
        .u64(&["num_attention_heads", "n_head", "n_heads", "num_heads"])
        .unwrap_or(0);
    let num_kv_heads = if f.bool(&["multi_query"]) == Some(true) {
        1
    } else {
        f.u64(&[
            "num_key_value_heads",
            "num_kv_heads",
            "n_head_kv",
            "multi_query_group_num",
        ])
        .unwrap_or(num_attention_heads)
    };
    let head_dim = match f.u64(&["head_dim", "attention_head_dim"]) {
        Some(h) => h,
        None if num_attention_heads > 0 => hidden_size / num_attention_heads,
        None => 0,
    };
    let head_dim_v = f.u64(&["v_head_dim_attn"]).unwrap_or(head_dim);
    let dtype = match f.str(&["torch_dtype", "dtype"]) {
        Some(s) if s != "auto" => Dtype::parse(s)?,
        _ => Dtype::Bfloat16,
    };
    let ssm_dtype = match f.str(&["mamba_ssm_dtype", "mamba_ssm_cache_dtype", "ssm_dtype"]) {
        Some(s) if s != "auto" => Dtype::parse(s)?,
        _ => dtype,
    };
    let model_type = f.str(&["model_type"]).unwrap_or_default();
    let mut layers = layer_kinds(f, num_layers, model_type)?;
    // Gemma 3n / Gemma 4: the last `num_kv_shared_layers` read the cache of
    // an earlier layer of their kind and keep none (gemma3n.py, gemma4.py).
    if let Some(shared) = f.u64(&["num_kv_shared_layers"]).filter(|n| *n > 0) {
        let first_shared = layers.len().saturating_sub(shared as usize);
        for k in &mut layers[first_shared..] {
            if k.is_attention() {
                *k = LayerKind::SharedKv;
            }
        }
    }
    // Gemma 4: full-attention layers use `global_head_dim` and, when K and V
    // share weights (`attention_k_eq_v`), `num_global_key_value_heads`
    // (Gemma4DecoderLayer / HF Gemma4TextConfig.per_layer_config).
    let full_attention_heads = f.u64(&["global_head_dim"]).map(|global_head_dim| {
        let k_eq_v = f.bool(&["attention_k_eq_v"]).unwrap_or(true);
        HeadShape {
            num_kv_heads: f
                .u64(&["num_global_key_value_heads"])
                .filter(|_| k_eq_v)
                .unwrap_or(num_kv_heads),
            head_dim: global_head_dim,
        }
    });
    let mla = f
        .u64(&["kv_lora_rank"])
        .filter(|r| *r > 0)
        .map(|kv_lora_rank| MlaShape {
            kv_lora_rank,
            qk_rope_head_dim: f.u64(&["qk_rope_head_dim"]).unwrap_or(64),
            qk_nope_head_dim: f.u64(&["qk_nope_head_dim"]).unwrap_or(128),
            v_head_dim: f.u64(&["v_head_dim"]).unwrap_or(128),
            q_lora_rank: f.u64(&["q_lora_rank"]).unwrap_or(0),
            indexer_head_dim: f.u64(&["index_head_dim"]).filter(|d| *d > 0),
        });
    let gdn = gdn_shape(f);
    let mamba = mamba_shape(f, hidden_size);
    if layers
        .iter()
        .any(|k| matches!(k, LayerKind::LinearAttention))
        && gdn.is_none()
    {
        return Err(CapacityError::MissingField {
            field: "linear_num_value_heads / linear_key_head_dim",
        });
    }
    if layers.iter().any(|k| matches!(k, LayerKind::Mamba)) && mamba.is_none() {
        return Err(CapacityError::MissingField {
            field: "mamba_n_heads / ssm_state_size",
        });
    }
    if layers.iter().any(|k| k.is_attention())
        && mla.is_none()
        && (num_kv_heads == 0 || head_dim == 0)
    {
        return Err(CapacityError::MissingField {
            field: "num_attention_heads or head_dim",
        });
    }
    let (quantization, declares_fp8_kv) = quantization(outer, f);
    let model = ModelConfig {
        architecture: outer
            .get("architectures")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        model_type: model_type.to_owned(),
        dtype,
        hidden_size,
        num_attention_heads,
        num_kv_heads,
        head_dim,
        head_dim_v,
        full_attention_heads,
        layers,
        mla,
        gdn,
        mamba,
        ssm_dtype,
        vocab_size: f.u64(&["vocab_size", "padded_vocab_size"]).unwrap_or(0),
        // Llama 4: `intermediate_size` is an expert's, `intermediate_size_mlp` the dense
        // layers'.
        intermediate_size: f
            .u64(&[
                "intermediate_size_mlp",
                "intermediate_size",
                "ffn_hidden_size",
                "n_inner",
            ])
            .unwrap_or(4 * hidden_size),
        moe: moe_shape(f, model_type),
        tie_word_embeddings: f.bool(&["tie_word_embeddings"]).unwrap_or(true),
        attn_output_gate: f.bool(&["attn_output_gate"]).unwrap_or(false),
        max_position_embeddings: f.u64(&[
            "max_position_embeddings",
            "n_positions",
            "max_seq_len",
            "seq_length",
        ]),
        quantization,
        quant_exclusions: quant_exclusions(outer, f),
        declares_fp8_kv,
        mtp_layers: f
            .u64(&["mtp_num_hidden_layers", "num_nextn_predict_layers"])
            .unwrap_or(0),
        vision: vision_shape(outer),
        separate_mlp_layers: f.str(&["hybrid_override_pattern"]).is_some(),
        gated_mlp: model_type != "nemotron_h",
    };
    check_envelope(&model)?;
    Ok(model)
}

/// Rejects dimensions far beyond any real model (every limit is at least 8×
/// the largest published value), so that no product the predictors form
/// can overflow: `cargo xtask fuzz` found configs that made them panic.
pub(super) fn check_envelope(m: &ModelConfig) -> Result<(), CapacityError> {
    let mut checks: Vec<(&'static str, u64, u32)> = vec![
        ("hidden_size", m.hidden_size, 17),
        ("num_attention_heads", m.num_attention_heads, 10),
        ("num_key_value_heads", m.num_kv_heads, 10),
        ("head_dim", m.head_dim, 13),
        ("head_dim (values)", m.head_dim_v, 13),
        ("num_hidden_layers", m.layers.len() as u64, 11),
        ("vocab_size", m.vocab_size, 22),
        ("intermediate_size", m.intermediate_size, 20),
        ("mtp_num_hidden_layers", m.mtp_layers, 8),
    ];
    if let Some(x) = &m.mla {
        checks.extend([
            ("kv_lora_rank", x.kv_lora_rank, 13),
            ("qk_rope_head_dim", x.qk_rope_head_dim, 13),
            ("qk_nope_head_dim", x.qk_nope_head_dim, 13),
            ("v_head_dim", x.v_head_dim, 13),
            ("q_lora_rank", x.q_lora_rank, 13),
        ]);
    }
    if let Some(x) = &m.gdn {
        checks.extend([
            ("linear_num_key_heads", x.num_key_heads, 10),
            ("linear_num_value_heads", x.num_value_heads, 10),
            ("linear_key_head_dim", x.key_head_dim, 13),
            ("linear_value_head_dim", x.value_head_dim, 13),
            ("linear_conv_kernel_dim", x.conv_kernel, 8),
        ]);
    }
    if let Some(x) = &m.mamba {
        checks.extend([
            ("mamba_num_heads", x.num_heads, 10),
            ("mamba_head_dim", x.head_dim, 13),
            ("ssm_state_size", x.state_size, 13),
            ("n_groups", x.n_groups, 10),
            ("conv_kernel", x.conv_kernel, 8),
            ("mamba d_inner", x.d_inner, 20),
        ]);
    }
    if let Some(x) = &m.moe {
        checks.extend([
            ("num_experts", x.num_experts, 11),
            ("moe_intermediate_size", x.expert_intermediate, 16),
            ("shared_expert_intermediate_size", x.shared_intermediate, 16),
            ("first_k_dense_replace", x.first_dense_layers, 11),
            ("num_experts_per_tok", x.experts_per_token, 10),
            ("interleave_moe_layer_step", x.interleave_step, 11),
            ("moe_latent_size", x.latent_size.unwrap_or(0), 17),
            ("moe_layer_end_index", x.last_layer.unwrap_or(0), 11),
        ]);
    }
    if let Some(x) = &m.vision {
        checks.extend([
            ("vision depth", x.depth, 11),
            ("vision hidden_size", x.hidden_size, 17),
            ("vision intermediate_size", x.intermediate_size, 20),
            ("vision out_hidden_size", x.out_hidden_size, 17),
        ]);
    }
    match checks.into_iter().find(|(_, v, bits)| *v > 1u64 << bits) {
        Some((field, value, _)) => Err(CapacityError::BadField {
            field,
            value: value.to_string(),
            why: "far larger than any real model's; check the file",
        }),
        None => Ok(()),
    }
}

pub(super) fn gdn_shape(f: &Fields<'_>) -> Option<GdnShape> {
    Some(GdnShape {
        num_key_heads: f.u64(&["linear_num_key_heads"])?,
        num_value_heads: f.u64(&["linear_num_value_heads"])?,
        key_head_dim: f.u64(&["linear_key_head_dim"])?,
        value_head_dim: f.u64(&["linear_value_head_dim"])?,
        conv_kernel: f.u64(&["linear_conv_kernel_dim"]).unwrap_or(4),
    })
}

pub(super) fn mamba_shape(f: &Fields<'_>, hidden: u64) -> Option<Mamba2Shape> {
    let state_size = f.u64(&["ssm_state_size", "mamba_d_state", "state_size", "d_state"])?;
    let expand = f.u64(&["mamba_expand", "expand"]).unwrap_or(2);
    let head_dim = f
        .u64(&["mamba_head_dim", "mamba_d_head", "head_dim_mamba"])
        .unwrap_or(64);
    let num_heads = f
        .u64(&["mamba_n_heads", "mamba_num_heads", "num_heads_mamba"])
        .unwrap_or(expand * hidden / head_dim.max(1));
    Some(Mamba2Shape {
        num_heads,
        head_dim,
        state_size,
        n_groups: f
            .u64(&["mamba_n_groups", "n_groups", "ngroups"])
            .unwrap_or(1),
        conv_kernel: f
            .u64(&["mamba_d_conv", "conv_kernel", "d_conv"])
            .unwrap_or(4),
        d_inner: f
            .u64(&["mamba_d_inner", "d_inner"])
            .unwrap_or(num_heads * head_dim),
    })
}

pub(super) fn moe_shape(f: &Fields<'_>, model_type: &str) -> Option<MoeShape> {
    let num_experts = f
        .u64(&[
            "num_experts",
            "num_local_experts",
            "n_routed_experts",
            "moe_num_experts",
        ])
        .filter(|n| *n > 1)?;
    let expert_intermediate = f.u64(&[
        "moe_intermediate_size",
        "expert_intermediate_size",
        "intermediate_size",
    ])?;
    // Llama 4 has one shared expert of an expert's width in every MoE layer, with no
    // field saying so (HF `Llama4TextMoe.shared_expert`).
    let implied_shared = u64::from(model_type.starts_with("llama4"));
    let shared = f
        .u64(&[
            "shared_expert_intermediate_size",
            "moe_shared_expert_intermediate_size",
        ])
        .unwrap_or_else(|| {
            f.u64(&["n_shared_experts", "num_shared_experts"])
                .unwrap_or(implied_shared)
                * expert_intermediate
        });
    Some(MoeShape {
        num_experts,
        expert_intermediate,
        shared_intermediate: shared,
        // ERNIE 4.5 names them `moe_layer_start_index` and `moe_layer_interval` (a layer is
        // MoE from the start index to `moe_layer_end_index` where `(index + 1) % interval ==
        // 0`, as Llama 4's step).
        first_dense_layers: f
            .u64(&["first_k_dense_replace", "moe_layer_start_index"])
            .unwrap_or(0),
        experts_per_token: f
            .u64(&["num_experts_per_tok", "moe_topk", "top_k"])
            .unwrap_or(8),
        interleave_step: f
            .u64(&["interleave_moe_layer_step", "moe_layer_interval"])
            .filter(|k| *k > 0)
            .unwrap_or(1),
        latent_size: f.u64(&["moe_latent_size"]).filter(|l| *l > 0),
        last_layer: f
            .value(&["moe_layer_end_index"])
            .and_then(|v| as_u64(v).or_else(|| v.as_array()?.iter().filter_map(as_u64).max())),
    })
}

pub(super) fn vision_shape(outer: &Map<String, Value>) -> Option<VisionShape> {
    let v = outer.get("vision_config")?.as_object()?;
    let g = |keys: &[&str]| keys.iter().find_map(|k| v.get(*k).and_then(as_u64));
    let hidden_size = g(&["hidden_size", "embed_dim", "width"])?;
    Some(VisionShape {
        depth: g(&["depth", "num_hidden_layers", "layers"])?,
        hidden_size,
        intermediate_size: g(&["intermediate_size", "mlp_dim"]).unwrap_or(4 * hidden_size),
        out_hidden_size: g(&["out_hidden_size", "projection_dim"]).unwrap_or(hidden_size),
    })
}

/// Weight quantization and whether an fp8 KV scheme is declared.
pub(super) fn quantization(outer: &Map<String, Value>, f: &Fields<'_>) -> (Quantization, bool) {
    let Some(q) = outer
        .get("quantization_config")
        .or_else(|| f.value(&["quantization_config"]))
        .and_then(Value::as_object)
    else {
        return (Quantization::None, false);
    };
    let s = |k: &str| {
        q.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_ascii_lowercase()
    };
    let method = s("quant_method");
    let algo = s("quant_algo");
    let kv_fp8 = q.get("kv_cache_scheme").is_some_and(|v| !v.is_null())
        || q.get("kv_cache_quant_algo")
            .and_then(Value::as_str)
            .is_some_and(|a| a.to_ascii_lowercase().contains("fp8"));
    let bits = q
        .get("bits")
        .or_else(|| q.get("w_bit"))
        .and_then(as_u64)
        .unwrap_or(4);
    let group_size = q
        .get("group_size")
        .or_else(|| q.get("q_group_size"))
        .and_then(as_u64)
        .unwrap_or(128);
    let quant = match method.as_str() {
        "fp8" | "fbgemm_fp8" | "ptpc_fp8" => Quantization::Fp8,
        "mxfp4" => Quantization::Mxfp4Experts,
        "awq" | "gptq" | "awq_marlin" | "gptq_marlin" | "auto-round" | "bitsandbytes" => {
            Quantization::Int { bits, group_size }
        }
        "modelopt" | "modelopt_fp4" => {
            if algo.contains("fp4") {
                Quantization::Nvfp4
            } else {
                Quantization::Fp8
            }
        }
        "compressed-tensors" | "compressed_tensors" => compressed_tensors(q),
        _ => Quantization::None,
    };
    (quant, kv_fp8)
}

/// The module patterns a quantization config keeps unquantized.
pub(super) fn quant_exclusions(outer: &Map<String, Value>, f: &Fields<'_>) -> Vec<String> {
    let Some(q) = outer
        .get("quantization_config")
        .or_else(|| f.value(&["quantization_config"]))
        .and_then(Value::as_object)
    else {
        return Vec::new();
    };
    [
        "ignore",
        "modules_to_not_convert",
        "exclude_modules",
        "ignored_layers",
    ]
    .iter()
    .filter_map(|k| q.get(*k).and_then(Value::as_array))
    .flatten()
    .filter_map(Value::as_str)
    .map(str::to_owned)
    .collect()
}

pub(super) fn compressed_tensors(q: &Map<String, Value>) -> Quantization {
    let format = q.get("format").and_then(Value::as_str).unwrap_or_default();
    let weights = q
        .get("config_groups")
        .and_then(Value::as_object)
        .and_then(|g| g.values().next())
        .and_then(|g| g.get("weights"))
        .and_then(Value::as_object);
    let bits = weights
        .and_then(|w| w.get("num_bits"))
        .and_then(as_u64)
        .unwrap_or(8);
    let is_float = weights.and_then(|w| w.get("type")).and_then(Value::as_str) == Some("float");
    let group = weights
        .and_then(|w| w.get("group_size"))
        .and_then(as_u64)
        .unwrap_or(128);
    match (
        bits,
        is_float || format.contains("float") || format.contains("nvfp4"),
    ) {
        (4, true) => Quantization::Nvfp4,
        (8, true) => Quantization::Fp8,
        (b, false) if b < 8 => Quantization::Int {
            bits: b,
            group_size: group,
        },
        (8, false) => Quantization::Fp8,
        _ => Quantization::None,
    }
}
