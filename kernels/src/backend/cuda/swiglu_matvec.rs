//! A decode step's gate and up projections and the SwiGLU after them in one launch
//! (matvec_swiglu.cu), which writes the activation and its int8 copy for the down projection:
//! the matvec and `swiglu_q8` apart cost a dependent hop a layer. Taken for one input row, gate
//! and up of one block-quantized type and shape, when their rows are whole blocks of the int8
//! copy and make at least a block per SM; `CANOPY_CUDA_FUSED_SWIGLU=0` keeps the two launches
//! (for A/B measurements).

use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use super::CudaBackend;
use super::context::{driver, grid, to_u32};
use super::matmul::quantize;
use super::memory::{CudaTensor, CudaWeight, Q8_BLOCK};
use crate::backend::BackendError;
use crate::quant::GgmlType;

const OP: &str = "swiglu_matmuls";
/// Outputs per block (`SWIGLU_OUTPUTS`): one block of the int8 copy.
const OUTPUTS_PER_BLOCK: usize = Q8_BLOCK;
/// Threads per block (`QMATVEC_WARPS` warps).
const THREADS: u32 = 128;

/// The kernel for gate and up weights of type `ty`.
fn kernel(ty: GgmlType) -> Option<&'static str> {
    match ty {
        GgmlType::Q8_0 => Some("matvec_swiglu_q8_0"),
        GgmlType::Q4K => Some("matvec_swiglu_q4_k"),
        GgmlType::Q5K => Some("matvec_swiglu_q5_k"),
        GgmlType::Q6K => Some("matvec_swiglu_q6_k"),
        _ => None,
    }
}

/// The kernel that takes `n_rows` rows by `gate` and `up` on a device of `sm_count` SMs, if one
/// does: fewer blocks than SMs would leave SMs without loads (Qwen3-0.6B's 3072 rows make 96).
pub(super) fn fused_kernel(
    n_rows: usize,
    gate: &CudaWeight,
    up: &CudaWeight,
    sm_count: usize,
) -> Option<&'static str> {
    let same_shape =
        gate.ty == up.ty && gate.rows == up.rows && gate.cols == up.cols && gate.row_bytes == up.row_bytes;
    let blocks = gate.rows / OUTPUTS_PER_BLOCK;
    let whole_blocks = gate.rows.is_multiple_of(OUTPUTS_PER_BLOCK) && gate.cols.is_multiple_of(Q8_BLOCK);
    (n_rows == 1 && same_shape && whole_blocks && blocks >= sm_count).then(|| kernel(gate.ty)).flatten()
}

/// `act = silu(x · gateᵀ) * (x · upᵀ)` for one row of `x` by `kernel` ([`fused_kernel`]), with
/// act's int8 copy; shapes already checked.
pub(super) fn launch(
    backend: &CudaBackend,
    kernel: &'static str,
    x: &CudaTensor,
    gate: &CudaWeight,
    up: &CudaWeight,
    act: &mut CudaTensor,
) -> Result<(), BackendError> {
    let device = &backend.device;
    let epoch = backend.epoch.load(Ordering::Relaxed);
    let cols = gate.cols;
    let mut quantized = x.quantized.lock().unwrap_or_else(PoisonError::into_inner);
    let (x_values, x_scales) = quantized
        .int8(device, OP, (epoch, cols), |values, scales| quantize(device, x, cols, values, scales))?;
    let n_outputs = gate.rows;
    let copy = act.quantized.get_mut().unwrap_or_else(PoisonError::into_inner);
    let buffers = copy.buffers(device, OP, n_outputs, 1, false)?;
    let row_bytes = gate.row_bytes as u64;
    let cols_arg = to_u32(OP, "weight cols", cols)?;
    let mut launch = device.launch(OP, kernel)?;
    launch
        .arg(x_values)
        .arg(x_scales)
        .arg(&gate.bytes)
        .arg(&up.bytes)
        .arg(&row_bytes)
        .arg(&cols_arg)
        .arg(&mut act.buf)
        .arg(buffers.values)
        .arg(buffers.scales);
    // SAFETY: `x`'s copy holds its first `cols` values quantized; gate and up hold `rows` rows of
    // `row_bytes` bytes in the layout of layout.rs (same type and shape, checked by
    // `fused_kernel`); a block writes 32 outputs of `act` (rows floats, shape-checked) and their
    // block of the copy, sized for `rows` values.
    unsafe { launch.launch(grid(OP, n_outputs / OUTPUTS_PER_BLOCK, THREADS)?) }.map_err(driver(OP))?;
    copy.mark_written(epoch, n_outputs, false);
    Ok(())
}
