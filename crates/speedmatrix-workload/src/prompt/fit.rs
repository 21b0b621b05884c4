//! Fitting a prompt to an exact count: the cut near the end is re-encoded
//! and moved (bounded steps, then a character scan) until the count is exact.

use super::*;

/// Candidate text and the estimated end byte of each of its content tokens.
#[derive(Debug)]
pub(super) struct Source {
    pub(super) text: String,
    pub(super) ends: Vec<usize>,
    /// Whether the pieces' token counts add up where they meet.
    pub(super) junctions_ok: bool,
}

impl Source {
    pub(super) fn prepend(
        &mut self,
        tok: &Tokenizer,
        prefix: &str,
        prefix_ends: &[usize],
    ) -> Result<(), WorkloadError> {
        let shift = prefix.len();
        self.text.insert_str(0, prefix);
        let mut ends = prefix_ends.to_vec();
        ends.extend(self.ends.iter().map(|e| e + shift));
        self.ends = ends;
        let at_end = prefix_ends.last() == Some(&shift);
        self.junctions_ok &=
            at_end && junction_ok(tok, &self.text, &self.ends, prefix_ends.len(), shift)?;
        Ok(())
    }
}

/// How a candidate cut is counted.
#[derive(Debug, Clone, Copy)]
pub(super) enum Counting {
    /// Re-encode only the text after `anchor`, assuming `before` tokens before it.
    Window { anchor: usize, before: usize },
    /// Re-encode the whole candidate.
    Full,
}

/// Finds where to cut a source so that its count is exactly the target.
pub(super) struct Fitter<'a> {
    pub(super) tok: &'a Tokenizer,
    pub(super) extra: usize,
    pub(super) source: &'a Source,
    pub(super) target: usize,
    /// No cut before this byte (keeps a shared prefix whole).
    pub(super) min_cut: usize,
    /// Count the whole text before accepting a cut.
    pub(super) full_check: bool,
    pub(super) attempts: u32,
    pub(super) closest: usize,
}

impl Fitter<'_> {
    pub(super) fn fit(mut self) -> Result<String, WorkloadError> {
        let fixed = self.extra + self.tok.special_tokens_count();
        // Keep this many content tokens of the source.
        let keep = self.target.saturating_sub(fixed);
        let ends = &self.source.ends;
        if keep > ends.len() {
            return Err(self.inexact());
        }
        let counting = self.window_for(keep);
        if let Some(cut) = self.search(keep, counting)?
            && (!self.full_check || self.count(Counting::Full, cut)? == self.target)
        {
            return Ok(self.source.text[..cut].to_owned());
        }
        // The window's assumption failed (tokens merged across the anchor):
        // do it again counting whole texts, slower but certain.
        if let Counting::Window { .. } = counting
            && let Some(cut) = self.search(keep, Counting::Full)?
        {
            return Ok(self.source.text[..cut].to_owned());
        }
        Err(self.inexact())
    }

    /// Counts re-encoding only the last [`WINDOW`] tokens, anchored where a
    /// token starts with a space (a word boundary every tokenizer respects).
    pub(super) fn window_for(&self, keep: usize) -> Counting {
        if !self.source.junctions_ok {
            return Counting::Full;
        }
        let ends = &self.source.ends;
        let lowest = keep.saturating_sub(4 * WINDOW);
        let mut w = keep.saturating_sub(WINDOW);
        while w > lowest {
            let anchor = ends[w - 1];
            if word_boundary(&self.source.text, anchor) {
                return Counting::Window { anchor, before: w };
            }
            w -= 1;
        }
        Counting::Full
    }

    /// Steps the cut by the count's error, then scans characters around the
    /// closest cut. Returns a cut whose count (as `counting` sees it) is exact.
    pub(super) fn search(
        &mut self,
        keep: usize,
        counting: Counting,
    ) -> Result<Option<usize>, WorkloadError> {
        let ends = &self.source.ends;
        let mut k = keep.max(1);
        let mut tried = Vec::new();
        let mut best: Option<(usize, usize)> = None; // (distance, cut)
        for _ in 0..MAX_STEPS {
            let cut = if keep == 0 { 0 } else { ends[k - 1] };
            if tried.contains(&k) || !self.cut_allowed(cut, counting) {
                break;
            }
            tried.push(k);
            let c = self.count(counting, cut)?;
            if c == self.target {
                return Ok(Some(cut));
            }
            let distance = c.abs_diff(self.target);
            if best.is_none_or(|(d, _)| distance < d) {
                best = Some((distance, cut));
            }
            if keep == 0 {
                break;
            }
            k = if c < self.target {
                (k + (self.target - c)).min(ends.len())
            } else {
                k.saturating_sub(c - self.target).max(1)
            };
        }
        match best {
            Some((_, cut)) => self.scan(cut, counting),
            None => Ok(None),
        }
    }

    /// Tries cuts at each character near `around`, nearest first.
    pub(super) fn scan(
        &mut self,
        around: usize,
        counting: Counting,
    ) -> Result<Option<usize>, WorkloadError> {
        let text = &self.source.text;
        for step in 1..=SCAN_CHARS {
            for cut in [around.checked_sub(step), around.checked_add(step)]
                .into_iter()
                .flatten()
            {
                if cut > text.len()
                    || !text.is_char_boundary(cut)
                    || !self.cut_allowed(cut, counting)
                {
                    continue;
                }
                if self.count(counting, cut)? == self.target {
                    return Ok(Some(cut));
                }
            }
        }
        Ok(None)
    }

    pub(super) fn cut_allowed(&self, cut: usize, counting: Counting) -> bool {
        let above_anchor = match counting {
            Counting::Window { anchor, .. } => cut > anchor,
            Counting::Full => true,
        };
        above_anchor && cut >= self.min_cut && self.source.text.is_char_boundary(cut)
    }

    pub(super) fn count(&mut self, counting: Counting, cut: usize) -> Result<usize, WorkloadError> {
        self.attempts += 1;
        let text = &self.source.text;
        let c = match counting {
            Counting::Window { anchor, before } => {
                self.extra
                    + self.tok.special_tokens_count()
                    + before
                    + self.tok.content_count(&text[anchor..cut])?
            }
            Counting::Full => self.extra + self.tok.encode_count(&text[..cut])?,
        };
        if c.abs_diff(self.target) < self.closest.abs_diff(self.target) || self.attempts == 1 {
            self.closest = c;
        }
        Ok(c)
    }

    pub(super) fn inexact(&self) -> WorkloadError {
        WorkloadError::Inexact {
            n: self.target as u64,
            closest: self.closest as u64,
            attempts: self.attempts,
            tokenizer: self.tok.name().to_owned(),
        }
    }
}

/// Whether a word starts at byte `at`: a space after a letter or digit, the
/// place where every pre-tokenizer splits.
pub(super) fn word_boundary(text: &str, at: usize) -> bool {
    let bytes = text.as_bytes();
    at > 0 && bytes.get(at) == Some(&b' ') && bytes[at - 1].is_ascii_alphanumeric()
}

/// Checks that the tokens before and after byte `at` (where token `idx`
/// starts) stay the same when a few words across it are encoded together.
pub(super) fn junction_ok(
    tok: &Tokenizer,
    text: &str,
    ends: &[usize],
    idx: usize,
    at: usize,
) -> Result<bool, WorkloadError> {
    const REACH: usize = 8;
    const SEARCH: usize = 64;
    if idx == 0 || idx >= ends.len() || ends[idx - 1] != at {
        return Ok(idx == 0);
    }
    // Window start: a word boundary some tokens back, or the text's start.
    let mut lo = idx.saturating_sub(REACH);
    while lo > 0 && idx - lo < SEARCH && !word_boundary(text, ends[lo - 1]) {
        lo -= 1;
    }
    if lo > 0 && !word_boundary(text, ends[lo - 1]) {
        lo = 0;
    }
    let mut hi = (idx + REACH).min(ends.len());
    while hi < ends.len() && hi - idx < SEARCH && !word_boundary(text, ends[hi - 1]) {
        hi += 1;
    }
    if !word_boundary(text, ends[hi - 1]) {
        return Ok(false);
    }
    let start = if lo == 0 { 0 } else { ends[lo - 1] };
    Ok(tok.content_count(&text[start..ends[hi - 1]])? == hi - lo)
}
