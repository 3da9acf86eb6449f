//! `out = x · weightᵀ` by a matrix-vector kernel that decodes each weight row once per tile of
//! up to eight input rows.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::context::{Device, driver, to_u32};
use super::memory::{CudaTensor, CudaWeight};
use super::rows::format_kernel;
use crate::backend::{BackendError, shape};

/// Input rows per weight pass (`MATVEC_TILE` in matmul.cu).
const TILE: usize = 8;
/// Weight rows per block, one per warp (`MATVEC_WARPS` in matmul.cu).
const WARPS: usize = 4;

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
    let kernel = format_kernel(OP, "matvec", weight.ty)?;
    let config = LaunchConfig {
        grid_dim: (
            to_u32(OP, "weight row blocks", weight.rows.div_ceil(WARPS))?,
            to_u32(OP, "input row tiles", n_rows.div_ceil(TILE))?,
            1,
        ),
        block_dim: (32 * WARPS as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let row_bytes = weight.row_bytes as u64;
    let rows = to_u32(OP, "weight rows", weight.rows)?;
    let cols = to_u32(OP, "weight cols", weight.cols)?;
    let n_rows = to_u32(OP, "n_rows", n_rows)?;
    let mut launch = device.stream.launch_builder(device.function(OP, kernel)?);
    launch
        .arg(&x.buf)
        .arg(&weight.bytes)
        .arg(&row_bytes)
        .arg(&rows)
        .arg(&cols)
        .arg(&n_rows)
        .arg(&mut out.buf);
    // SAFETY: the shape check guarantees `n_rows` rows of `x` and `out`; the weight holds
    // `rows * row_bytes` bytes by construction.
    unsafe { launch.launch(config) }.map_err(driver(OP))?;
    Ok(())
}
