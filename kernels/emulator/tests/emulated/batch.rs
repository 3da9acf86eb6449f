//! The attention batches of the emulated attention tests: sequences, their batch description as
//! the kernels read it, and the merge of the tensor-core kernel's split states.

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::backend::{AttentionLayout, Mask, SequenceSpec, TREE_ROOT};

use super::{DeviceBuffer, ptr, run};

/// Warps of `attention_mma_merge`'s blocks (`MMA_MERGE_WARPS`), a query each.
const MERGE_WARPS: usize = 8;

/// One sequence: its shape and its pool blocks.
pub struct Sequence {
    pub n_past: usize,
    pub n_new: usize,
    pub mask: Mask<'static>,
    pub table: Vec<u32>,
}

/// The batch description as the kernels read it (AttentionLayout's private arrays): per
/// sequence (q_start, n_new, n_past, table_start, mask code), the block tables cut to the blocks
/// each sequence uses, and every row's tree parent.
pub struct Flat {
    pub sequences: DeviceBuffer,
    pub block_tables: DeviceBuffer,
    pub tree_parents: DeviceBuffer,
}

pub fn flatten(block_size: usize, sequences: &[Sequence]) -> Flat {
    let (mut fields, mut tables, mut parents) = (vec![], vec![], vec![]);
    for s in sequences {
        let mask = match s.mask {
            Mask::Causal => 0,
            Mask::Bidirectional => 1,
            Mask::Tree(_) => 2,
        };
        fields.extend([parents.len() as u32, s.n_new as u32, s.n_past as u32, tables.len() as u32, mask]);
        tables.extend_from_slice(&s.table[..(s.n_past + s.n_new).div_ceil(block_size)]);
        match s.mask {
            Mask::Tree(tree) => parents.extend_from_slice(tree),
            _ => parents.extend(std::iter::repeat_n(TREE_ROOT, s.n_new)),
        }
    }
    // An empty array still needs an address.
    parents.push(TREE_ROOT);
    Flat {
        sequences: DeviceBuffer::from_words(&fields),
        block_tables: DeviceBuffer::from_words(&tables),
        tree_parents: DeviceBuffer::from_words(&parents),
    }
}

pub fn layout_of(block_size: usize, sequences: &[Sequence]) -> AttentionLayout {
    let specs: Vec<SequenceSpec<'_>> = sequences
        .iter()
        .map(|s| SequenceSpec { n_past: s.n_past, n_new: s.n_new, block_table: &s.table, mask: s.mask })
        .collect();
    AttentionLayout::new(block_size, &specs).unwrap()
}

/// Runs `attention_mma_merge` as attention_mma.rs launches it, a warp per query, over the split
/// states at the first two addresses, into the output and its int8 and f16 copies at the rest.
pub fn merge(n_queries: usize, n_splits: usize, n_heads: usize, addresses: [&mut u64; 7]) {
    let [stats, parts, out, out_q, out_scales, out_halves, out_half_scales] = addresses;
    let [mut n_queries, mut n_splits, mut n_heads] = [n_queries, n_splits, n_heads].map(|v| v as u32);
    run(
        "attention_mma_merge",
        LaunchShape::linear(n_queries.div_ceil(MERGE_WARPS as u32), 32 * MERGE_WARPS as u32),
        &mut [
            ptr(stats),
            ptr(parts),
            ptr(&mut n_queries),
            ptr(&mut n_splits),
            ptr(&mut n_heads),
            ptr(out),
            ptr(out_q),
            ptr(out_scales),
            ptr(out_halves),
            ptr(out_half_scales),
        ],
    );
}
