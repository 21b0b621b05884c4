//! The crate's one error type.

use std::path::PathBuf;

/// What went wrong while loading a tokenizer or building a prompt.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadError {
    /// A tokenizer or config file could not be read.
    #[error("could not read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file was read but is not a valid `tokenizer.json` or `tokenizer_config.json`.
    #[error("{path} is not a valid {what}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// `tokenizer.json` or `tokenizer_config.json`.
        what: &'static str,
        /// The parser's complaint.
        message: String,
    },
    /// The tokenizer compiled into this program did not load (a build problem).
    #[error(
        "the bundled tokenizer did not load ({message}); regenerate it with `cargo xtask gen-tokenizer`"
    )]
    Bundled {
        /// The parser's complaint.
        message: String,
    },
    /// A `--tokenizer` value names no file, folder or cached Hugging Face model.
    #[error(
        "`{given}` is not a tokenizer: expected `bundled`, a tokenizer.json file, a model folder \
         holding tokenizer.json, or a Hugging Face id like `org/name` in the local cache"
    )]
    UnknownSource {
        /// The value given.
        given: String,
    },
    /// A Hugging Face id whose files are not in the local cache.
    #[error(
        "Hugging Face model `{id}` is not in the local cache ({looked_in}: missing {missing}). \
         speedmatrix does not download models; fetch the files first (for example \
         `huggingface-cli download {id} tokenizer.json tokenizer_config.json`), set HF_HUB_CACHE or \
         HF_HOME to the cache that holds them, or pass the path of a tokenizer.json"
    )]
    NotCached {
        /// The model id.
        id: String,
        /// Where the cache was searched.
        looked_in: PathBuf,
        /// The missing files or folders.
        missing: String,
    },
    /// The tokenizer failed on some text or ids.
    #[error("tokenizer {tokenizer} failed: {message}")]
    Tokenize {
        /// The tokenizer's name.
        tokenizer: String,
        /// Its complaint.
        message: String,
    },
    /// Training a tokenizer failed.
    #[error("training the tokenizer failed: {message}")]
    Train {
        /// The trainer's complaint.
        message: String,
    },
    /// Fewer tokens were asked than the request's fixed part already holds.
    #[error(
        "a prompt of {n} tokens is impossible with {tokenizer}: it needs at least {min} for {what}"
    )]
    TooShort {
        /// Tokens asked.
        n: u64,
        /// The fewest tokens possible.
        min: u64,
        /// What takes them (special tokens, a chat template, a shared prefix).
        what: &'static str,
        /// The tokenizer's name.
        tokenizer: String,
    },
    /// More tokens were asked than a prompt may hold.
    #[error("a prompt of {n} tokens is too long: at most {max} are supported")]
    TooLong {
        /// Tokens asked.
        n: u64,
        /// The most supported.
        max: u64,
    },
    /// The bounded repair could not hit the exact count.
    #[error(
        "could not build a prompt of exactly {n} tokens with {tokenizer}: after {attempts} repairs \
         the closest text had {closest} tokens; try another seed or report this tokenizer"
    )]
    Inexact {
        /// Tokens asked.
        n: u64,
        /// Closest count reached.
        closest: u64,
        /// Repairs tried.
        attempts: u32,
        /// The tokenizer's name.
        tokenizer: String,
    },
    /// A shared prefix did not tokenize to the same ids inside a full prompt.
    #[error(
        "with {tokenizer} the shared prefix of {k} tokens does not stay intact inside the prompt, \
         so prompts would not share its KV blocks"
    )]
    PrefixNotStable {
        /// The shared prefix length.
        k: u64,
        /// The tokenizer's name.
        tokenizer: String,
    },
    /// An arrival rate that is not a positive finite number of requests per second.
    #[error("the request rate must be a positive number of requests per second, got {0}")]
    BadRate(f64),
    /// A gamma shape that is not positive and finite.
    #[error("the burstiness must be a positive number (1 is Poisson), got {0}")]
    BadBurstiness(f64),
    /// A token count callback (for chat prompts) failed.
    #[error("counting the prompt's tokens failed: {message}")]
    Count {
        /// What the callback reported.
        message: String,
    },
    /// A `--dataset-format` name that is not one of the formats read.
    #[error(
        "`{given}` is not a dataset format: expected sharegpt (a JSON array of conversations), \
         jsonl (one {{\"prompt\"|\"messages\", \"output_tokens\"}} object per line) or text (a plain \
         text corpus)"
    )]
    UnknownDatasetFormat {
        /// The value given.
        given: String,
    },
    /// A dataset file whose extension names no format, and no format was given.
    #[error(
        "cannot tell the format of {path} from its name: name it .json (ShareGPT conversations), \
         .jsonl (prompt or messages records) or .txt (a text corpus), or give --dataset-format"
    )]
    DatasetFormatUnknownFor {
        /// The file.
        path: PathBuf,
    },
    /// A block chain whose length does not fit its prompt's.
    #[error(
        "{blocks} block ids for a prompt of {n} tokens in blocks of {block}: a prompt has one id \
         per block, the last block possibly short"
    )]
    Blocks {
        /// Ids given.
        blocks: u64,
        /// The prompt's tokens.
        n: u64,
        /// Tokens per block.
        block: u64,
    },
    /// A dataset that is malformed, at a record when one is to blame.
    #[error("{name}{}: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Dataset {
        /// The file (or what the caller calls the bytes).
        name: String,
        /// The 1-based line (JSONL) or record (ShareGPT) at fault.
        line: Option<usize>,
        /// What is wrong and what to do.
        message: String,
    },
    /// More records asked of a dataset sample than it holds.
    #[error(
        "--dataset-sample {asked} asks more records than the dataset's {records}: give at most \
         {records}, or leave it out to send every record"
    )]
    SampleTooLarge {
        /// Records asked.
        asked: usize,
        /// Records the dataset holds.
        records: usize,
    },
    /// A length distribution that does not parse or cannot be drawn from.
    #[error(
        "`{given}` is not a length distribution ({message}): write a fixed count (`1k`), \
         `uniform:512..2048`, `normal:MEAN,SD` or `lognormal:MEDIAN,SIGMA` (tokens)"
    )]
    BadLengths {
        /// The value given.
        given: String,
        /// What is wrong with it.
        message: String,
    },
}
