//! The paged KV cache: per-layer K and V pools in fixed-size blocks, a block allocator with exact
//! memory accounting, and per-sequence block tables.
//!
//! A sequence's logical position `p` lives at pool slot
//! `block_table[p / block_size] * block_size + p % block_size` (the layout
//! [`canopy_kernels::backend::AttentionLayout`] reads), so sequences of any length share one pool.
//! Draft-tree verification appends the tree's nodes like ordinary tokens; after acceptance,
//! [`KvCache::compact`] moves the accepted nodes to contiguous positions and drops the rest.

mod allocator;
mod cache;

pub use allocator::{BlockAllocator, KvMemory};
pub use cache::{KvCache, KvConfig, SeqId};

use canopy_kernels::backend::BackendError;

/// Why the KV cache refused an operation.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// The pool has too few free blocks for the request; nothing was allocated.
    #[error("out of KV blocks: {needed} needed, {free} free")]
    OutOfBlocks {
        /// Blocks the request needs.
        needed: usize,
        /// Blocks free in the pool.
        free: usize,
    },
    /// No live sequence has this id (never created, or released).
    #[error("unknown KV sequence {0:?}")]
    UnknownSequence(SeqId),
    /// The cache's shape is unusable (a zero or overflowing size).
    #[error("invalid KV cache configuration: {0}")]
    InvalidConfig(String),
    /// A length or position is outside the sequence.
    #[error("KV sequence {seq:?}: {detail}")]
    OutOfRange {
        /// The sequence.
        seq: SeqId,
        /// What is out of range.
        detail: String,
    },
    /// A device operation failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
}
