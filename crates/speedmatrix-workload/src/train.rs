//! The recipe of the bundled tokenizer.

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper,
    TokenizerBuilder,
};

use crate::{TextGenerator, WorkloadError};

/// Special tokens of the bundled tokenizer, in id order (ids 0 to 4).
pub(crate) const BUNDLED_SPECIAL_TOKENS: [&str; 5] = [
    "<|bos|>",
    "<|eos|>",
    "<|pad|>",
    "<|im_start|>",
    "<|im_end|>",
];

/// ChatML, the chat format of the bundled tokenizer.
pub(crate) const BUNDLED_CHAT_TEMPLATE: &str = "{% for message in messages %}\
{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\
{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Renders chat messages (`(role, content)`) in ChatML, the bundled
/// tokenizer's chat format, ending with the assistant's turn: what a server
/// using the bundled tokenizer counts (without BOS) for a chat request.
///
/// ```
/// use speedmatrix_workload::render_chatml;
///
/// assert_eq!(
///     render_chatml([("user", "Hi")]),
///     "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
/// );
/// ```
pub fn render_chatml<'a>(messages: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::new();
    for (role, content) in messages {
        out.push_str("<|im_start|>");
        out.push_str(role);
        out.push('\n');
        out.push_str(content);
        out.push_str("<|im_end|>\n");
    }
    out.push_str("<|im_start|>assistant\n");
    out
}

/// How to train a byte-level BPE tokenizer on generated text, reproducibly.
///
/// Same recipe, same bytes: the corpus comes from [`TextGenerator`], and the
/// `tokenizers` BPE trainer breaks ties by pair ids, which are fixed by the
/// sorted alphabet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpeRecipe {
    /// Vocabulary size, special tokens included.
    pub vocab_size: usize,
    /// Bytes of generated training text.
    pub corpus_bytes: usize,
    /// Seed of the training text.
    pub seed: u64,
}

impl BpeRecipe {
    /// The recipe of `assets/bundled-tokenizer.json` (see [`crate::Tokenizer::bundled`]).
    pub const BUNDLED: BpeRecipe = BpeRecipe {
        vocab_size: 16_384,
        corpus_bytes: 8 << 20,
        seed: 0x005E_ED0F_70CE,
    };

    /// Trains the tokenizer and returns its `tokenizer.json` text (compact JSON).
    ///
    /// ```
    /// use speedmatrix_workload::{BpeRecipe, Tokenizer};
    ///
    /// let small = BpeRecipe { vocab_size: 400, corpus_bytes: 20_000, seed: 1 };
    /// let json = small.train_json()?;
    /// assert_eq!(json, small.train_json()?, "same recipe, same bytes");
    /// let tok = Tokenizer::from_tokenizers(
    ///     tokenizers::Tokenizer::from_bytes(json.as_bytes()).unwrap(), "small");
    /// assert_eq!(tok.vocab_size(), 400);
    /// # Ok::<(), speedmatrix_workload::WorkloadError>(())
    /// ```
    pub fn train_json(&self) -> Result<String, WorkloadError> {
        let train_err = |e: tokenizers::Error| WorkloadError::Train {
            message: e.to_string(),
        };
        let specials = BUNDLED_SPECIAL_TOKENS
            .iter()
            .map(|t| AddedToken::from(*t, true))
            .collect::<Vec<_>>();
        let mut trainer = BpeTrainerBuilder::new()
            .show_progress(false)
            .vocab_size(self.vocab_size)
            .min_frequency(2)
            .special_tokens(specials)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build();
        let post = TemplateProcessing::builder()
            .try_single("<|bos|> $A")
            .and_then(|b| b.try_pair("<|bos|> $A $B:1"))
            .map_err(|message| WorkloadError::Train { message })?
            .special_tokens(vec![("<|bos|>", 0)])
            .build()
            .map_err(|e| WorkloadError::Train {
                message: e.to_string(),
            })?;
        // No prefix space: a text's first word must decode to itself, so that
        // decode(encode(text)) == text and prompts survive a round trip.
        let byte_level = ByteLevel::new(false, true, true);
        let mut tokenizer = TokenizerBuilder::<
            BPE,
            NormalizerWrapper,
            PreTokenizerWrapper,
            PostProcessorWrapper,
            DecoderWrapper,
        >::default()
        .with_model(BPE::default())
        .with_pre_tokenizer(Some(byte_level.into()))
        .with_decoder(Some(ByteLevelDecoder::new(false, true, true).into()))
        .with_post_processor(Some(post.into()))
        .build()
        .map_err(train_err)?;
        tokenizer
            .train(&mut trainer, self.corpus().into_iter())
            .map_err(train_err)?;
        tokenizer.to_string(false).map_err(train_err)
    }

    /// The training text, as paragraphs.
    fn corpus(&self) -> Vec<String> {
        let mut generator = TextGenerator::new(self.seed);
        let mut paragraphs = Vec::new();
        let mut total = 0;
        while total < self.corpus_bytes {
            let mut chunk = String::new();
            generator.fill(&mut chunk, 64 << 10);
            total += chunk.len();
            paragraphs.push(chunk);
        }
        paragraphs
    }
}
