//! JSONL records: one JSON object per line, `prompt` or `messages`, and
//! optionally `output_tokens`.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};

use super::{
    DatasetMessage, DatasetPrompt, DatasetRecord, Parsed, ReferenceOutput, is_blank, json_message,
    utf8_error,
};
use crate::WorkloadError;

/// What every line is told it should look like.
pub(super) const EXPECTED: &str = "each line must be one JSON object, \
     {\"prompt\": \"…\", \"output_tokens\": 128} or \
     {\"messages\": [{\"role\": \"user\", \"content\": \"…\"}], \"output_tokens\": 128} \
     (`output_tokens` optional)";

/// Parses a JSONL file's bytes (BOM already removed).
pub(super) fn parse(bytes: &[u8], name: &str) -> Result<Parsed, WorkloadError> {
    let mut records = Vec::new();
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = i + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text = std::str::from_utf8(raw).map_err(|e| {
            let column = e.valid_up_to() + 1;
            bad(
                name,
                line,
                format!("column {column}: {}", utf8_error(raw, &e)),
            )
        })?;
        if is_blank(text) {
            continue;
        }
        let first = records.is_empty();
        records.push(record(text, line, first).map_err(|message| bad(name, line, message))?);
    }
    Ok(Parsed {
        records,
        skipped: 0,
    })
}

fn bad(name: &str, line: usize, message: String) -> WorkloadError {
    WorkloadError::Dataset {
        name: name.to_owned(),
        line: Some(line),
        message,
    }
}

/// One line's record, or what is wrong with it.
/// `first`: no record came before it (a JSON array there hints at ShareGPT).
fn record(text: &str, line: usize, first: bool) -> Result<DatasetRecord, String> {
    let parsed: Line = serde_json::from_str(text).map_err(|e| {
        let what = json_message(&e);
        let hint = if e.is_eof() {
            " (a record must fit on one line)"
        } else if text.trim_start().starts_with('[') && first {
            " (a JSON array of conversations is ShareGPT: give --dataset-format sharegpt or \
             name the file .json)"
        } else {
            ""
        };
        let kind = if e.is_data() { "" } else { "invalid JSON: " };
        format!("column {}: {kind}{what}{hint}; {EXPECTED}", e.column())
    })?;
    let prompt = match (parsed.prompt, parsed.messages) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "both `prompt` and `messages`: give one; {EXPECTED}"
            ));
        }
        (None, None) => {
            return Err(format!("neither `prompt` nor `messages`; {EXPECTED}"));
        }
        (Some(p), None) if is_blank(&p) => return Err("the prompt is empty".to_owned()),
        (Some(p), None) => DatasetPrompt::Text(p),
        (None, Some(m)) if m.is_empty() => {
            return Err("`messages` is empty: give at least one message".to_owned());
        }
        (None, Some(m)) if m.iter().all(|m| is_blank(&m.content)) => {
            return Err("every message's content is empty".to_owned());
        }
        (None, Some(m)) => DatasetPrompt::Messages(
            m.into_iter()
                .map(|m| DatasetMessage {
                    role: m.role,
                    content: m.content,
                })
                .collect(),
        ),
    };
    let output = match parsed.output_tokens {
        Some(n) => ReferenceOutput::Tokens(n),
        None => ReferenceOutput::None,
    };
    Ok(DatasetRecord {
        prompt,
        output,
        line,
    })
}

/// A line as written.
#[derive(Deserialize)]
#[serde(expecting = "a JSON object")]
struct Line {
    #[serde(default, deserialize_with = "prompt")]
    prompt: Option<String>,
    #[serde(default)]
    messages: Option<Vec<Message>>,
    #[serde(default, deserialize_with = "output_tokens")]
    output_tokens: Option<u32>,
}

#[derive(Deserialize)]
#[serde(expecting = "a message object {\"role\": …, \"content\": …}")]
struct Message {
    role: String,
    #[serde(deserialize_with = "content")]
    content: String,
}

/// `prompt`: a string (`null` counts as absent).
fn prompt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("`prompt` to be a string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_owned()))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// `output_tokens`: a whole number from 0 to `u32::MAX` (`null` counts as absent).
fn output_tokens<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<u32>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("`output_tokens` to be a whole number of tokens, 0 or more")
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            u32::try_from(v).map(Some).map_err(|_| {
                E::custom(format!(
                    "`output_tokens` {v} is too large: at most {}",
                    u32::MAX
                ))
            })
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            match u64::try_from(v) {
                Ok(v) => self.visit_u64(v),
                Err(_) => Err(E::custom(format!(
                    "`output_tokens` {v} is negative: give a whole number of tokens, 0 or more"
                ))),
            }
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            // `128.0` is a whole number; `12.5` and `-1.0` are not token counts.
            if v.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&v) {
                Ok(Some(v as u32))
            } else {
                Err(E::custom(format!(
                    "`output_tokens` {v} is not a whole number of tokens from 0 to {}",
                    u32::MAX
                )))
            }
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// A message's `content`: a string, or an array of `{"type": "text", "text": …}`
/// parts joined with newlines (as servers join them).
fn content<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("`content` to be a string or an array of text parts")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_owned())
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
            Ok(v)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<String, A::Error> {
            let mut out = String::new();
            let mut first = true;
            while let Some(part) = seq.next_element::<Part>()? {
                match (part.kind.as_str(), part.text) {
                    ("text", Some(text)) => {
                        if !first {
                            out.push('\n');
                        }
                        out.push_str(&text);
                        first = false;
                    }
                    ("text", None) => {
                        return Err(de::Error::custom("a text part without `text`"));
                    }
                    (other, _) => {
                        return Err(de::Error::custom(format!(
                            "a content part of type `{other}`: only text parts \
                             ({{\"type\": \"text\", \"text\": \"…\"}}) are read"
                        )));
                    }
                }
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}

#[derive(Deserialize)]
#[serde(expecting = "a content part {\"type\": \"text\", \"text\": …}")]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}
