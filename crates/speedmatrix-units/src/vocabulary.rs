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
