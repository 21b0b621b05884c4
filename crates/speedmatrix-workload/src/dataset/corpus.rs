//! Prompts cut from a text corpus to exact token counts.
//!
//! Each prompt starts at a seeded word of the corpus. A window of text from
//! there, a little longer than the prompt needs (its size estimated from the
//! bytes per token seen so far), is encoded once; the prompt is cut at the
//! token where the count is reached and repaired where re-encoding merges
//! tokens across the cut, as generated prompts are
//! ([`cut_to_count`](crate::prompt::cut_to_count)), then encoded whole once to
//! check it. A 16K-token prompt costs about two encodes of its text; the
//! windows of several prompts, and then their cuts, are encoded together,
//! in parallel. A prompt whose check fails is built again on its own.

use speedmatrix_units::Tokens;

use crate::prompt::{MAX_PROMPT_TOKENS, cut_to_count};
use crate::text::{SplitMix64, mix64};
use crate::{Tokenizer, WorkloadError};

/// Keeps the prompt streams of corpora apart from other seeded draws.
const SALT: u64 = 0x636f_7270_7573_0001;
/// Tokens encoded beyond the cut, so the repair can move it forward.
const SLACK_TOKENS: usize = 64;
/// The first guess of bytes per token (English text with a BPE: about 4.5).
const FIRST_BYTES_PER_TOKEN: f64 = 5.0;
/// Text encoded to measure a corpus's bytes per token before the first batch.
const CALIBRATION_BYTES: usize = 16 << 10;
/// Windows tried per prompt before giving up (each at least twice as long).
const MAX_ROUNDS: u32 = 8;
/// Text encoded at once (in parallel) by a batch of prompts: enough for
/// every core, little enough that the encodings' memory stays small.
const BATCH_BYTES: usize = 2 << 20;
/// Other starts tried when no cut from a start has the count.
const RETRIES: u32 = 3;
/// How far a start or an end looks for a word boundary, in bytes.
const WORD_REACH: usize = 256;

/// One prompt per length, from `corpus` (non-empty).
pub(super) fn prompts(
    corpus: &str,
    tok: &Tokenizer,
    lengths: &[Tokens],
    seed: u64,
) -> Result<Vec<String>, WorkloadError> {
    let mut rng = SplitMix64::new(mix64(seed ^ SALT));
    let specials = tok.special_tokens_count();
    // Where each prompt starts: one draw per prompt whatever its length, so
    // prompt i starts at the same place for a given seed however long the
    // others are. The first length that cannot be built is the error.
    let mut plans = Vec::with_capacity(lengths.len());
    for &n in lengths {
        let start = word_start(corpus, rng.below(corpus.len().max(1)));
        if n.get() > MAX_PROMPT_TOKENS {
            return Err(WorkloadError::TooLong {
                n: n.get(),
                max: MAX_PROMPT_TOKENS,
            });
        }
        let n = usize::try_from(n.get()).unwrap_or(usize::MAX);
        if n < specials {
            return Err(WorkloadError::TooShort {
                n: n as u64,
                min: specials as u64,
                what: "the special tokens",
                tokenizer: tok.name().to_owned(),
            });
        }
        plans.push(Plan { start, n });
    }
    let mut cutter = Cutter {
        corpus,
        tok,
        specials,
        bytes_per_token: FIRST_BYTES_PER_TOKEN,
    };
    if let Some(first) = plans.first() {
        cutter.calibrate(first.start)?;
    }
    let mut out = Vec::with_capacity(plans.len());
    let mut from = 0;
    while from < plans.len() {
        // A batch of about BATCH_BYTES of text (at least one prompt).
        let mut to = from;
        let mut bytes = 0;
        while to < plans.len() && (to == from || bytes < BATCH_BYTES) {
            bytes += cutter.window_bytes(plans[to].n);
            to += 1;
        }
        out.extend(cutter.batch(&plans[from..to])?);
        from = to;
    }
    Ok(out)
}

/// Where a prompt starts and how many tokens it has.
#[derive(Debug, Clone, Copy)]
struct Plan {
    start: usize,
    n: usize,
}

/// Cuts prompts from one corpus with one tokenizer.
struct Cutter<'a> {
    corpus: &'a str,
    tok: &'a Tokenizer,
    specials: usize,
    /// Bytes per token seen so far: sizes the windows.
    bytes_per_token: f64,
}

impl Cutter<'_> {
    /// Measures the corpus's bytes per token on a sample from `start`.
    fn calibrate(&mut self, start: usize) -> Result<(), WorkloadError> {
        let sample = window(self.corpus, start, CALIBRATION_BYTES.min(self.corpus.len()));
        let tokens = self.tok.content_count(&sample)?;
        if tokens > 0 {
            self.bytes_per_token = sample.len() as f64 / tokens as f64;
        }
        Ok(())
    }

    /// Bytes of the window for a prompt of `n` tokens.
    fn window_bytes(&self, n: usize) -> usize {
        estimate(n - self.specials + SLACK_TOKENS, self.bytes_per_token)
    }

    /// The prompts of `plans`: their windows encoded together (in
    /// parallel), each cut, the cuts counted together; a prompt whose window
    /// was too short or whose cut misses is built again on its own.
    fn batch(&mut self, plans: &[Plan]) -> Result<Vec<String>, WorkloadError> {
        let windows: Vec<String> = plans
            .iter()
            .map(|p| window(self.corpus, p.start, self.window_bytes(p.n)))
            .collect();
        let texts: Vec<&str> = windows.iter().map(String::as_str).collect();
        let all_ends = self.tok.content_token_ends_batch(&texts)?;
        let tokens: usize = all_ends.iter().map(Vec::len).sum();
        if tokens > 0 {
            let bytes: usize = texts.iter().map(|t| t.len()).sum();
            self.bytes_per_token = bytes as f64 / tokens as f64;
        }
        let mut cuts = Vec::with_capacity(plans.len());
        for ((text, ends), plan) in windows.into_iter().zip(all_ends).zip(plans) {
            let keep = plan.n - self.specials;
            if keep == 0 || ends.len() < keep + SLACK_TOKENS {
                cuts.push(None);
                continue;
            }
            match cut_to_count(self.tok, text, ends, plan.n, false) {
                Ok(cut) => cuts.push(Some(cut)),
                Err(WorkloadError::Inexact { .. }) => cuts.push(None),
                Err(e) => return Err(e),
            }
        }
        let candidates: Vec<&str> = cuts.iter().flatten().map(String::as_str).collect();
        let mut counts = self.tok.encode_counts(&candidates)?.into_iter();
        let mut out = Vec::with_capacity(plans.len());
        for (cut, plan) in cuts.into_iter().zip(plans) {
            match cut {
                Some(cut) if counts.next() == Some(plan.n) => out.push(cut),
                _ => out.push(self.one(*plan)?),
            }
        }
        Ok(out)
    }

    /// One prompt on its own, checked, from its start or (when no cut from
    /// there has the count: a tokenizer that spells a character in several
    /// tokens, and no character of one) from a few other starts drawn from
    /// it.
    fn one(&mut self, plan: Plan) -> Result<String, WorkloadError> {
        let mut retry = SplitMix64::new(mix64(plan.start as u64 ^ plan.n as u64 ^ SALT));
        let mut start = plan.start;
        let mut tries = 0;
        loop {
            match self.prompt(start, plan.n) {
                Err(WorkloadError::Inexact { .. }) if tries < RETRIES => {
                    tries += 1;
                    start = word_start(self.corpus, retry.below(self.corpus.len().max(1)));
                }
                result => return result,
            }
        }
    }

    /// The prompt of `n` tokens starting at byte `start`, checked.
    fn prompt(&mut self, start: usize, n: usize) -> Result<String, WorkloadError> {
        let tok = self.tok;
        let keep = n - self.specials;
        if keep == 0 {
            let count = tok.encode_count("")?;
            return if count == n {
                Ok(String::new())
            } else {
                Err(inexact(tok, n, count, 1))
            };
        }
        let needed = keep + SLACK_TOKENS;
        let mut want = estimate(needed, self.bytes_per_token);
        let mut closest = 0;
        for _ in 0..MAX_ROUNDS {
            let text = window(self.corpus, start, want);
            let ends = tok.content_token_ends(&text)?;
            if !ends.is_empty() {
                self.bytes_per_token = text.len() as f64 / ends.len() as f64;
            }
            if ends.len() >= needed {
                return cut_to_count(tok, text, ends, n, true);
            }
            closest = ends.len() + self.specials;
            // Grow to the new estimate, at least doubling.
            want = estimate(needed, self.bytes_per_token).max(want.saturating_mul(2));
        }
        Err(inexact(tok, n, closest, MAX_ROUNDS))
    }
}

/// Bytes of text for `tokens` tokens, with some margin.
fn estimate(tokens: usize, bytes_per_token: f64) -> usize {
    (tokens as f64 * bytes_per_token * 1.15) as usize + 64
}

fn inexact(tok: &Tokenizer, n: usize, closest: usize, attempts: u32) -> WorkloadError {
    WorkloadError::Inexact {
        n: n as u64,
        closest: closest as u64,
        attempts,
        tokenizer: tok.name().to_owned(),
    }
}

/// The start of the first word at or after byte `at` (a non-space after a
/// space), looking at most [`WORD_REACH`] bytes ahead; else the character
/// boundary at `at` (text without spaces), or the corpus's start when only
/// spaces follow.
fn word_start(corpus: &str, at: usize) -> usize {
    let at = corpus.floor_char_boundary(at);
    if at == 0 {
        return 0;
    }
    let reach = corpus.floor_char_boundary((at + WORD_REACH).min(corpus.len()));
    let mut prev_space = corpus[..at]
        .chars()
        .next_back()
        .is_some_and(char::is_whitespace);
    for (i, c) in corpus[at..reach].char_indices() {
        if prev_space && !c.is_whitespace() {
            return at + i;
        }
        prev_space = c.is_whitespace();
    }
    if corpus[at..].starts_with(char::is_whitespace) {
        // Only spaces after it: start at the top.
        return 0;
    }
    at
}

/// At least `want` bytes of corpus text from `start`, wrapping around to the
/// corpus's start (after a newline) as often as needed, ending before a space
/// when one is near.
fn window(corpus: &str, start: usize, want: usize) -> String {
    let mut out = String::with_capacity(want + WORD_REACH);
    let mut from = start;
    loop {
        let rest = &corpus[from..];
        let room = want.saturating_sub(out.len());
        if rest.len() > room {
            out.push_str(&rest[..word_end(rest, room)]);
            return out;
        }
        out.push_str(rest);
        if out.len() >= want {
            return out;
        }
        if !out.ends_with(char::is_whitespace) {
            out.push('\n');
        }
        from = 0;
    }
}

/// A cut of `text` at or after byte `at` (`at < text.len()`): before the next
/// whitespace within [`WORD_REACH`] bytes, else at a character boundary.
fn word_end(text: &str, at: usize) -> usize {
    let at = text.ceil_char_boundary(at);
    let reach = text.floor_char_boundary((at + WORD_REACH).min(text.len()));
    match text[at..reach].find(char::is_whitespace) {
        Some(i) => at + i,
        None => at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_are_word_starts() {
        let text = "alpha beta  gamma\ndelta";
        assert_eq!(word_start(text, 0), 0);
        assert_eq!(word_start(text, 1), 6);
        assert_eq!(word_start(text, 6), 6);
        assert_eq!(word_start(text, 11), 12);
        assert_eq!(word_start(text, 19), 19);
        let long = format!("a {}", "x".repeat(1_000));
        assert_eq!(word_start(&long, 10), 10);
        assert_eq!(word_start("héllo wörld", 2), 7);
        // No space after it: the start of the text.
        assert_eq!(word_start("text   ", 5), 0);
    }

    #[test]
    fn windows_wrap_around_the_corpus() {
        let w = window("one two", 4, 20);
        assert!(w.starts_with("two\none two\none"), "{w:?}");
        assert!(w.len() >= 20);
        assert_eq!(window("one two three", 0, 5), "one two");
        assert_eq!(window("ab cd\n", 3, 8), "cd\nab cd");
    }
}
