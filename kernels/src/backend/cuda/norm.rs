//! RMS norms (norm.cu): rows held in registers by one warp or one block each where they fit,
//! else one looping block per row.

use cudarc::driver::LaunchConfig;

use super::context::{Device, driver, grid, to_u32};
use super::memory::CudaTensor;
use crate::backend::{BackendError, shape};

/// Threads per block of the looping kernels, and of the one-warp-per-row kernels.
const THREADS: u32 = 256;
/// float4 each thread of the register kernels holds (`NORM_MAX_VECS`).
const MAX_VECS: usize = 4;
const MAX_BLOCK_THREADS: usize = 1024;

/// The kernels of norm.cu: which one runs a norm, and with what launch.
#[derive(Clone, Copy, PartialEq)]
enum Variant {
    /// One looping block per row.
    Looping,
    /// One warp per row, the row in registers.
    PerWarp,
    /// One block per row, the row in registers.
    PerBlock,
}

impl Variant {
    fn kernel(self, add: bool) -> &'static str {
        match (self, add) {
            (Variant::Looping, false) => "rms_norm",
            (Variant::Looping, true) => "add_rms_norm",
            (Variant::PerWarp, false) => "rms_norm_warp",
            (Variant::PerWarp, true) => "add_rms_norm_warp",
            (Variant::PerBlock, false) => "rms_norm_block",
            (Variant::PerBlock, true) => "add_rms_norm_block",
        }
    }
}

fn plan(op: &'static str, row_len: usize, n_rows: usize) -> Result<(Variant, LaunchConfig), BackendError> {
    let vecs = row_len / 4;
    if !row_len.is_multiple_of(4) || vecs > MAX_BLOCK_THREADS * MAX_VECS {
        return Ok((Variant::Looping, grid(op, n_rows, THREADS)?));
    }
    if vecs <= 32 * MAX_VECS {
        let rows_per_block = (THREADS / 32) as usize;
        return Ok((Variant::PerWarp, grid(op, n_rows.div_ceil(rows_per_block), THREADS)?));
    }
    let threads = vecs.next_multiple_of(32).min(MAX_BLOCK_THREADS);
    Ok((Variant::PerBlock, grid(op, n_rows, to_u32(op, "threads", threads)?)?))
}

pub(super) fn rms_norm(
    device: &Device,
    x: &CudaTensor,
    weight: &CudaTensor,
    n_rows: usize,
    eps: f32,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    const OP: &str = "rms_norm";
    let row_len = shape::rms_norm(OP, &[("x", x.len), ("out", out.len)], weight, n_rows, eps)?;
    if n_rows == 0 {
        return Ok(());
    }
    let (variant, config) = plan(OP, row_len, n_rows)?;
    let row_len = to_u32(OP, "row length", row_len)?;
    let n_rows = to_u32(OP, "n_rows", n_rows)?;
    let mut launch = device.launch(OP, variant.kernel(false))?;
    launch.arg(&x.buf).arg(&weight.buf).arg(&row_len);
    // The register kernels give whole warps rows, so they check the row count themselves.
    if variant != Variant::Looping {
        launch.arg(&n_rows);
    }
    launch.arg(&eps).arg(&mut out.buf);
    // SAFETY: the shape check guarantees `n_rows` rows in `x` and `out`; the register kernels only
    // run on rows that are whole float4.
    unsafe { launch.launch(config) }.map_err(driver(OP))?;
    Ok(())
}

pub(super) fn add_rms_norm(
    device: &Device,
    residual: &mut CudaTensor,
    delta: &CudaTensor,
    weight: &CudaTensor,
    n_rows: usize,
    eps: f32,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    const OP: &str = "add_rms_norm";
    let inputs = [("residual", residual.len), ("delta", delta.len), ("out", out.len)];
    let row_len = shape::rms_norm(OP, &inputs, weight, n_rows, eps)?;
    if n_rows == 0 {
        return Ok(());
    }
    let (variant, config) = plan(OP, row_len, n_rows)?;
    let row_len = to_u32(OP, "row length", row_len)?;
    let n_rows = to_u32(OP, "n_rows", n_rows)?;
    let mut launch = device.launch(OP, variant.kernel(true))?;
    launch.arg(&mut residual.buf).arg(&delta.buf).arg(&weight.buf).arg(&row_len);
    if variant != Variant::Looping {
        launch.arg(&n_rows);
    }
    launch.arg(&eps).arg(&mut out.buf);
    // SAFETY: the shape check guarantees `n_rows` rows in every buffer; the register kernels only
    // run on rows that are whole float4.
    unsafe { launch.launch(config) }.map_err(driver(OP))?;
    Ok(())
}
