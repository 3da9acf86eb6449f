//! A decode step's gate and up projections that finish SwiGLU in their own launch
//! (matvec_quant.cu's `matvec_q8_swiglu_*`): the last block to store a chunk of 32 rows of both
//! computes that chunk's activations and their int8 copy, which saves the SwiGLU launch of every
//! layer. `CANOPY_CUDA_FUSED_DECODE=0` turns it off.

use std::sync::{Mutex, PoisonError};

use cudarc::driver::{DevicePtrMut, DeviceRepr, LaunchConfig};

use super::context::{Device, driver, to_u32};
use super::matmul::{self, Projections};
use super::memory::{Counters, CudaTensor, CudaWeight, Q8_BLOCK};
use crate::backend::BackendError;
use crate::quant::GgmlType;

const OP: &str = "swiglu_matmuls";
/// Weight rows per block of the kernels (the decode kernels' four).
const ROWS_PER_BLOCK: usize = 4;
/// Threads per block (`QMATVEC_WARPS` warps).
const THREADS: u32 = 128;

/// The kernels' `SwigluTarget` (matvec_quant.cu), field for field.
#[repr(C)]
struct SwigluTarget {
    act: u64,
    q: u64,
    q_scales: u64,
    arrivals: u64,
}

// SAFETY: plain old data with the C layout the kernels declare.
unsafe impl DeviceRepr for SwigluTarget {}

/// Whether the fused kernels are on, and the arrival counters they share (one per chunk).
pub(super) struct FusedSwiglu {
    enabled: bool,
    arrivals: Mutex<Counters>,
}

impl FusedSwiglu {
    pub fn new() -> Self {
        let enabled = std::env::var("CANOPY_CUDA_FUSED_DECODE").map_or(true, |value| value.trim() != "0");
        Self { enabled, arrivals: Mutex::default() }
    }

    /// `gate = x · gate_weightᵀ`, `up = x · up_weightᵀ` and `act = silu(gate) * up` with its int8
    /// copy, for one input row, in one launch; `false` (nothing done) when the weights have no such
    /// kernel: two types, no kernel for the type, or rows that are not whole chunks of 32. Shapes
    /// are checked by the caller, and the outputs' copies marked stale.
    pub fn launch(
        &self,
        device: &Device,
        epoch: u64,
        x: &CudaTensor,
        (gate_weight, gate): (&CudaWeight, &mut CudaTensor),
        (up_weight, up): (&CudaWeight, &mut CudaTensor),
        act: &mut CudaTensor,
    ) -> Result<bool, BackendError> {
        let ty = gate_weight.ty;
        let Some(kernel) = kernel(ty) else { return Ok(false) };
        let (rows, cols) = (gate_weight.rows, gate_weight.cols);
        if !self.enabled || up_weight.ty != ty || rows == 0 || !rows.is_multiple_of(Q8_BLOCK) {
            return Ok(false);
        }
        let epoch_values = (epoch, cols);
        let mut quantized = x.quantized.lock().unwrap_or_else(PoisonError::into_inner);
        let (values, scales) = quantized.int8(device, OP, epoch_values, |values, scales| {
            matmul::quantize(device, x, cols, values, scales)
        })?;
        let mut group = [(gate_weight, gate), (up_weight, up)];
        let (projections, blocks) = Projections::table(device, &mut group, |_| ROWS_PER_BLOCK)?;

        let mut arrivals = self.arrivals.lock().unwrap_or_else(PoisonError::into_inner);
        let arrivals = arrivals.at_least(device, OP, rows / Q8_BLOCK)?;
        let CudaTensor { buf: act_buf, quantized: act_copy, .. } = act;
        let act_copy = act_copy.get_mut().unwrap_or_else(PoisonError::into_inner);
        let (act_values, act_scales, _) = act_copy.buffers(device, OP, rows, false)?;
        // The backend's context tracks no events: the guards hold nothing.
        let target = SwigluTarget {
            act: act_buf.device_ptr_mut(&device.stream).0,
            q: act_values.device_ptr_mut(&device.stream).0,
            q_scales: act_scales.device_ptr_mut(&device.stream).0,
            arrivals: arrivals.device_ptr_mut(&device.stream).0,
        };
        let (cols_u32, n_rows) = (to_u32(OP, "weight cols", cols)?, 1u32);
        let config =
            LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut launch = device.launch(OP, kernel)?;
        launch.arg(values).arg(scales).value(&projections).arg(&cols_u32).arg(&n_rows).value(&target);
        // SAFETY: the copy holds `x` quantized (cols values, whole blocks); the weights hold
        // `rows * row_bytes` bytes in the layout of layout.rs and gate, up and act `rows` floats
        // (shape-checked), rows whole chunks of 32 with one zero counter each; act's copy holds a
        // byte per value and two floats per block.
        unsafe { launch.launch(config) }.map_err(driver(OP))?;
        act_copy.mark_written(epoch, rows, false);
        Ok(true)
    }
}

/// The fused kernel for a weight type.
fn kernel(ty: GgmlType) -> Option<&'static str> {
    match ty {
        GgmlType::Q8_0 => Some("matvec_q8_swiglu_q8_0"),
        GgmlType::Q4K => Some("matvec_q8_swiglu_q4_k"),
        GgmlType::Q5K => Some("matvec_q8_swiglu_q5_k"),
        GgmlType::Q6K => Some("matvec_q8_swiglu_q6_k"),
        _ => None,
    }
}
