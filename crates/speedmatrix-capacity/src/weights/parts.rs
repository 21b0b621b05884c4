//! The parts of a decoder layer, and which of them a quantization config's exclusion list
//! keeps in the model dtype.

/// A part of a decoder layer, as quantization exclusions name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    Attention,
    Mixer,
    Mlp,
    Experts,
    SharedExperts,
    Router,
}

/// One module pattern of a quantization config's exclusion list, read as
/// the layer it names (if any) and the parts it covers: `lm_head` and
/// embeddings cover no decoder part (they stay unquantized anyway),
/// `model.layers.0` a whole layer, `re:.*self_attn.*` every attention,
/// `model.layers.*.mlp.gate` every router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Exclusion {
    layer: Option<u64>,
    parts: Vec<Part>,
}

impl Exclusion {
    pub(super) fn parse(pattern: &str) -> Exclusion {
        let p = pattern.trim().to_ascii_lowercase();
        let layer = p.find("layers.").and_then(|at| {
            let digits: String = p[at + 7..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        });
        let has = |words: &[&str]| words.iter().any(|w| p.contains(w));
        let all = vec![
            Part::Attention,
            Part::Mixer,
            Part::Mlp,
            Part::Experts,
            Part::SharedExperts,
            Part::Router,
        ];
        let parts = if has(&["shared_expert"]) {
            vec![Part::SharedExperts]
        } else if has(&["experts"]) {
            vec![Part::Experts]
        } else if has(&["router"]) || p.trim_end_matches('$').ends_with(".gate") {
            vec![Part::Router]
        } else if has(&["linear_attn", "mixer", "mamba"]) {
            vec![Part::Mixer]
        } else if has(&[
            "attn",
            "attention",
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "qkv",
        ]) {
            vec![Part::Attention]
        } else if has(&["mlp", "feed_forward", "gate_proj", "up_proj", "down_proj"]) {
            vec![Part::Mlp, Part::Experts, Part::SharedExperts, Part::Router]
        } else if layer.is_some() && !has(&["embed", "lm_head", "visual", "vision"]) {
            all
        } else {
            Vec::new()
        };
        Exclusion { layer, parts }
    }

    pub(super) fn covers(&self, layer: u64, part: Part) -> bool {
        self.layer.is_none_or(|l| l == layer) && self.parts.contains(&part)
    }
}
