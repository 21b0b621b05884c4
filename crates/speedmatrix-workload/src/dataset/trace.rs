//! Request traces: when each request came and how long it was, replayed at those times.
//!
//! One JSON object per line (JSONL), in either of the public shapes:
//!
//! - **Mooncake** (the FAST'25 Mooncake traces, AIPerf's `mooncake_trace`):
//!   `{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, …]}`
//!   — `hash_ids` names the prompt's blocks of [`Trace::MOONCAKE_BLOCK_TOKENS`] tokens, each id
//!   standing for the whole prefix up to its block, so two requests whose lists start alike
//!   share that many blocks of prompt (and of the engine's prefix cache);
//! - **generic**: `{"timestamp": 1500, "input_tokens": 512, "output_tokens": 128}`, or a
//!   `prompt` text, or chat `messages` (`[{"role": "user", "content": "…"}]`), instead of a
//!   length.
//!
//! `timestamp` is milliseconds from any origin (the first request's is subtracted), a number
//! ≥ 0; requests are replayed in timestamp order (a file out of order is sorted, ties kept in
//! file order). The output length is optional (the run's `--max-tokens` then). Other fields
//! (`session_id`, …) are ignored. A bad line is an error that names it.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use speedmatrix_units::Tokens;

use super::{BOM, is_blank, json_message, read_error, sha256_hex, too_large, utf8_error};
use crate::{MAX_PROMPT_TOKENS, WorkloadError};

/// What every line is told it should look like.
const EXPECTED: &str = "each line must be one JSON object: Mooncake's {\"timestamp\": MS, \
     \"input_length\": N, \"output_length\": N, \"hash_ids\": [...]} or {\"timestamp\": MS, \
     \"input_tokens\": N, \"output_tokens\": N} (or \"prompt\": TEXT, or \"messages\": \
     [{\"role\": ROLE, \"content\": TEXT}], for input_tokens)";

/// How to get a trace, for a file that is not there.
const HOW_TO_GET: &str = "traces are read from local files and never downloaded: give a \
     JSONL trace such as Mooncake's (`git clone` kvcache-ai/Mooncake and use \
     FAST25-release/traces/conversation_trace.jsonl) or one line per request of \
     {\"timestamp\": MS, \"input_tokens\": N, \"output_tokens\": N}";

/// The largest timestamp read: about 31.7 years in milliseconds.
const MAX_TIMESTAMP_MS: f64 = 1e12;

/// A request trace, read and sorted by time.
///
/// ```
/// use speedmatrix_workload::{Trace, TraceInput};
///
/// let t = Trace::parse(
///     b"{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 8, \"hash_ids\": [0, 1]}\n\
///       {\"timestamp\": 500, \"input_length\": 300, \"output_length\": 4, \"hash_ids\": [0]}\n",
///     "t.jsonl",
/// )?;
/// assert_eq!(t.records().len(), 2);
/// assert!(t.has_blocks());
/// let at: Vec<u128> = t.schedule(2.0).iter().map(|d| d.as_millis()).collect();
/// assert_eq!(at, [0, 250]); // replayed twice as fast
/// assert!(matches!(t.records()[1].input, TraceInput::Tokens { .. }));
/// # Ok::<(), speedmatrix_workload::WorkloadError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Trace {
    records: Vec<TraceRecord>,
    sha256: String,
    name: String,
}

/// One request of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRecord {
    /// When it is sent, from the trace's first request.
    pub at: Duration,
    /// What it sends.
    pub input: TraceInput,
    /// Its `max_tokens`, when the trace says.
    pub output_tokens: Option<Tokens>,
    /// Its 1-based line in the file.
    pub line: usize,
}

/// A trace request's prompt: a length (with the blocks it shares), or a text.
#[derive(Debug, Clone, PartialEq)]
pub enum TraceInput {
    /// A prompt of exactly this many tokens, built by the run.
    Tokens {
        /// Its length.
        tokens: Tokens,
        /// Mooncake's `hash_ids`: one id per block of the prompt, equal ids equal prefixes.
        hash_ids: Option<Arc<[u64]>>,
    },
    /// A prompt sent as written.
    Text(String),
    /// Chat messages sent as written.
    Messages(Vec<super::DatasetMessage>),
}

impl Trace {
    /// The block size Mooncake's traces hash prompts in (512 tokens).
    pub const MOONCAKE_BLOCK_TOKENS: u64 = 512;

    /// Reads a trace file (at most [`Dataset::MAX_BYTES`](super::Dataset::MAX_BYTES)).
    pub fn read(path: &Path) -> Result<Trace, WorkloadError> {
        let read_error = read_error(path, HOW_TO_GET);
        let meta = std::fs::metadata(path).map_err(read_error)?;
        let name = path.display().to_string();
        if meta.is_dir() {
            return Err(bad(
                &name,
                None,
                format!("is a folder, not a trace file; {HOW_TO_GET}"),
            ));
        }
        if meta.len() > super::Dataset::MAX_BYTES {
            return Err(too_large(name, meta.len()));
        }
        let bytes = std::fs::read(path).map_err(read_error)?;
        Self::parse_named(Cow::Owned(bytes), name)
    }

    /// Parses a trace's bytes; `name` is what errors call it.
    pub fn parse(bytes: &[u8], name: &str) -> Result<Trace, WorkloadError> {
        Self::parse_named(Cow::Borrowed(bytes), name.to_owned())
    }

    fn parse_named(bytes: Cow<'_, [u8]>, name: String) -> Result<Trace, WorkloadError> {
        if bytes.len() as u64 > super::Dataset::MAX_BYTES {
            return Err(too_large(name, bytes.len() as u64));
        }
        let sha256 = sha256_hex(&bytes);
        let body = bytes.strip_prefix(BOM).unwrap_or(&bytes);
        let mut records = Vec::new();
        let mut stamps = Vec::new();
        for (i, raw) in body.split(|&b| b == b'\n').enumerate() {
            let line = i + 1;
            let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
            let text = std::str::from_utf8(raw).map_err(|e| {
                let column = e.valid_up_to() + 1;
                bad(
                    &name,
                    Some(line),
                    format!("column {column}: {}", utf8_error(raw, &e)),
                )
            })?;
            if is_blank(text) {
                continue;
            }
            let (ms, record) = record(text, line).map_err(|m| bad(&name, Some(line), m))?;
            stamps.push(ms);
            records.push(record);
        }
        if records.is_empty() {
            return Err(bad(&name, None, format!("no requests; {EXPECTED}")));
        }
        // In time order, ties in file order; times from the first request.
        let mut order: Vec<usize> = (0..records.len()).collect();
        order.sort_by(|&a, &b| stamps[a].total_cmp(&stamps[b]));
        let first = stamps[order[0]];
        let mut sorted = Vec::with_capacity(records.len());
        for i in order {
            let mut r = records[i].clone();
            r.at = Duration::from_nanos(((stamps[i] - first) * 1e6).round() as u64);
            sorted.push(r);
        }
        Ok(Trace {
            records: sorted,
            sha256,
            name,
        })
    }

    /// Its requests, in the order they are sent.
    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// The file's SHA-256, lowercase hex: what a run records of it.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Whether any request names its blocks (`hash_ids`): a Mooncake trace.
    pub fn has_blocks(&self) -> bool {
        self.records.iter().any(|r| {
            matches!(
                r.input,
                TraceInput::Tokens {
                    hash_ids: Some(_),
                    ..
                }
            )
        })
    }

    /// Send times at `speed` times the trace's pace (2.0: twice as fast).
    pub fn schedule(&self, speed: f64) -> Vec<Duration> {
        self.records
            .iter()
            .map(|r| Duration::from_nanos((r.at.as_nanos() as f64 / speed).round() as u64))
            .collect()
    }

    /// Checks every request's `hash_ids` against its length in blocks of `block` tokens:
    /// a prompt of `n` tokens has `⌈n / block⌉` blocks.
    pub fn check_blocks(&self, block: Tokens) -> Result<(), WorkloadError> {
        let b = block.get().max(1);
        for r in &self.records {
            if let TraceInput::Tokens {
                tokens,
                hash_ids: Some(ids),
            } = &r.input
            {
                let blocks = tokens.get().div_ceil(b);
                if ids.len() as u64 != blocks {
                    return Err(bad(
                        &self.name,
                        Some(r.line),
                        format!(
                            "hash_ids names {} blocks, but a prompt of {tokens} tokens has {blocks} \
                             blocks of {b}: give the block size the trace was hashed with \
                             (--trace-block-tokens; Mooncake's is 512)",
                            ids.len()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn bad(name: &str, line: Option<usize>, message: String) -> WorkloadError {
    WorkloadError::Dataset {
        name: name.to_owned(),
        line,
        message,
    }
}

/// A line as written: Mooncake's names or the generic ones.
#[derive(Deserialize)]
#[serde(expecting = "a JSON object")]
struct Line {
    timestamp: Option<f64>,
    #[serde(alias = "input_length")]
    input_tokens: Option<u64>,
    #[serde(alias = "output_length")]
    output_tokens: Option<u64>,
    hash_ids: Option<Vec<u64>>,
    prompt: Option<String>,
    messages: Option<Vec<Message>>,
}

/// A chat message as written.
#[derive(Deserialize)]
#[serde(expecting = "a message object {\"role\": …, \"content\": …}")]
struct Message {
    role: String,
    content: String,
}

/// One line's timestamp (ms) and record, or what is wrong with it.
fn record(text: &str, line: usize) -> Result<(f64, TraceRecord), String> {
    let parsed: Line = serde_json::from_str(text).map_err(|e| {
        let kind = if e.is_data() { "" } else { "invalid JSON: " };
        format!(
            "column {}: {kind}{}; {EXPECTED}",
            e.column(),
            json_message(&e)
        )
    })?;
    let ms = match parsed.timestamp {
        Some(t) if t.is_finite() && (0.0..=MAX_TIMESTAMP_MS).contains(&t) => t,
        Some(t) => {
            return Err(format!(
                "timestamp {t} is not a time: give milliseconds, a number from 0 to {MAX_TIMESTAMP_MS:e}"
            ));
        }
        None => return Err(format!("no `timestamp`; {EXPECTED}")),
    };
    let count = |what: &str, n: u64| {
        if n == 0 || n > MAX_PROMPT_TOKENS {
            Err(format!(
                "{what} {n} is out of range: give 1 to {MAX_PROMPT_TOKENS}"
            ))
        } else {
            Ok(Tokens::new(n))
        }
    };
    let prompt = match (parsed.prompt, parsed.messages) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "both `prompt` and `messages`: give one; {EXPECTED}"
            ));
        }
        (None, Some(m)) if m.is_empty() => {
            return Err("`messages` is empty: give at least one message".to_owned());
        }
        (None, Some(m)) if m.iter().all(|m| is_blank(&m.content)) => {
            return Err("every message's content is empty".to_owned());
        }
        (None, Some(m)) => Some(TraceInput::Messages(
            m.into_iter()
                .map(|m| super::DatasetMessage {
                    role: m.role,
                    content: m.content,
                })
                .collect(),
        )),
        (Some(p), None) if is_blank(&p) => return Err("the prompt is empty".to_owned()),
        (Some(p), None) => Some(TraceInput::Text(p)),
        (None, None) => None,
    };
    let input = match (parsed.input_tokens, prompt, parsed.hash_ids) {
        (Some(_), Some(_), _) => {
            return Err(format!(
                "both an input length and a prompt (`prompt` or `messages`): give one; {EXPECTED}"
            ));
        }
        (None, Some(_), Some(_)) => {
            return Err("`hash_ids` describe a prompt the run builds: give `input_length` with them, not a `prompt` or `messages`".to_owned());
        }
        (None, None, _) => {
            return Err(format!(
                "no input length (`input_length` or `input_tokens`), `prompt` or `messages`; {EXPECTED}"
            ));
        }
        (None, Some(p), None) => p,
        (Some(n), None, ids) => TraceInput::Tokens {
            tokens: count("the input length", n)?,
            hash_ids: ids.map(Arc::from),
        },
    };
    let output_tokens = match parsed.output_tokens {
        Some(n) => Some(count("the output length", n)?),
        None => None,
    };
    Ok((
        ms,
        TraceRecord {
            at: Duration::ZERO,
            input,
            output_tokens,
            line,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn error(bytes: &str) -> String {
        Trace::parse(bytes.as_bytes(), "t.jsonl")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn both_shapes_are_read_sorted_by_time_from_the_first() {
        let t = Trace::parse(
            b"{\"timestamp\": 2000, \"input_tokens\": 10, \"output_tokens\": 3, \"session_id\": 7}\n\
              \n\
              {\"timestamp\": 1000, \"prompt\": \"hello\"}\r\n\
              {\"timestamp\": 3000, \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n\
              {\"timestamp\": 1000, \"input_length\": 700, \"output_length\": 5, \"hash_ids\": [4, 9]}\n",
            "t.jsonl",
        )
        .unwrap();
        let lines: Vec<usize> = t.records().iter().map(|r| r.line).collect();
        assert_eq!(lines, [3, 5, 1, 4], "time order, ties in file order");
        let at: Vec<u128> = t.schedule(1.0).iter().map(|d| d.as_millis()).collect();
        assert_eq!(at, [0, 0, 1000, 2000]);
        assert!(matches!(&t.records()[3].input, TraceInput::Messages(m) if m[0].content == "hi"));
        assert_eq!(t.records()[0].input, TraceInput::Text("hello".into()));
        assert_eq!(t.records()[0].output_tokens, None);
        assert!(t.has_blocks());
        t.check_blocks(Tokens::new(512)).unwrap();
        let e = t.check_blocks(Tokens::new(256)).unwrap_err().to_string();
        assert!(
            e.contains("line 5") && e.contains("--trace-block-tokens"),
            "{e}"
        );
    }

    #[test]
    fn bad_lines_are_named_and_say_what_is_expected() {
        for (text, says) in [
            ("{\"input_tokens\": 5}", "no `timestamp`"),
            ("{\"timestamp\": -1, \"input_tokens\": 5}", "not a time"),
            ("{\"timestamp\": 1}", "no input length"),
            ("{\"timestamp\": 1, \"input_tokens\": 0}", "out of range"),
            (
                "{\"timestamp\": 1, \"input_tokens\": 5, \"prompt\": \"x\"}",
                "give one",
            ),
            (
                "{\"timestamp\": 1, \"prompt\": \"x\", \"hash_ids\": [1]}",
                "hash_ids",
            ),
            ("{\"timestamp\": 1, \"messages\": []}", "empty"),
            (
                "{\"timestamp\": 1, \"messages\": [{\"role\": \"user\"}]}",
                "content",
            ),
            (
                "{\"timestamp\": 1, \"prompt\": \"x\", \"messages\": [{\"role\": \"user\", \"content\": \"y\"}]}",
                "give one",
            ),
            ("{\"timestamp\": \"soon\", \"input_tokens\": 5}", "line 2"),
            ("[1, 2]", "JSON object"),
        ] {
            let e = error(&format!(
                "{{\"timestamp\": 0, \"input_tokens\": 1}}\n{text}\n"
            ));
            assert!(e.contains("line 2") && e.contains(says), "{text}: {e}");
        }
        assert!(error("\n\n").contains("no requests"));
    }

    /// Any bytes: a trace whose times are sorted and finite, or an error naming the file,
    /// never a panic (`cargo xtask fuzz` runs it under libFuzzer).
    #[test]
    fn fuzz_trace() {
        bolero::check!().for_each(|input: &[u8]| match Trace::parse(input, "fuzz") {
            Ok(t) => {
                let at = t.schedule(1.0);
                assert!(at.windows(2).all(|w| w[0] <= w[1]));
                assert_eq!(at.first(), Some(&Duration::ZERO));
                let _ = t.check_blocks(Tokens::new(512));
            }
            Err(e) => assert!(e.to_string().starts_with("fuzz")),
        });
    }

    proptest! {
        /// Any bytes: a trace or an error, never a panic.
        #[test]
        fn any_bytes_read_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Trace::parse(&bytes, "t");
        }

        /// Written records read back, in time order, at the times written.
        #[test]
        fn written_traces_read_back(rows in proptest::collection::vec((0u32..100_000, 1u64..5_000, 1u64..500), 1..20)) {
            let text: String = rows
                .iter()
                .map(|(t, i, o)| format!("{{\"timestamp\": {t}, \"input_length\": {i}, \"output_length\": {o}}}\n"))
                .collect();
            let trace = Trace::parse(text.as_bytes(), "t").unwrap();
            let first = rows.iter().map(|r| r.0).min().unwrap();
            let mut want: Vec<u32> = rows.iter().map(|r| r.0 - first).collect();
            want.sort_unstable();
            let got: Vec<u128> = trace.schedule(1.0).iter().map(|d| d.as_millis()).collect();
            prop_assert_eq!(got, want.iter().map(|&w| u128::from(w)).collect::<Vec<_>>());
        }
    }
}
