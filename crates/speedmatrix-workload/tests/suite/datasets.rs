//! Dataset files (ShareGPT, JSONL, text): what they give, what their errors
//! say, sampling, and corpus prompts of exact lengths.

use crate::common;

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use speedmatrix_units::Tokens;
use speedmatrix_workload::{
    Dataset, DatasetFormat, DatasetMessage, DatasetPrompt, DatasetRecord, MAX_PROMPT_TOKENS,
    ReferenceOutput, TextGenerator, Tokenizer, WorkloadError,
};

fn parse(text: &str, format: DatasetFormat) -> Result<Dataset, WorkloadError> {
    Dataset::parse(text.as_bytes(), format, "data")
}

/// The error's line and message, for a file that must not parse.
fn error(text: &[u8], format: DatasetFormat) -> (Option<usize>, String) {
    match Dataset::parse(text, format, "data") {
        Err(WorkloadError::Dataset {
            name,
            line,
            message,
        }) => {
            assert_eq!(name, "data");
            (line, message)
        }
        Err(e) => panic!("not a dataset error: {e}"),
        Ok(d) => panic!("parsed: {:?}", d.records()),
    }
}

fn text(s: &str) -> DatasetPrompt {
    DatasetPrompt::Text(s.to_owned())
}

fn answer(s: &str) -> ReferenceOutput {
    ReferenceOutput::Text(s.to_owned())
}

// ---------------------------------------------------------------- ShareGPT

const SHAREGPT: &str = r#"[
  {"id": "a", "conversations": [
    {"from": "human", "value": "Name a river."},
    {"from": "gpt", "value": "The Danube."},
    {"from": "human", "value": "Another?"},
    {"from": "gpt", "value": 42, "odd": [1, 2]}
  ]},
  {"id": "b", "conversations": [
    {"role": "system", "content": "Be brief."},
    {"role": "User", "content": "Why is\nthe sky blue?"},
    {"role": "assistant", "content": "Scattering."}
  ]},
  {"conversations": [{"value": "Only a question", "from": "human"}]},
  {"conversations": [{"value": "An answer to nothing.", "from": "gpt"}]},
  {"conversations": []},
  {"conversations": [{"from": "human", "value": "  "}, {"from": "gpt", "value": "x"}]},
  {"conversations": [{"from": "human", "value": "Twice"}, {"from": "human", "value": "asked"}]},
  {"conversations": [{"from": "human", "value": "Q"}, {"from": "chatgpt", "value": ""}]},
  {"conversations": [{"from": "tool", "value": "{}"}, {"from": "user", "value": "After a tool"},
                     {"value": "Bard's", "from": "bard"}]},
  {"conversations": [{"from": "human", "value": "caf\u00e9 \"quoted\""}, {"from": "Model", "value": "ok"}]}
]"#;

#[test]
fn sharegpt_gives_the_first_user_turn_and_the_answer_after_it() {
    let d = parse(SHAREGPT, DatasetFormat::ShareGpt).unwrap();
    assert_eq!(d.format(), DatasetFormat::ShareGpt);
    let got: Vec<(DatasetPrompt, ReferenceOutput, usize)> = d
        .records()
        .iter()
        .map(|r| (r.prompt.clone(), r.output.clone(), r.line))
        .collect();
    assert_eq!(
        got,
        [
            (text("Name a river."), answer("The Danube."), 1),
            (text("Why is\nthe sky blue?"), answer("Scattering."), 2),
            (text("Only a question"), ReferenceOutput::None, 3),
            (text("Twice"), ReferenceOutput::None, 7),
            (text("Q"), ReferenceOutput::None, 8),
            (text("After a tool"), answer("Bard's"), 9),
            (text("café \"quoted\""), answer("ok"), 10),
        ]
    );
    // No user turn (4, 5) or an empty prompt (6).
    assert_eq!(d.skipped(), 3);
    assert_eq!(d.bytes(), SHAREGPT.len() as u64);
    assert!(d.corpus().is_empty());
}

#[test]
fn sharegpt_accepts_a_bom() {
    let file = format!("\u{feff}{SHAREGPT}");
    let d = parse(&file, DatasetFormat::ShareGpt).unwrap();
    assert_eq!(d.records().len(), 7);
    assert_ne!(
        d.sha256(),
        parse(SHAREGPT, DatasetFormat::ShareGpt).unwrap().sha256()
    );
}

#[test]
fn sharegpt_errors_name_the_entry() {
    let cases: &[(&str, usize, &str)] = &[
        (r#"[1]"#, 1, "invalid type: integer `1`, expected an object"),
        (
            r#"[{"conversations": []}, {"conversations": "hi"}]"#,
            2,
            "expected an array of turns",
        ),
        (r#"[{"id": 3}]"#, 1, "missing field `conversations`"),
        (
            r#"[{"conversations": [], "conversations": []}]"#,
            1,
            "duplicate field `conversations`",
        ),
        (
            r#"[{"conversations": [{"value": "x"}]}]"#,
            1,
            "a turn has no `from` (or `role`)",
        ),
        (
            r#"[{"conversations": [{"from": "human"}]}]"#,
            1,
            "a turn has no `value` (or `content`)",
        ),
        (
            r#"[{"conversations": [{"from": "human", "value": ["x"]}]}]"#,
            1,
            "expected a turn's text as a string",
        ),
        (
            r#"[{"conversations": [{"from": 1, "value": "x"}]}]"#,
            1,
            "expected a role name",
        ),
        (
            r#"[{"conversations": [{"from": "human", "value": "q"}, "answer"]}]"#,
            1,
            "expected a turn object",
        ),
        (
            r#"[{"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}, 7]}]"#,
            1,
            "expected a turn object",
        ),
    ];
    for &(file, entry, what) in cases {
        let (line, message) = error(file.as_bytes(), DatasetFormat::ShareGpt);
        assert_eq!(line, Some(entry), "{file}: {message}");
        assert!(message.contains(what), "{file}: {message}");
        assert!(
            message.starts_with(&format!("entry {entry} of the array (line 1 column ")),
            "{message}"
        );
    }
}

#[test]
fn sharegpt_syntax_errors_name_line_and_column() {
    let (line, message) = error(
        b"[\n  {\"conversations\": []},\n  {\"conversations\": [}\n]",
        DatasetFormat::ShareGpt,
    );
    assert_eq!(line, None);
    assert!(
        message.starts_with("line 3 column 22: invalid JSON (in entry 2 of the array): "),
        "{message}"
    );
    let (_, message) = error(b"[{\"conversations\": []}] x", DatasetFormat::ShareGpt);
    assert!(message.contains("trailing characters"), "{message}");
    let (_, message) = error(b"[{\"conversations\": [", DatasetFormat::ShareGpt);
    assert!(message.contains("EOF while parsing"), "{message}");
    let (_, message) = error(
        b"[{\"conversations\": [{\"from\": \"human\", \"value\": \"a\xFFb\"}]}]",
        DatasetFormat::ShareGpt,
    );
    assert_eq!(
        message,
        "line 1 column 50: invalid UTF-8 (byte 0xFF): a dataset must be UTF-8 text"
    );
}

#[test]
fn sharegpt_that_is_not_an_array_says_what_is_expected() {
    let (line, message) = error(b"{\"prompt\": \"hi\"}\n", DatasetFormat::ShareGpt);
    assert_eq!(line, None);
    assert!(
        message.contains("one JSON array of conversations"),
        "{message}"
    );
    assert!(message.contains("--dataset-format jsonl"), "{message}");
    let (_, message) = error(b"\"text\"", DatasetFormat::ShareGpt);
    assert!(!message.contains("jsonl"), "{message}");
}

#[test]
fn sharegpt_without_records_is_an_error() {
    let (_, message) = error(b"[]", DatasetFormat::ShareGpt);
    assert_eq!(message, "no records: the array is empty");
    let (_, message) = error(
        br#"[{"conversations": []}, {"conversations": [{"from": "gpt", "value": "a"}]}]"#,
        DatasetFormat::ShareGpt,
    );
    assert!(
        message.starts_with("no records: all 2 entries were skipped"),
        "{message}"
    );
    let err = Dataset::parse(b"", DatasetFormat::ShareGpt, "empty.json").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("empty.json: line 1 column 0: invalid JSON"),
        "{err}"
    );
}

// ------------------------------------------------------------------- JSONL

#[test]
fn jsonl_reads_prompts_messages_and_lengths() {
    let file = concat!(
        "\u{feff}{\"prompt\": \"Why is the sky blue?\", \"output_tokens\": 128, \"id\": 1}\r\n",
        "\n",
        "   \r\n",
        r#"{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}"#,
        "\n",
        r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "output_tokens": 7.0}"#,
        "\n",
        r#"{"prompt": "x", "output_tokens": null, "messages": null, "extra": {"nested": [1]}}"#,
        "\n",
        r#"{"prompt": "zero", "output_tokens": 0}"#,
    );
    let d = parse(file, DatasetFormat::Jsonl).unwrap();
    let message = |role: &str, content: &str| DatasetMessage {
        role: role.to_owned(),
        content: content.to_owned(),
    };
    assert_eq!(
        d.records(),
        [
            DatasetRecord {
                prompt: text("Why is the sky blue?"),
                output: ReferenceOutput::Tokens(128),
                line: 1,
            },
            DatasetRecord {
                prompt: DatasetPrompt::Messages(vec![
                    message("system", "Be brief."),
                    message("user", "Hi")
                ]),
                output: ReferenceOutput::None,
                line: 4,
            },
            DatasetRecord {
                prompt: DatasetPrompt::Messages(vec![message("user", "a\nb")]),
                output: ReferenceOutput::Tokens(7),
                line: 5,
            },
            DatasetRecord {
                prompt: text("x"),
                output: ReferenceOutput::None,
                line: 6,
            },
            DatasetRecord {
                prompt: text("zero"),
                output: ReferenceOutput::Tokens(0),
                line: 7,
            },
        ]
    );
    assert_eq!(d.skipped(), 0);
}

#[test]
fn jsonl_errors_name_the_line_and_what_was_expected() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}"#,
            "both `prompt` and `messages`",
        ),
        (r#"{"output_tokens": 3}"#, "neither `prompt` nor `messages`"),
        (r#"{"prompt": ""}"#, "the prompt is empty"),
        (r#"{"prompt": " \n "}"#, "the prompt is empty"),
        (
            r#"{"prompt": 5}"#,
            "invalid type: integer `5`, expected `prompt` to be a string",
        ),
        (
            r#"{"prompt": "a", "output_tokens": -1}"#,
            "`output_tokens` -1 is negative",
        ),
        (
            r#"{"prompt": "a", "output_tokens": 1.5}"#,
            "`output_tokens` 1.5 is not a whole number",
        ),
        (
            r#"{"prompt": "a", "output_tokens": "128"}"#,
            "expected `output_tokens` to be a whole number",
        ),
        (
            r#"{"prompt": "a", "output_tokens": 4294967296}"#,
            "`output_tokens` 4294967296 is too large",
        ),
        (
            r#"{"prompt": "a", "prompt": "b"}"#,
            "duplicate field `prompt`",
        ),
        (r#"{"messages": []}"#, "`messages` is empty"),
        (
            r#"{"messages": [{"role": "user", "content": ""}]}"#,
            "every message's content is empty",
        ),
        (
            r#"{"messages": [{"content": "x"}]}"#,
            "missing field `role`",
        ),
        (
            r#"{"messages": [{"role": "user", "content": null}]}"#,
            "expected `content` to be a string or an array of text parts",
        ),
        (
            r#"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}"#,
            "a content part of type `image_url`: only text parts",
        ),
        (
            r#"{"messages": [{"role": "user", "content": [{"type": "text"}]}]}"#,
            "a text part without `text`",
        ),
        (r#""just text""#, "expected a JSON object"),
        (
            r#"{"prompt": "a"} {"prompt": "b"}"#,
            "invalid JSON: trailing characters",
        ),
        (r#"{"prompt": "a",}"#, "invalid JSON: trailing comma"),
        ("{\"prompt\":", "(a record must fit on one line)"),
    ];
    for &(bad, what) in cases {
        let file = format!("{{\"prompt\": \"fine\"}}\n\n{bad}\n{{\"prompt\": \"after\"}}\n");
        let (line, message) = error(file.as_bytes(), DatasetFormat::Jsonl);
        assert_eq!(line, Some(3), "{bad}: {message}");
        assert!(message.contains(what), "{bad}: {message}");
    }
    // Errors that are about the record's shape say what one looks like.
    let (_, message) = error(br#"{"output_tokens": 3}"#, DatasetFormat::Jsonl);
    assert!(
        message.contains(r#"{"prompt": "…", "output_tokens": 128}"#)
            && message.contains(r#"{"messages": [{"role": "user", "content": "…"}]"#),
        "{message}"
    );
    let err = Dataset::parse(b"{\"prompt\": 5}", DatasetFormat::Jsonl, "x.jsonl").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("x.jsonl line 1: column 12: invalid type: integer `5`"),
        "{err}"
    );
}

#[test]
fn jsonl_utf8_errors_name_line_and_column() {
    let (line, message) = error(
        b"{\"prompt\": \"a\"}\n{\"prompt\": \"\xC3\x28\"}\n",
        DatasetFormat::Jsonl,
    );
    assert_eq!(line, Some(2));
    assert_eq!(
        message,
        "column 13: invalid UTF-8 (byte 0xC3): a dataset must be UTF-8 text"
    );
}

#[test]
fn jsonl_given_a_sharegpt_array_says_so() {
    let (line, message) = error(
        br#"[{"conversations": [{"from": "human", "value": "hi"}]}]"#,
        DatasetFormat::Jsonl,
    );
    assert_eq!(line, Some(1));
    assert!(message.contains("--dataset-format sharegpt"), "{message}");
}

#[test]
fn jsonl_without_records_is_an_error() {
    for file in ["", "\n\n", "\u{feff}", " \r\n"] {
        let (line, message) = error(file.as_bytes(), DatasetFormat::Jsonl);
        assert_eq!(line, None);
        assert!(
            message.starts_with("no records; each line must be"),
            "{message}"
        );
    }
}

// -------------------------------------------------------------------- Text

#[test]
fn text_is_a_corpus_without_records() {
    let d = Dataset::parse(b"abc", DatasetFormat::Text, "t").unwrap();
    assert_eq!(
        d.sha256(),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!((d.bytes(), d.corpus()), (3, "abc"));
    assert!(d.records().is_empty());
    assert_eq!(d.skipped(), 0);
    let d = parse("\u{feff}Some text.\n", DatasetFormat::Text).unwrap();
    assert_eq!(d.corpus(), "Some text.\n");
    let (line, message) = error(b" \n\t ", DatasetFormat::Text);
    assert_eq!(line, None);
    assert!(message.contains("empty"), "{message}");
    let (_, message) = error(b"ok\nbad \xFF", DatasetFormat::Text);
    assert!(
        message.starts_with("line 2 column 5: invalid UTF-8"),
        "{message}"
    );
}

#[test]
fn record_formats_have_no_corpus_and_corpora_no_sample() {
    let tok = common::bundled();
    let d = parse(r#"{"prompt": "a"}"#, DatasetFormat::Jsonl).unwrap();
    let err = d.corpus_prompts(&tok, &[Tokens::new(5)], 1).unwrap_err();
    assert!(
        err.to_string()
            .contains("a jsonl dataset has no text corpus"),
        "{err}"
    );
    let corpus = parse("Some text.", DatasetFormat::Text).unwrap();
    let err = corpus.sample(None, 1).unwrap_err();
    assert!(
        err.to_string().ends_with(
            "a text corpus has no records to sample: its prompts are cut to --input-tokens"
        ),
        "{err}"
    );
}

// ------------------------------------------------------------- Files

/// A temporary folder removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("sm-dataset-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn file(&self, name: &str, content: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn read_takes_the_format_from_the_extension_or_the_caller() {
    let dir = TempDir::new("read");
    let jsonl = dir.file("a.JSONL", "{\"prompt\": \"hi\"}\n");
    let d = Dataset::read(&jsonl, None).unwrap();
    assert_eq!(
        (d.format(), d.records().len(), d.bytes()),
        (DatasetFormat::Jsonl, 1, 17)
    );
    assert_eq!(
        d.sha256(),
        Dataset::parse(b"{\"prompt\": \"hi\"}\n", DatasetFormat::Jsonl, "x")
            .unwrap()
            .sha256()
    );
    let other = dir.file("prompts.data", "{\"prompt\": \"hi\"}\n");
    let err = Dataset::read(&other, None).unwrap_err();
    assert!(
        matches!(err, WorkloadError::DatasetFormatUnknownFor { .. }),
        "{err}"
    );
    let d = Dataset::read(&other, Some(DatasetFormat::Text)).unwrap();
    assert_eq!(d.corpus(), "{\"prompt\": \"hi\"}\n");
    let sharegpt = dir.file("s.json", SHAREGPT);
    assert_eq!(Dataset::read(&sharegpt, None).unwrap().skipped(), 3);
    // Errors name the path.
    let bad = dir.file("bad.jsonl", "{}\n");
    let err = Dataset::read(&bad, None).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{} line 1: ", bad.display())),
        "{err}"
    );
    let err = Dataset::read(&dir.0, Some(DatasetFormat::Jsonl))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is a folder"), "{err}");
}

#[test]
fn a_missing_file_says_how_to_get_one() {
    let err = Dataset::read(Path::new("no/such/ShareGPT_V3.json"), None).unwrap_err();
    let WorkloadError::Read { path, source } = &err else {
        panic!("{err}");
    };
    assert_eq!(path, Path::new("no/such/ShareGPT_V3.json"));
    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    let message = err.to_string();
    assert!(
        message.starts_with("could not read no/such/ShareGPT_V3.json: "),
        "{message}"
    );
    assert!(
        message.contains(
            "huggingface-cli download --repo-type dataset anon8231489123/ShareGPT_Vicuna_unfiltered ShareGPT_V3_unfiltered_cleaned_split.json"
        ),
        "{message}"
    );
    assert!(message.contains("never downloaded"), "{message}");
}

#[test]
fn files_over_the_limit_are_refused_before_reading() {
    let dir = TempDir::new("huge");
    let path = dir.0.join("huge.jsonl");
    // Sparse: no disk is used, and the file is never read.
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(Dataset::MAX_BYTES + 1).unwrap();
    let err = Dataset::read(&path, None).unwrap_err();
    let WorkloadError::Dataset { line, message, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(*line, None);
    assert!(
        message.starts_with(
            "is 4294967297 bytes (4.0 GiB); the largest dataset read is 4294967296 bytes"
        ),
        "{message}"
    );
}

// ---------------------------------------------------------------- Sampling

fn records(n: usize) -> Dataset {
    let file: String = (0..n)
        .map(|i| format!("{{\"prompt\": \"p{i}\"}}\n"))
        .collect();
    parse(&file, DatasetFormat::Jsonl).unwrap()
}

#[test]
fn samples_are_reproducible_distinct_and_bounded() {
    let d = records(100);
    assert_eq!(d.sample(None, 3).unwrap(), (0..100).collect::<Vec<_>>());
    let a = d.sample(Some(10), 3).unwrap();
    assert_eq!(a, d.sample(Some(10), 3).unwrap());
    assert_ne!(a, d.sample(Some(10), 4).unwrap());
    // A longer sample of the same seed starts with the shorter one.
    assert_eq!(d.sample(Some(20), 3).unwrap()[..10], a);
    let mut all = d.sample(Some(100), 9).unwrap();
    assert_ne!(all, (0..100).collect::<Vec<_>>());
    all.sort_unstable();
    assert_eq!(all, (0..100).collect::<Vec<_>>());
    let err = d.sample(Some(101), 3).unwrap_err();
    assert!(
        matches!(
            err,
            WorkloadError::SampleTooLarge {
                asked: 101,
                records: 100
            }
        ),
        "{err}"
    );
    let err = d.sample(Some(0), 3).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("--dataset-sample must be at least 1"),
        "{err}"
    );
}

// ---------------------------------------------------------- Corpus prompts

fn corpus(bytes: usize, seed: u64) -> Dataset {
    let mut text = String::new();
    TextGenerator::new(seed).fill(&mut text, bytes);
    Dataset::parse(text.as_bytes(), DatasetFormat::Text, "corpus.txt").unwrap()
}

#[test]
fn corpus_prompts_have_exactly_n_tokens() {
    let tok = common::bundled();
    let d = corpus(64 << 10, 11);
    let lengths: Vec<Tokens> = (1..=64).chain([2_048, 10_000]).map(Tokens::new).collect();
    let prompts = d.corpus_prompts(&tok, &lengths, 5).unwrap();
    for (p, n) in prompts.iter().zip(&lengths) {
        assert_eq!(tok.encode_count(p).unwrap() as u64, n.get(), "{p:?}");
        if n.get() > 1 {
            assert!(
                d.corpus().contains(&p[..p.floor_char_boundary(40)]),
                "{p:?}"
            );
        }
    }
    assert_eq!(prompts[0], "", "one token is the BOS alone");
    assert_eq!(prompts, d.corpus_prompts(&tok, &lengths, 5).unwrap());
    let other = d.corpus_prompts(&tok, &lengths, 6).unwrap();
    assert_ne!(prompts[40], other[40]);
    // Prompt i starts where it does whatever the other lengths are.
    let alone = d.corpus_prompts(&tok, &lengths[..41], 5).unwrap();
    assert_eq!(alone[40], prompts[40]);
}

#[test]
fn corpus_prompts_wrap_around_a_short_corpus() {
    let tok = common::bundled();
    let d = parse(
        "The harbor froze in January. Ships waited at the quay.",
        DatasetFormat::Text,
    )
    .unwrap();
    let lengths = [Tokens::new(10_000), Tokens::new(2_048), Tokens::new(17)];
    let prompts = d.corpus_prompts(&tok, &lengths, 1).unwrap();
    for (p, n) in prompts.iter().zip(lengths) {
        assert_eq!(tok.encode_count(p).unwrap() as u64, n.get());
    }
    assert!(prompts[0].matches("Ships waited").count() > 100);
    assert!(
        prompts[0].contains("quay.\nThe harbor"),
        "joined with a newline"
    );
    // One word without spaces, and text that ends in spaces.
    for corpus in ["word", "x", "end with spaces   \n"] {
        let d = parse(corpus, DatasetFormat::Text).unwrap();
        for n in [1_u64, 2, 3, 9, 100, 513] {
            let p = d.corpus_prompts(&tok, &[Tokens::new(n)], n).unwrap();
            assert_eq!(tok.encode_count(&p[0]).unwrap() as u64, n, "{corpus:?} {n}");
        }
    }
    // The bundled tokenizer spells each of these characters in three
    // tokens, and only the newline that joins the copies in one: other
    // starts find the counts that one start cannot reach.
    let d = parse("日本語のテキストです。", DatasetFormat::Text).unwrap();
    for n in [1_u64, 4, 10, 100, 1_000] {
        let p = d.corpus_prompts(&tok, &[Tokens::new(n)], 3).unwrap();
        assert_eq!(tok.encode_count(&p[0]).unwrap() as u64, n, "{n}");
    }
    // Some counts no text of it has (one content token; 512, which needs
    // more newlines than its characters cross): a typed error.
    for n in [2_u64, 513] {
        let err = d.corpus_prompts(&tok, &[Tokens::new(n)], 3).unwrap_err();
        assert!(matches!(err, WorkloadError::Inexact { .. }), "{err}");
    }
}

#[test]
fn corpus_prompts_are_exact_with_other_tokenizers() {
    let d = corpus(32 << 10, 12);
    for tok in [common::wordpiece(), common::unigram()] {
        let specials = tok.special_tokens_count() as u64;
        let lengths: Vec<Tokens> = (specials..specials + 40)
            .chain([1_000, 5_000])
            .map(Tokens::new)
            .collect();
        let prompts = d.corpus_prompts(&tok, &lengths, 2).unwrap();
        for (p, n) in prompts.iter().zip(&lengths) {
            assert_eq!(
                tok.encode_count(p).unwrap() as u64,
                n.get(),
                "{} {p:?}",
                tok.name()
            );
        }
        let err = d
            .corpus_prompts(&tok, &[Tokens::new(specials - 1)], 2)
            .unwrap_err();
        assert!(
            matches!(err, WorkloadError::TooShort { min, .. } if min == specials),
            "{err}"
        );
    }
}

#[test]
fn corpus_prompt_lengths_are_bounded() {
    let tok = common::bundled();
    let d = corpus(4 << 10, 13);
    let err = d.corpus_prompts(&tok, &[Tokens::new(0)], 1).unwrap_err();
    assert!(
        matches!(err, WorkloadError::TooShort { n: 0, min: 1, .. }),
        "{err}"
    );
    let err = d
        .corpus_prompts(&tok, &[Tokens::new(MAX_PROMPT_TOKENS + 1)], 1)
        .unwrap_err();
    assert!(matches!(err, WorkloadError::TooLong { .. }), "{err}");
    // Counting without special tokens, zero tokens is the empty prompt.
    let content = Tokenizer::bundled().unwrap().with_add_special_tokens(false);
    assert_eq!(
        d.corpus_prompts(&content, &[Tokens::new(0)], 1).unwrap(),
        [""]
    );
}

// -------------------------------------------------------------- Properties

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_parse_or_fail_without_panicking(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..256),
            // Near-JSON: brackets, quotes and keys in any order.
            prop::collection::vec(prop::sample::select(vec![
                "[", "]", "{", "}", ",", ":", "\"", "\n", "\r", " ", "\\", "\u{feff}",
                "\"conversations\"", "\"from\"", "\"value\"", "\"role\"", "\"content\"",
                "\"human\"", "\"gpt\"", "\"prompt\"", "\"messages\"", "\"output_tokens\"",
                "\"type\"", "\"text\"", "1", "-1", "2.5", "null", "true", "\"x\"", "\"\"",
            ]), 0..48).prop_map(|parts| parts.concat().into_bytes()),
        ],
    ) {
        for format in DatasetFormat::ALL {
            if let Ok(d) = Dataset::parse(&bytes, format, "p") {
                prop_assert_eq!(d.bytes(), bytes.len() as u64);
                prop_assert_eq!(d.records().is_empty(), format == DatasetFormat::Text);
            }
        }
    }

    #[test]
    fn jsonl_records_round_trip(
        rows in prop::collection::vec(
            (any::<String>(), prop::option::of(any::<u32>()), any::<bool>()),
            1..12,
        ),
    ) {
        let rows: Vec<_> = rows.into_iter().filter(|(p, _, _)| !p.trim().is_empty()).collect();
        prop_assume!(!rows.is_empty());
        let mut file = String::new();
        for (prompt, tokens, as_message) in &rows {
            let mut record = if *as_message {
                serde_json::json!({"messages": [{"role": "user", "content": prompt}]})
            } else {
                serde_json::json!({"prompt": prompt})
            };
            if let Some(t) = tokens {
                record["output_tokens"] = (*t).into();
            }
            file.push_str(&record.to_string());
            file.push('\n');
        }
        let d = parse(&file, DatasetFormat::Jsonl).unwrap();
        prop_assert_eq!(d.records().len(), rows.len());
        for (i, (r, (prompt, tokens, as_message))) in d.records().iter().zip(&rows).enumerate() {
            let expected = if *as_message {
                DatasetPrompt::Messages(vec![DatasetMessage {
                    role: "user".to_owned(),
                    content: prompt.clone(),
                }])
            } else {
                DatasetPrompt::Text(prompt.clone())
            };
            prop_assert_eq!(&r.prompt, &expected);
            let output = tokens.map_or(ReferenceOutput::None, ReferenceOutput::Tokens);
            prop_assert_eq!(&r.output, &output);
            prop_assert_eq!(r.line, i + 1);
        }
    }

    #[test]
    fn samples_are_distinct_indices_in_range(len in 1..300_usize, frac in 0.0..=1.0_f64,
                                            seed in any::<u64>()) {
        let d = records(len);
        let n = ((len as f64 * frac) as usize).max(1);
        let picked = d.sample(Some(n), seed).unwrap();
        prop_assert_eq!(picked.len(), n);
        prop_assert!(picked.iter().all(|&i| i < len));
        let distinct: std::collections::HashSet<_> = picked.iter().collect();
        prop_assert_eq!(distinct.len(), n);
        prop_assert_eq!(picked, d.sample(Some(n), seed).unwrap());
    }
}

/// Mooncake's block chains: prompts of exact lengths that share exactly the blocks their
/// chains share.
#[test]
fn block_prompts_share_exactly_their_common_blocks() {
    use speedmatrix_workload::{BlockMemo, PromptBuilder};
    let tok = Tokenizer::bundled().unwrap();
    let builder = PromptBuilder::new(tok.clone());
    let block = Tokens::new(256);
    let mut memo = BlockMemo::default();
    let build = |chain: &[u64], n: u64, memo: &mut BlockMemo| {
        let p = builder
            .block_prompt(chain, Tokens::new(n), block, 11, None, memo)
            .unwrap();
        let ids = tok.encode(&p.text).unwrap();
        assert_eq!(ids.len() as u64, n, "{chain:?}");
        ids
    };
    let a = build(&[1, 2, 3], 700, &mut memo);
    let b = build(&[1, 2, 9], 600, &mut memo);
    let c = build(&[1, 5], 300, &mut memo);
    let d = build(&[7], 200, &mut memo);
    let common = |x: &[u32], y: &[u32]| x.iter().zip(y).take_while(|(p, q)| p == q).count();
    // Whole blocks shared; a few tokens more may agree by chance, never a block's worth.
    assert!(
        (512..512 + 64).contains(&common(&a, &b)),
        "{}",
        common(&a, &b)
    );
    assert!(
        (256..256 + 64).contains(&common(&a, &c)),
        "{}",
        common(&a, &c)
    );
    assert!(common(&a, &d) < 64, "{}", common(&a, &d));
    // The same chain again is the same text, from the memo.
    let kept = memo.len();
    assert_eq!(build(&[1, 2, 3], 700, &mut memo), a);
    assert_eq!(memo.len(), kept);
    // A chain that does not fit its length is refused.
    let err = builder
        .block_prompt(&[1, 2], Tokens::new(900), block, 11, None, &mut memo)
        .unwrap_err();
    assert!(err.to_string().contains("blocks of 256"), "{err}");
}
