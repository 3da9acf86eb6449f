//! Paged attention, one block per (query row, head) whose warps split the keys (attention.cu).

use cudarc::driver::PushKernelArg;

use super::CudaBackend;
use super::context::{Device, driver, grid, to_u32};
use super::memory::CudaTensor;
use crate::backend::{AttentionBatch, AttentionParams, BackendError, shape};

/// Warps per block, sharing one row's keys (`ATTENTION_WARPS` in attention.cu).
const WARPS: u32 = 8;
/// The largest head the kernel holds in registers and shared memory (`MAX_HEAD_DIM` in attention.cu).
pub const MAX_HEAD_DIM: usize = 512;

pub(super) fn attention(
    device: &Device,
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
        .arg(&mut out.buf);
    // SAFETY: the shape check sizes `q`, `out` and both pools against the batch, whose arrays
    // come from a validated layout.
    unsafe { launch.launch(grid(OP, tasks, 32 * WARPS)?) }.map_err(driver(OP))?;
    Ok(())
}
