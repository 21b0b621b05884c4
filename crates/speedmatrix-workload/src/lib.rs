//! Prompts of an exact token count, with cache control, via the tokenizers crate.
