//! Hugging Face model folders and the local hub cache (no downloading).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::WorkloadError;

/// What a model's `tokenizer_config.json` says about chat and special tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenizerConfig {
    /// The default Jinja chat template, if the model has one.
    pub chat_template: Option<String>,
    /// The beginning-of-sequence token's text.
    pub bos_token: Option<String>,
    /// The end-of-sequence token's text.
    pub eos_token: Option<String>,
    /// Whether the model's tokenizer adds BOS to every text (`None`: not said).
    pub add_bos_token: Option<bool>,
}

impl TokenizerConfig {
    /// Parses the text of a `tokenizer_config.json`.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        let raw: RawConfig = serde_json::from_str(text)?;
        Ok(TokenizerConfig {
            chat_template: raw.chat_template.and_then(ChatTemplateField::into_default),
            bos_token: raw.bos_token.and_then(TokenField::into_content),
            eos_token: raw.eos_token.and_then(TokenField::into_content),
            add_bos_token: raw.add_bos_token,
        })
    }

    pub(crate) fn read(path: &Path) -> Result<Self, WorkloadError> {
        let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::from_json(&text).map_err(|e| WorkloadError::Parse {
            path: path.to_owned(),
            what: "tokenizer_config.json",
            message: e.to_string(),
        })
    }
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(default)]
    chat_template: Option<ChatTemplateField>,
    #[serde(default)]
    bos_token: Option<TokenField>,
    #[serde(default)]
    eos_token: Option<TokenField>,
    #[serde(default)]
    add_bos_token: Option<bool>,
}

/// `"<s>"` or `{"content": "<s>", ...}`; `null` is allowed.
#[derive(Deserialize)]
#[serde(untagged)]
enum TokenField {
    Text(String),
    Object { content: String },
    Null(()),
}

impl TokenField {
    fn into_content(self) -> Option<String> {
        match self {
            TokenField::Text(s) | TokenField::Object { content: s } => Some(s),
            TokenField::Null(()) => None,
        }
    }
}

/// One template, or a list of named ones of which `default` is used.
#[derive(Deserialize)]
#[serde(untagged)]
enum ChatTemplateField {
    One(String),
    Named(Vec<NamedTemplate>),
}

#[derive(Deserialize)]
struct NamedTemplate {
    name: String,
    template: String,
}

impl ChatTemplateField {
    fn into_default(self) -> Option<String> {
        match self {
            ChatTemplateField::One(s) => Some(s),
            ChatTemplateField::Named(list) => list
                .into_iter()
                .find(|t| t.name == "default")
                .map(|t| t.template),
        }
    }
}

/// A local Hugging Face hub cache (`models--org--name/snapshots/<rev>/`).
///
/// Only reads what is already there: downloading is not built, so an offline
/// machine and an online one behave the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfCache {
    root: PathBuf,
}

impl HfCache {
    /// The cache at `root` (the folder holding `models--*` folders).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        HfCache { root: root.into() }
    }

    /// The cache the Hugging Face tools use: `$HF_HUB_CACHE`, else
    /// `$HF_HOME/hub`, else `~/.cache/huggingface/hub`.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let root = if let Some(dir) = var("HF_HUB_CACHE") {
            PathBuf::from(dir)
        } else if let Some(home) = var("HF_HOME") {
            PathBuf::from(home).join("hub")
        } else if let Some(xdg) = var("XDG_CACHE_HOME") {
            PathBuf::from(xdg).join("huggingface").join("hub")
        } else {
            let home = var("HOME").map(PathBuf::from).unwrap_or_default();
            home.join(".cache").join("huggingface").join("hub")
        };
        HfCache { root }
    }

    /// The cache folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The snapshot folder of `id` (`org/name`, optionally `@revision`, where a
    /// revision is a branch or tag under `refs/`, or a commit hash), holding a
    /// `tokenizer.json`.
    pub fn snapshot(&self, id: &str) -> Result<PathBuf, WorkloadError> {
        let (name, revision) = id.split_once('@').unwrap_or((id, "main"));
        let model_dir = self
            .root
            .join(format!("models--{}", name.replace('/', "--")));
        let not_cached = |missing: String| WorkloadError::NotCached {
            id: name.to_owned(),
            looked_in: model_dir.clone(),
            missing,
        };
        if !model_dir.is_dir() {
            return Err(not_cached("the whole model folder".to_owned()));
        }
        let ref_file = model_dir.join("refs").join(revision);
        let commit = match std::fs::read_to_string(&ref_file) {
            Ok(text) => text.trim().to_owned(),
            Err(_) if model_dir.join("snapshots").join(revision).is_dir() => revision.to_owned(),
            Err(_) => return Err(not_cached(format!("refs/{revision}"))),
        };
        let snapshot = model_dir.join("snapshots").join(&commit);
        if !snapshot.join("tokenizer.json").is_file() {
            return Err(not_cached(format!("snapshots/{commit}/tokenizer.json")));
        }
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_reads_string_and_object_tokens_and_named_templates() {
        let cfg = TokenizerConfig::from_json(
            r#"{"bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>",
                "add_bos_token": true,
                "chat_template": [{"name": "tool_use", "template": "T"},
                                  {"name": "default", "template": "D"}]}"#,
        )
        .unwrap();
        assert_eq!(cfg.bos_token.as_deref(), Some("<s>"));
        assert_eq!(cfg.eos_token.as_deref(), Some("</s>"));
        assert_eq!(cfg.add_bos_token, Some(true));
        assert_eq!(cfg.chat_template.as_deref(), Some("D"));

        let cfg =
            TokenizerConfig::from_json(r#"{"bos_token": null, "chat_template": "X"}"#).unwrap();
        assert_eq!(cfg.bos_token, None);
        assert_eq!(cfg.chat_template.as_deref(), Some("X"));
        assert!(TokenizerConfig::from_json("[1]").is_err());
    }

    #[test]
    fn missing_model_names_what_is_missing_and_how_to_fix_it() {
        let dir = std::env::temp_dir().join(format!("sm-hf-missing-{}", std::process::id()));
        let err = HfCache::new(&dir).snapshot("org/model").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("org/model") && msg.contains("models--org--model"),
            "{msg}"
        );
        assert!(msg.contains("huggingface-cli download") && msg.contains("does not download"));
    }
}
