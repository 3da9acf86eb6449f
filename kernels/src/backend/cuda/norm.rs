//! RMS norms (norm.cu): rows held in registers by one warp or one block each where they fit,
//! else one looping block per row. The register kernels also write the output's int8 copy when
//! rows are whole blocks of 32, so that the quantized matmuls reading the output (q/k/v, gate/up,
//! the LM head) skip their quantize_q8 launch.

use cudarc::driver::LaunchConfig;

use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use super::CudaBackend;
use super::context::{driver, grid, to_u32};
use super::memory::{CudaTensor, Q8_BLOCK};
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
    fn kernel(self, add: bool, quantize: bool) -> &'static str {
        match (self, add, quantize) {
            (Variant::Looping, false, _) => "rms_norm",
            (Variant::Looping, true, _) => "add_rms_norm",
            (Variant::PerWarp, false, false) => "rms_norm_warp",
            (Variant::PerWarp, true, false) => "add_rms_norm_warp",
            (Variant::PerBlock, false, false) => "rms_norm_block",
            (Variant::PerBlock, true, false) => "add_rms_norm_block",
            (Variant::PerWarp, false, true) => "rms_norm_q8_warp",
            (Variant::PerWarp, true, true) => "add_rms_norm_q8_warp",
            (Variant::PerBlock, false, true) => "rms_norm_q8_block",
            (Variant::PerBlock, true, true) => "add_rms_norm_q8_block",
        }
    }

    /// Whether the kernel writes the int8 copy too: a register kernel, on rows of whole blocks.
    fn quantizes(self, row_len: usize) -> bool {
        self != Variant::Looping && row_len.is_multiple_of(Q8_BLOCK)
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
    backend: &CudaBackend,
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
    let (device, epoch) = (&backend.device, backend.epoch.load(Ordering::Relaxed));
    let (variant, config) = plan(OP, row_len, n_rows)?;
    let quantize = variant.quantizes(row_len);
    let halves = quantize && backend.writes_halves(n_rows);
    let n_values = n_rows * row_len;
    let copy = out.quantized.get_mut().unwrap_or_else(PoisonError::into_inner);
    let row_len = to_u32(OP, "row length", row_len)?;
    let n_rows = to_u32(OP, "n_rows", n_rows)?;
    let mut launch = device.launch(OP, variant.kernel(false, quantize))?;
    launch.arg(&x.buf).arg(&weight.buf).arg(&row_len);
    // The register kernels give whole warps rows, so they check the row count themselves.
    if variant != Variant::Looping {
        launch.arg(&n_rows);
    }
    launch.arg(&eps).arg(&mut out.buf);
    if quantize {
        let buffers = copy.buffers(device, OP, n_values, n_rows as usize, halves)?;
        launch.arg(buffers.values).arg(buffers.scales).arg(buffers.halves).arg(buffers.half_scales);
    }
    // SAFETY: the shape check guarantees `n_rows` rows in `x` and `out`; the register kernels only
    // run on rows that are whole float4, and the quantizing ones on rows of whole blocks, whose
    // copy holds a byte per value and two floats per block, and the f16 copy (or null) a half per
    // value and a float per row.
    unsafe { launch.launch(config) }.map_err(driver(OP))?;
    if quantize {
        copy.mark_written(epoch, n_values, halves);
    }
    Ok(())
}

pub(super) fn add_rms_norm(
    backend: &CudaBackend,
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
    let (device, epoch) = (&backend.device, backend.epoch.load(Ordering::Relaxed));
    let (variant, config) = plan(OP, row_len, n_rows)?;
    let quantize = variant.quantizes(row_len);
    let halves = quantize && backend.writes_halves(n_rows);
    let n_values = n_rows * row_len;
    let copy = out.quantized.get_mut().unwrap_or_else(PoisonError::into_inner);
    let row_len = to_u32(OP, "row length", row_len)?;
    let n_rows = to_u32(OP, "n_rows", n_rows)?;
    let mut launch = device.launch(OP, variant.kernel(true, quantize))?;
    launch.arg(&mut residual.buf).arg(&delta.buf).arg(&weight.buf).arg(&row_len);
    if variant != Variant::Looping {
        launch.arg(&n_rows);
    }
    launch.arg(&eps).arg(&mut out.buf);
    if quantize {
        let buffers = copy.buffers(device, OP, n_values, n_rows as usize, halves)?;
        launch.arg(buffers.values).arg(buffers.scales).arg(buffers.halves).arg(buffers.half_scales);
    }
    // SAFETY: the shape check guarantees `n_rows` rows in every buffer; the register kernels only
    // run on rows that are whole float4, and the quantizing ones on rows of whole blocks, whose
    // copy holds a byte per value and two floats per block, and the f16 copy (or null) a half per
    // value and a float per row.
    unsafe { launch.launch(config) }.map_err(driver(OP))?;
    if quantize {
        copy.mark_written(epoch, n_values, halves);
    }
    Ok(())
}
