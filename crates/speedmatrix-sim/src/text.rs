//! Text in and out: prompt tokenization, the chat template, and the simulated model's words.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use speedmatrix_workload::Tokenizer;

use crate::{SimError, TextStyle};

/// How many output words the simulated model draws from.
const OUTPUT_WORDS: usize = 256;

/// The text of each output token.
type TokenTexts = HashMap<u32, Arc<str>>;

/// One chat message; `content` is a string or a list of `{"type":"text","text":…}` parts.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Message {
    pub(crate) role: String,
    #[serde(default)]
    pub(crate) content: Option<Content>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Part {
    #[serde(default)]
    text: Option<String>,
}

impl Message {
    /// The message's text (its parts joined).
    pub(crate) fn text(&self) -> String {
        self.content.as_ref().map(Content::text).unwrap_or_default()
    }
}

impl Content {
    fn text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Parts(parts) => parts.iter().filter_map(|p| p.text.as_deref()).collect(),
        }
    }
}

/// The tokenizer, the chat markers, and the pre-decoded output words.
#[derive(Debug)]
pub(crate) struct TextModel {
    tokenizer: Tokenizer,
    content: Tokenizer,
    im_start: Vec<u32>,
    im_end: Vec<u32>,
    newline: Vec<u32>,
    output_ids: Arc<[u32]>,
    output_text: TokenTexts,
    two_byte_chars: OnceLock<Vec<char>>,
}

impl TextModel {
    /// The model over the tokenizer a profile names (`None` or `bundled`: the bundled one).
    pub(crate) fn for_source(source: Option<&str>) -> Result<Arc<TextModel>, SimError> {
        match source {
            None | Some(speedmatrix_workload::BUNDLED_NAME) => TextModel::bundled(),
            Some(source) => {
                let tok = Tokenizer::load(source).map_err(|e| {
                    SimError::Tokenizer(format!("cannot load tokenizer `{source}`: {e}"))
                })?;
                TextModel::new(tok).map(Arc::new)
            }
        }
    }

    /// The model over the bundled tokenizer, built once per process.
    pub(crate) fn bundled() -> Result<Arc<TextModel>, SimError> {
        static MODEL: OnceLock<Result<Arc<TextModel>, String>> = OnceLock::new();
        MODEL
            .get_or_init(|| {
                let tok = Tokenizer::bundled().map_err(|e| e.to_string())?;
                TextModel::new(tok).map(Arc::new).map_err(|e| e.to_string())
            })
            .clone()
            .map_err(SimError::Tokenizer)
    }

    /// Builds the chat markers and output words for `tokenizer`.
    pub(crate) fn new(tokenizer: Tokenizer) -> Result<TextModel, SimError> {
        let content = tokenizer.clone().with_add_special_tokens(false);
        let marker = |text: &str| -> Result<Vec<u32>, SimError> {
            match tokenizer.token_to_id(text) {
                Some(id) => Ok(vec![id]),
                None => encode(&content, text),
            }
        };
        let im_start = marker("<|im_start|>")?;
        let im_end = marker("<|im_end|>")?;
        let newline = encode(&content, "\n")?;
        let (output_ids, output_text) = output_words(&content)?;
        Ok(TextModel {
            tokenizer,
            content,
            im_start,
            im_end,
            newline,
            output_ids,
            output_text,
            two_byte_chars: OnceLock::new(),
        })
    }

    /// Token ids of a completions prompt, counted as vLLM counts a text prompt (special tokens
    /// such as BOS included).
    pub(crate) fn prompt_ids(&self, prompt: &str) -> Result<Vec<u32>, SimError> {
        encode(&self.tokenizer, prompt)
    }

    /// Token ids of a chat conversation under the simulator's ChatML template. Each message is
    /// `<|im_start|>` + role + `\n` + content + `<|im_end|>` + `\n`, and the generation prompt is
    /// `<|im_start|>assistant\n`; the content is tokenized on its own, so the overhead is fixed.
    pub(crate) fn chat_ids(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>, SimError> {
        let mut ids = Vec::new();
        for m in messages {
            let text = m.content.as_ref().map(Content::text).unwrap_or_default();
            ids.extend_from_slice(&self.im_start);
            ids.extend(encode(&self.content, &m.role)?);
            ids.extend_from_slice(&self.newline);
            ids.extend(encode(&self.content, &text)?);
            ids.extend_from_slice(&self.im_end);
            ids.extend_from_slice(&self.newline);
        }
        if add_generation_prompt {
            ids.extend_from_slice(&self.im_start);
            ids.extend(encode(&self.content, "assistant")?);
            ids.extend_from_slice(&self.newline);
        }
        Ok(ids)
    }

    /// The token ids the simulated model writes with.
    pub(crate) fn output_ids(&self) -> Arc<[u32]> {
        self.output_ids.clone()
    }

    /// The text of an output token (empty for a token the model never writes).
    pub(crate) fn token_text(&self, id: u32) -> &str {
        self.output_text.get(&id).map_or("", |t| t)
    }

    /// The bytes of output token `n` (0-based) of a request whose model writes in `style`:
    /// the token's word, or one byte of a two-byte character (so the text is incomplete
    /// UTF-8 after every even-numbered token).
    pub(crate) fn output_bytes(&self, style: TextStyle, n: u32, id: u32) -> Vec<u8> {
        match style {
            TextStyle::Words => self.token_text(id).as_bytes().to_vec(),
            TextStyle::TwoByteChars => {
                let chars = self.two_byte_chars();
                let Some(&c) = chars.get((n as usize / 2) * 7 % chars.len().max(1)) else {
                    return self.token_text(id).as_bytes().to_vec();
                };
                let mut buf = [0u8; 4];
                let bytes = c.encode_utf8(&mut buf).as_bytes();
                vec![bytes[n as usize % 2]]
            }
        }
    }

    /// Two-byte characters this tokenizer splits into two tokens that each decode to an
    /// incomplete character, and that keep that split in any sequence of them.
    pub(crate) fn two_byte_chars(&self) -> &[char] {
        self.two_byte_chars.get_or_init(|| {
            let split_in_two = |c: char| {
                let ids = encode(&self.content, &c.to_string()).unwrap_or_default();
                ids.len() == 2
                    && ids
                        .iter()
                        .all(|&id| self.content.decode(&[id]).is_ok_and(|t| t == "\u{fffd}"))
            };
            let chars: Vec<char> = ('\u{c0}'..='\u{24f}')
                .filter(|c| c.is_alphabetic() && split_in_two(*c))
                .take(16)
                .collect();
            // Only a set whose every sequence keeps two tokens a character will do.
            let sample: String = (0..64)
                .map(|i| chars[(i * 7) % chars.len().max(1)])
                .collect();
            let stable = !chars.is_empty()
                && encode(&self.content, &sample).is_ok_and(|ids| ids.len() == 2 * 64);
            if stable { chars } else { Vec::new() }
        })
    }

    /// The text of any token, as `/tokenize` spells it.
    pub(crate) fn token_str(&self, id: u32) -> String {
        self.tokenizer.id_to_token(id).unwrap_or_default()
    }
}

fn encode(tok: &Tokenizer, text: &str) -> Result<Vec<u32>, SimError> {
    tok.encode(text)
        .map_err(|e| SimError::Tokenizer(e.to_string()))
}

/// Tokens that decode to a space and a short lowercase word and encode back to themselves, so
/// that any sequence of them decodes to non-empty text that re-tokenizes to the same ids. A
/// tokenizer with too few such tokens (SentencePiece spells the space `▁` and strips it when a
/// token is decoded alone) gets its `▁word` tokens without the round-trip guarantee.
fn output_words(content: &Tokenizer) -> Result<(Arc<[u32]>, TokenTexts), SimError> {
    let strict = pick_words(content, true);
    let (ids, texts) = if strict.0.len() >= 16 {
        strict
    } else {
        pick_words(content, false)
    };
    if ids.is_empty() {
        return Err(SimError::Tokenizer(
            "the tokenizer has no token that is a space and a lowercase word; the simulator needs some \
             to write with"
                .to_owned(),
        ));
    }
    Ok((Arc::from(ids), texts))
}

fn pick_words(content: &Tokenizer, round_trip: bool) -> (Vec<u32>, TokenTexts) {
    let mut ids = Vec::new();
    let mut texts = HashMap::new();
    let vocab = u32::try_from(content.vocab_size()).unwrap_or(u32::MAX);
    for id in 0..vocab {
        if ids.len() == OUTPUT_WORDS {
            break;
        }
        let Ok(decoded) = content.decode(&[id]) else {
            continue;
        };
        let text = if decoded.starts_with(' ') {
            decoded
        } else if !round_trip
            && content
                .id_to_token(id)
                .is_some_and(|t| t.starts_with('\u{2581}'))
        {
            format!(" {decoded}")
        } else {
            continue;
        };
        let word = &text[1..];
        if !(4..=12).contains(&word.len()) || !word.bytes().all(|b| b.is_ascii_lowercase()) {
            continue;
        }
        if !round_trip || content.encode(&text).ok().as_deref() == Some(&[id][..]) {
            ids.push(id);
            texts.insert(id, Arc::from(text));
        }
    }
    (ids, texts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, content: &str) -> Message {
        Message {
            role: role.to_owned(),
            content: Some(Content::Text(content.to_owned())),
        }
    }

    #[test]
    fn chat_overhead_is_fixed_and_independent_of_content() {
        let m = TextModel::bundled().unwrap();
        let content = Tokenizer::bundled().unwrap().with_add_special_tokens(false);
        let mut overheads = Vec::new();
        for text in [
            "hello",
            "[probe 0] The quiet harbor measured twelve meters.",
            "\n  spaced  \n",
            "",
        ] {
            let ids = m.chat_ids(&[msg("user", text)], true).unwrap();
            overheads.push(ids.len() - content.encode_count(text).unwrap());
        }
        assert!(overheads.windows(2).all(|w| w[0] == w[1]), "{overheads:?}");
        let count = |t: &str| content.encode_count(t).unwrap();
        let per_message = 2 + count("user") + 2 * count("\n");
        let generation = 1 + count("assistant") + count("\n");
        assert_eq!(overheads[0], per_message + generation);
        assert_eq!(
            overheads[0], 11,
            "the documented overhead of one user message with the bundled tokenizer"
        );
    }

    #[test]
    fn output_words_decode_to_text_that_reencodes_to_the_same_ids() {
        let m = TextModel::bundled().unwrap();
        let ids = m.output_ids();
        assert!(ids.len() >= 32, "{}", ids.len());
        let seq: Vec<u32> = ids.iter().cycle().take(50).copied().collect();
        let text: String = seq.iter().map(|&id| m.token_text(id)).collect();
        let content = Tokenizer::bundled().unwrap().with_add_special_tokens(false);
        assert_eq!(content.encode(&text).unwrap(), seq);
        assert!(seq.iter().all(|&id| !m.token_text(id).is_empty()));
    }

    #[test]
    fn two_byte_characters_are_two_tokens_that_reencode_to_two_tokens() {
        let m = TextModel::bundled().unwrap();
        assert!(m.two_byte_chars().len() >= 8, "{:?}", m.two_byte_chars());
        let bytes: Vec<u8> = (0..400)
            .flat_map(|n| m.output_bytes(TextStyle::TwoByteChars, n, 0))
            .collect();
        let text = String::from_utf8(bytes).unwrap();
        assert_eq!(text.chars().count(), 200);
        let content = Tokenizer::bundled().unwrap().with_add_special_tokens(false);
        assert_eq!(content.encode(&text).unwrap().len(), 400);
        assert!(std::str::from_utf8(&m.output_bytes(TextStyle::TwoByteChars, 0, 0)).is_err());
    }

    #[test]
    fn a_profile_can_name_another_tokenizer_file() {
        let json = Tokenizer::bundled()
            .unwrap()
            .inner()
            .to_string(false)
            .unwrap();
        let path =
            std::env::temp_dir().join(format!("speedmatrix-sim-tok-{}.json", std::process::id()));
        std::fs::write(&path, json).unwrap();
        let m = TextModel::for_source(path.to_str()).unwrap();
        // The file has no BOS post-processor config of its own, so only content tokens count.
        let content = Tokenizer::bundled().unwrap().with_add_special_tokens(false);
        assert!(
            m.prompt_ids("hello there")
                .unwrap()
                .ends_with(&content.encode("hello there").unwrap())
        );
        assert!(!m.output_ids().is_empty());
        std::fs::remove_file(&path).unwrap();
        let err = TextModel::for_source(Some("/no/such/tokenizer.json")).unwrap_err();
        assert!(matches!(err, SimError::Tokenizer(_)), "{err}");
    }

    #[test]
    fn completion_prompts_count_like_the_client() {
        let m = TextModel::bundled().unwrap();
        let tok = Tokenizer::bundled().unwrap();
        let text = "The quiet harbor measured 12 meters.";
        assert_eq!(
            m.prompt_ids(text).unwrap().len(),
            tok.encode_count(text).unwrap()
        );
    }
}
