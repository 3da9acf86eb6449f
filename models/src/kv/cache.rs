//! KV pools of every layer and the block tables of the sequences that share them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use canopy_kernels::backend::{Backend, DeviceArray};

use super::{BlockAllocator, KvError, KvMemory};

/// The shape of a KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvConfig {
    /// Attention layers, each with its own K and V pool.
    pub n_layers: usize,
    /// Key/value heads per token.
    pub n_kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Positions per block.
    pub block_size: usize,
    /// Blocks in the pool.
    pub n_blocks: usize,
}

impl KvConfig {
    /// Elements of one pool row (one token of one layer's K or V).
    pub fn row_len(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Bytes one block occupies over every layer's K and V pools, of `element_bytes` an element.
    pub fn block_bytes(&self, element_bytes: usize) -> Option<usize> {
        [self.block_size, self.row_len(), self.n_layers, 2, element_bytes]
            .into_iter()
            .try_fold(1usize, |acc, n| acc.checked_mul(n))
    }

    /// Blocks a sequence of `len` positions holds.
    pub fn blocks_for(&self, len: usize) -> usize {
        len.div_ceil(self.block_size)
    }
}

/// A sequence's handle in a [`KvCache`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeqId(u64);

#[derive(Debug, Default)]
struct Sequence {
    len: usize,
    blocks: Vec<u32>,
}

/// Per-layer K and V pools of `n_blocks * block_size` rows of `n_kv_heads * head_dim`, shared by
/// sequences through their block tables.
pub struct KvCache<B: Backend> {
    /// Unique among the caches of this process, so recorded steps can tell caches apart.
    instance: u64,
    config: KvConfig,
    block_bytes: usize,
    pools: Vec<(B::KvPool, B::KvPool)>,
    allocator: BlockAllocator,
    sequences: HashMap<SeqId, Sequence>,
    next_id: u64,
    /// Slot lists of the last compaction, kept so that compaction allocates only when it grows.
    src_slots: B::Index,
    dst_slots: B::Index,
}

impl<B: Backend> KvCache<B> {
    /// Allocates the pools of every layer, all blocks free.
    pub fn new(backend: &B, config: KvConfig) -> Result<Self, KvError> {
        let invalid = |detail: &str| KvError::InvalidConfig(format!("{detail} ({config:?})"));
        if [config.n_layers, config.n_kv_heads, config.head_dim, config.block_size].contains(&0) {
            return Err(invalid("layers, heads, head_dim and block_size must be positive"));
        }
        let block_bytes = config
            .block_bytes(B::KV_ELEMENT_BYTES)
            .ok_or_else(|| invalid("block size in bytes overflows"))?;
        let pool_len = config
            .n_blocks
            .checked_mul(config.block_size)
            .and_then(|slots| slots.checked_mul(config.row_len()))
            .filter(|_| config.n_blocks.checked_mul(block_bytes).is_some())
            .ok_or_else(|| invalid("pool size overflows"))?;
        let slots = config.n_blocks * config.block_size;
        if u32::try_from(slots).is_err() {
            return Err(invalid("pool slots do not fit u32"));
        }
        let allocator = BlockAllocator::new(config.n_blocks)?;
        let pools = (0..config.n_layers)
            .map(|_| Ok((backend.kv_pool(pool_len)?, backend.kv_pool(pool_len)?)))
            .collect::<Result<_, KvError>>()?;
        static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(0);
        Ok(Self {
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            config,
            block_bytes,
            pools,
            allocator,
            sequences: HashMap::new(),
            next_id: 0,
            src_slots: backend.upload_index(&[])?,
            dst_slots: backend.upload_index(&[])?,
        })
    }

    /// A number no other cache of this process has: recorded forward passes write to one
    /// cache's pools and must not be replayed on another.
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// The cache's shape.
    pub fn config(&self) -> &KvConfig {
        &self.config
    }

    /// Blocks and bytes in use and free.
    pub fn memory(&self) -> KvMemory {
        KvMemory {
            block_bytes: self.block_bytes,
            total_blocks: self.allocator.n_blocks(),
            free_blocks: self.allocator.n_free(),
        }
    }

    /// A new, empty sequence.
    pub fn create_sequence(&mut self) -> SeqId {
        let id = SeqId(self.next_id);
        self.next_id += 1;
        self.sequences.insert(id, Sequence::default());
        id
    }

    /// Frees every block of `seq` and forgets it.
    pub fn release(&mut self, seq: SeqId) -> Result<(), KvError> {
        let sequence = self.sequences.remove(&seq).ok_or(KvError::UnknownSequence(seq))?;
        self.allocator.release(sequence.blocks);
        Ok(())
    }

    /// Positions `seq` holds.
    pub fn len(&self, seq: SeqId) -> Result<usize, KvError> {
        Ok(self.sequence(seq)?.len)
    }

    /// Pool block of each `block_size` positions of `seq`.
    pub fn block_table(&self, seq: SeqId) -> Result<&[u32], KvError> {
        Ok(&self.sequence(seq)?.blocks)
    }

    /// Pool slot of position `position` of `seq`.
    pub fn slot(&self, seq: SeqId, position: usize) -> Result<usize, KvError> {
        let sequence = self.sequence(seq)?;
        if position >= sequence.len {
            let detail = format!("position {position} is beyond the length {}", sequence.len);
            return Err(KvError::OutOfRange { seq, detail });
        }
        let block = sequence.blocks[position / self.config.block_size] as usize;
        Ok(block * self.config.block_size + position % self.config.block_size)
    }

    /// Reserves positions for `n_new` tokens after the current end of `seq`, allocating blocks as
    /// needed, and returns the length before. Allocates nothing when the pool is short.
    pub fn append(&mut self, seq: SeqId, n_new: usize) -> Result<usize, KvError> {
        let block_size = self.config.block_size;
        let sequence = self.sequences.get_mut(&seq).ok_or(KvError::UnknownSequence(seq))?;
        let n_past = sequence.len;
        let new_len = n_past.checked_add(n_new).ok_or_else(|| KvError::OutOfRange {
            seq,
            detail: format!("{n_past} + {n_new} positions overflow"),
        })?;
        let needed = new_len.div_ceil(block_size).saturating_sub(sequence.blocks.len());
        self.allocator.allocate(needed, &mut sequence.blocks)?;
        sequence.len = new_len;
        Ok(n_past)
    }

    /// Shortens `seq` to `len` positions, freeing the blocks past it.
    pub fn truncate(&mut self, seq: SeqId, len: usize) -> Result<(), KvError> {
        let keep_blocks = self.config.blocks_for(len);
        let sequence = self.sequences.get_mut(&seq).ok_or(KvError::UnknownSequence(seq))?;
        if len > sequence.len {
            let detail = format!("cannot truncate to {len}, the sequence holds {}", sequence.len);
            return Err(KvError::OutOfRange { seq, detail });
        }
        sequence.len = len;
        self.allocator.release(sequence.blocks.drain(keep_blocks..));
        Ok(())
    }

    /// Keeps, after a draft-tree verify whose nodes occupy positions `n_past + i`, only the
    /// accepted nodes: node `accepted[j]` moves to position `n_past + j` in every layer's pools,
    /// and the sequence is truncated to `n_past + accepted.len()`. `accepted` is a root-to-node
    /// path, so its indices increase (parents precede children).
    pub fn compact(
        &mut self,
        backend: &B,
        seq: SeqId,
        n_past: usize,
        accepted: &[u32],
    ) -> Result<(), KvError> {
        let len = self.len(seq)?;
        let out_of_range = |detail: String| KvError::OutOfRange { seq, detail };
        if n_past > len {
            return Err(out_of_range(format!("n_past {n_past} is beyond the length {len}")));
        }
        if accepted.windows(2).any(|pair| pair[0] >= pair[1]) {
            return Err(out_of_range(format!("accepted nodes {accepted:?} do not increase")));
        }
        if let Some(&last) = accepted.last()
            && n_past + last as usize >= len
        {
            return Err(out_of_range(format!("accepted node {last} is beyond the {} nodes", len - n_past)));
        }
        let mut src = Vec::new();
        let mut dst = Vec::new();
        for (j, &node) in accepted.iter().enumerate() {
            if node as usize != j {
                // Slots fit u32: the constructor checked the pool's slot count.
                src.push(self.slot(seq, n_past + node as usize)? as u32);
                dst.push(self.slot(seq, n_past + j)? as u32);
            }
        }
        if !src.is_empty() {
            if self.src_slots.len() < src.len() {
                let capacity = vec![0; src.len().next_power_of_two()];
                self.src_slots = backend.upload_index(&capacity)?;
                self.dst_slots = backend.upload_index(&capacity)?;
            }
            backend.write_index(&mut self.src_slots, &src)?;
            backend.write_index(&mut self.dst_slots, &dst)?;
            let row_len = self.config.row_len();
            for (k_pool, v_pool) in &mut self.pools {
                for pool in [k_pool, v_pool] {
                    backend.copy_kv(pool, &self.src_slots, &self.dst_slots, src.len(), row_len)?;
                }
            }
        }
        self.truncate(seq, n_past + accepted.len())
    }

    /// The K and V pools of `layer`.
    pub fn pools(&self, layer: usize) -> Option<(&B::KvPool, &B::KvPool)> {
        self.pools.get(layer).map(|(k, v)| (k, v))
    }

    /// The K and V pools of `layer`, to write new tokens' keys and values.
    pub fn pools_mut(&mut self, layer: usize) -> Option<(&mut B::KvPool, &mut B::KvPool)> {
        self.pools.get_mut(layer).map(|(k, v)| (k, v))
    }

    fn sequence(&self, seq: SeqId) -> Result<&Sequence, KvError> {
        self.sequences.get(&seq).ok_or(KvError::UnknownSequence(seq))
    }
}

#[cfg(test)]
mod tests {
    use canopy_kernels::backend::cpu::CpuBackend;

    use super::*;

    fn cache(n_blocks: usize) -> (CpuBackend, KvCache<CpuBackend>) {
        let backend = CpuBackend::new();
        let config = KvConfig { n_layers: 2, n_kv_heads: 1, head_dim: 2, block_size: 4, n_blocks };
        let cache = KvCache::new(&backend, config).unwrap();
        (backend, cache)
    }

    #[test]
    fn append_and_truncate_hold_whole_blocks() {
        let (_, mut cache) = cache(4);
        let a = cache.create_sequence();
        assert_eq!(cache.append(a, 5).unwrap(), 0);
        assert_eq!(cache.append(a, 3).unwrap(), 5);
        assert_eq!(cache.block_table(a).unwrap().len(), 2);
        assert_eq!(cache.memory().free_blocks, 2);
        // 2 layers * (K + V) * 4 positions * 2 elements * 4 bytes.
        assert_eq!(cache.memory().block_bytes, 128);
        assert_eq!(cache.memory().used_bytes(), 256);
        cache.truncate(a, 4).unwrap();
        assert_eq!(cache.block_table(a).unwrap().len(), 1);
        assert_eq!(cache.memory().free_blocks, 3);
        assert!(matches!(cache.truncate(a, 5), Err(KvError::OutOfRange { .. })));
        cache.release(a).unwrap();
        assert_eq!(cache.memory().free_blocks, 4);
        assert!(matches!(cache.len(a), Err(KvError::UnknownSequence(_))));
    }

    #[test]
    fn running_out_of_blocks_is_an_error_that_changes_nothing() {
        let (_, mut cache) = cache(2);
        let a = cache.create_sequence();
        cache.append(a, 6).unwrap();
        let err = cache.append(a, 3).unwrap_err();
        assert!(matches!(err, KvError::OutOfBlocks { needed: 1, free: 0 }), "{err}");
        assert_eq!(cache.len(a).unwrap(), 6);
        // Filling the last block's free positions needs no new block.
        cache.append(a, 2).unwrap();
    }

    #[test]
    fn compaction_moves_accepted_rows_in_every_layer() {
        let (backend, mut cache) = cache(4);
        let a = cache.create_sequence();
        let b = cache.create_sequence();
        cache.append(b, 1).unwrap();
        cache.append(a, 2).unwrap();
        // Five tree nodes at positions 2..7 of `a`; mark every slot with its own index.
        cache.append(a, 5).unwrap();
        let n_slots = 4 * 4;
        let marked: Vec<f32> = (0..n_slots).flat_map(|s| [s as f32, -(s as f32)]).collect();
        for (k, v) in &mut cache.pools {
            *k = backend.upload_kv_pool(&marked).unwrap();
            *v = backend.upload_kv_pool(&marked).unwrap();
        }
        let node_slots: Vec<usize> = (0..5).map(|i| cache.slot(a, 2 + i).unwrap()).collect();
        cache.compact(&backend, a, 2, &[1, 3, 4]).unwrap();
        assert_eq!(cache.len(a).unwrap(), 5);
        for layer in 0..2 {
            let (k, v) = cache.pools(layer).unwrap();
            for pool in [k, v] {
                let mut host = vec![0.0; n_slots * 2];
                backend.download_kv_pool(pool, &mut host).unwrap();
                for (j, node) in [1, 3, 4].into_iter().enumerate() {
                    let slot = cache.slot(a, 2 + j).unwrap();
                    assert_eq!(host[slot * 2], node_slots[node] as f32, "layer {layer} position {}", 2 + j);
                }
            }
        }
        assert!(cache.compact(&backend, a, 2, &[2, 1]).is_err());
        assert!(cache.compact(&backend, a, 2, &[3]).is_err());
    }
}
