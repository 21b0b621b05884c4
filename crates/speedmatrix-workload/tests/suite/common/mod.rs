//! Tokenizers shared by the integration tests.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::sync::OnceLock;

use speedmatrix_workload::{PromptBuilder, TextGenerator, Tokenizer};
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::unigram::{Unigram, UnigramTrainer};
use tokenizers::models::wordpiece::{WordPiece, WordPieceTrainerBuilder};
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::processors::bert::BertProcessing;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PostProcessorWrapper, PreTokenizerWrapper,
    TokenizerBuilder,
};

/// A BERT-style WordPiece tokenizer (lower-casing, splits on punctuation,
/// adds `[CLS]` and `[SEP]`), trained here so that exactness is proven on a
/// tokenizer unlike the bundled byte-level BPE.
pub fn wordpiece() -> Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let specials: Vec<AddedToken> = ["[UNK]", "[CLS]", "[SEP]"]
            .iter()
            .map(|t| AddedToken::from(*t, true))
            .collect();
        let mut trainer = WordPieceTrainerBuilder::new()
            .vocab_size(4_000)
            .show_progress(false)
            .special_tokens(specials)
            .build();
        let mut tok = TokenizerBuilder::<
            WordPiece,
            NormalizerWrapper,
            PreTokenizerWrapper,
            PostProcessorWrapper,
            DecoderWrapper,
        >::default()
        .with_model(WordPiece::default())
        .with_normalizer(Some(BertNormalizer::new(true, true, None, true).into()))
        .with_pre_tokenizer(Some(BertPreTokenizer.into()))
        .with_decoder(Some(WordPieceDecoder::default().into()))
        .build()
        .unwrap();
        let corpus: Vec<String> = (0..16)
            .map(|i| {
                let mut s = String::new();
                TextGenerator::new(1_000 + i).fill(&mut s, 64 << 10);
                s
            })
            .collect();
        tok.train(&mut trainer, corpus.into_iter()).unwrap();
        let (cls, sep) = (
            tok.token_to_id("[CLS]").unwrap(),
            tok.token_to_id("[SEP]").unwrap(),
        );
        tok.with_post_processor(Some(BertProcessing::new(
            ("[SEP]".into(), sep),
            ("[CLS]".into(), cls),
        )));
        Tokenizer::from_tokenizers(tokenizers::Tokenizer::from(tok), "test-wordpiece")
    })
    .clone()
}

/// A SentencePiece-style Unigram tokenizer (Metaspace `▁` words, `<s>`
/// prepended), like Llama 2's: a third kind, whose first word of a text is
/// tokenized differently from the same word after a space.
pub fn unigram() -> Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let specials: Vec<AddedToken> = ["<unk>", "<s>", "</s>"]
            .iter()
            .map(|t| AddedToken::from(*t, true))
            .collect();
        let mut trainer = UnigramTrainer::builder()
            .vocab_size(3_000)
            .show_progress(false)
            .unk_token(Some("<unk>".into()))
            .special_tokens(specials)
            .build()
            .unwrap();
        let metaspace = Metaspace::new('▁', PrependScheme::First, true);
        let mut tok = TokenizerBuilder::<
            Unigram,
            NormalizerWrapper,
            PreTokenizerWrapper,
            PostProcessorWrapper,
            DecoderWrapper,
        >::default()
        .with_model(Unigram::default())
        .with_pre_tokenizer(Some(metaspace.clone().into()))
        .with_decoder(Some(metaspace.into()))
        .build()
        .unwrap();
        let corpus: Vec<String> = (0..8)
            .map(|i| {
                let mut s = String::new();
                TextGenerator::new(2_000 + i).fill(&mut s, 64 << 10);
                s
            })
            .collect();
        tok.train(&mut trainer, corpus.into_iter()).unwrap();
        let bos = tok.token_to_id("<s>").unwrap();
        let post = TemplateProcessing::builder()
            .try_single("<s> $A")
            .unwrap()
            .special_tokens(vec![("<s>", bos)])
            .build()
            .unwrap();
        tok.with_post_processor(Some(post));
        Tokenizer::from_tokenizers(tokenizers::Tokenizer::from(tok), "test-unigram")
    })
    .clone()
}

pub fn bundled() -> Tokenizer {
    Tokenizer::bundled().unwrap()
}

/// Builders kept for the whole test binary, so pools are built once.
pub fn bundled_builder() -> &'static PromptBuilder {
    static B: OnceLock<PromptBuilder> = OnceLock::new();
    B.get_or_init(|| PromptBuilder::new(bundled()))
}

pub fn wordpiece_builder() -> &'static PromptBuilder {
    static B: OnceLock<PromptBuilder> = OnceLock::new();
    B.get_or_init(|| PromptBuilder::new(wordpiece()))
}

pub fn unigram_builder() -> &'static PromptBuilder {
    static B: OnceLock<PromptBuilder> = OnceLock::new();
    B.get_or_init(|| PromptBuilder::new(unigram()))
}
