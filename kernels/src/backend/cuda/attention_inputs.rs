//! A layer's attention inputs in one launch (attention_inputs.cu): per-head RMS norms of the
//! queries and keys, RoPE, and the KV pool writes.

use super::CudaBackend;
use super::context::{driver, grid, to_u32};
use crate::backend::{
    AttentionInputs, AttentionTargets, BackendError, DeviceArray, HeadParams, RopeStyle, attention_inputs,
    shape,
};

const OP: &str = "attention_inputs";
/// Warps per block, a task each (`INPUT_WARPS`).
const WARPS: usize = 4;
/// The largest head the kernel holds in shared memory (`INPUT_MAX_HEAD_DIM`).
const MAX_HEAD_DIM: usize = 512;

pub(super) fn attention_inputs(
    backend: &CudaBackend,
    inputs: &AttentionInputs<'_, CudaBackend>,
    targets: AttentionTargets<'_, CudaBackend>,
) -> Result<(), BackendError> {
    let AttentionInputs { q_raw, k_raw, v, heads } = *inputs;
    let HeadParams { q_norm, k_norm, eps, positions, slots, n_rows, q_rope, k_rope } = heads;
    let head_dim = q_rope.head_dim;
    // The kernel rotates queries and keys alike and normalises whole heads; anything else takes
    // the ops one at a time, which also report what is wrong with a malformed call.
    let fused = k_rope.head_dim == head_dim
        && k_rope.rotary_dim == q_rope.rotary_dim
        && k_rope.theta == q_rope.theta
        && k_rope.style == q_rope.style
        && q_norm.len() == head_dim
        && k_norm.len() == head_dim
        && head_dim <= MAX_HEAD_DIM;
    if !fused {
        return attention_inputs::one_op_at_a_time(backend, inputs, targets);
    }
    let AttentionTargets { q, k, k_pool, v_pool } = targets;
    shape::rms_norm(OP, &[("q_raw", q_raw.len()), ("q", q.len())], q_norm, n_rows * q_rope.n_heads, eps)?;
    shape::rms_norm(OP, &[("k_raw", k_raw.len()), ("k", k.len())], k_norm, n_rows * k_rope.n_heads, eps)?;
    shape::rope(q, positions, n_rows, &q_rope)?;
    shape::rope(k, positions, n_rows, &k_rope)?;
    let kv_width = k_rope.row_len();
    let k_rows = shape::write_kv(k_pool, k, slots, n_rows, kv_width)?;
    let v_rows = shape::write_kv(v_pool, v, slots, n_rows, kv_width)?;
    let tasks = shape::elements(OP, n_rows, q_rope.n_heads + 2 * k_rope.n_heads)?;
    if tasks == 0 {
        return Ok(());
    }
    q.invalidate_quantized();
    k.invalidate_quantized();
    let pool_rows = to_u32(OP, "pool rows", k_rows.min(v_rows))?;
    let n_rows = to_u32(OP, "n_rows", n_rows)?;
    let n_heads = to_u32(OP, "n_heads", q_rope.n_heads)?;
    let n_kv_heads = to_u32(OP, "n_kv_heads", k_rope.n_heads)?;
    let head_dim = to_u32(OP, "head_dim", head_dim)?;
    let rotary_dim = to_u32(OP, "rotary_dim", q_rope.rotary_dim)?;
    let neox = u32::from(q_rope.style == RopeStyle::Neox);
    let mut launch = backend.device.launch(OP, "attention_inputs")?;
    launch
        .arg(&q_raw.buf)
        .arg(&k_raw.buf)
        .arg(&v.buf)
        .arg(&q_norm.buf)
        .arg(&k_norm.buf)
        .arg(&eps)
        .arg(&positions.buf)
        .arg(&slots.buf)
        .arg(&pool_rows)
        .arg(&n_rows)
        .arg(&n_heads)
        .arg(&n_kv_heads)
        .arg(&head_dim)
        .arg(&rotary_dim)
        .arg(&q_rope.theta)
        .arg(&neox)
        .arg(&mut q.buf)
        .arg(&mut k.buf)
        .arg(&mut k_pool.buf)
        .arg(&mut v_pool.buf);
    let config = grid(OP, tasks.div_ceil(WARPS), to_u32(OP, "threads", 32 * WARPS)?)?;
    // SAFETY: the shape checks size every tensor for n_rows tokens of their heads, positions and
    // slots for n_rows entries, and the norm weights for one head (`fused`); pool rows are
    // bounds-checked in the kernel, and a head fits its warp's shared memory (MAX_HEAD_DIM).
    unsafe { launch.launch(config) }.map_err(driver(OP))?;
    Ok(())
}
