//! Ollama: `GET /api/version`.
//!
//! From `openai/openai.go`: no running count on chunks (its completions put an
//! all-zero `usage` on every chunk when `include_usage` is set), the real usage
//! in a final `choices: []` chunk; text held back until it is valid UTF-8.

use serde_json::{Value, json};

/// The endpoint that tells Ollama.
pub const VERSION: &str = "/api/version";

/// The version `/api/version` reports; `None` unless the answer has one.
pub fn version_from_json(answer: &Value) -> Option<String> {
    answer.get("version")?.as_str().map(str::to_owned)
}

/// An `/api/version` answer.
pub fn version_json(version: &str) -> Value {
    json!({ "version": version })
}
