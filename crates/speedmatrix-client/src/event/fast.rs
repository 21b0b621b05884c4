//! A single-pass reader for the chunk shapes servers actually send.
//!
//! serde_json spends most of a chunk's decode time on generic machinery:
//! visitor dispatch per key and a general string scanner for the many
//! fields nobody reads (`id`, `model`, `created`, `logprobs`, ...). This
//! reader walks the bytes once and fills the event directly.
//!
//! It accepts a strict subset of JSON and gives up (`None`) on anything
//! else: `\u` escapes, a raw control character in a string, a duplicate
//! usage field, a value of an unexpected type, deep nesting. The caller then
//! decodes the chunk with serde_json from scratch, so every error and every
//! odd-but-valid shape is handled there, and a chunk this reader accepts
//! yields exactly the event serde_json would (a proptest checks this).

use std::borrow::Cow;

use speedmatrix_units::Tokens;

use super::{StreamEvent, Usage};

/// Nesting allowed inside skipped values; deeper chunks go to serde_json.
const MAX_DEPTH: u8 = 32;

/// Fills `event` from `text`; returns whether the chunk is an error object,
/// or `None` to ask for the serde_json path (`event` may be half-filled).
///
/// `opening` carries what the stream's previous chunk taught: a server
/// opens every chunk with the same fields nobody reads (`{"id":"cmpl-1",
/// "object":"text_completion","created":1732000000,"model":"m",`), and bytes
/// equal to ones already read as valid and of no effect need no reading.
pub(super) fn parse(text: &str, event: &mut StreamEvent, opening: &mut Opening) -> Option<bool> {
    let mut r = Reader { s: text, i: 0 };
    let (is_error, learned) = r.chunk(event, opening)?;
    r.ws();
    if r.i != r.s.len() {
        return None;
    }
    if let Some(end) = learned {
        opening.bytes.clear();
        opening.bytes.extend_from_slice(&text.as_bytes()[..end]);
    }
    Some(is_error)
}

/// The start of a stream's last chunk that the next one may skip: from `{`
/// through the comma after its last leading field of no effect (not
/// `choices`, `usage`, `timings`, `error`, nor an `object` of `"error"`).
#[derive(Debug, Clone, Default)]
pub(super) struct Opening {
    bytes: Vec<u8>,
}

/// Most bytes an opening keeps: ids and model names are short; a longer
/// opening is not worth a copy per chunk.
const MAX_OPENING: usize = 512;

struct Reader<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.s.as_bytes()
    }

    fn ws(&mut self) {
        let b = self.bytes();
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = b.get(self.i) {
            self.i += 1;
        }
    }

    /// The next non-whitespace byte, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes().get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    fn try_eat(&mut self, c: u8) -> bool {
        self.eat(c).is_some()
    }

    /// `,` then more, or the closing byte.
    fn more(&mut self, close: u8) -> Option<bool> {
        match self.peek()? {
            b',' => {
                self.i += 1;
                Some(true)
            }
            c if c == close => {
                self.i += 1;
                Some(false)
            }
            _ => None,
        }
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.bytes().get(self.i..end)? == word).then(|| self.i = end)
    }

    /// True (consumed) when the next value is `null`.
    fn null(&mut self) -> Option<bool> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(true);
        }
        Some(false)
    }

    /// A string, borrowed unless it has escapes; `\u` escapes give up.
    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        let start = self.i;
        let end = self.plain_run();
        match self.bytes().get(end)? {
            b'"' => {
                self.i = end + 1;
                Some(Cow::Borrowed(self.s.get(start..end)?))
            }
            b'\\' => self.escaped(start, end).map(Cow::Owned),
            _ => None,
        }
    }

    /// End of the run from `self.i` without a quote, backslash or control byte.
    fn plain_run(&self) -> usize {
        let b = self.bytes();
        let mut j = self.i;
        // Eight bytes at a time; the lowest flagged byte is the first special one.
        while let Some(word) = b.get(j..j + 8) {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            let special = special_bytes(u64::from_le_bytes(w));
            if special != 0 {
                return j + (special.trailing_zeros() / 8) as usize;
            }
            j += 8;
        }
        while let Some(&c) = b.get(j) {
            if c == b'"' || c == b'\\' || c < 0x20 {
                break;
            }
            j += 1;
        }
        j
    }

    /// The rest of a string whose first escape is at `at`.
    fn escaped(&mut self, start: usize, at: usize) -> Option<String> {
        let mut out = String::with_capacity(at - start + 16);
        out.push_str(self.s.get(start..at)?);
        self.i = at;
        loop {
            match *self.bytes().get(self.i)? {
                b'"' => {
                    self.i += 1;
                    return Some(out);
                }
                b'\\' => {
                    out.push(match *self.bytes().get(self.i + 1)? {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        _ => return None,
                    });
                    self.i += 2;
                }
                c if c < 0x20 => return None,
                _ => {
                    let from = self.i;
                    self.i = self.plain_run();
                    out.push_str(self.s.get(from..self.i)?);
                }
            }
        }
    }

    /// `null` or a string.
    fn opt_string(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.null()? {
            return Some(None);
        }
        self.string().map(Some)
    }

    /// Any JSON value, unread.
    fn skip(&mut self, depth: u8) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => {
                self.i += 1;
                let depth = depth.checked_sub(1)?;
                if self.try_eat(b'}') {
                    return Some(());
                }
                loop {
                    self.string()?;
                    self.eat(b':')?;
                    self.skip(depth)?;
                    if !self.more(b'}')? {
                        return Some(());
                    }
                }
            }
            b'[' => {
                self.i += 1;
                let depth = depth.checked_sub(1)?;
                if self.try_eat(b']') {
                    return Some(());
                }
                loop {
                    self.skip(depth)?;
                    if !self.more(b']')? {
                        return Some(());
                    }
                }
            }
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// A number in JSON's grammar: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        if self.bytes().get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match *self.bytes().get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.bytes().get(self.i) == Some(&b'.') {
            self.i += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.bytes().get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.bytes().get(self.i) {
                self.i += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.bytes().get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let from = self.i;
        self.digits();
        (self.i > from).then_some(())
    }

    /// `null` or a plain unsigned integer that fits a `u64`.
    fn opt_u64(&mut self) -> Option<Option<u64>> {
        if self.null()? {
            return Some(None);
        }
        let b = self.bytes();
        let mut n: u64 = match *b.get(self.i)? {
            b'0' => {
                self.i += 1;
                0
            }
            c @ b'1'..=b'9' => {
                self.i += 1;
                u64::from(c - b'0')
            }
            _ => return None,
        };
        if n > 0 {
            while let Some(&c) = b.get(self.i).filter(|c| c.is_ascii_digit()) {
                n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
                self.i += 1;
            }
        }
        // A fraction, exponent or leading zero is not a plain integer.
        match b.get(self.i) {
            Some(b'.' | b'e' | b'E' | b'0'..=b'9') => None,
            _ => Some(Some(n)),
        }
    }

    /// The chunk object; returns whether it is an error object, and the end
    /// of a new opening to remember (see [`Opening`]), if it learned one.
    fn chunk(
        &mut self,
        event: &mut StreamEvent,
        opening: &Opening,
    ) -> Option<(bool, Option<usize>)> {
        let mut is_error = false;
        // Equal bytes read the same way: resume after the known opening.
        let resumed = !opening.bytes.is_empty() && self.bytes().starts_with(&opening.bytes);
        if resumed {
            self.i = opening.bytes.len();
        } else {
            self.eat(b'{')?;
            if self.try_eat(b'}') {
                return Some((false, None));
            }
        }
        let (mut leading, mut learned) = (!resumed, None);
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            let effect = match &*key {
                "choices" => {
                    self.choices(event)?;
                    true
                }
                "usage" => {
                    event.usage = self.usage()?;
                    true
                }
                "timings" => {
                    event.engine_tokens = self.timings()?;
                    true
                }
                "error" => {
                    if !self.null()? {
                        self.skip(MAX_DEPTH)?;
                        is_error = true;
                    }
                    true
                }
                "object" => {
                    let error = self.opt_string()?.is_some_and(|o| o == "error");
                    is_error |= error;
                    error
                }
                _ => {
                    self.skip(MAX_DEPTH)?;
                    false
                }
            };
            if !self.more(b'}')? {
                return Some((is_error, learned));
            }
            leading &= !effect;
            if leading && self.i <= MAX_OPENING {
                learned = Some(self.i);
            }
        }
    }

    fn choices(&mut self, event: &mut StreamEvent) -> Option<()> {
        if self.null()? {
            return Some(());
        }
        self.eat(b'[')?;
        if self.try_eat(b']') {
            event.has_choices = false;
            return Some(());
        }
        self.choice(event)?;
        event.has_choices = true;
        while self.more(b']')? {
            self.skip(MAX_DEPTH)?;
        }
        Some(())
    }

    fn choice(&mut self, event: &mut StreamEvent) -> Option<()> {
        self.eat(b'{')?;
        if self.try_eat(b'}') {
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            match &*key {
                "text" => {
                    if let Some(text) = self.opt_string()? {
                        replace(&mut event.content, &text);
                    }
                }
                "delta" => {
                    if !self.null()? {
                        self.delta(event)?;
                    }
                }
                "finish_reason" => {
                    event.finish_reason = self
                        .opt_string()?
                        .filter(|f| !f.is_empty())
                        .map(Cow::into_owned);
                }
                _ => self.skip(MAX_DEPTH)?,
            }
            if !self.more(b'}')? {
                return Some(());
            }
        }
    }

    fn delta(&mut self, event: &mut StreamEvent) -> Option<()> {
        self.eat(b'{')?;
        if self.try_eat(b'}') {
            return Some(());
        }
        let mut had_reasoning_content = false;
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            match &*key {
                "content" => {
                    if let Some(text) = self.opt_string()? {
                        replace(&mut event.content, &text);
                    }
                }
                "reasoning_content" => {
                    if let Some(text) = self.opt_string()? {
                        replace(&mut event.reasoning_content, &text);
                        had_reasoning_content = true;
                    }
                }
                "reasoning" => {
                    if let (Some(text), false) = (self.opt_string()?, had_reasoning_content) {
                        replace(&mut event.reasoning_content, &text);
                    }
                }
                // Rare: the general path reads tool calls.
                "tool_calls" => return None,
                _ => self.skip(MAX_DEPTH)?,
            }
            if !self.more(b'}')? {
                return Some(());
            }
        }
    }

    /// `usage`: `null` or an object; a repeated field gives up (serde rejects it).
    fn usage(&mut self) -> Option<Option<Usage>> {
        if self.null()? {
            return Some(None);
        }
        let (mut prompt, mut completion, mut cached) = (None, None, None);
        self.fields(|r, key| match key {
            "prompt_tokens" => set_once(&mut prompt, r.opt_u64()?),
            "completion_tokens" => set_once(&mut completion, r.opt_u64()?),
            "prompt_tokens_details" => set_once(&mut cached, r.details()?),
            _ => r.skip(MAX_DEPTH),
        })?;
        Some(Some(Usage {
            prompt_tokens: Tokens::new(prompt.flatten().unwrap_or(0)),
            completion_tokens: Tokens::new(completion.flatten().unwrap_or(0)),
            cached_prompt_tokens: cached.flatten().flatten().map(Tokens::new),
        }))
    }

    /// llama.cpp's `timings`: `null`, or an object whose `predicted_n` is
    /// the running output count; anything but a plain count gives up.
    fn timings(&mut self) -> Option<Option<Tokens>> {
        if self.null()? {
            return Some(None);
        }
        let mut predicted = None;
        self.fields(|r, key| match key {
            "predicted_n" => set_once(&mut predicted, r.opt_u64()?),
            _ => r.skip(MAX_DEPTH),
        })?;
        Some(predicted.flatten().map(Tokens::new))
    }

    /// `prompt_tokens_details`: `null`, or an object whose `cached_tokens` may be set.
    fn details(&mut self) -> Option<Option<Option<u64>>> {
        if self.null()? {
            return Some(None);
        }
        let mut cached = None;
        self.fields(|r, key| match key {
            "cached_tokens" => set_once(&mut cached, r.opt_u64()?),
            _ => r.skip(MAX_DEPTH),
        })?;
        Some(Some(cached.flatten()))
    }

    /// An object, handing each key to `field` to read its value.
    fn fields(&mut self, mut field: impl FnMut(&mut Self, &str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.try_eat(b'}') {
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.eat(b':')?;
            field(self, &key)?;
            if !self.more(b'}')? {
                return Some(());
            }
        }
    }
}

/// `*slot = text`, in the memory `slot` already has.
fn replace(slot: &mut String, text: &str) {
    slot.clear();
    slot.push_str(text);
}

/// Records a field's value; `None` when it was already set.
fn set_once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    slot.is_none().then(|| *slot = Some(value))
}

/// The high bit set in each byte of `w` that is `"`, `\` or below 0x20, and
/// maybe in bytes above such a one (the classic has-zero-byte and
/// has-less-than tricks: borrows only run upward, so the lowest flag is exact).
fn special_bytes(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_bytes = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let quote = zero_bytes(w ^ (ONES * u64::from(b'"')));
    let backslash = zero_bytes(w ^ (ONES * u64::from(b'\\')));
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGHS;
    quote | backslash | control
}

#[cfg(test)]
mod tests;
