//! Prompts of an exact token count, with prefix-cache control.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use speedmatrix_units::Tokens;

use crate::text::{SplitMix64, TextGenerator, mix64};
use crate::{Tokenizer, WorkloadError};

mod fit;
mod pool;

use self::fit::{Fitter, Source, junction_ok};
use self::pool::{Pool, usize_of};

/// Which prompts of a cell may share KV-cache blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CacheMode {
    /// Every request's prompt differs from its first tokens: no prefix-cache hits.
    Unique,
    /// Every request of a cell sends the same prompt, so only the first one
    /// is prefilled (decode-only measurement).
    Shared,
    /// The first `prefix` tokens are the same for every request of a cell; the
    /// rest is unique to the request.
    SharedPrefix {
        /// Tokens shared, special tokens included.
        prefix: Tokens,
    },
}

/// Whether a request is measured or only warms the server up.
///
/// Warm-up prompts carry a different marker, so they never seed the prefix
/// cache for the measured ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptRole {
    /// A request whose timings are kept.
    #[default]
    Measured,
    /// A request sent before measuring.
    WarmUp,
}

/// Which API a prompt is for: this decides which tokens the server adds.
pub use speedmatrix_units::Api;

/// Identifies one request for cache control: which cell, stream and request
/// it is, how it may share the cache, and its role (measured or warm-up).
///
/// The marker a prompt starts with is written from these fields (and the
/// seed) without hashing, so distinct keys always give distinct markers.
///
/// ```
/// use speedmatrix_workload::CacheKey;
///
/// let a = CacheKey::unique(3, 0, 0);
/// assert_ne!(a.marker(1), CacheKey::unique(3, 1, 0).marker(1));
/// assert_ne!(a.marker(1), a.warm_up().marker(1));
/// assert!(CacheKey::shared(3).marker(0).ends_with(" 3 0]"));
/// assert!(CacheKey::unique(3, 1, 0).marker(0).ends_with(" 1.0 3 0]"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CacheKey {
    /// How prompts share the cache.
    pub mode: CacheMode,
    /// Measured or warm-up.
    pub role: PromptRole,
    /// The matrix cell (any number unique within a run).
    pub cell: u64,
    /// The stream (simultaneous request slot) within the cell.
    pub stream: u64,
    /// The request's number within its stream.
    pub request: u64,
}

impl CacheKey {
    /// A prompt no other request shares.
    pub fn unique(cell: u64, stream: u64, request: u64) -> Self {
        CacheKey {
            mode: CacheMode::Unique,
            role: PromptRole::Measured,
            cell,
            stream,
            request,
        }
    }

    /// The one prompt every request of `cell` sends.
    pub fn shared(cell: u64) -> Self {
        CacheKey {
            mode: CacheMode::Shared,
            ..Self::unique(cell, 0, 0)
        }
    }

    /// A prompt whose first `prefix` tokens every request of `cell` shares.
    pub fn shared_prefix(cell: u64, prefix: Tokens, stream: u64, request: u64) -> Self {
        CacheKey {
            mode: CacheMode::SharedPrefix { prefix },
            ..Self::unique(cell, stream, request)
        }
    }

    /// The same key for a warm-up request.
    pub fn warm_up(self) -> Self {
        CacheKey {
            role: PromptRole::WarmUp,
            ..self
        }
    }

    /// The text a prompt with this key and `seed` starts with.
    ///
    /// It opens with a 32-bit hash of all fields, so two prompts part
    /// within the first 16-token KV block however long the fields are, then
    /// spells the fields out, so distinct keys never give the same marker.
    /// For [`CacheMode::SharedPrefix`] this is the shared part's marker; the
    /// unique part has its own (see [`CacheKey::suffix_marker`]).
    pub fn marker(&self, seed: u64) -> String {
        let tag = match self.role {
            PromptRole::Measured => "run",
            PromptRole::WarmUp => "warmup",
        };
        let fields = match self.mode {
            CacheMode::Unique => format!(
                "{:x}.{:x} {:x} {seed:x}",
                self.stream, self.request, self.cell
            ),
            CacheMode::Shared => format!("{:x} {seed:x}", self.cell),
            CacheMode::SharedPrefix { prefix } => {
                format!("{:x}/{} {seed:x}", self.cell, prefix.get())
            }
        };
        let hash = fields
            .bytes()
            .fold(mix64(self.role as u64), |h, b| mix64(h ^ u64::from(b)));
        format!("[{tag} {:08x} {fields}]", hash >> 32)
    }

    /// The marker that starts the unique part of a shared-prefix prompt.
    pub fn suffix_marker(&self) -> String {
        format!(" [{:x}.{:x}]", self.stream, self.request)
    }

    fn body_seed(&self, seed: u64, shared_part: bool) -> u64 {
        let mut h = mix64(seed ^ 0x0B0D_1E5E_ED00);
        let fields: &[u64] = if shared_part || self.mode == CacheMode::Shared {
            &[self.cell]
        } else {
            &[self.cell, self.stream, self.request, self.role as u64]
        };
        for f in fields {
            h = mix64(h ^ f);
        }
        h
    }
}

/// One generated request: its text and the prompt tokens the server should
/// report for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prompt {
    /// The prompt text (for [`Api::Chat`], the user message's content).
    pub text: String,
    /// `usage.prompt_tokens` the server should report; the runner checks it.
    pub expected_tokens: Tokens,
    /// How many leading tokens other prompts of the cell share.
    pub shared_tokens: Tokens,
    /// The API the count is for.
    pub api: Api,
}

/// Chat-template tokens a server adds around one user message.
///
/// Measure it once per server and model: send [`ChatOverhead::PROBE`] as the
/// only user message (the server's `/tokenize` with `messages`, or a chat
/// request with `max_tokens: 1`), then [`ChatOverhead::from_probe`] with the
/// reported prompt tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ChatOverhead(pub Tokens);

impl ChatOverhead {
    /// The user message to measure the overhead with: starts and ends like
    /// the prompts do (a bracket, then words), so it joins the template the
    /// same way.
    pub const PROBE: &'static str = "[probe 0] The quiet harbor measured twelve meters.";

    /// The overhead, from what the server reported for [`ChatOverhead::PROBE`].
    pub fn from_probe(
        tokenizer: &Tokenizer,
        server_prompt_tokens: u64,
    ) -> Result<Self, WorkloadError> {
        let content = tokenizer
            .clone()
            .with_add_special_tokens(false)
            .encode_count(Self::PROBE)? as u64;
        match server_prompt_tokens.checked_sub(content) {
            Some(overhead) => Ok(ChatOverhead(Tokens::new(overhead))),
            None => Err(WorkloadError::Count {
                message: format!(
                    "the server counted {server_prompt_tokens} tokens for a message of {content} \
                     tokens with {}; is it the same tokenizer as the server's model?",
                    tokenizer.name()
                ),
            }),
        }
    }
}

/// The longest prefix-cut of `text` that `tok` counts as exactly `target`
/// tokens (special tokens as it adds them): `ends` are the end bytes of the
/// content tokens of one encode of the whole `text`, which must hold more
/// than `target` tokens. The cut is repaired as prompts' cuts are (a window
/// re-encoded near the end, bounded steps and a character scan); with
/// `full_check`, the whole result is then encoded once to check it (the
/// caller checks it otherwise). Cuts dataset corpora.
pub(crate) fn cut_to_count(
    tok: &Tokenizer,
    text: String,
    ends: Vec<usize>,
    target: usize,
    full_check: bool,
) -> Result<String, WorkloadError> {
    let source = Source {
        text,
        ends,
        junctions_ok: true,
    };
    Fitter {
        tok,
        extra: 0,
        source: &source,
        target,
        min_cut: 0,
        full_check,
        attempts: 0,
        closest: 0,
    }
    .fit()
}

/// The prefixes [`PromptBuilder::block_prompt`] has built, by block id and length.
#[derive(Debug, Default, Clone)]
pub struct BlockMemo {
    prefixes: HashMap<(u64, u64), Arc<str>>,
}

impl BlockMemo {
    /// Prefixes kept.
    pub fn len(&self) -> usize {
        self.prefixes.len()
    }

    /// Whether it keeps none.
    pub fn is_empty(&self) -> bool {
        self.prefixes.is_empty()
    }
}

/// Builds exact-length prompts with one tokenizer.
///
/// Text comes from a pool of generated prose, encoded once per size class.
/// A prompt is a seeded marker and first sentence (encoded on their own),
/// then a slice of the pool whose tokens are already known, then a cut: the
/// last 64 tokens are re-encoded and the cut moved until the count is
/// exact (bounded; a typed error otherwise). Only those pieces are encoded,
/// so a 16K prompt costs a millisecond instead of a whole-text encode.
///
/// This relies on the tokenizer splitting text into words before its model
/// runs (every pre-tokenizer does; sentence and word boundaries are where the
/// pieces meet), and each junction is checked by re-encoding a few words
/// across it; when a check fails, or the tokenizer has no pre-tokenizer, the
/// whole prompt is counted instead. [`PromptBuilder::with_full_check`]
/// re-encodes every prompt whole.
///
/// ```
/// use speedmatrix_units::Tokens;
/// use speedmatrix_workload::{CacheKey, PromptBuilder, Tokenizer};
///
/// let tok = Tokenizer::bundled()?;
/// let builder = PromptBuilder::new(tok.clone());
/// let p = builder.prompt(Tokens::new(1_000), 42, &CacheKey::unique(0, 0, 0))?;
/// assert_eq!(tok.encode_count(&p.text)?, 1_000);
/// assert_eq!(p.expected_tokens, Tokens::new(1_000));
/// assert!(p.text.starts_with(&CacheKey::unique(0, 0, 0).marker(42)));
/// # Ok::<(), speedmatrix_workload::WorkloadError>(())
/// ```
#[derive(Debug)]
pub struct PromptBuilder {
    tokenizer: Tokenizer,
    content_tokenizer: Tokenizer,
    pools: Mutex<HashMap<usize, Arc<Pool>>>,
    full_check: bool,
}

/// Tokens before a cut that the repair re-encodes instead of the whole text.
const WINDOW: usize = 64;
/// Token-count steps tried before scanning characters.
const MAX_STEPS: usize = 12;
/// Characters tried on each side of the best cut.
const SCAN_CHARS: usize = 40;
/// Prompts start at a sentence within this many tokens of a pool's start.
const SPREAD_TOKENS: usize = 8_192;
/// Pool text beyond what the largest prompt of its class needs.
const SLACK_TOKENS: usize = 512;
/// Pool text is encoded in pieces of about this many bytes: small enough
/// that the tokenizer's per-byte bookkeeping (16 bytes of alignment per byte
/// of text) stays small (peak memory of a 128K-token pool: 42 MiB instead of
/// 49 with 64 KiB pieces), large enough that the junction checks between
/// pieces cost little.
const CHUNK_BYTES: usize = 16 << 10;
/// The least text a pool grows by at once.
const GROW_BYTES: usize = 64 << 10;
/// Content tokens below which a prompt may start without its marker.
const SHORT_TOKENS: usize = 16;

/// Passages a short prompt tries before it gives up ([`PromptBuilder::short_prose`]).
const SHORT_ATTEMPTS: u64 = 16;
/// The longest prompt built: 16M tokens (about 80 MB of text), far beyond
/// any model's context.
pub const MAX_PROMPT_TOKENS: u64 = 1 << 24;
const POOL_SEED: u64 = 0x009E_1170_7E47;

impl PromptBuilder {
    /// A builder counting with `tokenizer`.
    pub fn new(tokenizer: Tokenizer) -> Self {
        PromptBuilder {
            full_check: tokenizer.inner().get_pre_tokenizer().is_none(),
            content_tokenizer: tokenizer.clone().with_add_special_tokens(false),
            tokenizer,
            pools: Mutex::new(HashMap::new()),
        }
    }

    /// Whether every prompt is re-encoded whole before it is returned (slow:
    /// about 40 ms per 16K tokens). Off by default; always on for a tokenizer
    /// without a pre-tokenizer.
    pub fn with_full_check(mut self, on: bool) -> Self {
        self.full_check = on || self.tokenizer.inner().get_pre_tokenizer().is_none();
        self
    }

    /// The tokenizer prompts are counted with.
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// A completions prompt whose encoding has exactly `n` tokens, special
    /// tokens included, the same for the same `n`, `seed` and `key`.
    ///
    /// Prompts start with `key`'s marker, so prompts of different keys share
    /// no KV block when `n` is larger than the marker; shorter prompts are
    /// cut from the marker itself.
    pub fn prompt(&self, n: Tokens, seed: u64, key: &CacheKey) -> Result<Prompt, WorkloadError> {
        let text = self.text(&self.tokenizer, 0, n, seed, key)?;
        Ok(self.finish(text, n, key, Api::Completions))
    }

    /// A chat prompt: user-message content such that the server counts
    /// exactly `n` prompt tokens once it adds `overhead` template tokens.
    pub fn chat_prompt(
        &self,
        n: Tokens,
        seed: u64,
        key: &CacheKey,
        overhead: ChatOverhead,
    ) -> Result<Prompt, WorkloadError> {
        let extra = usize_of(overhead.0);
        let text = self.text(&self.content_tokenizer, extra, n, seed, key)?;
        Ok(self.finish(text, n, key, Api::Chat))
    }

    /// Like [`chat_prompt`](Self::chat_prompt), then asks `recount` (the
    /// server's `/tokenize`, say) for the real count and rebuilds with the
    /// overhead corrected, at most three times.
    pub fn chat_prompt_checked<F, E>(
        &self,
        n: Tokens,
        seed: u64,
        key: &CacheKey,
        mut overhead: ChatOverhead,
        mut recount: F,
    ) -> Result<Prompt, WorkloadError>
    where
        F: FnMut(&str) -> Result<u64, E>,
        E: fmt::Display,
    {
        let mut last = 0;
        for _ in 0..3 {
            let prompt = self.chat_prompt(n, seed, key, overhead)?;
            let counted = recount(&prompt.text).map_err(|e| WorkloadError::Count {
                message: e.to_string(),
            })?;
            if counted == n.get() {
                return Ok(prompt);
            }
            last = counted;
            let corrected = (overhead.0.get() + counted).checked_sub(n.get());
            overhead = ChatOverhead(Tokens::new(corrected.unwrap_or(0)));
        }
        Err(WorkloadError::Inexact {
            n: n.get(),
            closest: last,
            attempts: 3,
            tokenizer: self.tokenizer.name().to_owned(),
        })
    }

    fn finish(&self, text: String, n: Tokens, key: &CacheKey, api: Api) -> Prompt {
        let shared_tokens = match key.mode {
            CacheMode::Unique => Tokens::ZERO,
            CacheMode::Shared => n,
            CacheMode::SharedPrefix { prefix } => prefix.min(n),
        };
        Prompt {
            text,
            expected_tokens: n,
            shared_tokens,
            api,
        }
    }

    /// Text that `tok` counts as `n - extra` tokens.
    fn text(
        &self,
        tok: &Tokenizer,
        extra: usize,
        n: Tokens,
        seed: u64,
        key: &CacheKey,
    ) -> Result<String, WorkloadError> {
        if n.get() > MAX_PROMPT_TOKENS {
            return Err(WorkloadError::TooLong {
                n: n.get(),
                max: MAX_PROMPT_TOKENS,
            });
        }
        let n = usize_of(n);
        let min = extra + tok.special_tokens_count();
        if n < min {
            return Err(self.too_short(n, min, extra));
        }
        match key.mode {
            CacheMode::Unique | CacheMode::Shared => {
                let body_seed = key.body_seed(seed, false);
                let source = self.source(key.marker(seed), body_seed, n)?;
                match self.fitter(tok, extra, &source, n, 0).fit() {
                    // A prompt this short cannot hold the marker anyway, and
                    // with some tokenizers no cut of the marker has exactly
                    // n tokens: start with prose instead.
                    Err(WorkloadError::Inexact { .. }) if n - min < SHORT_TOKENS => {
                        self.short_prose(tok, extra, n, body_seed)
                    }
                    result => result,
                }
            }
            CacheMode::SharedPrefix { prefix } => {
                self.shared_prefix_text(tok, extra, n, usize_of(prefix), seed, key)
            }
        }
    }

    /// A short prompt of prose: the seed's text first, then (a few tokens can be hard to hit
    /// exactly: a unigram tokenizer may merge a cut's last piece into a longer one) other
    /// seeded passages, until one fits. The same inputs try the same passages.
    fn short_prose(
        &self,
        tok: &Tokenizer,
        extra: usize,
        n: usize,
        body_seed: u64,
    ) -> Result<String, WorkloadError> {
        let mut last = None;
        for k in 0..SHORT_ATTEMPTS {
            let seed = if k == 0 {
                body_seed
            } else {
                mix64(body_seed ^ k)
            };
            let prose = self.source(String::new(), seed, n)?;
            match self.fitter(tok, extra, &prose, n, 0).fit() {
                Err(e @ WorkloadError::Inexact { .. }) => last = Some(e),
                result => return result,
            }
        }
        Err(last.unwrap_or(WorkloadError::Inexact {
            n: n as u64,
            closest: 0,
            attempts: 0,
            tokenizer: tok.name().to_owned(),
        }))
    }

    fn shared_prefix_text(
        &self,
        tok: &Tokenizer,
        extra: usize,
        n: usize,
        k: usize,
        seed: u64,
        key: &CacheKey,
    ) -> Result<String, WorkloadError> {
        if n < k {
            return Err(WorkloadError::TooShort {
                n: n as u64,
                min: k as u64,
                what: "the shared prefix",
                tokenizer: tok.name().to_owned(),
            });
        }
        let shared = self.source(key.marker(seed), key.body_seed(seed, true), k)?;
        let prefix = self.fitter(tok, extra, &shared, k, 0).fit()?;
        if n == k {
            return Ok(prefix);
        }
        let more = self.source(key.suffix_marker(), key.body_seed(seed, false), n - k)?;
        self.extend_text(tok, extra, &prefix, k, n, more)
    }

    /// `prefix` (`k` tokens) followed by text from `more`, `n` tokens in all, its first `k`
    /// tokens still the prefix's.
    fn extend_text(
        &self,
        tok: &Tokenizer,
        extra: usize,
        prefix: &str,
        k: usize,
        n: usize,
        mut more: Source,
    ) -> Result<String, WorkloadError> {
        let prefix_ends = tok.content_token_ends(prefix)?;
        more.prepend(tok, prefix, &prefix_ends)?;
        let text = self.fitter(tok, extra, &more, n, prefix.len() + 1).fit()?;
        // Compare content tokens: a tokenizer may append special tokens
        // (BERT's `[SEP]`) that the longer prompt has only at its end.
        let content = &self.content_tokenizer;
        let (whole, part) = (content.encode(&text)?, content.encode(prefix)?);
        let keep = k.saturating_sub(extra + tok.special_tokens_count());
        if whole.get(..keep) != part.get(..keep) {
            return Err(WorkloadError::PrefixNotStable {
                k: k as u64,
                tokenizer: tok.name().to_owned(),
            });
        }
        Ok(text)
    }

    /// A prompt of exactly `n` tokens made of blocks of `block` tokens, block `i` standing
    /// for `chain[i]` and the prefix before it (Mooncake's `hash_ids`): two prompts whose
    /// chains start with the same `j` ids start with the same `j · block` tokens, and no
    /// more. `memo` keeps every prefix built, so a shared prefix is built once and is the
    /// same text in every prompt that has it; give each group of prompts that may share
    /// blocks one memo and one `seed` (a new seed: prompts no earlier group's cache holds).
    /// `overhead`: a chat prompt's template tokens (`None` for completions).
    ///
    /// Each block is fitted after the prefix before it, so a prompt of `m` blocks
    /// tokenizes its prefix `m` times: long chains cost time quadratic in their blocks.
    pub fn block_prompt(
        &self,
        chain: &[u64],
        n: Tokens,
        block: Tokens,
        seed: u64,
        overhead: Option<ChatOverhead>,
        memo: &mut BlockMemo,
    ) -> Result<Prompt, WorkloadError> {
        let (tok, extra, api) = match overhead {
            Some(o) => (&self.content_tokenizer, usize_of(o.0), Api::Chat),
            None => (&self.tokenizer, 0, Api::Completions),
        };
        if n.get() > MAX_PROMPT_TOKENS {
            return Err(WorkloadError::TooLong {
                n: n.get(),
                max: MAX_PROMPT_TOKENS,
            });
        }
        let (total, b) = (usize_of(n), usize_of(block).max(1));
        if chain.len() != total.div_ceil(b) {
            return Err(WorkloadError::Blocks {
                blocks: chain.len() as u64,
                n: n.get(),
                block: block.get(),
            });
        }
        let mut prefix: Option<(Arc<str>, usize)> = None;
        for (i, &id) in chain.iter().enumerate() {
            let target = ((i + 1) * b).min(total);
            let key = (id, target as u64);
            let text = match memo.prefixes.get(&key) {
                Some(t) => Arc::clone(t),
                None => {
                    let marker = CacheKey::unique(seed, id, 0);
                    let text: Arc<str> = match &prefix {
                        None => self.text(tok, extra, Tokens::new(target as u64), seed, &marker)?,
                        Some((p, k)) => {
                            let more = self.source(
                                marker.suffix_marker(),
                                marker.body_seed(seed, false),
                                target - k,
                            )?;
                            self.extend_text(tok, extra, p, *k, target, more)?
                        }
                    }
                    .into();
                    memo.prefixes.insert(key, Arc::clone(&text));
                    text
                }
            };
            prefix = Some((text, target));
        }
        let text = prefix.map(|(t, _)| t.to_string()).unwrap_or_default();
        Ok(self.finish(text, n, &CacheKey::unique(seed, 0, 0), api))
    }

    fn fitter<'a>(
        &self,
        tok: &'a Tokenizer,
        extra: usize,
        source: &'a Source,
        target: usize,
        min_cut: usize,
    ) -> Fitter<'a> {
        Fitter {
            tok,
            extra,
            source,
            target,
            min_cut,
            full_check: self.full_check || !source.junctions_ok,
            attempts: 0,
            closest: 0,
        }
    }

    fn too_short(&self, n: usize, min: usize, extra: usize) -> WorkloadError {
        WorkloadError::TooShort {
            n: n as u64,
            min: min as u64,
            what: if extra > 0 {
                "the chat template"
            } else {
                "the special tokens"
            },
            tokenizer: self.tokenizer.name().to_owned(),
        }
    }

    /// `marker` then pool text from a seeded sentence, long enough for `n`
    /// tokens, with the estimated end of each token.
    fn source(&self, marker: String, body_seed: u64, n: usize) -> Result<Source, WorkloadError> {
        let pool = self.pool(n)?;
        let mut rng = SplitMix64::new(body_seed);
        let i = rng.below(pool.spread_starts);
        let starts = &pool.sentence_starts;
        let (start, head_end) = match (starts.get(i), starts.get(i + 1)) {
            (Some(&s), Some(&e)) => (s, e),
            _ => (0, 0),
        };
        // Encode the marker with the first sentence, so the estimate is exact
        // where the two meet; the pool's own encoding serves after that.
        let mut text = marker;
        text.push_str(&pool.text[start..head_end]);
        let mut ends = self.content_tokenizer.content_token_ends(&text)?;
        let first_token = pool.ends.partition_point(|&e| e <= head_end);
        let head = (text.len(), ends.len());
        let pool_split_here = first_token > 0 && pool.ends[first_token - 1] == head_end;
        let last_token = (first_token + n + SLACK_TOKENS).min(pool.ends.len());
        let end = pool.ends[last_token - 1].max(head_end);
        let base = text.len();
        text.push_str(&pool.text[head_end..end]);
        // Tokens from `first_token` on end after `head_end`.
        ends.extend(
            pool.ends[first_token..last_token]
                .iter()
                .map(|&e| e.saturating_sub(head_end) + base),
        );
        let junctions_ok =
            pool_split_here && junction_ok(&self.content_tokenizer, &text, &ends, head.1, head.0)?;
        Ok(Source {
            text,
            ends,
            junctions_ok,
        })
    }

    /// The pool for prompts of up to `n` tokens, built on first use.
    fn pool(&self, n: usize) -> Result<Arc<Pool>, WorkloadError> {
        let class = n.next_power_of_two().max(4_096);
        let mut pools = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pool) = pools.get(&class) {
            return Ok(Arc::clone(pool));
        }
        let pool = Arc::new(Pool::build(
            &self.content_tokenizer,
            class + SPREAD_TOKENS + SLACK_TOKENS,
        )?);
        pools.insert(class, Arc::clone(&pool));
        Ok(pool)
    }
}
