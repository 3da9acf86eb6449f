//! Paged attention (attention.cu). Decode attention is bound by reading keys and values, and the
//! query heads of a grouped-query model that share a KV head read the same rows: so a block
//! serves the query heads of one KV head (a chunk of them, for groups larger than a block has
//! warps), reading each key and value row once for all of them, a tile of keys at a time,
//! coalesced. The warps a group leaves over take the next rows of the same sequence
//! ([`rows_per_block`]), whose keys a verify batch's rows share. When rows × KV heads would leave
//! SMs idle (decode), each row's keys are also split across blocks, and the last of a task's
//! blocks to finish merges their softmax states.
//! Merging in the same kernel saves a second launch per layer on every decode step; it needs a
//! completion counter per split task, which lives with the states so that both are allocated
//! once, before any graph is recorded.
//!
//! Batches with heads of 128 (`CANOPY_CUDA_MMA_ATTENTION_MIN_ROWS` rows or more, every batch by
//! default) go to the tensor-core kernel of attention_mma.rs instead, which shares the split
//! states' buffer.
//!
//! Everything a launch decides (heads per block, keys per tile, splits, shared memory) depends on
//! the shape alone, never on the context length, so a recorded step stays valid at every length.

use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};

use cudarc::driver::{CudaSlice, DriverError};

use super::context::{Device, device_error, driver, grid, to_u32};
use super::divisor::FastDivisor;
use super::launch::Launch;
use super::memory::{CudaKvPool, CudaTensor, Q8_BLOCK};
use super::{CudaBackend, attention_mma};
use crate::backend::{AttentionBatch, AttentionParams, BackendError, shape};

/// Warps per block, one per query head it serves (`ATTENTION_WARPS` in attention.cu).
const WARPS: usize = 8;
/// Threads per block.
const THREADS: usize = 32 * WARPS;
/// The largest head the kernels hold in registers and shared memory (`MAX_HEAD_DIM` in attention.cu).
pub const MAX_HEAD_DIM: usize = 512;
/// The largest head of `attention_dim128`, which holds 4 dimensions a lane (`SMALL_HEAD_DIM`).
const SMALL_HEAD_DIM: usize = 128;
/// Keys per tile at most: one per lane.
const MAX_TILE_KEYS: usize = 32;
/// Elements (float4s, or floats for heads of no multiple of 4) of a tile's keys, and of its
/// values, each thread copies (`TILE_LOADS` in attention.cu).
const TILE_LOADS: usize = 4;
/// Floats of shared memory for a block's queries and one tile's key and value rows: 48 KB, the
/// most any device grants a block without opting in, less room for the kernel's static variables.
const SHARED_FLOATS: usize = (48 * 1024 - 256) / 4;
/// Splits of one row's keys at most.
const MAX_SPLITS: usize = 64;
/// Blocks per SM that a split launch aims for.
const BLOCKS_PER_SM: usize = 4;
/// Split states the buffer holds when each is of the largest head; a state is one query head's.
const MAX_STATES: usize = 8192;
/// Floats of the split states: max, sum and output row each.
const STATES_LEN: usize = MAX_STATES * (MAX_HEAD_DIM + 2);
/// Tasks that may be split, each taking two states at least; one counter each.
const SPLIT_TASKS: usize = MAX_STATES / 2;
/// Floats of the partials buffer, allocated zeroed once with the backend so that recorded graphs
/// can use it: the split states, then one u32 completion counter per split task. Zeroed f32 bits
/// are zero counters, and every launch leaves its counters at zero again.
const PARTIALS_LEN: usize = STATES_LEN + SPLIT_TASKS;

/// What the split decode attention keeps with the backend.
pub(super) struct SplitAttention {
    /// The split states and completion counters ([`PARTIALS_LEN`] floats).
    partials: Mutex<CudaSlice<f32>>,
}

impl SplitAttention {
    pub fn new(device: &Device) -> Result<Self, DriverError> {
        let partials = device.stream.alloc_zeros::<f32>(PARTIALS_LEN)?;
        Ok(Self { partials: Mutex::new(partials) })
    }
}

// Every head, in the largest chunk, leaves room for a tile of one key at least.
const _: () = {
    let mut head_dim = 1;
    while head_dim <= MAX_HEAD_DIM {
        assert!(tile_keys(WARPS, head_dim) >= 1);
        head_dim += 1;
    }
};

pub(super) fn attention(
    backend: &CudaBackend,
    q: &CudaTensor,
    k_pool: &CudaKvPool,
    v_pool: &CudaKvPool,
    batch: &AttentionBatch<CudaBackend>,
    params: &AttentionParams,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    const OP: &str = "attention";
    shape::attention(q, k_pool, v_pool, batch, params, out)?;
    if params.head_dim > MAX_HEAD_DIM {
        let detail = format!("head_dim {} exceeds the CUDA kernel's {MAX_HEAD_DIM}", params.head_dim);
        return Err(BackendError::shape(OP, detail));
    }
    let split_attention = &backend.split_attention;
    let mut partials = split_attention.partials.lock().unwrap_or_else(PoisonError::into_inner);
    let (mut states, mut tail) = partials
        .try_split_at_mut(STATES_LEN)
        .ok_or_else(|| device_error(OP, "the partials buffer is smaller than its states"))?;
    if backend.mma_attention.as_ref().is_some_and(|mma| mma.takes(params, batch.n_rows())) {
        return attention_mma::launch(backend, q, k_pool, v_pool, batch, params, &mut states, out);
    }
    // The shape check makes n_heads a positive multiple of n_kv_heads.
    let group = params.n_heads / params.n_kv_heads;
    let heads_per_block = heads_per_block(group);
    let chunks = group.div_ceil(heads_per_block);
    let rows_per_block = rows_per_block(heads_per_block, chunks, batch.n_rows(), batch.n_sequences());
    // Query heads a block serves, a warp each: the states it writes per split, and the queries it
    // holds in shared memory.
    let block_queries = rows_per_block * heads_per_block;
    let tasks = shape::elements(OP, batch.n_rows(), params.n_kv_heads * chunks)?;
    if tasks == 0 {
        return Ok(());
    }
    let device = &backend.device;
    let splits = splits(device.sm_count, tasks, block_queries, params.head_dim);
    let tile_keys = tile_keys(block_queries, params.head_dim);
    let shared_floats =
        block_queries * params.head_dim + tile_keys * (key_stride(params.head_dim) + params.head_dim);
    to_u32(OP, "tasks", tasks)?;
    let n_sequences = to_u32(OP, "sequences", batch.n_sequences())?;
    let block_size = FastDivisor::new(OP, batch.block_size())?;
    let n_rows = to_u32(OP, "rows", batch.n_rows())?;
    let n_heads = to_u32(OP, "n_heads", params.n_heads)?;
    let n_kv_heads = to_u32(OP, "n_kv_heads", params.n_kv_heads)?;
    let head_dim = to_u32(OP, "head_dim", params.head_dim)?;
    let heads_per_block = to_u32(OP, "heads per block", heads_per_block)?;
    let rows_per_block = to_u32(OP, "rows per block", rows_per_block)?;
    let tile_keys = to_u32(OP, "keys per tile", tile_keys)?;
    let key_stride = to_u32(OP, "key stride", key_stride(params.head_dim))?;
    let n_splits = to_u32(OP, "splits", splits)?;
    // SAFETY: u32 and f32 have the same size and every bit pattern is valid for both; only the
    // kernel reads the tail, as counters.
    let mut counters = unsafe { tail.transmute_mut::<u32>(SPLIT_TASKS) }
        .ok_or_else(|| device_error(OP, "the partials buffer has no room for its counters"))?;
    let kernel = match (rows_per_block > 1, params.head_dim <= SMALL_HEAD_DIM) {
        (false, true) => "attention_dim128",
        (false, false) => "attention_dim512",
        (true, true) => "attention_rows_dim128",
        (true, false) => "attention_rows_dim512",
    };
    let mut launch = device.launch(OP, kernel)?;
    push_batch_args(&mut launch, q, [k_pool, v_pool], batch, &n_sequences, &block_size);
    launch
        .arg(&n_rows)
        .arg(&n_heads)
        .arg(&n_kv_heads)
        .arg(&head_dim)
        .arg(&params.scale)
        .arg(&heads_per_block)
        .arg(&rows_per_block)
        .arg(&tile_keys)
        .arg(&key_stride)
        .arg(&n_splits)
        .arg(&mut states)
        .arg(&mut counters)
        .arg(&mut out.buf);
    // Heads of whole blocks also write the output's int8 copy, for the output projection.
    let quantize = params.head_dim.is_multiple_of(Q8_BLOCK);
    let n_values = out.len;
    let copy = out.quantized.get_mut().unwrap_or_else(PoisonError::into_inner);
    let halves = quantize && backend.writes_halves(batch.n_rows());
    if quantize {
        let buffers = copy.buffers(device, OP, n_values, batch.n_rows(), halves)?;
        launch.arg(buffers.values).arg(buffers.scales).arg(buffers.halves).arg(buffers.half_scales);
    } else {
        copy.invalidate();
        launch.arg(&0u64).arg(&0u64).arg(&0u64).arg(&0u64);
    }
    let mut config = grid(OP, tasks * splits, to_u32(OP, "threads", THREADS)?)?;
    config.shared_mem_bytes = to_u32(OP, "shared memory", shared_floats * size_of::<f32>())?;
    // SAFETY: the shape check sizes `q`, `out` and both pools against the batch, whose arrays
    // come from a validated layout; `splits` keeps tasks * splits * block_queries states within
    // `states` and, when it splits, one counter per task within `counters`; the shared memory
    // holds the queries and a tile as the kernel lays them out, within 48 KB; with heads of whole
    // blocks, the copy holds a byte per output value and two floats per block (and the f16 copy,
    // when asked for, a half per value and a float per row), else the kernel gets null pointers
    // and writes no copy.
    unsafe { launch.launch(config) }.map_err(driver(OP))?;
    if quantize {
        copy.mark_written(backend.epoch.load(Ordering::Relaxed), n_values, halves);
    }
    Ok(())
}

/// Pushes the arguments every attention kernel starts with: the queries, both pools, and the
/// batch description.
pub(super) fn push_batch_args<'a>(
    launch: &mut Launch<'a>,
    q: &'a CudaTensor,
    [k_pool, v_pool]: [&'a CudaKvPool; 2],
    batch: &'a AttentionBatch<CudaBackend>,
    n_sequences: &'a u32,
    block_size: &'a FastDivisor,
) {
    launch
        .arg(&q.buf)
        .arg(&k_pool.buf)
        .arg(&v_pool.buf)
        .arg(&batch.sequences.buf)
        .arg(n_sequences)
        .arg(&batch.block_tables.buf)
        .arg(&batch.tree_parents.buf)
        .value(block_size);
}

/// Query heads per block: the whole group when it has no more heads than a block has warps, else
/// the group cut into as few even chunks as fit. attention_mma's blocks have as many warps.
pub(super) fn heads_per_block(group: usize) -> usize {
    group.div_ceil(group.div_ceil(WARPS))
}

/// Query rows per block: when the group is a single chunk and some sequence has more rows than one
/// (a verify or prefill batch), as many as the warps it leaves over hold (2 for Qwen3-8B's groups
/// of 4, 4 for Qwen3-0.6B's of 2), else one. The attention_rows kernels give a block that many
/// consecutive rows of one sequence, fewer at the sequence's end, so rows of different sequences
/// never share a block.
fn rows_per_block(heads_per_block: usize, chunks: usize, n_rows: usize, n_sequences: usize) -> usize {
    if chunks == 1 && n_rows > n_sequences { WARPS / heads_per_block } else { 1 }
}

/// Floats between consecutive key rows of a tile in shared memory, chosen so that the 32 lanes
/// each reading their own key row hit distinct banks: an odd stride for rows read a float at a
/// time, and an odd number of float4s for rows read four floats at a time (when head_dim is a
/// multiple of 4), whose quarter-warps then each cover all 32 banks.
const fn key_stride(head_dim: usize) -> usize {
    if !head_dim.is_multiple_of(4) {
        head_dim | 1
    } else if (head_dim / 4).is_multiple_of(2) {
        head_dim + 4
    } else {
        head_dim
    }
}

/// Keys per tile: a lane each, or fewer for large heads, so that the tile fits beside the
/// block's `block_queries` query heads in SHARED_FLOATS and TILE_LOADS elements a thread cover it.
const fn tile_keys(block_queries: usize, head_dim: usize) -> usize {
    let row_elements = if head_dim.is_multiple_of(4) { head_dim / 4 } else { head_dim };
    let loaded = TILE_LOADS * THREADS / row_elements;
    let fit = (SHARED_FLOATS - block_queries * head_dim) / (key_stride(head_dim) + head_dim);
    let keys = if fit < loaded { fit } else { loaded };
    if keys < MAX_TILE_KEYS { keys } else { MAX_TILE_KEYS }
}

/// Blocks per task: enough for BLOCKS_PER_SM blocks on every SM, within the states buffer (a
/// state per query head of the block, `block_queries`) and its counters (a step too large for them
/// is not split).
fn splits(sm_count: usize, tasks: usize, block_queries: usize, head_dim: usize) -> usize {
    let tasks = tasks.max(1);
    if tasks > SPLIT_TASKS {
        return 1;
    }
    let wanted = (BLOCKS_PER_SM * sm_count).div_ceil(tasks);
    let room = STATES_LEN / (tasks * block_queries * (head_dim + 2));
    wanted.min(room).clamp(1, MAX_SPLITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_of_one_chunk_fill_the_block_with_rows_of_multi_row_sequences() {
        // A verify batch of 23 rows: Qwen3-8B (groups of 4), Qwen3-0.6B (2), one head a KV head,
        // a group of 8, and of 9 (cut into chunks of 5 and 4).
        assert_eq!(rows_per_block(heads_per_block(4), 1, 23, 1), 2);
        assert_eq!(rows_per_block(heads_per_block(2), 1, 23, 1), 4);
        assert_eq!(rows_per_block(heads_per_block(1), 1, 23, 1), 8);
        assert_eq!(rows_per_block(heads_per_block(8), 1, 23, 1), 1);
        assert_eq!(heads_per_block(9), 5);
        assert_eq!(rows_per_block(heads_per_block(9), 2, 23, 1), 1);
        // Decode batches: a row per sequence.
        assert_eq!(rows_per_block(heads_per_block(4), 1, 1, 1), 1);
        assert_eq!(rows_per_block(heads_per_block(4), 1, 8, 8), 1);
    }
}
