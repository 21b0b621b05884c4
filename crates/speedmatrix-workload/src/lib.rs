//! Prompts of an exact token count, with prefix-cache control, via the
//! `tokenizers` crate.
//!
//! A "16K context" cell is only honest if its requests carry 16,384 prompt
//! tokens as the server counts them. [`PromptBuilder`] makes such prompts for
//! any [`Tokenizer`]: seeded English-like text from [`TextGenerator`], cut at
//! the target and repaired where re-encoding merges tokens across the cut,
//! then checked by encoding the whole prompt. Each prompt starts with a marker
//! written from its [`CacheKey`], so prompts share KV-cache blocks only when
//! the [`CacheMode`] asks for it, and warm-up prompts never seed the cache of
//! measured ones.
//!
//! Tokenizers come from a `tokenizer.json`, a Hugging Face model folder, the
//! local Hugging Face cache ([`HfCache`]; nothing is downloaded), or the
//! project's own byte-level BPE ([`Tokenizer::bundled`], trained by
//! `cargo xtask gen-tokenizer` from [`BpeRecipe::BUNDLED`]).
//!
//! Lengths need not be fixed: a [`LengthDistribution`] (`uniform:512..2048`,
//! `lognormal:1024,0.5`, …) draws each request's own, seeded, and its prompt
//! is still built to exactly that many tokens. Prompts may also be the
//! user's: a [`Dataset`] file of ShareGPT conversations or JSONL records is
//! sent as written (with the reference answer lengths it gives, and a seeded
//! [`Dataset::sample`] of it), and a plain text corpus is cut into prompts of
//! exact counts by [`Dataset::corpus_prompts`]. Nothing is downloaded.
//!
//! ```
//! use speedmatrix_units::Tokens;
//! use speedmatrix_workload::{CacheKey, ChatOverhead, PromptBuilder, Tokenizer};
//!
//! let builder = PromptBuilder::new(Tokenizer::bundled()?);
//! let n: Tokens = "2k".parse().unwrap();
//!
//! // Completions: the text's encoding, BOS included, has exactly n tokens.
//! let a = builder.prompt(n, 7, &CacheKey::unique(0, 0, 0))?;
//! let b = builder.prompt(n, 7, &CacheKey::unique(0, 1, 0))?;
//! assert_eq!(builder.tokenizer().encode_count(&a.text)?, 2_048);
//! assert_ne!(a.text, b.text);
//! assert_eq!(a, builder.prompt(n, 7, &CacheKey::unique(0, 0, 0))?);
//!
//! // Chat: the server adds template tokens, measured once per server.
//! let overhead = ChatOverhead(Tokens::new(9));
//! let chat = builder.chat_prompt(n, 7, &CacheKey::unique(0, 0, 0), overhead)?;
//! let content = builder.tokenizer().clone().with_add_special_tokens(false);
//! assert_eq!(content.encode_count(&chat.text)? + 9, 2_048);
//! # Ok::<(), speedmatrix_workload::WorkloadError>(())
//! ```

mod arrivals;
mod dataset;
mod error;
mod hf;
mod lengths;
mod prompt;
mod text;
mod tokenizer;
mod train;
// Word lists read best as dense paragraphs, not one word per line.
#[rustfmt::skip]
mod words;

pub use arrivals::{ArrivalProcess, Arrivals};
pub use dataset::{
    Dataset, DatasetFormat, DatasetMessage, DatasetPrompt, DatasetRecord, ReferenceOutput, Trace,
    TraceInput, TraceRecord,
};
pub use error::WorkloadError;
pub use hf::{HfCache, TokenizerConfig};
pub use lengths::LengthDistribution;
pub use prompt::{
    Api, BlockMemo, CacheKey, CacheMode, ChatOverhead, MAX_PROMPT_TOKENS, Prompt, PromptBuilder,
    PromptRole,
};
pub use text::TextGenerator;
pub use tokenizer::{BUNDLED_NAME, Tokenizer};
pub use train::{BpeRecipe, render_chatml};
