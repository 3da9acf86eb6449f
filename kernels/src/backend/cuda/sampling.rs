//! Row-wise reductions over logits: softmax, argmax, top-k with log-probabilities.

use super::context::{Device, driver, grid, to_u32};
use super::memory::{CudaTensor, ScratchBuffer};
use super::transfer::download_index;
use crate::backend::{BackendError, shape};

/// Threads per row (`ROW_THREADS` in sampling.cu).
const THREADS: u32 = 256;
/// Threads per row of `argmax_rows` (`ARGMAX_THREADS` in sampling.cu).
const ARGMAX_THREADS: u32 = 1024;
/// The largest `k` of `top_k_rows`: each pick rescans the row.
pub const MAX_TOP_K: usize = 64;

pub(super) fn softmax_rows(
    device: &Device,
    x: &mut CudaTensor,
    n_rows: usize,
    row_len: usize,
) -> Result<(), BackendError> {
    const OP: &str = "softmax_rows";
    shape::row_reduction(OP, x, n_rows, row_len, &[], 0)?;
    if n_rows == 0 {
        return Ok(());
    }
    let row_len = to_u32(OP, "row_len", row_len)?;
    let mut launch = device.launch(OP, "softmax_rows")?;
    launch.arg(&mut x.buf).arg(&row_len);
    // SAFETY: the shape check guarantees `n_rows` rows in `x`.
    unsafe { launch.launch(grid(OP, n_rows, THREADS)?) }.map_err(driver(OP))?;
    Ok(())
}

pub(super) fn argmax_rows(
    device: &Device,
    x: &CudaTensor,
    n_rows: usize,
    row_len: usize,
    ids: &mut ScratchBuffer<u32>,
    out: &mut [u32],
) -> Result<(), BackendError> {
    const OP: &str = "argmax_rows";
    shape::row_reduction(OP, x, n_rows, row_len, &[("out", out.len())], 1)?;
    if n_rows == 0 {
        return Ok(());
    }
    let ids = ids.at_least(device, OP, n_rows)?;
    let row_len = to_u32(OP, "row_len", row_len)?;
    let mut launch = device.launch(OP, "argmax_rows")?;
    launch.arg(&x.buf).arg(&row_len).arg(&mut *ids);
    // SAFETY: the shape check guarantees `n_rows` rows in `x`; `ids` holds `n_rows`, each of which
    // the kernel writes before the download reads it.
    unsafe { launch.launch(grid(OP, n_rows, ARGMAX_THREADS)?) }.map_err(driver(OP))?;
    download_index(device, OP, ids, &mut out[..n_rows])
}

pub(super) fn top_k_rows(
    device: &Device,
    logits: &CudaTensor,
    n_rows: usize,
    row_len: usize,
    k: usize,
    ids: &mut [u32],
    log_probs: &mut [f32],
) -> Result<(), BackendError> {
    const OP: &str = "top_k_rows";
    let outputs = [("ids", ids.len()), ("log_probs", log_probs.len())];
    shape::row_reduction(OP, logits, n_rows, row_len, &outputs, k)?;
    if k > row_len {
        return Err(BackendError::shape(OP, format!("k = {k} exceeds the row length {row_len}")));
    }
    if k > MAX_TOP_K {
        return Err(BackendError::shape(OP, format!("k = {k} exceeds the CUDA kernel's {MAX_TOP_K}")));
    }
    let total = n_rows * k;
    if total == 0 {
        return Ok(());
    }
    let mut device_ids = device.stream.alloc_zeros::<u32>(total).map_err(driver(OP))?;
    let mut device_log_probs = device.stream.alloc_zeros::<f32>(total).map_err(driver(OP))?;
    let row_len = to_u32(OP, "row_len", row_len)?;
    let k = to_u32(OP, "k", k)?;
    let mut launch = device.launch(OP, "top_k_rows")?;
    launch.arg(&logits.buf).arg(&row_len).arg(&k).arg(&mut device_ids).arg(&mut device_log_probs);
    // SAFETY: the shape check guarantees `n_rows` rows of logits; the outputs hold `n_rows * k`.
    unsafe { launch.launch(grid(OP, n_rows, THREADS)?) }.map_err(driver(OP))?;
    device.stream.memcpy_dtoh(&device_log_probs, &mut log_probs[..total]).map_err(driver(OP))?;
    download_index(device, OP, &device_ids, &mut ids[..total])
}
