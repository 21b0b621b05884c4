//! The text pool: generated prose encoded once per size class, in pieces
//! whose junctions are checked, so a prompt's tokens are known without
//! encoding it.

use super::*;

pub(super) fn usize_of(t: Tokens) -> usize {
    usize::try_from(t.get()).unwrap_or(usize::MAX)
}

/// Generated prose and where each of its tokens ends.
#[derive(Debug)]
pub(super) struct Pool {
    pub(super) text: String,
    /// End byte of each content token.
    pub(super) ends: Vec<usize>,
    /// Byte offsets of the separators before sentences.
    pub(super) sentence_starts: Vec<usize>,
    /// How many of `sentence_starts` lie in the first [`SPREAD_TOKENS`]
    /// tokens: where prompt bodies may start.
    pub(super) spread_starts: usize,
    /// Where separately encoded pieces of `text` meet.
    pub(super) chunk_starts: Vec<usize>,
}

impl Pool {
    /// At least `tokens` tokens of text. Pools of every size share a prefix,
    /// so a prompt's text depends only on its size class.
    pub(super) fn build(tok: &Tokenizer, tokens: usize) -> Result<Self, WorkloadError> {
        let mut generator = TextGenerator::new(POOL_SEED);
        let mut pool = Pool {
            text: String::new(),
            ends: Vec::new(),
            sentence_starts: Vec::new(),
            spread_starts: 0,
            chunk_starts: Vec::new(),
        };
        while pool.ends.len() < tokens {
            let (had, missing) = (pool.ends.len(), tokens - pool.ends.len());
            let chunks = pool.grow(&mut generator, missing * 6);
            pool.encode_chunks(tok, &chunks)?;
            if pool.ends.len() == had {
                return Err(tok.error("it turned 64 KiB of text into no tokens"));
            }
        }
        if !pool.chunks_join_cleanly(tok)? {
            // Tokens merge across a paragraph break with this tokenizer:
            // encode the text in one piece instead.
            pool.ends = tok.content_token_ends(&pool.text)?;
        }
        let spread_end = pool.ends.get(SPREAD_TOKENS).map_or(usize::MAX, |&e| e);
        let spread = pool.sentence_starts.partition_point(|&s| s < spread_end);
        // Every start needs a next one (the end of its first sentence).
        pool.spread_starts = spread
            .min(pool.sentence_starts.len().saturating_sub(1))
            .max(1);
        Ok(pool)
    }

    /// Appends about `bytes` of text as paragraph-aligned chunks; returns
    /// their byte ranges.
    pub(super) fn grow(
        &mut self,
        generator: &mut TextGenerator,
        bytes: usize,
    ) -> Vec<(usize, usize)> {
        let target = self.text.len() + bytes.max(GROW_BYTES);
        let mut chunks = Vec::new();
        let mut chunk_start = self.text.len();
        while self.text.len() < target {
            let sep = self.text.len();
            generator.push_sentence(&mut self.text);
            // Cut only before a paragraph break: text on either side of one
            // tokenizes the same alone as together.
            if self.text[sep..].starts_with("\n\n") && sep - chunk_start >= CHUNK_BYTES {
                chunks.push((chunk_start, sep));
                chunk_start = sep;
            }
            if sep > 0 {
                self.sentence_starts.push(sep);
            }
        }
        // The last sentence of the last chunk may be incomplete in context,
        // but text is only ever added after it, never between.
        chunks.push((chunk_start, self.text.len()));
        chunks
    }

    pub(super) fn encode_chunks(
        &mut self,
        tok: &Tokenizer,
        chunks: &[(usize, usize)],
    ) -> Result<(), WorkloadError> {
        let inputs: Vec<&str> = chunks.iter().map(|&(s, e)| &self.text[s..e]).collect();
        let encodings = tok
            .inner()
            .encode_batch(inputs, false)
            .map_err(|e| tok.error(e))?;
        for (enc, &(start, _)) in encodings.iter().zip(chunks) {
            if start > 0 {
                self.chunk_starts.push(start);
            }
            let mut last = self.ends.last().copied().unwrap_or(0);
            for &(_, end) in enc.get_offsets() {
                last = (start + end).max(last);
                self.ends.push(last);
            }
        }
        Ok(())
    }

    pub(super) fn chunks_join_cleanly(&self, tok: &Tokenizer) -> Result<bool, WorkloadError> {
        for &at in &self.chunk_starts {
            let idx = self.ends.partition_point(|&e| e <= at);
            if !junction_ok(tok, &self.text, &self.ends, idx, at)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool encoded in pieces has the token ends of a whole-text encode,
    /// without falling back to one.
    #[test]
    fn pool_pieces_encode_like_the_whole_text() {
        let tok = Tokenizer::bundled().unwrap().with_add_special_tokens(false);
        let pool = Pool::build(&tok, 20_000).unwrap();
        assert!(
            pool.chunk_starts.len() >= 4,
            "{} pieces",
            pool.chunk_starts.len() + 1
        );
        assert!(pool.chunks_join_cleanly(&tok).unwrap());
        assert_eq!(pool.ends, tok.content_token_ends(&pool.text).unwrap());
    }
}
