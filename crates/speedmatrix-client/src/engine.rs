//! Which engine serves the API, and what that changes about its streams.
//!
//! Every engine speaks the OpenAI streaming format, but they differ in what
//! they count for the client (facts from each engine's source, cited in
//! `docs/metrics.md`):
//!
//! - vLLM and SGLang put cumulative `usage` on every chunk when asked with
//!   `stream_options.continuous_usage_stats` (SGLang on chat; its
//!   completions send usage at the end only).
//! - llama.cpp's `llama-server` ignores `continuous_usage_stats` but puts a
//!   `timings` object with the running output count `predicted_n` on every
//!   chunk when the request sets `timings_per_token`.
//! - TGI sends one event per generated token (an event with empty text for
//!   an incomplete UTF-8 character or a special token), so the events
//!   counted so far are its running count; usage only at the end.
//! - Ollama sends no running count (its completions put an all-zero
//!   `usage` on every chunk); usage only at the end.

use serde_json::{Map, Value};

use crate::ServerInfo;

/// An inference engine, as told by the endpoints only it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Engine {
    /// vLLM (`/version`, `vllm:` metrics) or a server that answers like it.
    Vllm,
    /// SGLang (`/get_server_info`).
    Sglang,
    /// llama.cpp's `llama-server` (`/props`).
    LlamaCpp,
    /// Hugging Face text-generation-inference (`/info`).
    Tgi,
    /// Ollama (`/api/version`).
    Ollama,
    /// None of the above: an OpenAI-compatible server or proxy.
    Unknown,
}

impl Engine {
    /// Tells the engine from what the probe found. Engine-specific endpoints
    /// win over the generic ones, since proxies and look-alikes copy those.
    pub fn identify(info: &ServerInfo) -> Engine {
        if info.tgi.is_some() {
            return Engine::Tgi;
        }
        if info.sglang.is_some() {
            return Engine::Sglang;
        }
        if info.llamacpp_props.is_some() {
            return Engine::LlamaCpp;
        }
        if info.ollama_version.is_some() {
            return Engine::Ollama;
        }
        let vllm_metrics = info.metrics.as_ref().is_some_and(|m| m.has_prefix("vllm:"));
        let vllm_models = info
            .models
            .iter()
            .flatten()
            .any(|m| m.owned_by.as_deref() == Some("vllm"));
        if vllm_metrics || vllm_models {
            return Engine::Vllm;
        }
        Engine::Unknown
    }

    /// The engine's name as reports spell it.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
            Engine::LlamaCpp => "llama.cpp",
            Engine::Tgi => "tgi",
            Engine::Ollama => "ollama",
            Engine::Unknown => "unknown",
        }
    }

    /// Request fields that make this engine count output tokens on every
    /// chunk, beyond the `stream_options` every request carries.
    pub fn stream_fields(self) -> Map<String, Value> {
        let mut fields = Map::new();
        if self == Engine::LlamaCpp {
            fields.insert("timings_per_token".into(), Value::Bool(true));
        }
        fields
    }

    /// Whether every streamed event with `choices` carries exactly one
    /// generated token, so that counting events counts tokens (TGI).
    pub fn one_event_per_token(self) -> bool {
        self == Engine::Tgi
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
