//! The few domain words every crate shares, defined once: which endpoint a
//! request goes to and whether a cell's streams share their prompt.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which OpenAI endpoint carries a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum Api {
    /// `POST /v1/completions` with a text prompt: the tokenizer's special
    /// tokens (BOS) are counted.
    #[default]
    Completions,
    /// `POST /v1/chat/completions` with one user message: the chat
    /// template's tokens are counted.
    Chat,
}

impl Api {
    /// `completions` or `chat`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Api::Completions => "completions",
            Api::Chat => "chat",
        }
    }

    /// The endpoint's path, e.g. `/v1/completions`.
    pub const fn path(self) -> &'static str {
        match self {
            Api::Completions => "/v1/completions",
            Api::Chat => "/v1/chat/completions",
        }
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether the streams of one decode cell share their prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum PromptSharing {
    /// Every stream has its own prompt: no KV block is shared between streams.
    #[default]
    Unique,
    /// All streams of a cell send one prompt (measures prefix-cache sharing).
    Shared,
}

impl PromptSharing {
    /// `unique` or `shared`.
    pub const fn as_str(self) -> &'static str {
        match self {
            PromptSharing::Unique => "unique",
            PromptSharing::Shared => "shared",
        }
    }
}

impl fmt::Display for PromptSharing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the prefill rows of a run are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum PrefillMode {
    /// A separate request per prefill context, with a never-seen prompt, before the decode cells.
    #[default]
    Cold,
    /// The first warm-up request of each context's first decode cell, sent alone with nothing
    /// cached (the seed page's "Measured during decode warm-up"); prefill contexts without a
    /// decode row get a cold request.
    Warmup,
}

impl PrefillMode {
    /// `cold` or `warmup`.
    pub const fn as_str(self) -> &'static str {
        match self {
            PrefillMode::Cold => "cold",
            PrefillMode::Warmup => "warmup",
        }
    }

    /// The words a report shows, as the seed page spells its mode.
    pub const fn describe(self) -> &'static str {
        match self {
            PrefillMode::Cold => "Separate cold request",
            PrefillMode::Warmup => "Measured during decode warm-up",
        }
    }
}

impl fmt::Display for PrefillMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the cells of a run measure: the kind of load they put on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum LoadKind {
    /// N streams kept busy through a fixed window, the prefix cache warmed first (the seed page).
    #[default]
    Sustained,
    /// N requests sent at once per cell; the cell lasts until the last one ends.
    Burst,
    /// Requests arriving at a rate, at send times drawn before the cell (open loop).
    Rate,
    /// N multi-turn conversations at once: each turn's prompt is the last one's, its answer and
    /// a new question, so the prefix cache holds all but the new text.
    Conversation,
}

impl LoadKind {
    /// `sustained`, `burst`, `rate` or `conversation`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LoadKind::Sustained => "sustained",
            LoadKind::Burst => "burst",
            LoadKind::Rate => "rate",
            LoadKind::Conversation => "conversation",
        }
    }
}

impl fmt::Display for LoadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An inference engine speedmatrix knows by name: told from the endpoints only it has, named
/// by a user (`--engine`), or followed for its KV-cache rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub enum Engine {
    /// vLLM (v1 engine).
    Vllm,
    /// SGLang.
    Sglang,
    /// llama.cpp's `llama-server`.
    #[cfg_attr(
        feature = "clap",
        value(name = "llama.cpp", alias = "llamacpp", alias = "llama-server")
    )]
    // A study's `[run]` table writes the flag's text.
    #[serde(alias = "llama.cpp", alias = "llamacpp", alias = "llama-server")]
    LlamaCpp,
    /// Hugging Face text-generation-inference.
    Tgi,
    /// Ollama.
    Ollama,
    /// None of the above: an OpenAI-compatible server or proxy (never a user's choice).
    #[cfg_attr(feature = "clap", value(skip))]
    Unknown,
}

impl Engine {
    /// Every engine a user can name, in the order help text lists them.
    pub const NAMED: [Engine; 5] = [
        Engine::Vllm,
        Engine::Sglang,
        Engine::LlamaCpp,
        Engine::Tgi,
        Engine::Ollama,
    ];

    /// The engine's name as reports spell it: `vllm`, `sglang`, `llama.cpp`, `tgi`, `ollama`,
    /// `unknown`.
    pub const fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
            Engine::LlamaCpp => "llama.cpp",
            Engine::Tgi => "tgi",
            Engine::Ollama => "ollama",
            Engine::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_serialize_as_they_are_spelled() {
        for (mode, text) in [(PrefillMode::Cold, "cold"), (PrefillMode::Warmup, "warmup")] {
            assert_eq!(serde_json::to_string(&mode).unwrap(), format!("\"{text}\""));
            assert_eq!(mode.to_string(), text);
        }
        for kind in [
            LoadKind::Sustained,
            LoadKind::Burst,
            LoadKind::Rate,
            LoadKind::Conversation,
        ] {
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{kind}\""));
            assert_eq!(serde_json::from_str::<LoadKind>(&json).unwrap(), kind);
        }
        assert!(serde_json::from_str::<LoadKind>("\"steady\"").is_err());
        assert_eq!(
            serde_json::to_string(&Engine::LlamaCpp).unwrap(),
            "\"llama-cpp\""
        );
        assert_eq!(Engine::LlamaCpp.to_string(), "llama.cpp");
        assert!(!Engine::NAMED.contains(&Engine::Unknown));
    }
}

/// How reasoning ("thinking") text is told apart from the answer when the server streams
/// both as answer text. Servers with a reasoning parser (vLLM `--reasoning-parser`, SGLang)
/// send it apart in `delta.reasoning_content` / `delta.reasoning`, which is always read;
/// this says what to do with `<think>` tags left in the answer text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
pub enum ReasoningParser {
    /// Answer text is answer text; reasoning only from the reasoning fields.
    #[default]
    None,
    /// Text inside `<think>…</think>` at the start of the answer is reasoning (leading
    /// whitespace allowed): an answer that does not open with `<think>` has none; one that
    /// never closes it is all reasoning.
    Think,
    /// Everything before `</think>` is reasoning, the opening tag optional (DeepSeek-R1,
    /// whose chat template opens the tag itself; vLLM's `deepseek_r1` parser): an answer
    /// that never closes the tag is all reasoning.
    DeepseekR1,
}

impl ReasoningParser {
    /// `none`, `think` or `deepseek-r1`, as the flag spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            ReasoningParser::None => "none",
            ReasoningParser::Think => "think",
            ReasoningParser::DeepseekR1 => "deepseek-r1",
        }
    }
}

impl fmt::Display for ReasoningParser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
