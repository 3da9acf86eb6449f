//! Attention for heads of 128 on the tensor cores (`attention_mma` and `attention_mma_narrow` in
//! attention_mma.cu): a block serves the query heads of one KV head in up to 16 (row, query head)
//! slots of one sequence per warp (8 warps in wide blocks, one in narrow ones), and
//! multiplies each tile of f16 keys and values with mma.sync, streamed through a ring of tiles in
//! shared memory, so that every key and value row read serves all of them. A decode or verify
//! batch is only a few such blocks, so each block's keys are also split across blocks
//! ([`splits`]), whose softmax states `attention_mma_merge` combines.
//!
//! As in attention.rs, everything a launch decides depends on the shape alone, never on the
//! context length, so a recorded verify step stays valid at every length.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{CudaViewMut, LaunchConfig};

use super::CudaBackend;
use super::CudaError;
use super::attention::{heads_per_block, push_batch_args};
use super::context::{Device, device_error, driver, enabled_from_env, grid, rows_from_env, to_u32};
use super::divisor::FastDivisor;
use super::memory::{CudaKvPool, CudaTensor};
use crate::backend::{AttentionBatch, AttentionParams, BackendError};

/// The only head size of the kernel (`MMA_HEAD_DIM`).
const HEAD_DIM: usize = 128;
/// (Row, query head) slots per warp (`MMA_ROWS`).
const ROWS: usize = 16;
/// Halves between consecutive key rows of a tile (`MMA_STRIDE`).
const STRIDE: usize = HEAD_DIM + 8;
/// Splits of a block's keys at most: `attention_mma_merge` gives each lane of a warp two.
const MAX_SPLITS: usize = 64;
/// The fewest rows that take the kernel by default.
const DEFAULT_MIN_ROWS: usize = 1;
/// Warps in the merge's blocks (`MMA_MERGE_WARPS`), a query each.
const MERGE_WARPS: usize = 8;
/// Keys of the longest sequence from which wide blocks take [`LONG`]'s tiles: on an H100 a
/// 23-row verify batch was as fast with either after 1024 tokens, faster with LONG's from 4096
/// (-3 % after 16384) and slower on an empty context (+1.6 %).
const LONG_CONTEXT: usize = 1024;

/// One width of the kernel: its entry point, the warps of a block and the keys its ring of tiles
/// holds.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Width {
    kernel: &'static str,
    warps: usize,
    ring_keys: usize,
}

/// Blocks of 8 warps and 6 tiles of 32 keys (`MMA_WIDE_WARPS`, `MMA_WIDE_KEYS`,
/// `MMA_WIDE_STAGES`): verify and prefill batches, whose rows fill several warps.
const WIDE: Width = Width { kernel: "attention_mma", warps: 8, ring_keys: 6 * 32 };
/// Wide blocks with 3 tiles of 64 keys (`MMA_LONG_KEYS`, `MMA_LONG_STAGES`): the same batches
/// after [`LONG_CONTEXT`] keys, where a tile's chain and barrier, not its keys, set the pace.
const LONG: Width = Width { kernel: "attention_mma_long", warps: 8, ring_keys: 3 * 64 };
/// Blocks of one warp and 3 tiles of 32 keys (`MMA_NARROW_KEYS`, `MMA_NARROW_STAGES`): decode
/// rows, whose slots fill one warp, so that an SM holds several computing warps instead of one
/// wide block's one.
const NARROW: Width = Width { kernel: "attention_mma_narrow", warps: 1, ring_keys: 3 * 32 };

impl Width {
    /// Dynamic shared memory of a block: the ring of tiles of f16 keys and values (a wide block's
    /// 102 KB, which sm_80 and sm_90 grant a block, 163 and 227 KB, but sm_86 and sm_89 do not,
    /// 99 KB).
    const fn shared_bytes(self) -> usize {
        self.ring_keys * 2 * STRIDE * size_of::<u16>()
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
    long: Loaded,
    /// Absent with `CANOPY_CUDA_MMA_ATTENTION_NARROW=0`: every batch then takes wide blocks.
    narrow: Option<Loaded>,
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
        Ok(Some(Self {
            min_rows: rows_from_env("CANOPY_CUDA_MMA_ATTENTION_MIN_ROWS", DEFAULT_MIN_ROWS),
            wide: Loaded::new(device, WIDE)?,
            long: Loaded::new(device, LONG)?,
            narrow: if narrow { Some(Loaded::new(device, NARROW)?) } else { None },
        }))
    }

    /// Whether the kernel takes a batch of `n_rows` rows with heads of `params`.
    pub fn takes(&self, params: &AttentionParams, n_rows: usize) -> bool {
        params.head_dim == HEAD_DIM && n_rows >= self.min_rows
    }

    /// The width for a batch of `n_rows` rows in `n_sequences` sequences, `heads_per_block` query
    /// heads a block, `max_kv_len` keys the longest reads: narrow where the rows' slots fill no
    /// more than a warp per sequence, else wide, with long tiles after a long context.
    fn width(&self, n_rows: usize, n_sequences: usize, heads_per_block: usize, max_kv_len: usize) -> &Loaded {
        match &self.narrow {
            Some(narrow) if n_rows * heads_per_block <= ROWS * n_sequences => narrow,
            _ if Self::context_class(max_kv_len) == 1 => &self.long,
            _ => &self.wide,
        }
    }

    /// 1 after a long context (at least [`LONG_CONTEXT`] keys), where wide batches take
    /// [`LONG`]; else 0 ([`crate::backend::Backend::attention_context_class`]).
    pub fn context_class(max_kv_len: usize) -> usize {
        usize::from(max_kv_len >= LONG_CONTEXT)
    }
}

/// Launches the kernel, and the merge when it splits, with the split states in `states`; the
/// caller has checked the shapes and [`MmaAttention::takes`].
#[allow(clippy::too_many_arguments)]
pub(super) fn launch(
    backend: &CudaBackend,
    q: &CudaTensor,
    k_pool: &CudaKvPool,
    v_pool: &CudaKvPool,
    batch: &AttentionBatch<CudaBackend>,
    params: &AttentionParams,
    states: &mut CudaViewMut<'_, f32>,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    const OP: &str = "attention";
    let group = params.n_heads / params.n_kv_heads;
    let heads_per_block = heads_per_block(group);
    let chunks = group.div_ceil(heads_per_block);
    let loaded = match &backend.mma_attention {
        Some(mma) => mma.width(batch.n_rows(), batch.n_sequences(), heads_per_block, batch.max_kv_len()),
        None => return Err(device_error(OP, "the tensor-core attention is not loaded")),
    };
    let width = loaded.width;
    let rows_per_block = width.warps * ROWS / heads_per_block;
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
    push_batch_args(&mut launch, q, [k_pool, v_pool], batch, &n_sequences, &block_size);
    launch
        .arg(&n_heads)
        .arg(&n_kv_heads)
        .arg(&params.scale)
        .arg(&heads_per_block)
        .arg(&n_splits)
        .arg(&mut stats)
        .arg(&mut parts)
        .arg(&mut out.buf);
    // SAFETY: the caller's shape check sizes `q`, `out` and both pools against the batch, whose
    // arrays come from a validated layout; the kernel reads only keys below each row's end, which
    // lie inside its sequence's block table, and writes only rows of the batch; `splits` keeps
    // the n_queries x splits states (two floats in `stats`, HEAD_DIM in `parts` each) within
    // `states`.
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
            long: Loaded { width: LONG, blocks_per_sm: 1 },
            narrow: narrow.then_some(Loaded { width: NARROW, blocks_per_sm: 4 }),
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
        // Decode rows of groups of 4 query heads: 4 slots a sequence, at any context length.
        assert_eq!(with_narrow.width(1, 1, 4, 1).width, NARROW);
        assert_eq!(with_narrow.width(1, 1, 4, 20_000).width, NARROW);
        assert_eq!(with_narrow.width(3, 3, 4, 5).width, NARROW);
        // Four rows a sequence fill a warp; five do not.
        assert_eq!(with_narrow.width(8, 2, 4, 8).width, NARROW);
        assert_eq!(with_narrow.width(5, 1, 4, 5).width, WIDE);
        // A 23-row verify batch.
        assert_eq!(with_narrow.width(23, 1, 4, 23).width, WIDE);
        // Switched off, every batch takes wide blocks.
        assert_eq!(attention(false).width(1, 1, 4, 1).width, WIDE);
    }

    #[test]
    fn wide_batches_take_long_tiles_from_a_long_context_on() {
        let mma = attention(true);
        assert_eq!(mma.width(23, 1, 4, LONG_CONTEXT - 1).width, WIDE);
        assert_eq!(mma.width(23, 1, 4, LONG_CONTEXT).width, LONG);
        assert_eq!(mma.width(23, 1, 4, 16_407).width, LONG);
        assert_eq!(attention(false).width(1, 1, 4, 16_384).width, LONG);
        // The classes the recordings are keyed by follow the same line.
        assert_eq!(MmaAttention::context_class(LONG_CONTEXT - 1), 0);
        assert_eq!(MmaAttention::context_class(LONG_CONTEXT), 1);
    }

    #[test]
    fn the_rings_fit_where_the_kernel_is_loaded() {
        // sm_90 grants a block 227 KB; the narrow ring leaves room for four blocks; the long
        // tiles take the same ring as the wide ones.
        assert_eq!(WIDE.shared_bytes(), 104_448);
        assert_eq!(LONG.shared_bytes(), WIDE.shared_bytes());
        assert!(4 * NARROW.shared_bytes() <= 227 * 1024);
    }
}
