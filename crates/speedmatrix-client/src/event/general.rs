//! The general decode of a chunk, through serde_json, for every chunk the
//! fast path declines: read in one pass straight into the event.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use speedmatrix_units::Tokens;

use super::{StreamEvent, Usage};

/// The general decode, for every chunk the fast path declines: fills `event`
/// and returns whether the chunk is an error object.
pub(super) fn parse_serde(text: &str, event: &mut StreamEvent) -> Result<bool, serde_json::Error> {
    let mut is_error = false;
    let mut json = serde_json::Deserializer::from_str(text);
    ChunkSeed {
        event,
        is_error: &mut is_error,
    }
    .deserialize(&mut json)?;
    json.end()?;
    Ok(is_error)
}

// The chunk JSON is read in one pass straight into the event: no
// intermediate structs to build and move, unknown fields skipped unparsed.

/// The whole chunk object.
struct ChunkSeed<'e> {
    event: &'e mut StreamEvent,
    is_error: &'e mut bool,
}

impl<'de> DeserializeSeed<'de> for ChunkSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ChunkSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a completion chunk object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.as_str() {
                "choices" => map.next_value_seed(ChoicesSeed(self.event))?,
                "usage" => {
                    self.event.usage = map
                        .next_value::<Option<RawUsage>>()?
                        .map(RawUsage::into_usage);
                }
                "timings" => {
                    self.event.engine_tokens = map
                        .next_value::<Option<RawTimings>>()?
                        .and_then(|t| t.predicted_n)
                        .and_then(|n| n.0)
                        .map(Tokens::new);
                }
                "error" => *self.is_error |= map.next_value::<Option<IgnoredAny>>()?.is_some(),
                "object" => {
                    let object = map.next_value::<Option<Text<'de>>>()?;
                    *self.is_error |= object.is_some_and(|o| o.as_str() == "error");
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// `choices`: only the first element is read; `null` counts as empty.
struct ChoicesSeed<'e>(&'e mut StreamEvent);

impl<'de> DeserializeSeed<'de> for ChoicesSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ChoicesSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of choices")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.0.has_choices = seq.next_element_seed(ChoiceSeed(self.0))?.is_some();
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
}

/// `choices[0]`: completions' `text`, chat's `delta`, and `finish_reason`.
struct ChoiceSeed<'e>(&'e mut StreamEvent);

impl<'de> DeserializeSeed<'de> for ChoiceSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ChoiceSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a choice object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.as_str() {
                "text" => {
                    if let Some(text) = map.next_value::<Option<Text<'de>>>()? {
                        self.0.content = text.into_owned();
                    }
                }
                "delta" => map.next_value_seed(DeltaSeed(self.0))?,
                "finish_reason" => {
                    // TGI sends `""` on every chunk but the last: not a finish.
                    self.0.finish_reason = map
                        .next_value::<Option<Text<'de>>>()?
                        .filter(|t| !t.as_str().is_empty())
                        .map(Text::into_owned);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// A chat `delta`: `content`, and reasoning as `reasoning_content` (preferred) or `reasoning`.
struct DeltaSeed<'e>(&'e mut StreamEvent);

impl<'de> DeserializeSeed<'de> for DeltaSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DeltaSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a delta object")
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut had_reasoning_content = false;
        // After the content, whichever order the keys come in.
        let mut tools = String::new();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.as_str() {
                "content" => {
                    if let Some(text) = map.next_value::<Option<Text<'de>>>()? {
                        self.0.content = text.into_owned();
                    }
                }
                "reasoning_content" => {
                    if let Some(text) = map.next_value::<Option<Text<'de>>>()? {
                        self.0.reasoning_content = text.into_owned();
                        had_reasoning_content = true;
                    }
                }
                "reasoning" => {
                    let text = map.next_value::<Option<Text<'de>>>()?;
                    if let (Some(text), false) = (text, had_reasoning_content) {
                        self.0.reasoning_content = text.into_owned();
                    }
                }
                "tool_calls" => {
                    tools.push_str(&tool_call_text(&map.next_value()?));
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        self.0.content.push_str(&tools);
        Ok(())
    }
}

/// The text a `tool_calls` delta streams: each call's function name and argument text, in
/// order. A tool call is output the model generated (vLLM, SGLang and llama.cpp stream its
/// arguments token by token in `function.arguments`), so it counts as answer text: its
/// chunks are token arrivals and its text feeds an estimate. Anything but strings where
/// OpenAI's format has them is ignored, never an error.
fn tool_call_text(calls: &serde_json::Value) -> String {
    let mut text = String::new();
    for call in calls.as_array().into_iter().flatten() {
        let function = call.get("function");
        for part in ["name", "arguments"] {
            if let Some(s) = function.and_then(|f| f.get(part)).and_then(|v| v.as_str()) {
                text.push_str(s);
            }
        }
    }
    text
}

/// llama.cpp's `timings` object; only the running output count is read.
#[derive(Deserialize)]
struct RawTimings {
    #[serde(default)]
    predicted_n: Option<Count>,
}

/// A token count that is read when it is a non-negative integer and ignored
/// (`None`) otherwise, so that an odd value never breaks a stream.
struct Count(Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;
        impl<'de> Visitor<'de> for CountVisitor {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a token count")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                Ok(Count(Some(v)))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Count, E> {
                Ok(Count(None))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Count, E> {
                Ok(Count(None))
            }
        }
        deserializer.deserialize_any(CountVisitor)
    }
}

#[derive(Deserialize)]
struct RawUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<RawPromptDetails>,
}

#[derive(Deserialize)]
struct RawPromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl RawUsage {
    fn into_usage(self) -> Usage {
        Usage {
            prompt_tokens: Tokens::new(self.prompt_tokens.unwrap_or(0)),
            completion_tokens: Tokens::new(self.completion_tokens.unwrap_or(0)),
            cached_prompt_tokens: self
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .map(Tokens::new),
        }
    }
}

/// A JSON string borrowed from the input when it has no escapes.
///
/// Like `Cow<str>`, but measurably faster through serde_json (it asks for a
/// borrowed string directly instead of going through `deserialize_string`).
enum Text<'a> {
    Borrowed(&'a str),
    Owned(String),
}

impl Text<'_> {
    fn as_str(&self) -> &str {
        match self {
            Text::Borrowed(s) => s,
            Text::Owned(s) => s,
        }
    }

    fn into_owned(self) -> String {
        match self {
            Text::Borrowed(s) => s.to_owned(),
            Text::Owned(s) => s,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text::Borrowed(v))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text::Owned(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text::Owned(v))
            }
        }
        deserializer.deserialize_str(TextVisitor(std::marker::PhantomData))
    }
}
