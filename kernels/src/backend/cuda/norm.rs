//! RMS norms, one block per row.

use cudarc::driver::PushKernelArg;

use super::context::{Device, driver, grid, to_u32};
use super::memory::CudaTensor;
use crate::backend::{BackendError, shape};

const THREADS: u32 = 256;

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
    let row_len = to_u32(OP, "row length", row_len)?;
    let mut launch = device.stream.launch_builder(device.function(OP, "rms_norm")?);
    launch.arg(&x.buf).arg(&weight.buf).arg(&row_len).arg(&eps).arg(&mut out.buf);
    // SAFETY: the shape check guarantees `n_rows` rows in `x` and `out`.
    unsafe { launch.launch(grid(OP, n_rows, THREADS)?) }.map_err(driver(OP))?;
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
    let row_len = to_u32(OP, "row length", row_len)?;
    let mut launch = device.stream.launch_builder(device.function(OP, "add_rms_norm")?);
    launch.arg(&mut residual.buf).arg(&delta.buf).arg(&weight.buf).arg(&row_len).arg(&eps).arg(&mut out.buf);
    // SAFETY: the shape check guarantees `n_rows` rows in every buffer.
    unsafe { launch.launch(grid(OP, n_rows, THREADS)?) }.map_err(driver(OP))?;
    Ok(())
}
