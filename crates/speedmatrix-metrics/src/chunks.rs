//! A request's chunks, stored at a few bytes each.
//!
//! A 30 s window against a fast server holds tens of millions of chunks, so
//! a chunk is not kept as a [`Chunk`] (72 bytes) but as the difference from
//! the chunk before it: its arrival in nanoseconds after the previous one,
//! a flags byte, and the growth of each running count, every number a
//! LEB128 varint (zigzag for the signed ones). A vLLM chunk with continuous
//! usage takes 4–6 bytes. Nothing is rounded: iterating gives back exactly
//! the chunks pushed.

use std::fmt;
use std::time::Duration;

use speedmatrix_units::Tokens;

use crate::{Chunk, Timestamp, Usage};

const CONTENT: u8 = 1;
const REASONING: u8 = 1 << 1;
const USAGE: u8 = 1 << 2;
/// The usage's prompt count differs from the previous usage's (or is the first).
const PROMPT: u8 = 1 << 3;
const ENGINE: u8 = 1 << 4;

/// A request's chunks in arrival order, compactly encoded; see the module docs.
///
/// ```
/// use speedmatrix_metrics::{Chunk, Chunks, Timestamp, Usage};
/// use speedmatrix_units::Tokens;
///
/// let mut chunks = Chunks::new();
/// for i in 1..=3u64 {
///     let usage = Usage::new(Tokens::new(8), Tokens::new(i));
///     chunks.push(Chunk::content(Timestamp::from_millis(10 * i)).with_usage(usage));
/// }
/// assert_eq!(chunks.len(), 3);
/// assert_eq!(chunks.last().unwrap().usage.unwrap().completion_tokens, Tokens::new(3));
/// assert!(chunks.encoded_bytes() < 3 * 8);
/// ```
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Chunks {
    bytes: Vec<u8>,
    len: usize,
    /// The decoder's state after the last chunk, to encode the next one.
    state: State,
    last: Option<Chunk>,
    /// `(index, tokens)` of chunks with tokenized-text counts, by index:
    /// only estimates have them, so they live beside the stream.
    text_tokens: Vec<(usize, u32)>,
}

/// What a chunk is encoded relative to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
struct State {
    at_ns: u128,
    completion: u64,
    prompt: Option<u64>,
    engine: u64,
}

impl Chunks {
    /// No chunks.
    pub const fn new() -> Self {
        Chunks {
            bytes: Vec::new(),
            len: 0,
            state: State {
                at_ns: 0,
                completion: 0,
                prompt: None,
                engine: 0,
            },
            last: None,
            text_tokens: Vec::new(),
        }
    }

    /// Appends a chunk (timestamps need not be in order; metrics check that).
    pub fn push(&mut self, c: Chunk) {
        let s = &mut self.state;
        let mut flags = 0;
        if c.content {
            flags |= CONTENT;
        }
        if c.reasoning {
            flags |= REASONING;
        }
        if let Some(u) = c.usage {
            flags |= USAGE;
            if s.prompt != Some(u.prompt_tokens.get()) {
                flags |= PROMPT;
            }
        }
        if c.engine_count.is_some() {
            flags |= ENGINE;
        }
        let at = c.at.offset().as_nanos();
        put_signed(&mut self.bytes, delta(at, s.at_ns));
        self.bytes.push(flags);
        s.at_ns = at;
        if let Some(u) = c.usage {
            let n = u.completion_tokens.get();
            put_signed(
                &mut self.bytes,
                delta(u128::from(n), u128::from(s.completion)),
            );
            s.completion = n;
            if flags & PROMPT != 0 {
                put(&mut self.bytes, u128::from(u.prompt_tokens.get()));
                s.prompt = Some(u.prompt_tokens.get());
            }
        }
        if let Some(e) = c.engine_count {
            let n = e.get();
            put_signed(&mut self.bytes, delta(u128::from(n), u128::from(s.engine)));
            s.engine = n;
        }
        if let Some(n) = c.text_tokens {
            self.text_tokens.push((self.len, n));
        }
        self.last = Some(c);
        self.len += 1;
    }

    /// How many chunks.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunks in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            bytes: &self.bytes,
            state: State::default(),
            text_tokens: &self.text_tokens,
            index: 0,
        }
    }

    /// The last chunk pushed.
    pub fn last(&self) -> Option<Chunk> {
        let mut c = self.last?;
        c.text_tokens = self.text_tokens_of(self.len - 1);
        Some(c)
    }

    /// Sets (or with `None` clears) the tokenized-text count of chunk `index`;
    /// ignored past the end.
    pub fn set_text_tokens(&mut self, index: usize, tokens: Option<u32>) {
        if index >= self.len {
            return;
        }
        match (
            self.text_tokens.binary_search_by_key(&index, |e| e.0),
            tokens,
        ) {
            (Ok(i), Some(n)) => self.text_tokens[i].1 = n,
            (Ok(i), None) => {
                self.text_tokens.remove(i);
            }
            (Err(i), Some(n)) => self.text_tokens.insert(i, (index, n)),
            (Err(_), None) => {}
        }
    }

    /// Frees spare capacity, for a request that will get no more chunks.
    pub fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
        self.text_tokens.shrink_to_fit();
    }

    /// Bytes of the encoded stream (not counting spare capacity).
    pub fn encoded_bytes(&self) -> usize {
        self.bytes.len() + self.text_tokens.len() * std::mem::size_of::<(usize, u32)>()
    }

    fn text_tokens_of(&self, index: usize) -> Option<u32> {
        self.text_tokens
            .binary_search_by_key(&index, |e| e.0)
            .ok()
            .map(|i| self.text_tokens[i].1)
    }
}

impl fmt::Debug for Chunks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl From<Vec<Chunk>> for Chunks {
    fn from(chunks: Vec<Chunk>) -> Self {
        chunks.into_iter().collect()
    }
}

impl FromIterator<Chunk> for Chunks {
    fn from_iter<I: IntoIterator<Item = Chunk>>(iter: I) -> Self {
        let mut chunks = Chunks::new();
        for c in iter {
            chunks.push(c);
        }
        chunks
    }
}

impl<'a> IntoIterator for &'a Chunks {
    type Item = Chunk;
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The chunks of a [`Chunks`], decoded in order.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    bytes: &'a [u8],
    state: State,
    text_tokens: &'a [(usize, u32)],
    index: usize,
}

impl Iterator for Iter<'_> {
    type Item = Chunk;

    fn next(&mut self) -> Option<Chunk> {
        if self.bytes.is_empty() {
            return None;
        }
        let s = &mut self.state;
        s.at_ns = undelta(s.at_ns, get_signed(&mut self.bytes));
        let (&flags, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        let mut c = Chunk::empty(timestamp(s.at_ns));
        c.content = flags & CONTENT != 0;
        c.reasoning = flags & REASONING != 0;
        if flags & USAGE != 0 {
            s.completion = narrow(undelta(
                u128::from(s.completion),
                get_signed(&mut self.bytes),
            ));
            if flags & PROMPT != 0 {
                s.prompt = Some(narrow(get(&mut self.bytes)));
            }
            c.usage = Some(Usage::new(
                Tokens::new(s.prompt.unwrap_or(0)),
                Tokens::new(s.completion),
            ));
        }
        if flags & ENGINE != 0 {
            s.engine = narrow(undelta(u128::from(s.engine), get_signed(&mut self.bytes)));
            c.engine_count = Some(Tokens::new(s.engine));
        }
        if let Some((&(i, n), rest)) = self.text_tokens.split_first()
            && i == self.index
        {
            c.text_tokens = Some(n);
            self.text_tokens = rest;
        }
        self.index += 1;
        Some(c)
    }
}

fn delta(now: u128, before: u128) -> i128 {
    // Both come from u64 counts or a `Duration`'s nanoseconds, so the
    // difference fits; saturate for the impossible rest.
    i128::try_from(now)
        .unwrap_or(i128::MAX)
        .saturating_sub(i128::try_from(before).unwrap_or(i128::MAX))
}

fn undelta(before: u128, d: i128) -> u128 {
    u128::try_from(
        i128::try_from(before)
            .unwrap_or(i128::MAX)
            .saturating_add(d),
    )
    .unwrap_or(0)
}

fn narrow(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn timestamp(ns: u128) -> Timestamp {
    let secs = u64::try_from(ns / 1_000_000_000).unwrap_or(u64::MAX);
    let nanos = (ns % 1_000_000_000) as u32;
    Timestamp::from_offset(Duration::new(secs, nanos))
}

fn put(out: &mut Vec<u8>, mut n: u128) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_signed(out: &mut Vec<u8>, n: i128) {
    put(out, ((n << 1) ^ (n >> 127)) as u128);
}

/// Reads a varint; the encoder wrote it, so a short or over-long one only
/// comes from a bug and reads as what is there.
fn get(bytes: &mut &[u8]) -> u128 {
    let mut n = 0u128;
    let mut shift = 0;
    while let Some((&b, rest)) = bytes.split_first() {
        *bytes = rest;
        if shift < 128 {
            n |= u128::from(b & 0x7f) << shift;
        }
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    n
}

fn get_signed(bytes: &mut &[u8]) -> i128 {
    let z = get(bytes);
    ((z >> 1) as i128) ^ -((z & 1) as i128)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn chunk() -> impl Strategy<Value = Chunk> {
        (
            any::<u64>(),
            any::<u32>(),
            any::<[bool; 2]>(),
            prop::option::of((any::<u64>(), any::<u64>())),
            prop::option::of(any::<u64>()),
            prop::option::of(any::<u32>()),
        )
            .prop_map(
                |(secs, nanos, [content, reasoning], usage, engine, text)| Chunk {
                    at: Timestamp::from_offset(Duration::new(secs, nanos % 1_000_000_000)),
                    content,
                    reasoning,
                    usage: usage.map(|(p, c)| Usage::new(Tokens::new(p), Tokens::new(c))),
                    engine_count: engine.map(Tokens::new),
                    text_tokens: text,
                },
            )
    }

    proptest! {
        #[test]
        fn every_chunk_comes_back_exactly(list in prop::collection::vec(chunk(), 0..50)) {
            let chunks = Chunks::from(list.clone());
            prop_assert_eq!(chunks.len(), list.len());
            prop_assert_eq!(chunks.iter().collect::<Vec<_>>(), list.clone());
            prop_assert_eq!(chunks.last(), list.last().copied());
        }

        #[test]
        fn text_tokens_set_later_read_back(list in prop::collection::vec(chunk(), 1..30), edits in prop::collection::vec((any::<prop::sample::Index>(), prop::option::of(any::<u32>())), 0..20)) {
            let mut chunks = Chunks::from(list.clone());
            let mut expected = list;
            for (i, n) in edits {
                let i = i.index(expected.len());
                chunks.set_text_tokens(i, n);
                expected[i].text_tokens = n;
            }
            prop_assert_eq!(chunks.iter().collect::<Vec<_>>(), expected);
        }
    }

    #[test]
    fn a_vllm_chunk_takes_a_few_bytes() {
        // 2,000 tokens 10 ms apart, usage on each, one prompt count.
        let chunks: Chunks = (1..=2_000u64)
            .map(|i| {
                Chunk::content(Timestamp::from_millis(1_000 + 10 * i))
                    .with_usage(Usage::new(Tokens::new(1_024), Tokens::new(i)))
            })
            .collect();
        // A 10 ms gap takes 4 bytes, the flags 1, the count's growth 1; the
        // first chunk also carries its offset and the prompt count.
        let per_chunk = chunks.encoded_bytes() as f64 / 2_000.0;
        assert!(per_chunk < 6.01, "{per_chunk} bytes per chunk");
    }
}
