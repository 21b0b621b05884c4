//! The paged KV cache: a fixed pool of blocks, reference counts, and the prefix cache.
//!
//! As in vLLM v1, free blocks sit in one LRU queue whether or not they hold a cached prefix; a
//! cached block stays findable by its hash until the queue hands it out again (eviction).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// Index of a block in the pool.
pub(crate) type BlockId = u32;

const NIL: u32 = u32::MAX;

/// The hash of a full block of token ids, chained to the hash of the block before it, so that
/// equal hashes mean equal prefixes (up to hash collisions).
pub(crate) fn block_hash(parent: Option<u64>, tokens: &[u32]) -> u64 {
    let mut hasher = DefaultHasher::new();
    parent.hash(&mut hasher);
    tokens.hash(&mut hasher);
    hasher.finish()
}

/// The block pool with its LRU free queue and prefix-cache index.
#[derive(Debug)]
pub(crate) struct BlockPool {
    ref_cnt: Vec<u32>,
    hash: Vec<Option<u64>>,
    prev: Vec<u32>,
    next: Vec<u32>,
    in_free: Vec<bool>,
    head: u32,
    tail: u32,
    free_len: usize,
    cached: HashMap<u64, BlockId>,
    caching: bool,
}

impl BlockPool {
    /// A pool of `blocks` free blocks.
    pub(crate) fn new(blocks: usize, caching: bool) -> Self {
        let n = u32::try_from(blocks).unwrap_or(NIL - 1) as usize;
        let mut pool = BlockPool {
            ref_cnt: vec![0; n],
            hash: vec![None; n],
            prev: vec![NIL; n],
            next: vec![NIL; n],
            in_free: vec![false; n],
            head: NIL,
            tail: NIL,
            free_len: 0,
            cached: HashMap::new(),
            caching,
        };
        for id in 0..n as u32 {
            pool.push_tail(id);
        }
        pool
    }

    /// Number of blocks in the pool.
    pub(crate) fn total(&self) -> usize {
        self.ref_cnt.len()
    }

    /// Blocks no request holds (some may still hold a cached prefix).
    pub(crate) fn free(&self) -> usize {
        self.free_len
    }

    /// Blocks findable in the prefix cache.
    #[cfg(test)]
    pub(crate) fn cached(&self) -> usize {
        self.cached.len()
    }

    /// Blocks some request holds.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.ref_cnt.iter().filter(|&&r| r > 0).count()
    }

    /// The longest run of cached blocks matching `hashes` from the start.
    pub(crate) fn lookup(&self, hashes: &[u64]) -> Vec<BlockId> {
        if !self.caching {
            return Vec::new();
        }
        hashes
            .iter()
            .map_while(|h| self.cached.get(h).copied())
            .collect()
    }

    /// Whether `hits` (from [`BlockPool::lookup`]) plus `new` fresh blocks can be had now.
    pub(crate) fn can_allocate(&self, hits: &[BlockId], new: usize) -> bool {
        let evictable_hits = hits.iter().filter(|&&b| self.in_free[b as usize]).count();
        new <= self.free_len - evictable_hits
    }

    /// Takes a reference on cached blocks found by [`BlockPool::lookup`].
    pub(crate) fn touch(&mut self, hits: &[BlockId]) {
        for &b in hits {
            if self.in_free[b as usize] {
                self.unlink(b);
            }
            self.ref_cnt[b as usize] += 1;
        }
    }

    /// Hands out `n` fresh blocks from the LRU end, evicting their cached prefixes; `None` (and
    /// nothing taken) when fewer than `n` are free.
    pub(crate) fn allocate(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.free_len {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let b = self.head;
            self.unlink(b);
            if let Some(h) = self.hash[b as usize].take()
                && self.cached.get(&h) == Some(&b)
            {
                self.cached.remove(&h);
            }
            self.ref_cnt[b as usize] = 1;
            out.push(b);
        }
        Some(out)
    }

    /// Drops one reference on each block; blocks nobody holds go to the free queue, the last
    /// block of the request first in line for eviction (its tail is the least likely to be shared).
    pub(crate) fn release(&mut self, blocks: &[BlockId]) {
        for &b in blocks.iter().rev() {
            let r = &mut self.ref_cnt[b as usize];
            debug_assert!(*r > 0, "block {b} released more often than it was taken");
            *r = r.saturating_sub(1);
            if *r == 0 && !self.in_free[b as usize] {
                self.push_tail(b);
            }
        }
    }

    /// Records that block `b` now holds the full block with hash `h`.
    pub(crate) fn cache(&mut self, b: BlockId, h: u64) {
        if !self.caching || self.hash[b as usize].is_some() {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(slot) = self.cached.entry(h) {
            slot.insert(b);
            self.hash[b as usize] = Some(h);
        }
    }

    fn push_tail(&mut self, b: BlockId) {
        let i = b as usize;
        self.prev[i] = self.tail;
        self.next[i] = NIL;
        if self.tail == NIL {
            self.head = b;
        } else {
            self.next[self.tail as usize] = b;
        }
        self.tail = b;
        self.in_free[i] = true;
        self.free_len += 1;
    }

    fn unlink(&mut self, b: BlockId) {
        let i = b as usize;
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[i] = NIL;
        self.next[i] = NIL;
        self.in_free[i] = false;
        self.free_len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_and_release_restore_the_free_count() {
        let mut pool = BlockPool::new(8, true);
        let a = pool.allocate(3).unwrap();
        let b = pool.allocate(5).unwrap();
        assert_eq!(pool.free(), 0);
        assert!(pool.allocate(1).is_none());
        pool.release(&a);
        assert_eq!(pool.free(), 3);
        pool.release(&b);
        assert_eq!(pool.free(), 8);
        assert_eq!(pool.held(), 0);
    }

    #[test]
    fn cached_blocks_are_found_until_evicted_lru_first() {
        let mut pool = BlockPool::new(4, true);
        let blocks = pool.allocate(2).unwrap();
        let h0 = block_hash(None, &[1, 2]);
        let h1 = block_hash(Some(h0), &[3, 4]);
        pool.cache(blocks[0], h0);
        pool.cache(blocks[1], h1);
        pool.release(&blocks);
        assert_eq!(pool.lookup(&[h0, h1]), blocks);
        // Two never-used blocks are ahead of the cached ones in the LRU queue.
        let fresh = pool.allocate(2).unwrap();
        assert_eq!(pool.lookup(&[h0, h1]), blocks);
        // The next allocation evicts the request's tail block first (released in reverse).
        let evicting = pool.allocate(1).unwrap();
        assert_eq!(evicting, vec![blocks[1]]);
        assert_eq!(pool.lookup(&[h0, h1]), vec![blocks[0]]);
        pool.release(&fresh);
        pool.release(&evicting);
        assert_eq!(pool.free(), 4);
    }

    #[test]
    fn touching_a_free_cached_block_takes_it_out_of_the_free_queue() {
        let mut pool = BlockPool::new(2, true);
        let blocks = pool.allocate(1).unwrap();
        let h = block_hash(None, &[9]);
        pool.cache(blocks[0], h);
        pool.release(&blocks);
        let hits = pool.lookup(&[h]);
        assert!(pool.can_allocate(&hits, 1));
        assert!(!pool.can_allocate(&hits, 2));
        pool.touch(&hits);
        assert_eq!(pool.free(), 1);
        // A second request shares the block.
        pool.touch(&hits);
        pool.release(&hits);
        assert_eq!(pool.free(), 1);
        pool.release(&hits);
        assert_eq!(pool.free(), 2);
    }

    #[test]
    fn without_prefix_caching_nothing_is_found() {
        let mut pool = BlockPool::new(2, false);
        let blocks = pool.allocate(1).unwrap();
        let h = block_hash(None, &[9]);
        pool.cache(blocks[0], h);
        assert!(pool.lookup(&[h]).is_empty());
        assert_eq!(pool.cached(), 0);
    }

    #[test]
    fn chained_hashes_depend_on_the_prefix() {
        let a = block_hash(None, &[1, 2]);
        let b = block_hash(None, &[1, 3]);
        assert_ne!(block_hash(Some(a), &[5, 6]), block_hash(Some(b), &[5, 6]));
        assert_eq!(block_hash(Some(a), &[5, 6]), block_hash(Some(a), &[5, 6]));
    }
}
