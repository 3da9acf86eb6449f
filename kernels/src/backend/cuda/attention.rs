//! Paged attention (attention.cu): blocks per (query row, head) whose warps split the keys; when
//! rows × heads would leave SMs idle (decode), each row's keys are also split across blocks and a
//! second kernel merges their softmax states.

use std::sync::PoisonError;

use cudarc::driver::PushKernelArg;

use super::CudaBackend;
use super::context::{driver, grid, to_u32};
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
/// Floats of the split states buffer, allocated once with the backend so that recorded graphs
/// can use it: 8192 states of the largest head.
pub(super) const PARTIALS_LEN: usize = 8192 * (MAX_HEAD_DIM + 2);

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
    let n_splits = to_u32(OP, "splits", splits)?;
    let mut launch = device.stream.launch_builder(device.function(OP, "attention")?);
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
        .arg(&mut *partials)
        .arg(&mut out.buf);
    // SAFETY: the shape check sizes `q`, `out` and both pools against the batch, whose arrays
    // come from a validated layout; `splits` keeps tasks * splits states within `partials`.
    unsafe { launch.launch(grid(OP, tasks * splits, 32 * WARPS)?) }.map_err(driver(OP))?;
    if splits > 1 {
        let mut combine = device.stream.launch_builder(device.function(OP, "attention_combine")?);
        combine.arg(&*partials).arg(&n_splits).arg(&head_dim).arg(&mut out.buf);
        // SAFETY: the first launch wrote tasks * splits states; `out` holds tasks head rows.
        unsafe { combine.launch(grid(OP, tasks, COMBINE_THREADS)?) }.map_err(driver(OP))?;
    }
    Ok(())
}

const COMBINE_THREADS: u32 = 128;

/// Blocks per (row, head): enough for BLOCKS_PER_SM blocks on every SM, within the states buffer.
/// Depends only on the shape, so a recorded step stays valid at every context length.
fn splits(sm_count: usize, tasks: usize, head_dim: usize) -> usize {
    let wanted = (BLOCKS_PER_SM * sm_count).div_ceil(tasks.max(1));
    let room = PARTIALS_LEN / (tasks.max(1) * (head_dim + 2));
    wanted.min(room).clamp(1, MAX_SPLITS)
}
