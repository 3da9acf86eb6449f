//! Paged attention over a batch of sequences with causal, bidirectional or tree masks.
//!
//! One task per (query row, head). A task walks the keys its row may see, a chunk at a time:
//! it scores the chunk, then folds it into a running softmax (max, sum and weighted values kept
//! in the output row itself), so no score buffer grows with the context.
//!
//! Keys are visited in position order: the context, then the new tokens the row sees (a tree
//! node's ancestors from the root down). A row's result therefore depends only on the keys it
//! sees, bit for bit: a tree node gets exactly what decoding its root-to-node path one token at
//! a time would give, and a sequence gets the same in any batch.

use std::cell::Cell;

use rayon::prelude::*;

use super::CpuBackend;
use super::lanes::dot;
use super::memory::CpuTensor;
use super::scratch::{Scratch, ThreadBuffer};
use crate::backend::attention::{MaskKind, SEQ_FIELDS, SequenceView};
use crate::backend::{AttentionBatch, AttentionParams, BackendError, TREE_ROOT, shape};

/// Keys scored before each update of the running softmax.
const KEY_CHUNK: usize = 32;

thread_local! {
    /// A tree node's ancestry, node first.
    static TREE_PATH: Cell<Vec<u32>> = const { Cell::new(Vec::new()) };
}

pub(super) fn attention(
    q: &CpuTensor,
    k_pool: &CpuTensor,
    v_pool: &CpuTensor,
    batch: &AttentionBatch<CpuBackend>,
    params: &AttentionParams,
    out: &mut CpuTensor,
    sequences: &Scratch<SequenceView>,
) -> Result<(), BackendError> {
    shape::attention(q, k_pool, v_pool, batch, params, out)?;
    sequences.with_vec(|sequences| {
        decode_sequences(batch, sequences)?;
        attend(q, k_pool, v_pool, batch, params, out, sequences);
        Ok(())
    })
}

/// Runs every (row, head) task of a checked call whose sequences are decoded.
fn attend(
    q: &CpuTensor,
    k_pool: &CpuTensor,
    v_pool: &CpuTensor,
    batch: &AttentionBatch<CpuBackend>,
    params: &AttentionParams,
    out: &mut CpuTensor,
    sequences: &[SequenceView],
) {
    let (n_heads, head_dim) = (params.n_heads, params.head_dim);
    let heads_per_kv = n_heads / params.n_kv_heads;
    let q_row_len = params.q_row_len();
    let pools = Pools {
        k: &k_pool.0,
        v: &v_pool.0,
        kv_row_len: params.kv_row_len(),
        block_size: batch.block_size(),
        block_tables: &batch.block_tables.0,
        parents: &batch.tree_parents.0,
    };
    let tasks = out.0[..batch.n_rows() * q_row_len].par_chunks_mut(head_dim).enumerate();
    // Each rayon job borrows its thread's buffer for the tree paths of its tasks.
    tasks.for_each_init(
        || ThreadBuffer::take(&TREE_PATH, 0),
        |path, (task, out)| {
            let (row, head) = (task / n_heads, task % n_heads);
            // Rows are packed in sequence order; sequences without rows end where they start.
            let seq = &sequences[sequences.partition_point(|s| s.q_start + s.n_new <= row)];
            let q = &q.0[row * q_row_len + head * head_dim..][..head_dim];
            let kv_offset = head / heads_per_kv * head_dim;
            let mut softmax = RunningSoftmax::new(q, params.scale, out);
            pools.for_each_visible_slot(seq, row - seq.q_start, path, |slot| {
                let start = slot * pools.kv_row_len + kv_offset;
                softmax.push(&pools.k[start..start + head_dim], &pools.v[start..start + head_dim]);
            });
            softmax.finish();
        },
    );
}

/// Decodes the batch's sequences into `out`, replacing its contents. They come from a validated
/// layout, so the only failure is a batch whose arrays are shorter than its counts, which
/// `AttentionBatch` prevents.
fn decode_sequences(
    batch: &AttentionBatch<CpuBackend>,
    out: &mut Vec<SequenceView>,
) -> Result<(), BackendError> {
    let corrupt = || BackendError::index("attention", "the batch description is inconsistent");
    let fields = batch.sequences.0.get(..batch.n_sequences() * SEQ_FIELDS).ok_or_else(corrupt)?;
    out.clear();
    for fields in fields.as_chunks::<SEQ_FIELDS>().0 {
        out.push(SequenceView::decode(fields).ok_or_else(corrupt)?);
    }
    Ok(())
}

/// Where a batch's keys and values are, and how to find a sequence's positions among them.
struct Pools<'a> {
    k: &'a [f32],
    v: &'a [f32],
    kv_row_len: usize,
    block_size: usize,
    block_tables: &'a [u32],
    parents: &'a [u32],
}

impl Pools<'_> {
    /// Calls `visit` with the pool slot of every key new token `i` of `seq` may see, in position
    /// order; `path` is scratch space for a tree node's ancestry.
    fn for_each_visible_slot(
        &self,
        seq: &SequenceView,
        i: usize,
        path: &mut Vec<u32>,
        mut visit: impl FnMut(usize),
    ) {
        let table = &self.block_tables[seq.table_start..];
        let mut visit_position = |position: usize| {
            visit(table[position / self.block_size] as usize * self.block_size + position % self.block_size);
        };
        (0..seq.n_past).for_each(&mut visit_position);
        match seq.mask {
            MaskKind::Causal => (0..=i).for_each(|j| visit_position(seq.n_past + j)),
            MaskKind::Bidirectional => (0..seq.n_new).for_each(|j| visit_position(seq.n_past + j)),
            MaskKind::Tree => {
                let parents = &self.parents[seq.q_start..seq.q_start + seq.n_new];
                path.clear();
                let mut node = i as u32;
                while node != TREE_ROOT {
                    path.push(node);
                    node = parents[node as usize];
                }
                path.iter().rev().for_each(|&node| visit_position(seq.n_past + node as usize));
            }
        }
    }
}

/// An online softmax-weighted sum of values, accumulated in the output slice.
struct RunningSoftmax<'a> {
    q: &'a [f32],
    scale: f32,
    out: &'a mut [f32],
    max: f32,
    sum: f32,
    pending: usize,
    scores: [f32; KEY_CHUNK],
    values: [&'a [f32]; KEY_CHUNK],
}

impl<'a> RunningSoftmax<'a> {
    fn new(q: &'a [f32], scale: f32, out: &'a mut [f32]) -> Self {
        out.fill(0.0);
        let values = [&[][..]; KEY_CHUNK];
        Self { q, scale, out, max: f32::NEG_INFINITY, sum: 0.0, pending: 0, scores: [0.0; KEY_CHUNK], values }
    }

    fn push(&mut self, key: &[f32], value: &'a [f32]) {
        self.scores[self.pending] = dot(self.q, key) * self.scale;
        self.values[self.pending] = value;
        self.pending += 1;
        if self.pending == KEY_CHUNK {
            self.flush();
        }
    }

    fn flush(&mut self) {
        let scores = &self.scores[..self.pending];
        let chunk_max = scores.iter().fold(f32::NEG_INFINITY, |m, &s| m.max(s));
        let new_max = self.max.max(chunk_max);
        if new_max > self.max {
            // exp(-inf) = 0 on the first chunk, when the accumulators are still zero.
            let rescale = (self.max - new_max).exp();
            self.sum *= rescale;
            self.out.iter_mut().for_each(|o| *o *= rescale);
            self.max = new_max;
        }
        for (&score, value) in scores.iter().zip(&self.values) {
            let weight = (score - new_max).exp();
            self.sum += weight;
            for (o, &v) in self.out.iter_mut().zip(*value) {
                *o += weight * v;
            }
        }
        self.pending = 0;
    }

    fn finish(mut self) {
        self.flush();
        let inv_sum = 1.0 / self.sum;
        self.out.iter_mut().for_each(|o| *o *= inv_sum);
    }
}
