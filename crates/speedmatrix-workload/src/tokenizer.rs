//! A tokenizer that counts the way the server counts.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use crate::WorkloadError;
use crate::hf::{HfCache, TokenizerConfig};

/// The bundled tokenizer, made by `cargo xtask gen-tokenizer` (see
/// [`BpeRecipe::BUNDLED`](crate::BpeRecipe::BUNDLED)).
pub(crate) const BUNDLED_JSON: &[u8] = include_bytes!("../assets/bundled-tokenizer.json");

/// The name [`Tokenizer::bundled`] reports and [`Tokenizer::load`] accepts.
pub const BUNDLED_NAME: &str = "bundled";

/// A tokenizer plus the rules a server applies when it counts prompt tokens.
///
/// Counting includes the special tokens the tokenizer adds to any text (a BOS
/// token, for instance), as vLLM does for a completions request with a text
/// prompt; [`Tokenizer::with_add_special_tokens`] turns that off, as a server
/// does for text rendered by a chat template. Cloning is cheap.
///
/// ```
/// use speedmatrix_workload::Tokenizer;
///
/// let tok = Tokenizer::bundled()?;
/// let ids = tok.encode("The quiet harbor measured 12 meters.")?;
/// assert_eq!(ids[0], tok.token_to_id("<|bos|>").unwrap());
/// assert_eq!(tok.encode_count("The quiet harbor measured 12 meters.")?, ids.len());
/// assert_eq!(tok.decode(&ids)?, "The quiet harbor measured 12 meters.");
/// assert_eq!(tok.special_tokens_count(), 1);
/// # Ok::<(), speedmatrix_workload::WorkloadError>(())
/// ```
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<tokenizers::Tokenizer>,
    name: String,
    config: Option<TokenizerConfig>,
    add_special_tokens: bool,
    /// BOS id to put first when the model config asks for BOS but the
    /// tokenizer.json's post-processor does not add it (transformers does).
    forced_bos: Option<u32>,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("name", &self.name)
            .field("vocab_size", &self.vocab_size())
            .field("add_special_tokens", &self.add_special_tokens)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// The project's own byte-level BPE (16K vocab), compiled into the program.
    ///
    /// It adds `<|bos|>` to every text and knows the chat tokens
    /// `<|im_start|>` and `<|im_end|>`; its [`config`](Self::config) holds a
    /// ChatML template.
    pub fn bundled() -> Result<Self, WorkloadError> {
        let inner = tokenizers::Tokenizer::from_bytes(BUNDLED_JSON).map_err(|e| {
            WorkloadError::Bundled {
                message: e.to_string(),
            }
        })?;
        let config = TokenizerConfig {
            chat_template: Some(crate::train::BUNDLED_CHAT_TEMPLATE.to_owned()),
            bos_token: Some("<|bos|>".to_owned()),
            eos_token: Some("<|im_end|>".to_owned()),
            add_bos_token: Some(true),
        };
        Ok(Self::from_tokenizers(inner, BUNDLED_NAME).with_config(config))
    }

    /// Wraps a tokenizer built or loaded elsewhere.
    pub fn from_tokenizers(inner: tokenizers::Tokenizer, name: impl Into<String>) -> Self {
        Tokenizer {
            inner: Arc::new(inner),
            name: name.into(),
            config: None,
            add_special_tokens: true,
            forced_bos: None,
        }
    }

    /// Loads a `tokenizer.json` file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, WorkloadError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| WorkloadError::Read {
            path: path.to_owned(),
            source,
        })?;
        let inner =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| WorkloadError::Parse {
                path: path.to_owned(),
                what: "tokenizer.json",
                message: e.to_string(),
            })?;
        Ok(Self::from_tokenizers(inner, path.display().to_string()))
    }

    /// Loads a Hugging Face model folder: its `tokenizer.json`, and its
    /// `tokenizer_config.json` (chat template, BOS/EOS, `add_bos_token`) when
    /// present.
    pub fn from_model_dir(dir: impl AsRef<Path>) -> Result<Self, WorkloadError> {
        let dir = dir.as_ref();
        let mut tok = Self::from_file(dir.join("tokenizer.json"))?;
        tok.name = dir.display().to_string();
        let config_path = dir.join("tokenizer_config.json");
        if config_path.is_file() {
            tok = tok.with_config(TokenizerConfig::read(&config_path)?);
        }
        Ok(tok)
    }

    /// Loads model `id` (`org/name` or `org/name@revision`) from a local hub cache.
    pub fn from_hf_cache(id: &str, cache: &HfCache) -> Result<Self, WorkloadError> {
        let mut tok = Self::from_model_dir(cache.snapshot(id)?)?;
        tok.name = id.to_owned();
        Ok(tok)
    }

    /// Loads what a `--tokenizer` value names: `bundled`, a `tokenizer.json`
    /// file, a model folder, or a Hugging Face id from [`HfCache::from_env`].
    pub fn load(source: &str) -> Result<Self, WorkloadError> {
        let path = Path::new(source);
        if source == BUNDLED_NAME {
            Self::bundled()
        } else if path.is_file() {
            Self::from_file(path)
        } else if path.is_dir() {
            Self::from_model_dir(path)
        } else if looks_like_hub_id(source) {
            Self::from_hf_cache(source, &HfCache::from_env())
        } else {
            Err(WorkloadError::UnknownSource {
                given: source.to_owned(),
            })
        }
    }

    /// Applies a model's `tokenizer_config.json`.
    pub fn with_config(mut self, config: TokenizerConfig) -> Self {
        self.forced_bos = None;
        if config.add_bos_token == Some(true)
            && let Some(bos) = config
                .bos_token
                .as_deref()
                .and_then(|t| self.token_to_id(t))
            && !self.post_processor_adds(bos)
        {
            self.forced_bos = Some(bos);
        }
        self.config = Some(config);
        self
    }

    /// Whether counting includes the special tokens the tokenizer adds to any
    /// text (default: yes, as a server counts a text prompt).
    pub fn with_add_special_tokens(mut self, add: bool) -> Self {
        self.add_special_tokens = add;
        self
    }

    /// Whether counting includes added special tokens.
    pub fn adds_special_tokens(&self) -> bool {
        self.add_special_tokens
    }

    /// Where the tokenizer came from: `bundled`, a path or a hub id.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The model's `tokenizer_config.json`, when it was loaded from a model.
    pub fn config(&self) -> Option<&TokenizerConfig> {
        self.config.as_ref()
    }

    /// The ids of `text`, special tokens included when they are counted.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, WorkloadError> {
        let enc = self
            .inner
            .encode_fast(text, self.add_special_tokens)
            .map_err(|e| self.error(e))?;
        let mut ids = Vec::with_capacity(enc.len() + 1);
        if let Some(bos) = self.forced_bos.filter(|_| self.add_special_tokens) {
            ids.push(bos);
        }
        ids.extend_from_slice(enc.get_ids());
        Ok(ids)
    }

    /// How many tokens a server counts for `text`.
    pub fn encode_count(&self, text: &str) -> Result<usize, WorkloadError> {
        let enc = self
            .inner
            .encode_fast(text, self.add_special_tokens)
            .map_err(|e| self.error(e))?;
        Ok(enc.len() + self.special_tokens_count_extra())
    }

    /// Where each token of `text` ends, as a byte offset into it: the text is
    /// tokenized as a whole, with no special tokens (as a model's output
    /// is), so `result.len()` is its token count. A token inside a multi-byte
    /// character ends where the character ends.
    pub fn token_ends(&self, text: &str) -> Result<Vec<usize>, WorkloadError> {
        let enc = self.inner.encode(text, false).map_err(|e| self.error(e))?;
        Ok(enc.get_offsets().iter().map(|&(_, end)| end).collect())
    }

    /// The text of `ids`, special tokens left out (as servers return output).
    pub fn decode(&self, ids: &[u32]) -> Result<String, WorkloadError> {
        self.inner.decode(ids, true).map_err(|e| self.error(e))
    }

    /// Number of tokens, added (special) tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The text of token `id`, as stored in the vocabulary.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// The id of the token spelled `token`.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// How many tokens are counted for an empty text (BOS and the like); zero
    /// when special tokens are not counted.
    pub fn special_tokens_count(&self) -> usize {
        if !self.add_special_tokens {
            return 0;
        }
        let added = self
            .inner
            .get_post_processor()
            .map(|p| tokenizers::PostProcessor::added_tokens(p, false))
            .unwrap_or(0);
        added + self.special_tokens_count_extra()
    }

    /// A fingerprint of the tokenizer's whole definition (vocabulary,
    /// merges, normalizer, special-token handling): two tokenizers with the
    /// same fingerprint build the same prompts. FNV-1a, stable across runs.
    pub fn fingerprint(&self) -> u64 {
        let definition = self.inner.to_string(false).unwrap_or_default();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let extra = [
            u8::from(self.add_special_tokens),
            u8::from(self.forced_bos.is_some()),
        ];
        for &b in definition.as_bytes().iter().chain(&extra) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        h
    }

    /// The wrapped `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    /// Content tokens of `text` (no special tokens) and where each ends, in bytes.
    pub(crate) fn content_token_ends(&self, text: &str) -> Result<Vec<usize>, WorkloadError> {
        let enc = self.inner.encode(text, false).map_err(|e| self.error(e))?;
        Ok(enc.get_offsets().iter().map(|&(_, end)| end).collect())
    }

    /// [`content_token_ends`](Self::content_token_ends) of several texts,
    /// encoded in parallel (one by one when the tokenizer pads batches).
    pub(crate) fn content_token_ends_batch(
        &self,
        texts: &[&str],
    ) -> Result<Vec<Vec<usize>>, WorkloadError> {
        if self.inner.get_padding().is_some() {
            return texts.iter().map(|t| self.content_token_ends(t)).collect();
        }
        let encodings = self
            .inner
            .encode_batch(texts.to_vec(), false)
            .map_err(|e| self.error(e))?;
        Ok(encodings
            .iter()
            .map(|enc| enc.get_offsets().iter().map(|&(_, end)| end).collect())
            .collect())
    }

    /// [`encode_count`](Self::encode_count) of several texts, encoded in
    /// parallel (one by one when the tokenizer pads batches).
    pub(crate) fn encode_counts(&self, texts: &[&str]) -> Result<Vec<usize>, WorkloadError> {
        if self.inner.get_padding().is_some() {
            return texts.iter().map(|t| self.encode_count(t)).collect();
        }
        let encodings = self
            .inner
            .encode_batch_fast(texts.to_vec(), self.add_special_tokens)
            .map_err(|e| self.error(e))?;
        let extra = self.special_tokens_count_extra();
        Ok(encodings.iter().map(|enc| enc.len() + extra).collect())
    }

    /// Content tokens of `text`, without special tokens.
    pub(crate) fn content_count(&self, text: &str) -> Result<usize, WorkloadError> {
        let enc = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| self.error(e))?;
        Ok(enc.len())
    }

    pub(crate) fn error(&self, e: impl fmt::Display) -> WorkloadError {
        WorkloadError::Tokenize {
            tokenizer: self.name.clone(),
            message: e.to_string(),
        }
    }

    fn special_tokens_count_extra(&self) -> usize {
        usize::from(self.forced_bos.is_some() && self.add_special_tokens)
    }

    fn post_processor_adds(&self, id: u32) -> bool {
        self.inner
            .encode_fast("a", true)
            .map(|enc| enc.get_ids().contains(&id))
            .unwrap_or(false)
    }
}

/// `org/name` or `org/name@rev`: two non-empty path parts, no backslash.
fn looks_like_hub_id(s: &str) -> bool {
    let name = s.split_once('@').map_or(s, |(n, _)| n);
    let mut parts = name.split('/');
    matches!(
        (parts.next(), parts.next(), parts.next()),
        (Some(org), Some(model), None) if !org.is_empty() && !model.is_empty()
            && !org.starts_with('.') && !name.contains('\\')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_ids_are_recognised() {
        assert!(looks_like_hub_id("Qwen/Qwen3-8B"));
        assert!(looks_like_hub_id("meta-llama/Llama-3.1-8B@main"));
        assert!(!looks_like_hub_id("tokenizer.json"));
        assert!(!looks_like_hub_id("./dir/tok.json"));
        assert!(!looks_like_hub_id("a/b/c"));
    }

    #[test]
    fn token_ends_are_byte_offsets_of_the_whole_text() {
        let tok = Tokenizer::bundled().unwrap();
        let text = " the café of the day";
        let ends = tok.token_ends(text).unwrap();
        let ids = tok
            .clone()
            .with_add_special_tokens(false)
            .encode(text)
            .unwrap();
        assert_eq!(ends.len(), ids.len());
        assert!(ends.windows(2).all(|w| w[0] <= w[1]), "{ends:?}");
        assert_eq!(ends.last(), Some(&text.len()));
        // The two tokens of `é` (two bytes) both end where the character ends.
        let e = text.find('é').unwrap() + 'é'.len_utf8();
        assert!(ends.iter().filter(|&&x| x == e).count() >= 2, "{ends:?}");
    }

    #[test]
    fn unknown_source_is_a_typed_error() {
        let err = Tokenizer::load("no-such-tokenizer.json").unwrap_err();
        assert!(matches!(err, WorkloadError::UnknownSource { .. }), "{err}");
    }
}
