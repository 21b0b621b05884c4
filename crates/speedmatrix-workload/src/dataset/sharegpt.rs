//! ShareGPT conversations: a JSON array of `{"conversations": [turn, …]}`.
//!
//! Real files are large (ShareGPT V3: 650 MB, 94K entries of long multi-turn
//! conversations), so nothing is deserialized into `serde_json::Value`: typed
//! visitors keep the first user turn and the turn after it, and skip every
//! other turn's text with [`IgnoredAny`] without allocating it.

use std::fmt;

use serde::Deserializer as _;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{DatasetPrompt, DatasetRecord, Parsed, ReferenceOutput, is_blank, json_message};
use crate::WorkloadError;

/// Parses a ShareGPT file's text (BOM already removed).
pub(super) fn parse(text: &str, name: &str) -> Result<Parsed, WorkloadError> {
    let mut state = State::default();
    let mut de = serde_json::Deserializer::from_str(text);
    let result = de
        .deserialize_seq(Entries { state: &mut state })
        .and_then(|()| de.end());
    if let Err(e) = result {
        return Err(error(&e, &state, text, name));
    }
    Ok(Parsed {
        records: state.records,
        skipped: state.skipped,
    })
}

/// What the visitors have read so far; on an error, `entry` is where it was.
#[derive(Default)]
struct State {
    records: Vec<DatasetRecord>,
    skipped: usize,
    /// The 1-based index of the entry being read (0 before the first).
    entry: usize,
}

fn error(e: &serde_json::Error, state: &State, text: &str, name: &str) -> WorkloadError {
    let at = format!("line {} column {}", e.line(), e.column());
    let what = json_message(e);
    let (line, message) = match e.classify() {
        serde_json::error::Category::Data if state.entry == 0 => {
            let hint = if text.trim_start().starts_with('{') {
                " (one JSON object per line is JSONL: give --dataset-format jsonl or name \
                 the file .jsonl)"
            } else {
                ""
            };
            (
                None,
                format!(
                    "{at}: {what}; a ShareGPT file is one JSON array of conversations, \
                     [{{\"conversations\": [{{\"from\": \"human\", \"value\": \"…\"}}, \
                     {{\"from\": \"gpt\", \"value\": \"…\"}}]}}, …]{hint}"
                ),
            )
        }
        serde_json::error::Category::Data => (
            Some(state.entry),
            format!(
                "entry {} of the array ({at}): {what}; each entry must be an object whose \
                 `conversations` is an array of turns {{\"from\": \"human\"|\"gpt\"|…, \
                 \"value\": \"…\"}} (or {{\"role\": …, \"content\": …}})",
                state.entry
            ),
        ),
        _ => {
            let inside = if state.entry == 0 {
                String::new()
            } else {
                format!(" (in entry {} of the array)", state.entry)
            };
            (None, format!("{at}: invalid JSON{inside}: {what}"))
        }
    };
    WorkloadError::Dataset {
        name: name.to_owned(),
        line,
        message,
    }
}

/// The top-level array.
struct Entries<'a> {
    state: &'a mut State,
}

impl<'de> Visitor<'de> for Entries<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON array of conversations")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if let Some(n) = seq.size_hint() {
            self.state.records.reserve(n);
        }
        loop {
            self.state.entry += 1;
            let Some(conversation) = seq.next_element_seed(Entry)? else {
                self.state.entry -= 1;
                return Ok(());
            };
            match conversation.prompt {
                Some(prompt) if !is_blank(&prompt) => {
                    let output = match conversation.answer {
                        Some(answer) if !is_blank(&answer) => ReferenceOutput::Text(answer),
                        _ => ReferenceOutput::None,
                    };
                    self.state.records.push(DatasetRecord {
                        prompt: DatasetPrompt::Text(prompt),
                        output,
                        line: self.state.entry,
                    });
                }
                _ => self.state.skipped += 1,
            }
        }
    }
}

/// What one entry gives: its first user turn and the assistant turn right
/// after it, when there are.
#[derive(Default)]
struct Conversation {
    prompt: Option<String>,
    answer: Option<String>,
}

/// One entry of the array: an object with `conversations`.
struct Entry;

impl<'de> DeserializeSeed<'de> for Entry {
    type Value = Conversation;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Conversation, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Entry {
    type Value = Conversation;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object with `conversations`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Conversation, A::Error> {
        let mut conversation = None;
        while let Some(key) = map.next_key_seed(KeyOf(&["conversations"]))? {
            match key {
                Some(_) if conversation.is_some() => {
                    return Err(de::Error::duplicate_field("conversations"));
                }
                Some(_) => conversation = Some(map.next_value_seed(Turns)?),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        conversation.ok_or_else(|| de::Error::missing_field("conversations"))
    }
}

/// Reads a map key without allocating it: `Some(i)` when it is `names[i]`.
struct KeyOf(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for KeyOf {
    type Value = Option<usize>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyOf {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|k| *k == v))
    }
}

/// The `conversations` array.
struct Turns;

impl<'de> DeserializeSeed<'de> for Turns {
    type Value = Conversation;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Conversation, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Turns {
    type Value = Conversation;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of turns")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Conversation, A::Error> {
        let mut out = Conversation::default();
        // Up to the first user turn: only its text is kept.
        while let Some(turn) = seq.next_element_seed(TurnSeed(Keep::User))? {
            if turn.role == Some(Role::User) {
                out.prompt = turn.text;
                // The turn right after it: its text is the reference answer
                // when an assistant wrote it.
                if let Some(next) = seq.next_element_seed(TurnSeed(Keep::Assistant))?
                    && next.role == Some(Role::Assistant)
                {
                    out.answer = next.text;
                }
                break;
            }
        }
        // The rest: checked to be objects, not read.
        while seq.next_element_seed(TurnSeed(Keep::Nothing))?.is_some() {}
        Ok(out)
    }
}

/// Who wrote a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
    System,
    Other,
}

impl Role {
    fn of(name: &str) -> Role {
        const USER: &[&str] = &["human", "user"];
        const ASSISTANT: &[&str] = &["gpt", "assistant", "chatgpt", "bard", "bing", "model"];
        let is = |names: &[&str]| names.iter().any(|n| n.eq_ignore_ascii_case(name));
        if is(USER) {
            Role::User
        } else if is(ASSISTANT) {
            Role::Assistant
        } else if name.eq_ignore_ascii_case("system") {
            Role::System
        } else {
            Role::Other
        }
    }
}

impl<'de> de::Deserialize<'de> for Role {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Role, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Role;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a role name (`human`, `gpt`, `user`, `assistant`, `system`, …)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Role, E> {
                Ok(Role::of(v))
            }
        }
        d.deserialize_str(V)
    }
}

/// Which turn text to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// A user turn's.
    User,
    /// An assistant turn's.
    Assistant,
    /// None: the turn only has to be an object.
    Nothing,
}

impl Keep {
    fn wants(self, role: Role) -> bool {
        match self {
            Keep::User => role == Role::User,
            Keep::Assistant => role == Role::Assistant,
            Keep::Nothing => false,
        }
    }
}

/// One turn as read: its role and, when kept, its text.
struct Turn {
    role: Option<Role>,
    text: Option<String>,
}

struct TurnSeed(Keep);

impl<'de> DeserializeSeed<'de> for TurnSeed {
    type Value = Turn;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Turn, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for TurnSeed {
    type Value = Turn;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a turn object {\"from\": …, \"value\": …}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Turn, A::Error> {
        const KEYS: &[&str] = &["from", "role", "value", "content"];
        let keep = self.0;
        let mut turn = Turn {
            role: None,
            text: None,
        };
        // Whether a text was seen (kept or not).
        let mut has_text = false;
        if keep == Keep::Nothing {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(turn);
        }
        while let Some(key) = map.next_key_seed(KeyOf(KEYS))? {
            match key {
                Some(0 | 1) => {
                    if turn.role.is_some() {
                        return Err(de::Error::custom(
                            "a turn names its role twice (`from` and `role`)",
                        ));
                    }
                    let role: Role = map.next_value()?;
                    // A text read before its role was kept in case: drop it.
                    if !keep.wants(role) {
                        turn.text = None;
                    }
                    turn.role = Some(role);
                }
                Some(_) => {
                    if has_text {
                        return Err(de::Error::custom(
                            "a turn has its text twice (`value` and `content`)",
                        ));
                    }
                    has_text = true;
                    match turn.role {
                        Some(role) if !keep.wants(role) => {
                            map.next_value::<IgnoredAny>()?;
                        }
                        _ => turn.text = Some(map.next_value_seed(TurnText)?),
                    }
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if turn.role.is_none() {
            return Err(de::Error::custom("a turn has no `from` (or `role`)"));
        }
        if !has_text {
            return Err(de::Error::custom("a turn has no `value` (or `content`)"));
        }
        Ok(turn)
    }
}

/// A turn's text: a string.
struct TurnText;

impl<'de> DeserializeSeed<'de> for TurnText {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_string(self)
    }
}

impl Visitor<'_> for TurnText {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a turn's text as a string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<String, E> {
        Ok(v)
    }
}
