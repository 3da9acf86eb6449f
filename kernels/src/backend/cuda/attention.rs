//! Paged attention (attention.cu): blocks per (query row, head) whose warps split the keys; when
//! rows × heads would leave SMs idle (decode), each row's keys are also split across blocks, and
//! the last of a (row, head)'s blocks to finish merges their softmax states. Merging in the same kernel
//! saves a second launch per layer on every decode step; it needs a completion counter per split
//! (row, head), which lives with the states so that both are allocated once, before any graph
//! is recorded.

use std::sync::PoisonError;

use super::CudaBackend;
use super::context::{device_error, driver, grid, to_u32};
use super::memory::CudaTensor;
use crate::backend::{AttentionBatch, AttentionParams, BackendError, shape};

/// Warps per block, sharing one row's keys (`ATTENTION_WARPS` in attention.cu).
const WARPS: u32 = 8;
/// The largest head the kernel holds in registers and shared memory (`MAX_HEAD_DIM` in attention.cu).
pub const MAX_HEAD_DIM: usize = 512;
/// Splits of one row's keys at most.
const MAX_SPLITS: usize = 32;
/// Blocks per SM that a split launch aims for.
const BLOCKS_PER_SM: usize = 4;
/// Split states the buffer holds when each is of the largest head.
const MAX_STATES: usize = 8192;
/// Floats of the split states: max, sum and output row each.
const STATES_LEN: usize = MAX_STATES * (MAX_HEAD_DIM + 2);
/// (row, head) tasks that may be split, each taking two states at least; one counter each.
const SPLIT_TASKS: usize = MAX_STATES / 2;
/// Floats of the partials buffer, allocated zeroed once with the backend so that recorded graphs
/// can use it: the split states, then one u32 completion counter per split task. Zeroed f32 bits
/// are zero counters, and every launch leaves its counters at zero again.
pub(super) const PARTIALS_LEN: usize = STATES_LEN + SPLIT_TASKS;

pub(super) fn attention(
    backend: &CudaBackend,
    q: &CudaTensor,
    k_pool: &CudaTensor,
    v_pool: &CudaTensor,
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
    let tasks = shape::elements(OP, batch.n_rows(), params.n_heads)?;
    if tasks == 0 {
        return Ok(());
    }
    let n_sequences = to_u32(OP, "sequences", batch.n_sequences())?;
    let block_size = to_u32(OP, "block_size", batch.block_size())?;
    let n_rows = to_u32(OP, "rows", batch.n_rows())?;
    to_u32(OP, "rows * heads", tasks)?;
    let n_heads = to_u32(OP, "n_heads", params.n_heads)?;
    let n_kv_heads = to_u32(OP, "n_kv_heads", params.n_kv_heads)?;
    let head_dim = to_u32(OP, "head_dim", params.head_dim)?;
    let device = &backend.device;
    let splits = splits(device.sm_count, tasks, params.head_dim);
    let mut partials = backend.attention_partials.lock().unwrap_or_else(PoisonError::into_inner);
    let (mut states, mut tail) = partials
        .try_split_at_mut(STATES_LEN)
        .ok_or_else(|| device_error(OP, "the partials buffer is smaller than its states"))?;
    // SAFETY: u32 and f32 have the same size and every bit pattern is valid for both; only the
    // kernel reads the tail, as counters.
    let mut counters = unsafe { tail.transmute_mut::<u32>(SPLIT_TASKS) }
        .ok_or_else(|| device_error(OP, "the partials buffer has no room for its counters"))?;
    let n_splits = to_u32(OP, "splits", splits)?;
    let mut launch = device.launch(OP, "attention")?;
    launch
        .arg(&q.buf)
        .arg(&k_pool.buf)
        .arg(&v_pool.buf)
        .arg(&batch.sequences.buf)
        .arg(&n_sequences)
        .arg(&batch.block_tables.buf)
        .arg(&batch.tree_parents.buf)
        .arg(&block_size)
        .arg(&n_rows)
        .arg(&n_heads)
        .arg(&n_kv_heads)
        .arg(&head_dim)
        .arg(&params.scale)
        .arg(&n_splits)
        .arg(&mut states)
        .arg(&mut counters)
        .arg(&mut out.buf);
    // SAFETY: the shape check sizes `q`, `out` and both pools against the batch, whose arrays
    // come from a validated layout; `splits` keeps tasks * splits states within `states` and,
    // when it splits, one counter per task within `counters`.
    unsafe { launch.launch(grid(OP, tasks * splits, 32 * WARPS)?) }.map_err(driver(OP))?;
    Ok(())
}

/// Blocks per (row, head): enough for BLOCKS_PER_SM blocks on every SM, within the states buffer
/// and its counters (a step too large for them is not split). Depends only on the shape, so a
/// recorded step stays valid at every context length.
fn splits(sm_count: usize, tasks: usize, head_dim: usize) -> usize {
    let tasks = tasks.max(1);
    if tasks > SPLIT_TASKS {
        return 1;
    }
    let wanted = (BLOCKS_PER_SM * sm_count).div_ceil(tasks);
    let room = STATES_LEN / (tasks * (head_dim + 2));
    wanted.min(room).clamp(1, MAX_SPLITS)
}
