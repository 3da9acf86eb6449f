//! Attention for heads of 128 on the tensor cores (`attention_mma` and `attention_mma_narrow` in
//! attention_mma.cu): a block serves the query heads of one KV head in up to 16 (row, query head)
//! slots of one sequence per warp (8 warps in wide blocks, one in narrow ones), and
//! multiplies each tile of f16 keys and values with mma.sync, streamed through a ring of tiles in
//! shared memory, so that every key and value row read serves all of them. A decode or verify
//! batch is only a few such blocks, so each block's keys are also split across blocks
//! ([`splits`]), whose softmax states `attention_mma_merge` combines.
//!
//! Decode and verify batches can also come straight from their q/k/v projections
//! ([`Queries::Projected`]): `attention_mma_decode` (narrow blocks, one row a sequence) and
//! `attention_mma_projected` (wide blocks, up to 32 rows a sequence) normalise and rotate their
//! own queries and make and store the batch's new keys and values, so that no attention-inputs
//! launch sits between the projections and the attention. They pass their parity tests in the
//! CPU emulator but have not yet been measured on a device, so they are off unless
//! `CANOPY_CUDA_ATTENTION_FROM_PROJECTIONS=1`.
//!
//! As in attention.rs, everything a launch decides depends on the shape alone, never on the
//! context length, so a recorded verify step stays valid at every length.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{CudaViewMut, LaunchConfig};

use super::CudaBackend;
use super::CudaError;
use super::attention::{heads_per_block, push_batch_args, push_sequence_args};
use super::context::{
    Device, device_error, driver, enabled_from_env, grid, opted_in_from_env, rows_from_env, to_u32,
};
use super::divisor::FastDivisor;
use super::memory::{CudaKvPool, CudaTensor};
use crate::backend::{
    AttentionBatch, AttentionInputs, AttentionParams, BackendError, HeadParams, RopeParams, RopeStyle,
};

/// The only head size of the kernel (`MMA_HEAD_DIM`).
const HEAD_DIM: usize = 128;
/// (Row, query head) slots per warp (`MMA_ROWS`).
const ROWS: usize = 16;
/// Keys per tile (`MMA_KEYS`).
const KEYS: usize = 32;
/// Halves between consecutive key rows of a tile (`MMA_STRIDE`).
const STRIDE: usize = HEAD_DIM + 8;
/// Splits of a block's keys at most: `attention_mma_merge` gives each lane of a warp two.
const MAX_SPLITS: usize = 64;
/// The fewest rows that take the kernel by default.
const DEFAULT_MIN_ROWS: usize = 1;
/// Warps in the merge's blocks (`MMA_MERGE_WARPS`), a query each.
const MERGE_WARPS: usize = 8;

/// One width of the kernel: its entry point, the warps of a block, the tiles of its ring, and the
/// tile-sized stages past the ring that hold its queries.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Width {
    kernel: &'static str,
    warps: usize,
    stages: usize,
    query_stages: usize,
}

/// Blocks of 8 warps and 6 tiles (`MMA_WIDE_WARPS`, `MMA_WIDE_STAGES`): verify and prefill
/// batches, whose rows fill several warps.
const WIDE: Width = Width { kernel: "attention_mma", warps: 8, stages: 6, query_stages: 0 };
/// Blocks of one warp and 3 tiles (`MMA_NARROW_STAGES`): decode rows, whose slots fill one warp,
/// so that an SM holds several computing warps instead of one wide block's one.
const NARROW: Width = Width { kernel: "attention_mma_narrow", warps: 1, stages: 3, query_stages: 0 };
/// Narrow blocks that make their queries, keys and values from the projections
/// ([`Queries::Projected`]): their queries fit the ring's last stage.
const DECODE: Width = Width { kernel: "attention_mma_decode", ..NARROW };
/// Wide blocks that make theirs: 128 query rows, the ring's last stage and one past it.
const PROJECTED: Width = Width { kernel: "attention_mma_projected", query_stages: 1, ..WIDE };
/// New rows a sequence may have in [`PROJECTED`] blocks: the new keys a block makes (a tile's).
const MAX_PROJECTED_ROWS: usize = KEYS;

impl Width {
    /// Dynamic shared memory of a block: the ring of tiles of f16 keys and values, and the
    /// stages past it (a wide block's 102 KB, 122 KB for [`PROJECTED`], which sm_80 and sm_90
    /// grant a block, 163 and 227 KB, but sm_86 and sm_89 do not, 99 KB).
    const fn shared_bytes(self) -> usize {
        (self.stages + self.query_stages) * 2 * KEYS * STRIDE * size_of::<u16>()
    }

    /// Rows of a sequence a block holds with `heads_per_block` query heads a row.
    fn rows_per_block(self, heads_per_block: usize) -> usize {
        self.warps * ROWS / heads_per_block
    }

    /// The most new rows a sequence may have in blocks of this projected width: a decode row, or
    /// as many as one block holds and makes keys for.
    fn max_projected_rows(self, heads_per_block: usize) -> usize {
        if self == DECODE { 1 } else { MAX_PROJECTED_ROWS.min(self.rows_per_block(heads_per_block)) }
    }

    fn threads(self) -> usize {
        32 * self.warps
    }
}

/// A width of the kernel, loaded: how many of its blocks an SM holds at once, as the driver
/// computes it.
struct Loaded {
    width: Width,
    blocks_per_sm: usize,
}

impl Loaded {
    /// Lets the kernel take its ring's shared memory, more than a block gets without asking.
    fn new(device: &Device, width: Width) -> Result<Self, CudaError> {
        let function =
            device.function("attention", width.kernel).map_err(|_| CudaError::MissingKernel(width.kernel))?;
        let shared_bytes = i32::try_from(width.shared_bytes()).unwrap_or(i32::MAX);
        function.set_attribute(
            CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            shared_bytes,
        )?;
        let threads = u32::try_from(width.threads()).unwrap_or(u32::MAX);
        let blocks_per_sm =
            function.occupancy_max_active_blocks_per_multiprocessor(threads, width.shared_bytes(), None)?;
        Ok(Self { width, blocks_per_sm: usize::try_from(blocks_per_sm).unwrap_or(1).max(1) })
    }
}

/// The kernel's switch: present on devices with f16 mma.sync, ldmatrix and cp.async (sm_80 and
/// later).
pub(super) struct MmaAttention {
    /// The fewest rows of a batch that take the kernel: `CANOPY_CUDA_MMA_ATTENTION_MIN_ROWS` or
    /// [`DEFAULT_MIN_ROWS`]; batches with fewer go to the split kernels of attention.rs.
    min_rows: usize,
    wide: Loaded,
    /// Absent with `CANOPY_CUDA_MMA_ATTENTION_NARROW=0`: every batch then takes wide blocks.
    narrow: Option<Loaded>,
    /// The widths that make their queries from the projections, present with
    /// `CANOPY_CUDA_ATTENTION_FROM_PROJECTIONS=1` (off by default): [`DECODE`] for the batches
    /// narrow blocks take, when there are narrow blocks, and [`PROJECTED`] for the wide ones.
    decode: Option<Loaded>,
    projected: Option<Loaded>,
}

impl MmaAttention {
    /// The switch, or `None` (every batch then takes the split kernels) before sm_80 and on
    /// devices that grant a block less shared memory than the wide ring needs.
    pub fn new(device: &Device) -> Result<Option<Self>, CudaError> {
        let sm = device.arch.strip_prefix("sm_").and_then(|sm| sm.parse::<u32>().ok());
        if sm.is_none_or(|sm| sm < 80) {
            return Ok(None);
        }
        if device.max_shared_per_block < WIDE.shared_bytes() {
            return Ok(None);
        }
        let narrow = enabled_from_env("CANOPY_CUDA_MMA_ATTENTION_NARROW");
        let from_projections = opted_in_from_env("CANOPY_CUDA_ATTENTION_FROM_PROJECTIONS");
        let load = |width, wanted: bool| wanted.then(|| Loaded::new(device, width)).transpose();
        Ok(Some(Self {
            min_rows: rows_from_env("CANOPY_CUDA_MMA_ATTENTION_MIN_ROWS", DEFAULT_MIN_ROWS),
            wide: Loaded::new(device, WIDE)?,
            narrow: load(NARROW, narrow)?,
            decode: load(DECODE, narrow && from_projections)?,
            projected: load(PROJECTED, from_projections)?,
        }))
    }

    /// Whether the kernel takes a batch of `n_rows` rows with heads of `params`.
    pub fn takes(&self, params: &AttentionParams, n_rows: usize) -> bool {
        params.head_dim == HEAD_DIM && n_rows >= self.min_rows
    }

    /// Whether a batch with these heads may come straight from its projections: heads of 128
    /// rotated NeoX-style over the whole head, and one new row a sequence in narrow blocks
    /// ([`DECODE`]) or up to [`MAX_PROJECTED_ROWS`] in one wide block a sequence ([`PROJECTED`]).
    pub fn attends_from_projections(
        &self,
        heads: &HeadParams<'_, super::CudaBackend>,
        batch: &AttentionBatch<super::CudaBackend>,
        params: &AttentionParams,
    ) -> bool {
        let heads_per_block = heads_per_block(params.n_heads / params.n_kv_heads.max(1));
        let Some(loaded) = self.loaded(batch.n_rows(), batch.n_sequences(), heads_per_block, true) else {
            return false;
        };
        self.takes(params, batch.n_rows())
            && batch.max_new() <= loaded.width.max_projected_rows(heads_per_block)
            && heads.n_rows == batch.n_rows()
            && heads_fit_projected(&heads.q_rope, &heads.k_rope, params)
    }

    /// The loaded width for a batch of `n_rows` rows in `n_sequences` sequences,
    /// `heads_per_block` query heads a block, whose queries are made already or, if `projected`,
    /// come from the projections (`None` when those kernels are not loaded).
    fn loaded(
        &self,
        n_rows: usize,
        n_sequences: usize,
        heads_per_block: usize,
        projected: bool,
    ) -> Option<&Loaded> {
        let made = self.width(n_rows, n_sequences, heads_per_block);
        match projected {
            false => Some(made),
            true if made.width == NARROW => self.decode.as_ref(),
            true => self.projected.as_ref(),
        }
    }

    /// The width for a batch of `n_rows` rows in `n_sequences` sequences, `heads_per_block` query
    /// heads a block: narrow where the rows' slots fill no more than a warp per sequence.
    fn width(&self, n_rows: usize, n_sequences: usize, heads_per_block: usize) -> &Loaded {
        match &self.narrow {
            Some(narrow) if n_rows * heads_per_block <= ROWS * n_sequences => narrow,
            _ => &self.wide,
        }
    }
}

/// Whether queries rotated by `q_rope` and keys by `k_rope` are heads the projected kernels make:
/// of 128, rotated NeoX-style over the whole head, as many as `params` attends over. (The host's
/// fused-inputs check also requires both ropes alike.)
fn heads_fit_projected(q_rope: &RopeParams, k_rope: &RopeParams, params: &AttentionParams) -> bool {
    q_rope.style == RopeStyle::Neox
        && q_rope.rotary_dim == HEAD_DIM
        && q_rope.head_dim == HEAD_DIM
        && (q_rope.n_heads, k_rope.n_heads) == (params.n_heads, params.n_kv_heads)
}

/// What the kernel's queries come from.
pub(super) enum Queries<'a> {
    /// Queries made already, with the pools that hold every key the batch reads.
    Made { q: &'a CudaTensor, k_pool: &'a CudaKvPool, v_pool: &'a CudaKvPool },
    /// Rows' projections and head parameters ([`MmaAttention::attends_from_projections`]),
    /// with the pools that take their keys and values, which hold `pool_rows` rows.
    Projected {
        inputs: AttentionInputs<'a, CudaBackend>,
        k_pool: &'a mut CudaKvPool,
        v_pool: &'a mut CudaKvPool,
        pool_rows: u32,
    },
}

/// Launches the kernel, and the merge when it splits, with the split states in `states`; the
/// caller has checked the shapes and [`MmaAttention::takes`] (or, for projected queries,
/// [`MmaAttention::attends_from_projections`]).
pub(super) fn launch(
    backend: &CudaBackend,
    queries: Queries<'_>,
    batch: &AttentionBatch<CudaBackend>,
    params: &AttentionParams,
    states: &mut CudaViewMut<'_, f32>,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    const OP: &str = "attention";
    let group = params.n_heads / params.n_kv_heads;
    let heads_per_block = heads_per_block(group);
    let chunks = group.div_ceil(heads_per_block);
    let projected = matches!(queries, Queries::Projected { .. });
    let loaded = backend
        .mma_attention
        .as_ref()
        .and_then(|mma| mma.loaded(batch.n_rows(), batch.n_sequences(), heads_per_block, projected))
        .ok_or_else(|| device_error(OP, "the tensor-core attention for these queries is not loaded"))?;
    let width = loaded.width;
    let rows_per_block = width.rows_per_block(heads_per_block);
    let filled_row_blocks = batch.n_rows().div_ceil(rows_per_block);
    // Each sequence's rows start a row block of their own, so there are at most this many (each
    // sequence after the first adds at most one block to those its rows fill).
    let row_blocks = filled_row_blocks + batch.n_sequences().saturating_sub(1);
    let head_blocks = params.n_kv_heads * chunks;
    let n_queries = batch.n_rows() * params.n_heads;
    let device = &backend.device;
    // The splits aim at the blocks the rows fill, not at the bound's spare ones.
    let resident_blocks = loaded.blocks_per_sm * device.sm_count;
    let splits = splits(resident_blocks, filled_row_blocks * head_blocks, n_queries, states.len());
    let n_splits = to_u32(OP, "splits", splits)?;
    let n_states = n_queries * splits;
    // The outputs' states start on a float4 boundary, as the merge reads them. Unsplit launches
    // write no states, however many queries they have.
    let stats_len = if splits > 1 { (2 * n_states).next_multiple_of(4) } else { 0 };
    let (mut stats, mut parts) = states
        .try_split_at_mut(stats_len)
        .ok_or_else(|| device_error(OP, "the split states do not fit the partials buffer"))?;
    let config = LaunchConfig {
        grid_dim: (to_u32(OP, "row blocks", row_blocks)?, to_u32(OP, "head blocks", head_blocks)?, n_splits),
        block_dim: (to_u32(OP, "threads", width.threads())?, 1, 1),
        shared_mem_bytes: to_u32(OP, "shared memory", width.shared_bytes())?,
    };
    let n_sequences = to_u32(OP, "sequences", batch.n_sequences())?;
    let block_size = FastDivisor::new(OP, batch.block_size())?;
    let n_heads = to_u32(OP, "n_heads", params.n_heads)?;
    let n_kv_heads = to_u32(OP, "n_kv_heads", params.n_kv_heads)?;
    let heads_per_block = to_u32(OP, "heads per block", heads_per_block)?;
    let mut launch = device.launch(OP, width.kernel)?;
    let projected = match queries {
        Queries::Made { q, k_pool, v_pool } => {
            push_batch_args(&mut launch, q, [k_pool, v_pool], batch, &n_sequences, &block_size);
            None
        }
        Queries::Projected { inputs, k_pool, v_pool, pool_rows } => {
            launch.arg(&inputs.q_raw.buf).arg(&mut k_pool.buf).arg(&mut v_pool.buf);
            push_sequence_args(&mut launch, batch, &n_sequences, &block_size);
            Some((inputs, pool_rows))
        }
    };
    launch
        .arg(&n_heads)
        .arg(&n_kv_heads)
        .arg(&params.scale)
        .arg(&heads_per_block)
        .arg(&n_splits)
        .arg(&mut stats)
        .arg(&mut parts)
        .arg(&mut out.buf);
    if let Some((inputs, pool_rows)) = &projected {
        let heads = &inputs.heads;
        launch
            .arg(&inputs.k_raw.buf)
            .arg(&inputs.v.buf)
            .arg(&heads.q_norm.buf)
            .arg(&heads.k_norm.buf)
            .arg(&heads.eps)
            .arg(&heads.positions.buf)
            .arg(&heads.slots.buf)
            .arg(pool_rows)
            .arg(&heads.q_rope.theta);
    }
    // SAFETY: the caller's shape check sizes `q`, `out` and both pools against the batch, whose
    // arrays come from a validated layout; the kernel reads only keys below each row's end, which
    // lie inside its sequence's block table, and writes only rows of the batch; `splits` keeps
    // the n_queries x splits states (two floats in `stats`, HEAD_DIM in `parts` each) within
    // `states`. Projected queries come with their operands checked as attention_inputs checks
    // them (norm weights of a head, a position and a slot a row), and the kernel stores keys and
    // values only at slots below `pool_rows`.
    unsafe { launch.launch(config) }.map_err(driver(OP))?;
    if splits == 1 {
        return Ok(());
    }
    let config = grid(OP, n_queries.div_ceil(MERGE_WARPS), to_u32(OP, "threads", 32 * MERGE_WARPS)?)?;
    let n_queries = to_u32(OP, "queries", n_queries)?;
    let mut merge = device.launch(OP, "attention_mma_merge")?;
    merge.arg(&mut stats).arg(&mut parts).arg(&n_queries).arg(&n_splits).arg(&n_heads).arg(&mut out.buf);
    // The merge also writes the output's copies for the output projection (heads of 128 are whole
    // int8 blocks).
    let n_values = out.len;
    let copy = out.quantized.get_mut().unwrap_or_else(PoisonError::into_inner);
    let halves = backend.writes_halves(batch.n_rows());
    let buffers = copy.buffers(device, OP, n_values, batch.n_rows(), halves)?;
    merge.arg(buffers.values).arg(buffers.scales).arg(buffers.halves).arg(buffers.half_scales);
    // SAFETY: a warp per query reads its `splits` states, which the launch above wrote, and
    // writes its output row, HEAD_DIM floats of `out`, and of the copies a byte and with
    // `halves` a half per value, two floats per block of 32 and with `halves` a float per row,
    // within the buffers sized for `n_values` values in the batch's rows.
    unsafe { merge.launch(config) }.map_err(driver(OP))?;
    copy.mark_written(backend.epoch.load(Ordering::Relaxed), n_values, halves);
    Ok(())
}

/// Splits of each block's keys: as many as the `resident_blocks` the device holds at once take in
/// one wave (a block more would wait for a whole second one), within the merge's MAX_SPLITS and
/// the `states_len` floats of split states (two floats and a head each per query and split, and
/// up to three floats aligning the heads).
fn splits(resident_blocks: usize, blocks: usize, n_queries: usize, states_len: usize) -> usize {
    let wanted = resident_blocks / blocks.max(1);
    let room = states_len.saturating_sub(3) / (n_queries.max(1) * (HEAD_DIM + 2));
    wanted.min(room).clamp(1, MAX_SPLITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_batches_split_their_keys_and_prefill_batches_do_not() {
        let states_len = 8192 * 514;
        // Qwen3-8B, 23 rows, on 132 SMs of one block each: one row block of 8 KV heads, split
        // 16 ways (128 blocks; 17 would leave 4 blocks for a second wave).
        assert_eq!(splits(132, 8, 23 * 32, states_len), 16);
        // A decode row in narrow blocks, four an SM: as far as the merge goes.
        assert_eq!(splits(4 * 132, 8, 32, states_len), MAX_SPLITS);
        // 64 rows: two row blocks, 16 splits wanted, and the states bound them.
        let room = (states_len - 3) / (64 * 32 * 130);
        assert_eq!(room, 15);
        assert_eq!(splits(264, 2 * 8, 64 * 32, states_len), room);
        // A long prefill fills the device alone.
        assert_eq!(splits(132, 64 * 8, 2048 * 32, states_len), 1);
        // More SMs than states: never past MAX_SPLITS.
        assert_eq!(splits(10_000, 1, 1, states_len), MAX_SPLITS);
    }

    fn attention(narrow: bool) -> MmaAttention {
        MmaAttention {
            min_rows: 2,
            wide: Loaded { width: WIDE, blocks_per_sm: 1 },
            narrow: narrow.then_some(Loaded { width: NARROW, blocks_per_sm: 4 }),
            decode: narrow.then_some(Loaded { width: DECODE, blocks_per_sm: 4 }),
            projected: Some(Loaded { width: PROJECTED, blocks_per_sm: 1 }),
        }
    }

    #[test]
    fn batches_of_at_least_min_rows_with_heads_of_128_take_the_kernel() {
        let params = |head_dim| AttentionParams { n_heads: 32, n_kv_heads: 8, head_dim, scale: 1.0 };
        assert!(attention(true).takes(&params(128), 23));
        assert!(attention(true).takes(&params(128), 8));
        assert!(!attention(true).takes(&params(64), 23));
        assert!(!attention(true).takes(&params(128), 1));
    }

    #[test]
    fn batches_of_a_warp_of_slots_a_sequence_take_narrow_blocks() {
        let with_narrow = attention(true);
        // Decode rows of groups of 4 query heads: 4 slots a sequence.
        assert_eq!(with_narrow.width(1, 1, 4).width, NARROW);
        assert_eq!(with_narrow.width(3, 3, 4).width, NARROW);
        // Four rows a sequence fill a warp; five do not.
        assert_eq!(with_narrow.width(8, 2, 4).width, NARROW);
        assert_eq!(with_narrow.width(5, 1, 4).width, WIDE);
        // A 23-row verify batch.
        assert_eq!(with_narrow.width(23, 1, 4).width, WIDE);
        // Switched off, every batch takes wide blocks.
        assert_eq!(attention(false).width(1, 1, 4).width, WIDE);
    }

    #[test]
    fn projected_queries_take_the_projected_kernel_of_their_width() {
        let loaded = |mma: &MmaAttention, n_rows, n_sequences| {
            mma.loaded(n_rows, n_sequences, 4, true).map(|loaded| loaded.width)
        };
        assert_eq!(loaded(&attention(true), 1, 1), Some(DECODE));
        assert_eq!(loaded(&attention(true), 23, 1), Some(PROJECTED));
        assert_eq!(loaded(&attention(false), 1, 1), Some(PROJECTED));
        assert_eq!(attention(true).loaded(23, 1, 4, false).map(|loaded| loaded.width), Some(WIDE));
        // A decode block makes one new key; a wide one a tile's, in the rows it holds.
        assert_eq!(DECODE.max_projected_rows(4), 1);
        assert_eq!(PROJECTED.max_projected_rows(4), 32);
        assert_eq!(PROJECTED.max_projected_rows(8), 16);
        assert_eq!(PROJECTED.max_projected_rows(1), 32);
    }

    #[test]
    fn projected_heads_are_heads_of_128_rotated_neox_over_the_whole_head() {
        let params = AttentionParams { n_heads: 32, n_kv_heads: 8, head_dim: 128, scale: 1.0 };
        let rope = |n_heads, head_dim, rotary_dim, style| RopeParams {
            n_heads,
            head_dim,
            rotary_dim,
            theta: 1_000_000.0,
            style,
        };
        let qwen3 = |n_heads| rope(n_heads, 128, 128, RopeStyle::Neox);
        assert!(heads_fit_projected(&qwen3(32), &qwen3(8), &params));
        assert!(!heads_fit_projected(&rope(32, 128, 128, RopeStyle::Normal), &qwen3(8), &params));
        assert!(!heads_fit_projected(&rope(32, 128, 64, RopeStyle::Neox), &qwen3(8), &params));
        assert!(!heads_fit_projected(&rope(64, 64, 64, RopeStyle::Neox), &qwen3(8), &params));
        assert!(!heads_fit_projected(&qwen3(32), &qwen3(4), &params));
        assert!(!heads_fit_projected(&qwen3(16), &qwen3(8), &params));
    }

    #[test]
    fn the_rings_fit_where_the_kernel_is_loaded() {
        // sm_90 grants a block 227 KB; the narrow ring leaves room for four blocks.
        assert_eq!(WIDE.shared_bytes(), 104_448);
        assert_eq!(PROJECTED.shared_bytes(), 121_856);
        assert!(4 * NARROW.shared_bytes() <= 227 * 1024);
    }
}
