//! `out = x · weightᵀ` by matrix-vector kernels, for decode and verify-sized batches.
//!
//! Block-quantized weights (Q8_0, Q4_K, Q5_K, Q6_K) take the int8 kernels of matvec_quant.cu:
//! `quantize_q8` rounds `x` to int8 blocks of 32 into a copy kept with the tensor (reused until
//! the tensor is written again), then dp4a dot products read each weight byte once. Element-wise weights (F32, F16, BF16) take the float kernels of
//! matvec_float.cu. Both have a decode kernel that applies each activation load to four weight
//! rows and a batch kernel for more than one input row.

use std::sync::PoisonError;

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::context::{Device, driver, per_element, to_u32};
use super::memory::{CudaTensor, CudaWeight, QuantizedCopy};
use crate::backend::{BackendError, shape};
use crate::quant::GgmlType;

const OP: &str = "matmul";
/// Warps per block, which split each row between them (`MATVEC_WARPS`, `QMATVEC_WARPS`).
const WARPS: u32 = 4;
/// Columns per activation scale of the int8 kernels (`Q8_BLOCK`).
const Q8_BLOCK: usize = 32;
/// Activation blocks `quantize_q8` gives one thread each group of eight lanes.
const LANES_PER_Q8_BLOCK: usize = 8;

/// The shape of the work one block does.
struct Kernel {
    name: &'static str,
    /// Weight rows per block.
    rows: usize,
    /// Input rows per block (grid.y tiles them); `None` when the block loops over every input row.
    tile: Option<usize>,
}

/// `epoch` is the backend's (see `CudaBackend::epoch`): an int8 copy of `x` made in an earlier
/// epoch is never reused.
pub(super) fn matmul(
    device: &Device,
    epoch: u64,
    x: &CudaTensor,
    weight: &CudaWeight,
    n_rows: usize,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    shape::matmul(x, weight, n_rows, out)?;
    if n_rows == 0 || weight.rows == 0 {
        return Ok(());
    }
    let kernel = choose(weight.ty, weight.cols, n_rows)?;
    let config = LaunchConfig {
        grid_dim: (
            to_u32(OP, "weight row blocks", weight.rows.div_ceil(kernel.rows))?,
            to_u32(OP, "input row tiles", kernel.tile.map_or(1, |tile| n_rows.div_ceil(tile)))?,
            1,
        ),
        block_dim: (32 * WARPS, 1, 1),
        shared_mem_bytes: 0,
    };
    let row_bytes = weight.row_bytes as u64;
    let rows = to_u32(OP, "weight rows", weight.rows)?;
    let cols = to_u32(OP, "weight cols", weight.cols)?;
    let n_rows_u32 = to_u32(OP, "n_rows", n_rows)?;
    if kernel.tile.is_some() {
        let mut launch = device.stream.launch_builder(device.function(OP, kernel.name)?);
        launch
            .arg(&x.buf)
            .arg(&weight.bytes)
            .arg(&row_bytes)
            .arg(&rows)
            .arg(&cols)
            .arg(&n_rows_u32)
            .arg(&mut out.buf);
        // SAFETY: the shape check guarantees `n_rows` rows of `x` and `out`; the weight holds
        // `rows * row_bytes` bytes by construction, and `choose` only picks a 16-byte-load kernel
        // for rows that are whole numbers of such loads.
        unsafe { launch.launch(config) }.map_err(driver(OP))?;
        return Ok(());
    }

    let mut quantized = x.quantized.lock().unwrap_or_else(PoisonError::into_inner);
    let QuantizedCopy { values, scales, valid_for } = &mut *quantized;
    let n_values = n_rows * weight.cols;
    let n_blocks = n_values / Q8_BLOCK;
    // Blocks never straddle rows (cols is a multiple of 32), so a copy of more values serves.
    let reusable = matches!(*valid_for, Some((copy_epoch, held)) if copy_epoch == epoch && held >= n_values);
    let values = values.at_least(device, OP, n_values)?;
    let scales = scales.at_least(device, OP, 2 * n_blocks)?;
    if !reusable {
        let n_blocks_u32 = to_u32(OP, "activation blocks", n_blocks)?;
        let mut launch = device.stream.launch_builder(device.function(OP, "quantize_q8")?);
        launch.arg(&x.buf).arg(&n_blocks_u32).arg(&mut *values).arg(&mut *scales);
        // SAFETY: `x` holds n_rows * cols floats, cols a multiple of 32 (whole quant blocks); the
        // copy holds one byte per value and two floats per block.
        unsafe { launch.launch(per_element(OP, n_blocks * LANES_PER_Q8_BLOCK)?) }.map_err(driver(OP))?;
        *valid_for = Some((epoch, n_values));
    }

    let mut launch = device.stream.launch_builder(device.function(OP, kernel.name)?);
    launch
        .arg(&*values)
        .arg(&*scales)
        .arg(&weight.bytes)
        .arg(&row_bytes)
        .arg(&rows)
        .arg(&cols)
        .arg(&n_rows_u32)
        .arg(&mut out.buf);
    // SAFETY: the scratch now holds the quantized `x`; the weight holds `rows * row_bytes` bytes
    // in the layout of layout.rs, whose rows the kernels read with aligned loads.
    unsafe { launch.launch(config) }.map_err(driver(OP))?;
    Ok(())
}

/// The kernel for a weight type, row length and batch size.
fn choose(ty: GgmlType, cols: usize, n_rows: usize) -> Result<Kernel, BackendError> {
    let quantized = |decode, batch| {
        Ok(if n_rows == 1 {
            Kernel { name: decode, rows: 4, tile: None }
        } else {
            Kernel { name: batch, rows: 2, tile: None }
        })
    };
    let (decode, batch, any, per_load) = match ty {
        GgmlType::Q8_0 => return quantized("matvec_q8_decode_q8_0", "matvec_q8_batch_q8_0"),
        GgmlType::Q4K => return quantized("matvec_q8_decode_q4_k", "matvec_q8_batch_q4_k"),
        GgmlType::Q5K => return quantized("matvec_q8_decode_q5_k", "matvec_q8_batch_q5_k"),
        GgmlType::Q6K => return quantized("matvec_q8_decode_q6_k", "matvec_q8_batch_q6_k"),
        GgmlType::F32 => ("matvec_decode_f32", "matvec_batch_f32", "matvec_any_f32", 4),
        GgmlType::F16 => ("matvec_decode_f16", "matvec_batch_f16", "matvec_any_f16", 8),
        GgmlType::Bf16 => ("matvec_decode_bf16", "matvec_batch_bf16", "matvec_any_bf16", 8),
        _ => return Err(BackendError::Unsupported { op: OP, ty }),
    };
    // Rows that are not whole 16-byte loads take the one-element-per-lane kernel, one warp (row)
    // per block slot.
    Ok(if !cols.is_multiple_of(per_load) {
        Kernel { name: any, rows: WARPS as usize, tile: Some(8) }
    } else if n_rows == 1 {
        Kernel { name: decode, rows: 4, tile: Some(1) }
    } else {
        Kernel { name: batch, rows: 1, tile: Some(8) }
    })
}
