//! `out = x · weightᵀ` for prefill-sized batches on the tensor cores, through cuBLAS: block-format
//! weights are decoded to f16 into a scratch matrix, activations rounded to the weight operand's
//! type, and `cublasGemmEx` accumulates in f32. F32 weights run as an f32 GEMM (no rounding).
//!
//! Decoding the whole weight for every call costs a read of the quantized bytes and a write and
//! read of the f16 ones; against a GEMM of prefill size that is small, and it keeps no second copy
//! of the model resident.

use std::ffi::c_void;
use std::sync::{Mutex, PoisonError};

use cudarc::cublas::CudaBlas;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig};

use super::context::{Device, device_error, driver, grid, rows_from_env, to_u32};
use super::memory::{CudaTensor, CudaWeight, ScratchBuffer, is_weight_supported};
use crate::backend::BackendError;
use crate::quant::GgmlType;

/// By default, batches of 16 input rows or more take the GEMM. Measured on an H200
/// (docs/performance.md): the int8 matrix-vector kernels win up to 8 rows (Qwen3-8B Q4_K_M fwd8
/// 7.8 ms against 13.9), the GEMM from 16 (fwd23 14.3 ms against 22.4; Qwen3-0.6B Q8_0 breaks
/// even at 16). Recorded verify steps then launch cuBLAS inside a graph. Block-quantized weights
/// take the int8 tensor-core kernels (mmq.rs) instead for batches they cover (5 to 64 rows).
const DEFAULT_MIN_GEMM_ROWS: usize = 16;

/// The smallest batch that takes the GEMM: `$CANOPY_CUDA_GEMM_MIN_ROWS` when set to a positive
/// number (for tuning), else [`DEFAULT_MIN_GEMM_ROWS`].
pub(super) fn min_gemm_rows() -> usize {
    rows_from_env("CANOPY_CUDA_GEMM_MIN_ROWS", DEFAULT_MIN_GEMM_ROWS)
}

const OP: &str = "matmul";
const THREADS: u32 = 256;
/// Enough blocks of grid-stride loops to fill any current GPU.
const MAX_BLOCKS: usize = 4096;

/// cuBLAS on the backend's stream, and the scratch operands it reuses between calls.
pub(super) struct Gemm {
    blas: CudaBlas,
    scratch: Mutex<Scratch>,
}

#[derive(Default)]
struct Scratch {
    weight: ScratchBuffer<u16>,
    x: ScratchBuffer<u16>,
}

impl Gemm {
    /// cuBLAS on `device`'s stream, or `None` when the library is absent (matmul then stays on
    /// the matrix-vector kernels).
    pub fn open(device: &Device) -> Option<Self> {
        // SAFETY: only tries to open the library; dynamic loading panics on a missing one.
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return None;
        }
        let blas = CudaBlas::new(device.stream.clone()).ok()?;
        Some(Self { blas, scratch: Mutex::new(Scratch::default()) })
    }

    /// Whether this weight type has a GEMM path: every type the backend uploads.
    pub fn supports(ty: GgmlType) -> bool {
        is_weight_supported(ty)
    }

    /// `out[n_rows × rows] = x[n_rows × cols] · weightᵀ`; shapes are checked by the caller.
    pub fn matmul(
        &self,
        device: &Device,
        x: &CudaTensor,
        weight: &CudaWeight,
        n_rows: usize,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        let (rows, cols) = (weight.rows, weight.cols);
        if weight.ty == GgmlType::F32 {
            let (x_ptr, _x) = x.buf.device_ptr(&device.stream);
            let (w_ptr, _w) = weight.bytes.device_ptr(&device.stream);
            return self.gemm_ex(device, (w_ptr, x_ptr, cudaDataType::CUDA_R_32F), rows, n_rows, cols, out);
        }
        let mut scratch = self.scratch.lock().unwrap_or_else(PoisonError::into_inner);
        let Scratch { weight: weight_scratch, x: x_scratch } = &mut *scratch;
        // Every element is written by a conversion kernel before cuBLAS reads it.
        let x_half = x_scratch.at_least(device, OP, n_rows * cols)?;
        let rounding = if weight.ty == GgmlType::Bf16 { "round_bf16" } else { "round_f16" };
        let count = (n_rows * cols) as u64;
        let mut launch = device.launch(OP, rounding)?;
        launch.arg(&x.buf).arg(&count).arg(&mut *x_half);
        // SAFETY: `x` holds n_rows * cols floats (shape-checked) and the scratch at least as many.
        unsafe { launch.launch(grid_stride(n_rows * cols)?) }.map_err(driver(OP))?;

        let data_type =
            if weight.ty == GgmlType::Bf16 { cudaDataType::CUDA_R_16BF } else { cudaDataType::CUDA_R_16F };
        let (x_ptr, _x) = x_half.device_ptr(&device.stream);
        if matches!(weight.ty, GgmlType::F16 | GgmlType::Bf16) {
            let (w_ptr, _w) = weight.bytes.device_ptr(&device.stream);
            return self.gemm_ex(device, (w_ptr, x_ptr, data_type), rows, n_rows, cols, out);
        }
        let decoded = weight_scratch.at_least(device, OP, rows * cols)?;
        let kernel = match weight.ty {
            GgmlType::Q8_0 => "dequantize_f16_q8_0",
            GgmlType::Q4K => "dequantize_f16_q4_k",
            GgmlType::Q5K => "dequantize_f16_q5_k",
            GgmlType::Q6K => "dequantize_f16_q6_k",
            ty => return Err(BackendError::Unsupported { op: OP, ty }),
        };
        // The kernel indexes chunks of 8 (Q8_0) or 16 elements in 32 bits.
        to_u32(OP, "weight chunks", rows * cols / 8)?;
        let row_bytes = weight.row_bytes as u64;
        let (rows_u32, cols_u32) = (to_u32(OP, "weight rows", rows)?, to_u32(OP, "weight cols", cols)?);
        let mut launch = device.launch(OP, kernel)?;
        launch.arg(&weight.bytes).arg(&row_bytes).arg(&rows_u32).arg(&cols_u32).arg(&mut *decoded);
        // SAFETY: the weight holds rows * row_bytes bytes; the scratch holds rows * cols halves.
        unsafe { launch.launch(grid_stride(rows * cols)?) }.map_err(driver(OP))?;
        let (w_ptr, _w) = decoded.device_ptr(&device.stream);
        self.gemm_ex(device, (w_ptr, x_ptr, data_type), rows, n_rows, cols, out)
    }

    /// The column-major view cuBLAS wants: out (rows × n, ld rows) = Wᵀ (W is cols × rows, ld
    /// cols) times X (cols × n, ld cols). `operands` are the weight and activation pointers and
    /// their element type; the output is f32.
    fn gemm_ex(
        &self,
        device: &Device,
        operands: (u64, u64, cudaDataType),
        rows: usize,
        n_rows: usize,
        cols: usize,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        let (w_ptr, x_ptr, data_type) = operands;
        let dim = |what, value: usize| {
            i32::try_from(value).map_err(|_| BackendError::shape(OP, format!("{what} = {value} exceeds i32")))
        };
        let (m, n, k) = (dim("weight rows", rows)?, dim("input rows", n_rows)?, dim("weight cols", cols)?);
        let (alpha, beta) = (1.0f32, 0.0f32);
        let (out_ptr, _out) = out.buf.device_ptr_mut(&device.stream);
        // SAFETY: the pointers address live device buffers of at least rows*cols, n_rows*cols and
        // n_rows*rows elements of the stated types, on the stream cuBLAS is bound to.
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.blas.handle(),
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                m,
                n,
                k,
                (&raw const alpha).cast::<c_void>(),
                w_ptr as *const c_void,
                data_type,
                k,
                x_ptr as *const c_void,
                data_type,
                k,
                (&raw const beta).cast::<c_void>(),
                out_ptr as *mut c_void,
                cudaDataType::CUDA_R_32F,
                m,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DFALT,
            )
        }
        .map_err(|error| device_error(OP, format!("cuBLAS: {error:?}")))
    }
}

fn grid_stride(total: usize) -> Result<LaunchConfig, BackendError> {
    grid(OP, total.div_ceil(THREADS as usize).clamp(1, MAX_BLOCKS), THREADS)
}
