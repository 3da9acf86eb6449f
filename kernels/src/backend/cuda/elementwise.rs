//! `add` and `swiglu`, one thread per element (SwiGLU four per thread when it also writes the
//! int8 copy of its output).

use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use super::CudaBackend;
use super::context::{Device, driver, per_element, to_u32};
use super::memory::{CudaTensor, Q8_BLOCK};
use crate::backend::{BackendError, shape};

pub(super) fn add(
    device: &Device,
    acc: &mut CudaTensor,
    x: &CudaTensor,
    len: usize,
) -> Result<(), BackendError> {
    const OP: &str = "add";
    shape::elementwise(OP, &[("acc", acc.len), ("x", x.len)], len)?;
    if len == 0 {
        return Ok(());
    }
    let n = len as u64;
    let mut launch = device.launch(OP, "add")?;
    launch.arg(&mut acc.buf).arg(&x.buf).arg(&n);
    // SAFETY: the shape check guarantees both buffers hold `len` elements.
    unsafe { launch.launch(per_element(OP, len)?) }.map_err(driver(OP))?;
    Ok(())
}

/// When `len` is a whole number of blocks of 32, the kernel also writes the int8 copy of `out`
/// (see matmul.rs), which spares the down projection its quantize_q8 launch. `next_matmul_rows`:
/// the input rows of the matmul that reads `out` next, when one does, so that the kernel may let
/// it start early (`let_next_matmul_start` in common.cuh).
pub(super) fn swiglu(
    backend: &CudaBackend,
    gate: &CudaTensor,
    up: &CudaTensor,
    len: usize,
    next_matmul_rows: Option<usize>,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    const OP: &str = "swiglu";
    let device = &backend.device;
    shape::elementwise(OP, &[("gate", gate.len), ("up", up.len), ("out", out.len)], len)?;
    if len == 0 {
        return Ok(());
    }
    if !len.is_multiple_of(Q8_BLOCK) {
        let n = len as u64;
        let mut launch = device.launch(OP, "swiglu")?;
        launch.arg(&gate.buf).arg(&up.buf).arg(&n).arg(&mut out.buf);
        // SAFETY: the shape check guarantees every buffer holds `len` elements.
        unsafe { launch.launch(per_element(OP, len)?) }.map_err(driver(OP))?;
        return Ok(());
    }
    let copy = out.quantized.get_mut().unwrap_or_else(PoisonError::into_inner);
    let n_quads = to_u32(OP, "len / 4", len / 4)?;
    // With no matmul known to follow, a row count past any that starts early (`EARLY_START_ROWS`).
    let next_rows = next_matmul_rows.map_or(Ok(u32::MAX), |rows| to_u32(OP, "next matmul rows", rows))?;
    let mut launch = device.launch(OP, "swiglu_q8")?;
    launch.arg(&gate.buf).arg(&up.buf).arg(&n_quads).arg(&next_rows).arg(&mut out.buf);
    let buffers = copy.buffers(device, OP, len, 1, false)?;
    launch.arg(buffers.values).arg(buffers.scales);
    // SAFETY: the shape check guarantees every buffer holds `len` elements, a whole number of
    // float4 (and of blocks of 32, whose copy holds a byte per value and two floats per block).
    unsafe { launch.launch(per_element(OP, len / 4)?) }.map_err(driver(OP))?;
    copy.mark_written(backend.epoch.load(Ordering::Relaxed), len, false);
    Ok(())
}
