//! A fixed pool of KV blocks handed out from a free list.

use super::KvError;

/// Hands out block ids `0..n_blocks` and takes them back. Allocation is all-or-nothing.
#[derive(Clone, Debug)]
pub struct BlockAllocator {
    n_blocks: usize,
    /// Free block ids; the last one is handed out first.
    free: Vec<u32>,
}

/// Memory of a KV cache, in whole blocks and in bytes (K and V pools of every layer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvMemory {
    /// Bytes one block occupies over all layers' K and V pools.
    pub block_bytes: usize,
    /// Blocks in the pool.
    pub total_blocks: usize,
    /// Blocks not held by any sequence.
    pub free_blocks: usize,
}

impl KvMemory {
    /// Blocks held by sequences.
    pub fn used_blocks(&self) -> usize {
        self.total_blocks - self.free_blocks
    }

    /// Bytes of the whole pool.
    pub fn total_bytes(&self) -> usize {
        self.total_blocks * self.block_bytes
    }

    /// Bytes held by sequences.
    pub fn used_bytes(&self) -> usize {
        self.used_blocks() * self.block_bytes
    }

    /// Bytes not held by any sequence.
    pub fn free_bytes(&self) -> usize {
        self.free_blocks * self.block_bytes
    }
}

impl BlockAllocator {
    /// An allocator of `n_blocks` free blocks; block ids must fit in `u32`.
    pub fn new(n_blocks: usize) -> Result<Self, KvError> {
        let last = u32::try_from(n_blocks)
            .map_err(|_| KvError::InvalidConfig(format!("{n_blocks} blocks do not fit u32 ids")))?;
        // Reversed so that blocks are handed out in ascending order, which keeps tests readable.
        Ok(Self { n_blocks, free: (0..last).rev().collect() })
    }

    /// Blocks in the pool.
    pub fn n_blocks(&self) -> usize {
        self.n_blocks
    }

    /// Blocks currently free.
    pub fn n_free(&self) -> usize {
        self.free.len()
    }

    /// Appends `n` blocks to `out`, or allocates nothing and fails when fewer are free.
    pub fn allocate(&mut self, n: usize, out: &mut Vec<u32>) -> Result<(), KvError> {
        if n > self.free.len() {
            return Err(KvError::OutOfBlocks { needed: n, free: self.free.len() });
        }
        let start = self.free.len() - n;
        out.extend(self.free.drain(start..).rev());
        Ok(())
    }

    /// Returns blocks to the pool. Callers pass only blocks they hold, each once.
    pub fn release(&mut self, blocks: impl IntoIterator<Item = u32>) {
        self.free.extend(blocks);
        debug_assert!(self.free.len() <= self.n_blocks, "a block was released twice");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_is_all_or_nothing_and_blocks_come_back() {
        let mut allocator = BlockAllocator::new(4).unwrap();
        let mut held = Vec::new();
        allocator.allocate(3, &mut held).unwrap();
        assert_eq!(held, vec![0, 1, 2]);
        let err = allocator.allocate(2, &mut held).unwrap_err();
        assert!(matches!(err, KvError::OutOfBlocks { needed: 2, free: 1 }), "{err}");
        assert_eq!(held.len(), 3, "a failed allocation must not hand out blocks");
        allocator.release(held.drain(1..));
        assert_eq!(allocator.n_free(), 3);
        allocator.allocate(3, &mut held).unwrap();
        held.sort_unstable();
        assert_eq!(held, vec![0, 1, 2, 3]);
    }

    #[test]
    fn memory_accounting_adds_up() {
        let memory = KvMemory { block_bytes: 100, total_blocks: 8, free_blocks: 3 };
        assert_eq!(memory.used_blocks(), 5);
        assert_eq!(memory.total_bytes(), 800);
        assert_eq!(memory.used_bytes() + memory.free_bytes(), memory.total_bytes());
    }
}
