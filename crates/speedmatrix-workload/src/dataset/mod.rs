//! Prompts the user brings: a dataset file whose records are sent as
//! written, or a plain text corpus cut into prompts of exact token counts.
//!
//! The formats, and exactly how each is read, are described at
//! [`DatasetFormat`]; [`Dataset`] reads a file (nothing is downloaded) and
//! hands out its records, a seeded sample of them, or prompts cut from a
//! text corpus.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use sha2::{Digest, Sha256};
use speedmatrix_units::Tokens;

use crate::text::{SplitMix64, mix64};
use crate::{Tokenizer, WorkloadError};

mod corpus;
mod jsonl;
mod sharegpt;
mod trace;

pub use trace::{Trace, TraceInput, TraceRecord};

/// How to get a dataset, for a file that is not there.
const HOW_TO_GET: &str = "datasets are read from local files and never downloaded: give a \
     ShareGPT .json (ShareGPT V3, as vLLM's benchmarks use: `huggingface-cli download \
     --repo-type dataset anon8231489123/ShareGPT_Vicuna_unfiltered \
     ShareGPT_V3_unfiltered_cleaned_split.json`), a .jsonl of {\"prompt\"|\"messages\", \
     \"output_tokens\"} records, or a .txt text corpus";

/// The UTF-8 byte order mark, ignored at a file's start.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Keeps sampling's stream apart from other seeded draws.
const SAMPLE_SALT: u64 = 0x7361_6d70_6c65_0001;

/// The formats `--dataset` reads.
///
/// `--dataset-format` names the format; without it the file's extension does
/// ([`DatasetFormat::from_path`]): `.json` is ShareGPT, `.jsonl` and
/// `.ndjson` JSONL, `.txt`, `.md` and `.text` a text corpus. Every format is
/// UTF-8 (a byte order mark at the start is ignored). A ShareGPT or JSONL
/// file must give at least one record.
///
/// # ShareGPT (`sharegpt`)
///
/// One JSON array of conversations; each entry is an object whose
/// `conversations` is an array of turns, `{"from": ROLE, "value": TEXT}` or
/// `{"role": ROLE, "content": TEXT}` (TEXT a string):
///
/// ```json
/// [
///   {"id": "a1", "conversations": [
///     {"from": "human", "value": "Name three rivers of Europe."},
///     {"from": "gpt", "value": "The Danube, the Rhine and the Loire."},
///     {"from": "human", "value": "Which is longest?"}
///   ]}
/// ]
/// ```
///
/// - Roles, in any case: `human` and `user` are the user; `gpt`,
///   `assistant`, `chatgpt`, `bard`, `bing` and `model` the assistant;
///   `system` the system; any other is neither.
/// - Each entry gives one record ([`DatasetRecord::line`]: its 1-based index
///   in the array). Its prompt is the text of its first user turn, sent as
///   one text ([`DatasetPrompt::Text`]). When the turn right after it is the
///   assistant's and not empty, that answer is the reference output
///   ([`ReferenceOutput::Text`]: the run's tokenizer counts its tokens);
///   otherwise the record has [`ReferenceOutput::None`].
/// - Turns after that answer are not read, beyond checking that each is an
///   object; nor are keys other than `conversations` (`id`, …) and other
///   than the role and text of a turn.
/// - An entry without a user turn, or whose first user turn is empty or only
///   whitespace, is skipped and counted ([`Dataset::skipped`]).
/// - An entry that is not an object, has no `conversations`, or whose
///   turns up to the answer are not objects with a role and a text, is an
///   error naming the entry (the error's `line` is its index in the array)
///   and where in the file it is; invalid JSON is an error naming its line
///   and column in the file.
///
/// # JSONL (`jsonl`)
///
/// One JSON object per line:
///
/// ```text
/// {"prompt": "Summarize the plot of Hamlet in two sentences.", "output_tokens": 128}
/// {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Why is the sky blue?"}]}
/// ```
///
/// - `prompt`: a string, sent as written ([`DatasetPrompt::Text`]: the
///   completions prompt, or a chat request's one user message).
/// - `messages`: an array of `{"role": …, "content": …}` sent as written
///   ([`DatasetPrompt::Messages`], chat API only). The role is any string;
///   the content is a string or an array of text parts
///   `{"type": "text", "text": …}`, which are joined with newlines (as
///   servers join them); parts of other types (images, …) are an error.
/// - A record has exactly one of `prompt` and `messages`, and something to
///   send: an empty (or whitespace-only) prompt, an empty `messages` array,
///   or messages whose contents are all empty are errors.
/// - `output_tokens` (optional): the answer's length, a whole number from 0
///   to 4,294,967,295 ([`ReferenceOutput::Tokens`]; `128.0` is read as 128);
///   a fraction, a negative number or a string is an error. Without it the
///   record has [`ReferenceOutput::None`].
/// - `null` reads as an absent field; other fields are ignored.
/// - Blank lines are skipped and `\r\n` line ends are read like `\n`.
///   [`DatasetRecord::line`] is the record's 1-based line in the file. Any
///   line that is not such an object is an error naming the line and what
///   was expected.
///
/// # Text (`text`)
///
/// Any UTF-8 text with something other than whitespace: a corpus with no
/// records ([`Dataset::records`] is empty). [`Dataset::corpus_prompts`]
/// cuts it into prompts of the lengths asked (`--input-tokens`), each
/// starting at a seeded word and wrapping around to the corpus's start (after
/// a newline) when the corpus is shorter than a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DatasetFormat {
    /// A JSON array of `{"conversations": [{"from": "human", "value": …}, {"from": "gpt", …}]}`
    /// (ShareGPT): the first human turn is the prompt, the answer after it gives the
    /// reference output length.
    ShareGpt,
    /// One JSON object per line: `prompt` (text) or `messages` (`[{role, content}]`), and
    /// optionally `output_tokens`.
    Jsonl,
    /// Plain text, cut into prompts of the lengths asked (`--input-tokens`).
    Text,
}

impl DatasetFormat {
    /// Every format, in the order `--help` lists them.
    pub const ALL: [DatasetFormat; 3] = [Self::ShareGpt, Self::Jsonl, Self::Text];

    /// The name users type (`sharegpt`, `jsonl`, `text`).
    pub fn name(self) -> &'static str {
        match self {
            Self::ShareGpt => "sharegpt",
            Self::Jsonl => "jsonl",
            Self::Text => "text",
        }
    }

    /// The format a file's extension names: `.json` ShareGPT, `.jsonl`/`.ndjson` JSONL,
    /// `.txt`/`.md`/`.text` text; `None` for any other.
    pub fn from_path(path: &Path) -> Option<DatasetFormat> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "json" => Some(Self::ShareGpt),
            "jsonl" | "ndjson" => Some(Self::Jsonl),
            "txt" | "md" | "text" => Some(Self::Text),
            _ => None,
        }
    }
}

impl std::fmt::Display for DatasetFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DatasetFormat {
    type Err = WorkloadError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| WorkloadError::UnknownDatasetFormat {
                given: s.to_owned(),
            })
    }
}

/// One chat message of a `messages` record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetMessage {
    /// `system`, `user`, `assistant` (as given).
    pub role: String,
    /// The message's text.
    pub content: String,
}

/// What a record asks: one text, or a list of chat messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatasetPrompt {
    /// A prompt text (completions: the prompt; chat: one user message).
    Text(String),
    /// Chat messages sent as given (chat API only).
    Messages(Vec<DatasetMessage>),
}

/// How long a record's answer should be, when the dataset says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReferenceOutput {
    /// The dataset names no length.
    None,
    /// A token count (`output_tokens`).
    Tokens(u32),
    /// A reference answer whose tokens the run's tokenizer counts (ShareGPT's reply).
    Text(String),
}

/// One request of a dataset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetRecord {
    /// The prompt, used as given.
    pub prompt: DatasetPrompt,
    /// The answer length the dataset gives, if any.
    pub output: ReferenceOutput,
    /// The 1-based line (JSONL) or array index + 1 (ShareGPT) it came from.
    pub line: usize,
}

/// A dataset file, read and checked.
///
/// Datasets are local files, read whole (at most [`Dataset::MAX_BYTES`]);
/// nothing is downloaded. ShareGPT V3, the set vLLM's serving benchmark
/// uses, can be fetched with
/// `huggingface-cli download --repo-type dataset anon8231489123/ShareGPT_Vicuna_unfiltered ShareGPT_V3_unfiltered_cleaned_split.json`.
/// The run record names a file by its SHA-256 ([`Dataset::sha256`]), so two
/// runs can tell whether they sent the same prompts.
///
/// # Examples
///
/// ```
/// use speedmatrix_workload::{Dataset, DatasetFormat, DatasetPrompt, ReferenceOutput};
///
/// let jsonl = concat!(
///     r#"{"prompt": "Why is the sky blue?", "output_tokens": 64}"#, "\n",
///     "\n",
///     r#"{"messages": [{"role": "user", "content": "Name a river."}]}"#, "\n",
/// );
/// let d = Dataset::parse(jsonl.as_bytes(), DatasetFormat::Jsonl, "example.jsonl")?;
/// assert_eq!(d.records().len(), 2);
/// assert_eq!(d.records()[0].prompt, DatasetPrompt::Text("Why is the sky blue?".into()));
/// assert_eq!(d.records()[0].output, ReferenceOutput::Tokens(64));
/// assert_eq!((d.records()[1].line, &d.records()[1].output), (3, &ReferenceOutput::None));
/// assert_eq!(d.sha256().len(), 64);
///
/// // A sample of more records than it holds is refused.
/// assert!(d.sample(Some(5), 7).is_err());
/// let picked = d.sample(Some(2), 7)?;
/// assert_eq!(picked, d.sample(Some(2), 7)?);
///
/// let err = Dataset::parse(b"{\"prompt\": 5}\n", DatasetFormat::Jsonl, "bad.jsonl").unwrap_err();
/// assert!(err.to_string().starts_with("bad.jsonl line 1: "), "{err}");
/// # Ok::<(), speedmatrix_workload::WorkloadError>(())
/// ```
///
/// A text corpus gives prompts of exact token counts:
///
/// ```
/// use speedmatrix_units::Tokens;
/// use speedmatrix_workload::{Dataset, DatasetFormat, Tokenizer};
///
/// let corpus = Dataset::parse(
///     "The river rose in spring. Boats waited at the quay for the water to fall.".as_bytes(),
///     DatasetFormat::Text,
///     "corpus.txt",
/// )?;
/// let tok = Tokenizer::bundled()?;
/// let lengths = [Tokens::new(5), Tokens::new(300)];
/// let prompts = corpus.corpus_prompts(&tok, &lengths, 7)?;
/// assert_eq!(tok.encode_count(&prompts[0])?, 5);
/// assert_eq!(tok.encode_count(&prompts[1])?, 300); // wraps around the short corpus
/// assert_eq!(prompts, corpus.corpus_prompts(&tok, &lengths, 7)?);
/// # Ok::<(), speedmatrix_workload::WorkloadError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Dataset {
    format: DatasetFormat,
    records: Vec<DatasetRecord>,
    /// The text of a [`DatasetFormat::Text`] corpus (empty otherwise).
    corpus: String,
    skipped: usize,
    sha256: String,
    bytes: u64,
    /// What errors call it: the path, or the name given to [`Dataset::parse`].
    name: String,
}

/// Records and skipped entries, as a record format's parser gives them.
struct Parsed {
    records: Vec<DatasetRecord>,
    skipped: usize,
}

impl Dataset {
    /// Reads `path` (at most [`Dataset::MAX_BYTES`]), in `format` or the one its
    /// extension names.
    ///
    /// A file that is not there is a [`WorkloadError::Read`] that says how to
    /// get one; a file without a known extension and no `format` is
    /// [`WorkloadError::DatasetFormatUnknownFor`]; one over the limit is
    /// refused before it is read.
    pub fn read(path: &Path, format: Option<DatasetFormat>) -> Result<Dataset, WorkloadError> {
        let read_error = read_error(path, HOW_TO_GET);
        let meta = std::fs::metadata(path).map_err(read_error)?;
        let name = path.display().to_string();
        if meta.is_dir() {
            return Err(WorkloadError::Dataset {
                name,
                line: None,
                message: format!("is a folder, not a dataset file; {HOW_TO_GET}"),
            });
        }
        let format = format
            .or_else(|| DatasetFormat::from_path(path))
            .ok_or_else(|| WorkloadError::DatasetFormatUnknownFor {
                path: path.to_owned(),
            })?;
        if meta.len() > Self::MAX_BYTES {
            return Err(too_large(name, meta.len()));
        }
        let bytes = std::fs::read(path).map_err(read_error)?;
        Self::parse_cow(Cow::Owned(bytes), format, name)
    }

    /// Parses a file's bytes in `format`; `name` is what errors call it.
    pub fn parse(
        bytes: &[u8],
        format: DatasetFormat,
        name: &str,
    ) -> Result<Dataset, WorkloadError> {
        Self::parse_cow(Cow::Borrowed(bytes), format, name.to_owned())
    }

    fn parse_cow(
        bytes: Cow<'_, [u8]>,
        format: DatasetFormat,
        name: String,
    ) -> Result<Dataset, WorkloadError> {
        let size = bytes.len() as u64;
        if size > Self::MAX_BYTES {
            return Err(too_large(name, size));
        }
        let sha256 = sha256_hex(&bytes);
        let bom = bytes.starts_with(BOM);
        let body = if bom { &bytes[BOM.len()..] } else { &bytes[..] };
        let parsed = match format {
            DatasetFormat::ShareGpt => Some(sharegpt::parse(utf8(body, &name)?, &name)?),
            DatasetFormat::Jsonl => Some(jsonl::parse(body, &name)?),
            DatasetFormat::Text => None,
        };
        let mut dataset = Dataset {
            format,
            records: Vec::new(),
            corpus: String::new(),
            skipped: 0,
            sha256,
            bytes: size,
            name,
        };
        match parsed {
            Some(Parsed {
                mut records,
                skipped,
            }) => {
                if records.is_empty() {
                    let why = match (format, skipped) {
                        (DatasetFormat::Jsonl, _) => format!("; {}", jsonl::EXPECTED),
                        (_, 0) => ": the array is empty".to_owned(),
                        _ => format!(
                            ": all {skipped} entries were skipped (no user turn, or an empty \
                             prompt)"
                        ),
                    };
                    return Err(dataset.error(None, format!("no records{why}")));
                }
                records.shrink_to_fit();
                dataset.records = records;
                dataset.skipped = skipped;
            }
            None => {
                dataset.corpus = match bytes {
                    // Read from a file: reuse its buffer.
                    Cow::Owned(mut v) if !bom => {
                        utf8(&v, &dataset.name)?;
                        v.shrink_to_fit();
                        String::from_utf8(v).unwrap_or_default()
                    }
                    _ => utf8(body, &dataset.name)?.to_owned(),
                };
                if is_blank(&dataset.corpus) {
                    return Err(dataset.error(
                        None,
                        "the text corpus is empty (or only whitespace): give a file of text to \
                         cut prompts from"
                            .to_owned(),
                    ));
                }
            }
        }
        Ok(dataset)
    }

    /// The largest file read (4 GiB).
    pub const MAX_BYTES: u64 = 4 << 30;

    /// The format it was read in.
    pub fn format(&self) -> DatasetFormat {
        self.format
    }
    /// Its records (none for a text corpus).
    pub fn records(&self) -> &[DatasetRecord] {
        &self.records
    }
    /// Entries left out because they ask nothing usable: a ShareGPT entry
    /// without a user turn, or whose first user turn is empty. (JSONL lines
    /// are never skipped: a bad one is an error.)
    pub fn skipped(&self) -> usize {
        self.skipped
    }
    /// The file's SHA-256, lowercase hex: what the run record names it by.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }
    /// The file's size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// A text corpus's text (empty for record formats).
    pub fn corpus(&self) -> &str {
        &self.corpus
    }

    /// Indices of `n` records drawn without replacement by `seed` (all of them, in file
    /// order, when `n` is `None`); an `n` above the records is refused.
    ///
    /// The draw is a partial Fisher–Yates shuffle on the crate's SplitMix64
    /// stream, so a seed picks the same records, in the same order, on every
    /// machine; the indices come in draw order. `n` of 0 is refused, and so
    /// is any sample of a text corpus (it has no records).
    pub fn sample(&self, n: Option<usize>, seed: u64) -> Result<Vec<usize>, WorkloadError> {
        if self.format == DatasetFormat::Text {
            return Err(self.error(
                None,
                "a text corpus has no records to sample: its prompts are cut to --input-tokens"
                    .to_owned(),
            ));
        }
        let len = self.records.len();
        let n = match n {
            None => return Ok((0..len).collect()),
            Some(0) => {
                return Err(self.error(None, "--dataset-sample must be at least 1".to_owned()));
            }
            Some(n) if n > len => {
                return Err(WorkloadError::SampleTooLarge {
                    asked: n,
                    records: len,
                });
            }
            Some(n) => n,
        };
        // Fisher–Yates over 0..len, stopped after n draws; the swapped slots
        // are kept in a map, so memory is O(n) however large the dataset.
        let mut rng = SplitMix64::new(mix64(seed ^ SAMPLE_SALT));
        let mut moved: HashMap<usize, usize> = HashMap::with_capacity(n);
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let j = i + rng.below(len - i);
            let at_j = moved.get(&j).copied().unwrap_or(j);
            let at_i = moved.get(&i).copied().unwrap_or(i);
            moved.insert(j, at_i);
            out.push(at_j);
        }
        Ok(out)
    }

    /// Prompts cut from a text corpus, one per length in `lengths`: each starts at a
    /// seeded offset and its encoding with `tokenizer` (special tokens as it adds them)
    /// has exactly that many tokens.
    ///
    /// Prompt `i` starts at a word drawn from `seed` and `i` alone, and is
    /// the same for the same corpus, tokenizer, length and seed. A length
    /// below the tokenizer's special tokens is [`WorkloadError::TooShort`],
    /// one above [`MAX_PROMPT_TOKENS`](crate::MAX_PROMPT_TOKENS)
    /// [`WorkloadError::TooLong`]. Each prompt costs about two encodes of
    /// its text: one of a window a little longer than it, cut at the token
    /// where the count is reached and repaired there in a few bounded steps,
    /// and one of the result, to check it ([`WorkloadError::Inexact`] if no
    /// cut has the count). Record formats have no corpus: an error.
    pub fn corpus_prompts(
        &self,
        tokenizer: &Tokenizer,
        lengths: &[Tokens],
        seed: u64,
    ) -> Result<Vec<String>, WorkloadError> {
        if self.format != DatasetFormat::Text {
            return Err(self.error(
                None,
                format!(
                    "a {} dataset has no text corpus to cut prompts from: its records are sent \
                     as written (give a text file, or --dataset-format text)",
                    self.format
                ),
            ));
        }
        corpus::prompts(&self.corpus, tokenizer, lengths, seed)
    }

    fn error(&self, line: Option<usize>, message: String) -> WorkloadError {
        WorkloadError::Dataset {
            name: self.name.clone(),
            line,
            message,
        }
    }
}

/// How a failed read of `path` is told: a missing file also says how to get one.
fn read_error<'p>(
    path: &'p Path,
    how_to_get: &'static str,
) -> impl Fn(std::io::Error) -> WorkloadError + Copy + 'p {
    move |source| {
        let source = if source.kind() == std::io::ErrorKind::NotFound {
            std::io::Error::new(source.kind(), format!("{source}; {how_to_get}"))
        } else {
            source
        };
        WorkloadError::Read {
            path: path.to_owned(),
            source,
        }
    }
}

fn too_large(name: String, size: u64) -> WorkloadError {
    WorkloadError::Dataset {
        name,
        line: None,
        message: format!(
            "is {size} bytes ({:.1} GiB); the largest dataset read is {} bytes (4 GiB): take a \
             part of it first (for JSONL, `head -n 100000`)",
            size as f64 / f64::from(1u32 << 30),
            Dataset::MAX_BYTES
        ),
    }
}

/// Lowercase hex SHA-256 of `bytes`.
fn sha256_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest.iter() {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
    out
}

/// Whether `s` is empty or only whitespace.
fn is_blank(s: &str) -> bool {
    s.trim().is_empty()
}

/// serde_json's message without its ` at line L column C` (the caller
/// places the error itself).
fn json_message(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let at = format!(" at line {} column {}", e.line(), e.column());
    match full.strip_suffix(&at) {
        Some(m) => m.to_owned(),
        None => full,
    }
}

/// What an invalid UTF-8 byte is.
fn utf8_error(bytes: &[u8], e: &std::str::Utf8Error) -> String {
    match bytes.get(e.valid_up_to()) {
        Some(b) => format!("invalid UTF-8 (byte 0x{b:02X}): a dataset must be UTF-8 text"),
        None => "invalid UTF-8: a dataset must be UTF-8 text".to_owned(),
    }
}

/// `bytes` as text, or an error naming the line and column of the first
/// invalid byte.
fn utf8<'a>(bytes: &'a [u8], name: &str) -> Result<&'a str, WorkloadError> {
    std::str::from_utf8(bytes).map_err(|e| {
        let before = &bytes[..e.valid_up_to()];
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        WorkloadError::Dataset {
            name: name.to_owned(),
            line: None,
            message: format!(
                "line {line} column {}: {}",
                before.len() - line_start + 1,
                utf8_error(bytes, &e)
            ),
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Checks what holds for any dataset `parse` accepts.
    fn check_parsed(input: &[u8], format: DatasetFormat) -> Option<Dataset> {
        let d = Dataset::parse(input, format, "fuzz").ok()?;
        assert_eq!(d.sha256().len(), 64);
        assert_eq!(d.bytes(), input.len() as u64);
        assert_eq!(d.format(), format);
        if format == DatasetFormat::Text {
            assert!(d.records().is_empty() && !is_blank(d.corpus()));
        } else {
            assert!(!d.records().is_empty() && d.corpus().is_empty());
            let lines = input.iter().filter(|&&b| b == b'\n').count() + 1;
            for r in d.records() {
                assert!(r.line >= 1);
                if format == DatasetFormat::Jsonl {
                    assert!(r.line <= lines);
                }
                match &r.prompt {
                    DatasetPrompt::Text(t) => assert!(!is_blank(t)),
                    DatasetPrompt::Messages(m) => assert!(!m.is_empty()),
                }
            }
            let n = d.records().len();
            let picked = d.sample(Some(n), 1).unwrap();
            assert_eq!(picked.len(), n);
        }
        Some(d)
    }

    /// Coverage-guided under `cargo xtask fuzz`, random inputs under `cargo
    /// test`: no bytes make the ShareGPT reader panic, and any text as a
    /// prompt and an answer reads back as written.
    #[test]
    fn fuzz_dataset_sharegpt() {
        bolero::check!().for_each(|input: &[u8]| {
            check_parsed(input, DatasetFormat::ShareGpt);
            let text = String::from_utf8_lossy(input);
            let (prompt, answer) = text.split_at(text.floor_char_boundary(text.len() / 2));
            let file = serde_json::json!([{"id": 1, "conversations": [
                {"from": "human", "value": prompt},
                {"from": "gpt", "value": answer},
            ]}])
            .to_string();
            match Dataset::parse(file.as_bytes(), DatasetFormat::ShareGpt, "fuzz") {
                Ok(d) => {
                    let r = &d.records()[0];
                    assert_eq!(r.prompt, DatasetPrompt::Text(prompt.to_owned()));
                    let expected = if is_blank(answer) {
                        ReferenceOutput::None
                    } else {
                        ReferenceOutput::Text(answer.to_owned())
                    };
                    assert_eq!(r.output, expected);
                }
                Err(e) => assert!(is_blank(prompt), "{e}"),
            }
        });
    }

    /// Like [`fuzz_dataset_sharegpt`], for JSONL.
    #[test]
    fn fuzz_dataset_jsonl() {
        bolero::check!().for_each(|input: &[u8]| {
            check_parsed(input, DatasetFormat::Jsonl);
            let text = String::from_utf8_lossy(input);
            let tokens = input.len() as u32 * 7;
            let file = format!(
                "{}\r\n\n",
                serde_json::json!({"prompt": text, "output_tokens": tokens})
            );
            match Dataset::parse(file.as_bytes(), DatasetFormat::Jsonl, "fuzz") {
                Ok(d) => {
                    let r = &d.records()[0];
                    assert_eq!(r.prompt, DatasetPrompt::Text(text.into_owned()));
                    assert_eq!(r.output, ReferenceOutput::Tokens(tokens));
                }
                Err(e) => {
                    assert!(is_blank(&text), "{e}");
                    assert!(matches!(e, WorkloadError::Dataset { line: Some(1), .. }));
                }
            }
        });
    }

    /// Like [`fuzz_dataset_sharegpt`], for a text corpus.
    #[test]
    fn fuzz_dataset_text() {
        bolero::check!().for_each(|input: &[u8]| {
            if let Some(d) = check_parsed(input, DatasetFormat::Text) {
                let text = std::str::from_utf8(input).unwrap();
                assert_eq!(d.corpus(), text.strip_prefix('\u{feff}').unwrap_or(text));
            }
        });
    }

    #[test]
    fn sha256_is_lowercase_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn json_messages_lose_their_position() {
        let e = serde_json::from_str::<u32>("\n x").unwrap_err();
        assert_eq!((e.line(), e.column()), (2, 2));
        assert_eq!(json_message(&e), "expected value");
    }

    #[test]
    fn utf8_errors_name_line_and_column() {
        let err = utf8(b"ab\ncd\xFFe", "f").unwrap_err().to_string();
        assert_eq!(
            err,
            "f: line 2 column 3: invalid UTF-8 (byte 0xFF): a dataset must be UTF-8 text"
        );
    }
}
