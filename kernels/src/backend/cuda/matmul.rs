//! `out = x · weightᵀ` by matrix-vector kernels (matmul.cu): a decode kernel that applies each
//! activation load to four weight rows, and a batch kernel that decodes each weight row once per
//! tile of up to eight input rows.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::context::{Device, driver, to_u32};
use super::memory::{CudaTensor, CudaWeight};
use crate::backend::{BackendError, shape};
use crate::quant::GgmlType;

/// Warps per block, which split each row between them (`MATVEC_WARPS` in matmul.cu).
const WARPS: u32 = 4;

/// The shape of the work one block does, per kernel family.
struct Kernel {
    name: &'static str,
    /// Weight rows per block.
    rows: usize,
    /// Input rows per block.
    tile: usize,
}

pub(super) fn matmul(
    device: &Device,
    x: &CudaTensor,
    weight: &CudaWeight,
    n_rows: usize,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    const OP: &str = "matmul";
    shape::matmul(x, weight, n_rows, out)?;
    if n_rows == 0 || weight.rows == 0 {
        return Ok(());
    }
    let kernel = choose(OP, weight.ty, weight.cols, n_rows)?;
    let config = LaunchConfig {
        grid_dim: (
            to_u32(OP, "weight row blocks", weight.rows.div_ceil(kernel.rows))?,
            to_u32(OP, "input row tiles", n_rows.div_ceil(kernel.tile))?,
            1,
        ),
        block_dim: (32 * WARPS, 1, 1),
        shared_mem_bytes: 0,
    };
    let row_bytes = weight.row_bytes as u64;
    let rows = to_u32(OP, "weight rows", weight.rows)?;
    let cols = to_u32(OP, "weight cols", weight.cols)?;
    let n_rows = to_u32(OP, "n_rows", n_rows)?;
    let mut launch = device.stream.launch_builder(device.function(OP, kernel.name)?);
    launch
        .arg(&x.buf)
        .arg(&weight.bytes)
        .arg(&row_bytes)
        .arg(&rows)
        .arg(&cols)
        .arg(&n_rows)
        .arg(&mut out.buf);
    // SAFETY: the shape check guarantees `n_rows` rows of `x` and `out`; the weight holds
    // `rows * row_bytes` bytes by construction, and `choose` only picks a 16-byte-load kernel for
    // rows that are whole numbers of such loads.
    unsafe { launch.launch(config) }.map_err(driver(OP))?;
    Ok(())
}

/// The kernel for a weight type, row length and batch size.
fn choose(op: &'static str, ty: GgmlType, cols: usize, n_rows: usize) -> Result<Kernel, BackendError> {
    let (decode, batch, any) = match ty {
        GgmlType::F32 => ("matvec_decode_f32", "matvec_batch_f32", Some(("matvec_any_f32", 4))),
        GgmlType::F16 => ("matvec_decode_f16", "matvec_batch_f16", Some(("matvec_any_f16", 8))),
        GgmlType::Bf16 => ("matvec_decode_bf16", "matvec_batch_bf16", Some(("matvec_any_bf16", 8))),
        GgmlType::Q8_0 => ("matvec_decode_q8_0", "matvec_batch_q8_0", None),
        GgmlType::Q4K => ("matvec_decode_q4_k", "matvec_batch_q4_k", None),
        GgmlType::Q5K => ("matvec_decode_q5_k", "matvec_batch_q5_k", None),
        GgmlType::Q6K => ("matvec_decode_q6_k", "matvec_batch_q6_k", None),
        _ => return Err(BackendError::Unsupported { op, ty }),
    };
    // Element-wise rows that are not whole 16-byte loads take the one-element-per-lane kernel,
    // one warp (row) per block slot.
    if let Some((name, per_load)) = any
        && !cols.is_multiple_of(per_load)
    {
        return Ok(Kernel { name, rows: WARPS as usize, tile: 8 });
    }
    Ok(if n_rows == 1 {
        Kernel { name: decode, rows: 4, tile: 1 }
    } else {
        Kernel { name: batch, rows: 1, tile: 8 }
    })
}
