//! The description of one batched attention call: which query rows belong to which sequence, where
//! each sequence's keys and values live in the paged KV pool, and what each new token may see.
//!
//! A KV pool is a tensor of `n_slots` rows of `n_kv_heads * head_dim` values, grouped in blocks of
//! `block_size` consecutive slots. A sequence's logical position `p` lives at slot
//! `block_table[p / block_size] * block_size + p % block_size`, so sequences of any length share
//! one pool. A sequence in a batch has `n_past` committed positions (already in the pool) and
//! `n_new` new tokens; new token `i` is the query row `q_start + i` and its key and value sit at
//! logical position `n_past + i`, written there by the caller (`Backend::write_kv`) before the
//! attention call. Every new token sees the whole committed context; its [`Mask`] says which new
//! tokens it sees besides.
//!
//! [`AttentionLayout`] validates the per-sequence description on the host and flattens it into
//! three `u32` arrays that [`AttentionBatch`] holds on the device, so a kernel can read it without
//! any host round trip and a captured decode step can rewrite it in place.

use super::{Backend, BackendError, DeviceArray};

/// Parent of a tree node whose parent is the committed context rather than another new token.
pub const TREE_ROOT: u32 = u32::MAX;

/// The fields of one sequence in [`AttentionLayout::sequences`], in order.
pub(crate) const SEQ_FIELDS: usize = 5;
const SEQ_Q_START: usize = 0;
const SEQ_N_NEW: usize = 1;
const SEQ_N_PAST: usize = 2;
const SEQ_TABLE_START: usize = 3;
const SEQ_MASK: usize = 4;

/// The operation a refused layout names.
const LAYOUT_OP: &str = "attention layout";

const MASK_CAUSAL: u32 = 0;
const MASK_BIDIRECTIONAL: u32 = 1;
const MASK_TREE: u32 = 2;

/// Which new tokens of its own sequence a new token attends to (besides the committed context).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mask<'a> {
    /// New token `i` sees new tokens `0..=i`: prefill chunks and chain verification.
    Causal,
    /// Every new token sees every new token: the DFlash drafter's block.
    Bidirectional,
    /// New token `i` sees itself and its ancestors: draft-tree verification. `parents[i]` is the
    /// index (among the new tokens) of node `i`'s parent, or [`TREE_ROOT`]; parents precede their
    /// children. Node `i`'s RoPE position is `n_past + depth(i)`, where a child of the context has
    /// depth 0.
    Tree(&'a [u32]),
}

/// One sequence's part in a batched attention call.
#[derive(Clone, Copy, Debug)]
pub struct SequenceSpec<'a> {
    /// Positions already in the KV pool.
    pub n_past: usize,
    /// New tokens, whose queries are this sequence's rows of the batch.
    pub n_new: usize,
    /// Pool block of each `block_size` logical positions; must cover `n_past + n_new` positions.
    pub block_table: &'a [u32],
    /// What the new tokens see among themselves.
    pub mask: Mask<'a>,
}

/// Shapes of an attention call that do not depend on the batch: the model's head layout.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionParams {
    /// Query heads.
    pub n_heads: usize,
    /// Key/value heads; query head `h` reads KV head `h / (n_heads / n_kv_heads)`.
    pub n_kv_heads: usize,
    /// Elements per head, for queries, keys and values alike.
    pub head_dim: usize,
    /// Factor applied to `q · k` before the softmax, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
}

impl AttentionParams {
    /// Elements in one query or output row.
    pub fn q_row_len(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Elements in one KV pool row.
    pub fn kv_row_len(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    pub(crate) fn validate(&self, op: &'static str) -> Result<(), BackendError> {
        let detail = if self.n_heads == 0 || self.n_kv_heads == 0 || self.head_dim == 0 {
            "head counts and head_dim must be positive"
        } else if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            "n_heads must be a multiple of n_kv_heads"
        } else if !self.scale.is_finite() {
            "scale must be finite"
        } else if self.n_heads.checked_mul(self.head_dim).is_none() {
            "n_heads * head_dim overflows"
        } else {
            return Ok(());
        };
        Err(BackendError::shape(op, format!("{detail} ({self:?})")))
    }
}

/// A validated, flattened batch description on the host, together with the per-token RoPE
/// positions and KV slots of the new tokens, which the model uploads for `rope` and `write_kv`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttentionLayout {
    block_size: usize,
    sequences: Vec<u32>,
    block_tables: Vec<u32>,
    tree_parents: Vec<u32>,
    positions: Vec<u32>,
    slots: Vec<u32>,
    max_block: Option<u32>,
    max_kv_len: usize,
}

impl AttentionLayout {
    /// Lays out `sequences` in order: the first sequence's new tokens are rows `0..n_new`, the
    /// next sequence's follow, and so on.
    pub fn new(block_size: usize, sequences: &[SequenceSpec<'_>]) -> Result<Self, BackendError> {
        let mut layout = Self::default();
        layout.clear(block_size)?;
        for seq in sequences {
            layout.push(seq)?;
        }
        Ok(layout)
    }

    /// Empties the layout for a new batch of blocks of `block_size` positions, keeping its
    /// buffers, so that a model laying out every step in the same layout allocates nothing once
    /// they have grown to its batches.
    pub fn clear(&mut self, block_size: usize) -> Result<(), BackendError> {
        if block_size == 0 {
            return Err(BackendError::shape(LAYOUT_OP, "block_size must be positive"));
        }
        self.block_size = block_size;
        self.sequences.clear();
        self.block_tables.clear();
        self.tree_parents.clear();
        self.positions.clear();
        self.slots.clear();
        self.max_block = None;
        self.max_kv_len = 0;
        Ok(())
    }

    /// Lays out `seq` after the sequences already in the layout. A refused sequence may leave
    /// part of itself behind: [`Self::clear`] the layout before using it again.
    pub fn push(&mut self, seq: &SequenceSpec<'_>) -> Result<(), BackendError> {
        self.push_sequence(self.n_sequences(), seq).map_err(|detail| BackendError::shape(LAYOUT_OP, detail))
    }

    fn push_sequence(&mut self, index: usize, seq: &SequenceSpec<'_>) -> Result<(), String> {
        if self.block_size == 0 {
            return Err("the layout has no block size: clear it with one first".to_owned());
        }
        let too_large = |what: &str| format!("sequence {index}: {what} does not fit in u32");
        let kv_len = seq.n_past.checked_add(seq.n_new).ok_or_else(|| too_large("n_past + n_new"))?;
        let kv_len_u32 = u32::try_from(kv_len).map_err(|_| too_large("n_past + n_new"))?;
        let rows_after = self.positions.len().checked_add(seq.n_new).ok_or_else(|| too_large("row count"))?;
        let q_start = u32::try_from(self.positions.len()).map_err(|_| too_large("q_start"))?;
        u32::try_from(rows_after).map_err(|_| too_large("row count"))?;
        let table_start = u32::try_from(self.block_tables.len()).map_err(|_| too_large("table_start"))?;

        let blocks_needed = kv_len.div_ceil(self.block_size);
        let table = seq.block_table.get(..blocks_needed).ok_or_else(|| {
            format!(
                "sequence {index}: {kv_len} positions need {blocks_needed} blocks of {}, the table has {}",
                self.block_size,
                seq.block_table.len()
            )
        })?;
        let block_slots_fit = |&block: &u32| {
            (block as usize).checked_add(1).and_then(|b| b.checked_mul(self.block_size)).is_some()
        };
        if !table.iter().all(block_slots_fit) {
            return Err(format!("sequence {index}: a block id's slots overflow usize"));
        }

        let n_past = seq.n_past as u32;
        let mask = match seq.mask {
            Mask::Causal => MASK_CAUSAL,
            Mask::Bidirectional => MASK_BIDIRECTIONAL,
            Mask::Tree(parents) => {
                check_tree(parents, seq.n_new).map_err(|detail| format!("sequence {index}: {detail}"))?;
                MASK_TREE
            }
        };
        for i in 0..seq.n_new {
            let position = match seq.mask {
                Mask::Tree(parents) => n_past + tree_depth(parents, i),
                Mask::Causal | Mask::Bidirectional => n_past + i as u32,
            };
            self.positions.push(position);
            let logical = seq.n_past + i;
            let block = table[logical / self.block_size] as usize;
            let slot = block * self.block_size + logical % self.block_size;
            self.slots.push(u32::try_from(slot).map_err(|_| too_large("a KV slot"))?);
            self.tree_parents.push(match seq.mask {
                Mask::Tree(parents) => parents[i],
                Mask::Causal | Mask::Bidirectional => TREE_ROOT,
            });
        }

        self.sequences.extend_from_slice(&[q_start, seq.n_new as u32, n_past, table_start, mask]);
        self.block_tables.extend_from_slice(table);
        self.max_block = table.iter().copied().chain(self.max_block).max();
        self.max_kv_len = self.max_kv_len.max(kv_len_u32 as usize);
        Ok(())
    }

    /// Positions per KV block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Sequences in the batch.
    pub fn n_sequences(&self) -> usize {
        self.sequences.len() / SEQ_FIELDS
    }

    /// Query rows (new tokens) over all sequences.
    pub fn n_rows(&self) -> usize {
        self.positions.len()
    }

    /// The longest `n_past + n_new` of any sequence, for sizing kernel launches.
    pub fn max_kv_len(&self) -> usize {
        self.max_kv_len
    }

    /// KV pool slots the batch reads: one past the last slot of its highest block.
    pub fn slots_needed(&self) -> usize {
        self.max_block.map_or(0, |block| (block as usize + 1) * self.block_size)
    }

    /// RoPE position of every query row: `n_past + i`, or `n_past + depth(i)` in a tree.
    pub fn positions(&self) -> &[u32] {
        &self.positions
    }

    /// KV pool slot of every query row's own key and value (logical position `n_past + i`).
    pub fn slots(&self) -> &[u32] {
        &self.slots
    }
}

fn check_tree(parents: &[u32], n_new: usize) -> Result<(), String> {
    if parents.len() != n_new {
        return Err(format!("the tree has {} parents for {n_new} new tokens", parents.len()));
    }
    for (i, &parent) in parents.iter().enumerate() {
        if parent != TREE_ROOT && parent as usize >= i {
            return Err(format!("tree node {i} has parent {parent}, which does not precede it"));
        }
    }
    Ok(())
}

/// Depth of node `i` of a checked tree (children of the context have depth 0).
fn tree_depth(parents: &[u32], i: usize) -> u32 {
    let mut depth = 0;
    let mut node = parents[i];
    while node != TREE_ROOT {
        depth += 1;
        node = parents[node as usize];
    }
    depth
}

/// One sequence of a batch as kernels read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SequenceView {
    pub q_start: usize,
    pub n_new: usize,
    pub n_past: usize,
    pub table_start: usize,
    pub mask: MaskKind,
}

/// [`Mask`] without its parents, which kernels read from the batch's parent array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MaskKind {
    Causal,
    Bidirectional,
    Tree,
}

impl SequenceView {
    /// Decodes the fields of one sequence; `None` for an unknown mask code.
    pub fn decode(fields: &[u32; SEQ_FIELDS]) -> Option<Self> {
        let mask = match fields[SEQ_MASK] {
            MASK_CAUSAL => MaskKind::Causal,
            MASK_BIDIRECTIONAL => MaskKind::Bidirectional,
            MASK_TREE => MaskKind::Tree,
            _ => return None,
        };
        Some(Self {
            q_start: fields[SEQ_Q_START] as usize,
            n_new: fields[SEQ_N_NEW] as usize,
            n_past: fields[SEQ_N_PAST] as usize,
            table_start: fields[SEQ_TABLE_START] as usize,
            mask,
        })
    }
}

/// An [`AttentionLayout`] on the device, as `attention` reads it.
///
/// The arrays are private so that their contents always come from a validated layout: kernels
/// may trust them, apart from the KV pool's size, which the call checks against
/// [`Self::slots_needed`].
pub struct AttentionBatch<B: Backend> {
    pub(crate) sequences: B::Index,
    pub(crate) block_tables: B::Index,
    pub(crate) tree_parents: B::Index,
    n_sequences: usize,
    n_rows: usize,
    block_size: usize,
    max_kv_len: usize,
    slots_needed: usize,
}

impl<B: Backend> AttentionBatch<B> {
    /// Uploads `layout` into new device arrays.
    pub fn upload(backend: &B, layout: &AttentionLayout) -> Result<Self, BackendError> {
        Ok(Self {
            sequences: backend.upload_index(&layout.sequences)?,
            block_tables: backend.upload_index(&layout.block_tables)?,
            tree_parents: backend.upload_index(&layout.tree_parents)?,
            n_sequences: layout.n_sequences(),
            n_rows: layout.n_rows(),
            block_size: layout.block_size,
            max_kv_len: layout.max_kv_len,
            slots_needed: layout.slots_needed(),
        })
    }

    /// An empty batch whose arrays can later take, through [`Self::update`], any layout of at most
    /// `max_sequences` sequences, `max_rows` query rows and `max_table_entries` block-table
    /// entries in all: the buffers a captured step keeps.
    pub fn with_capacity(
        backend: &B,
        max_sequences: usize,
        max_rows: usize,
        max_table_entries: usize,
    ) -> Result<Self, BackendError> {
        let fields = max_sequences.checked_mul(SEQ_FIELDS).ok_or_else(|| {
            BackendError::shape("attention batch", format!("{max_sequences} sequences overflow usize"))
        })?;
        Ok(Self {
            sequences: backend.upload_index(&vec![0; fields])?,
            block_tables: backend.upload_index(&vec![0; max_table_entries])?,
            tree_parents: backend.upload_index(&vec![TREE_ROOT; max_rows])?,
            n_sequences: 0,
            n_rows: 0,
            block_size: 1,
            max_kv_len: 0,
            slots_needed: 0,
        })
    }

    /// Rewrites the device arrays in place with `layout`, which must fit in the capacity they
    /// were created with; the buffers stay where they are, as a captured step needs.
    pub fn update(&mut self, backend: &B, layout: &AttentionLayout) -> Result<(), BackendError> {
        let arrays = [
            ("sequences", &self.sequences, &layout.sequences),
            ("block tables", &self.block_tables, &layout.block_tables),
            ("tree parents", &self.tree_parents, &layout.tree_parents),
        ];
        // Check every capacity first, so that a refused update leaves the batch unchanged.
        for (what, device, host) in arrays {
            if device.len() < host.len() {
                let detail = format!("{what}: {} entries exceed the capacity {}", host.len(), device.len());
                return Err(BackendError::shape("attention batch update", detail));
            }
        }
        backend.write_index(&mut self.sequences, &layout.sequences)?;
        backend.write_index(&mut self.block_tables, &layout.block_tables)?;
        backend.write_index(&mut self.tree_parents, &layout.tree_parents)?;
        self.n_sequences = layout.n_sequences();
        self.n_rows = layout.n_rows();
        self.block_size = layout.block_size;
        self.max_kv_len = layout.max_kv_len;
        self.slots_needed = layout.slots_needed();
        Ok(())
    }

    /// Sequences in the batch.
    pub fn n_sequences(&self) -> usize {
        self.n_sequences
    }

    /// Query rows over all sequences.
    pub fn n_rows(&self) -> usize {
        self.n_rows
    }

    /// Positions per KV block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The longest `n_past + n_new` of any sequence.
    pub fn max_kv_len(&self) -> usize {
        self.max_kv_len
    }

    /// KV pool slots the batch reads.
    pub fn slots_needed(&self) -> usize {
        self.slots_needed
    }
}
