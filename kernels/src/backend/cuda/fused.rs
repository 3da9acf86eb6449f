//! Decode-step matmuls that finish the next op in their own launch, which saves a launch per
//! layer each (matvec_quant.cu): gate and up projections that finish SwiGLU (`matvec_q8_swiglu_*`:
//! the last block to store a chunk of 32 rows of both computes that chunk's activations and their
//! int8 copy), and q, k and v projections that finish their heads (`matvec_q8_heads_*`: the last
//! block to store a row of a head normalises and rotates it, and stores keys and values in the
//! pools). They are off unless `CANOPY_CUDA_FUSED_DECODE=1`: on an H200 they made Qwen3-8B
//! Q4_K_M decode 6 % slower than the separate launches (docs/performance.md, session 15).

use std::sync::{Mutex, PoisonError};

use std::sync::atomic::Ordering;

use cudarc::driver::{DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig};

use super::CudaBackend;
use super::attention_inputs::HeadShape;
use super::context::{Device, driver, to_u32};
use super::matmul::{self, Projections};
use super::memory::{Counters, CudaTensor, CudaWeight, Q8_BLOCK};
use crate::backend::{
    AttentionInputs, AttentionProjections, AttentionTargets, BackendError, HeadParams, attention_inputs,
    shape,
};
use crate::quant::GgmlType;

const SWIGLU_OP: &str = "swiglu_matmuls";
const HEADS_OP: &str = "project_attention_inputs";
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

/// The kernels' `HeadTargets` (matvec_quant.cu), field for field.
#[repr(C)]
struct HeadTargets {
    q_norm: u64,
    k_norm: u64,
    positions: u64,
    slots: u64,
    q: u64,
    k: u64,
    k_pool: u64,
    v_pool: u64,
    arrivals: u64,
    eps: f32,
    theta: f32,
    pool_rows: u32,
    n_heads: u32,
    n_kv_heads: u32,
    head_dim: u32,
    rotary_dim: u32,
    neox: u32,
}

// SAFETY: plain old data with the C layout the kernels declare.
unsafe impl DeviceRepr for HeadTargets {}

/// Whether the fused kernels are on, and their arrival counters (SwiGLU's one per chunk, the
/// heads' one per head).
pub(super) struct FusedDecode {
    enabled: bool,
    swiglu_arrivals: Mutex<Counters>,
    head_arrivals: Mutex<Counters>,
}

impl FusedDecode {
    pub fn new() -> Self {
        let enabled = std::env::var("CANOPY_CUDA_FUSED_DECODE").is_ok_and(|value| value.trim() == "1");
        Self { enabled, swiglu_arrivals: Mutex::default(), head_arrivals: Mutex::default() }
    }

    /// `gate = x · gate_weightᵀ`, `up = x · up_weightᵀ` and `act = silu(gate) * up` with its int8
    /// copy, for one input row, in one launch; `false` (nothing done) when the weights have no such
    /// kernel: two types, no kernel for the type, or rows that are not whole chunks of 32. Shapes
    /// are checked by the caller, and the outputs' copies marked stale.
    pub fn swiglu(
        &self,
        device: &Device,
        epoch: u64,
        x: &CudaTensor,
        (gate_weight, gate): (&CudaWeight, &mut CudaTensor),
        (up_weight, up): (&CudaWeight, &mut CudaTensor),
        act: &mut CudaTensor,
    ) -> Result<bool, BackendError> {
        let ty = gate_weight.ty;
        let Some(kernel) = swiglu_kernel(ty) else { return Ok(false) };
        let (rows, cols) = (gate_weight.rows, gate_weight.cols);
        if !self.enabled || up_weight.ty != ty || rows == 0 || !rows.is_multiple_of(Q8_BLOCK) {
            return Ok(false);
        }
        let epoch_values = (epoch, cols);
        let mut quantized = x.quantized.lock().unwrap_or_else(PoisonError::into_inner);
        let (values, scales) = quantized.int8(device, SWIGLU_OP, epoch_values, |values, scales| {
            matmul::quantize(device, x, cols, values, scales)
        })?;
        let mut group = [(gate_weight, gate), (up_weight, up)];
        let (projections, blocks) = Projections::table(device, &mut group, |_| ROWS_PER_BLOCK)?;

        let mut arrivals = self.swiglu_arrivals.lock().unwrap_or_else(PoisonError::into_inner);
        let arrivals = arrivals.at_least(device, SWIGLU_OP, rows / Q8_BLOCK)?;
        let CudaTensor { buf: act_buf, quantized: act_copy, .. } = act;
        let act_copy = act_copy.get_mut().unwrap_or_else(PoisonError::into_inner);
        let act_buffers = act_copy.buffers(device, SWIGLU_OP, rows, 1, false)?;
        // The backend's context tracks no events: the guards hold nothing.
        let target = SwigluTarget {
            act: act_buf.device_ptr_mut(&device.stream).0,
            q: act_buffers.values.device_ptr_mut(&device.stream).0,
            q_scales: act_buffers.scales.device_ptr_mut(&device.stream).0,
            arrivals: arrivals.device_ptr_mut(&device.stream).0,
        };
        let (cols_u32, n_rows) = (to_u32(SWIGLU_OP, "weight cols", cols)?, 1u32);
        let config =
            LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut launch = device.launch(SWIGLU_OP, kernel)?;
        launch.arg(values).arg(scales).value(&projections).arg(&cols_u32).arg(&n_rows).value(&target);
        // SAFETY: the copy holds `x` quantized (cols values, whole blocks); the weights hold
        // `rows * row_bytes` bytes in the layout of layout.rs and gate, up and act `rows` floats
        // (shape-checked), rows whole chunks of 32 with one zero counter each; act's copy holds a
        // byte per value and two floats per block.
        unsafe { launch.launch(config) }.map_err(driver(SWIGLU_OP))?;
        act_copy.mark_written(epoch, rows, false);
        Ok(true)
    }

    /// The fused kernel for a decode step's q, k and v projections, when one takes them: one
    /// input row, weights of one block-quantized type (or Q4_K_M's q and k in Q4_K with v in
    /// Q6_K) whose rows are whole heads of a multiple of 4 dimensions.
    pub fn heads_kernel(
        &self,
        projections: &AttentionProjections<'_, CudaBackend>,
        heads: &HeadParams<'_, CudaBackend>,
    ) -> Option<&'static str> {
        let [q, k, v] = [projections.q.0, projections.k.0, projections.v.0];
        let (q_rope, k_rope) = (heads.q_rope, heads.k_rope);
        let whole_heads = q.rows == q_rope.n_heads * q_rope.head_dim
            && k.rows == k_rope.n_heads * k_rope.head_dim
            && v.rows == k.rows
            && q.cols == k.cols
            && v.cols == k.cols
            && q_rope.head_dim.is_multiple_of(4);
        if !self.enabled || heads.n_rows != 1 || !whole_heads || k.ty != q.ty {
            return None;
        }
        match (q.ty, v.ty) {
            (GgmlType::Q4K, GgmlType::Q6K) => Some("matvec_q8_heads_q4_k_q6_k"),
            (ty, v_ty) if ty == v_ty => match ty {
                GgmlType::Q8_0 => Some("matvec_q8_heads_q8_0"),
                GgmlType::Q4K => Some("matvec_q8_heads_q4_k"),
                GgmlType::Q5K => Some("matvec_q8_heads_q5_k"),
                GgmlType::Q6K => Some("matvec_q8_heads_q6_k"),
                _ => None,
            },
            _ => None,
        }
    }

    /// The q, k and v projections and their heads ([`Backend::project_attention_inputs`]) in one
    /// launch of `kernel` ([`Self::heads_kernel`]); calls the kernels do not take (see
    /// [`HeadShape::of`]) go the ops' way.
    pub fn heads(
        &self,
        backend: &CudaBackend,
        kernel: &'static str,
        projections: AttentionProjections<'_, CudaBackend>,
        heads: &HeadParams<'_, CudaBackend>,
        targets: AttentionTargets<'_, CudaBackend>,
    ) -> Result<(), BackendError> {
        let AttentionProjections { x, q: (q_weight, q_raw), k: (k_weight, k_raw), v: (v_weight, v) } =
            projections;
        for (weight, out) in [(q_weight, &*q_raw), (k_weight, &*k_raw), (v_weight, &*v)] {
            shape::matmul(x, weight, heads.n_rows, out)?;
        }
        let inputs = AttentionInputs { q_raw: &*q_raw, k_raw: &*k_raw, v: &*v, heads: *heads };
        let Some(head_shape) = HeadShape::of(&inputs, &targets)? else {
            let projections =
                AttentionProjections { x, q: (q_weight, q_raw), k: (k_weight, k_raw), v: (v_weight, v) };
            return attention_inputs::projections_then_inputs(backend, projections, heads, targets);
        };
        let AttentionTargets { q, k, k_pool, v_pool } = targets;
        for written in [&mut *q_raw, &mut *k_raw, &mut *v, &mut *q, &mut *k, &mut *k_pool, &mut *v_pool] {
            written.invalidate_quantized();
        }
        let device = &backend.device;
        let epoch = backend.epoch.load(Ordering::Relaxed);
        let cols = q_weight.cols;
        let mut quantized = x.quantized.lock().unwrap_or_else(PoisonError::into_inner);
        let (values, scales) = quantized.int8(device, HEADS_OP, (epoch, cols), |values, scales| {
            matmul::quantize(device, x, cols, values, scales)
        })?;
        let mixed = v_weight.ty != q_weight.ty;
        let mut group = [(q_weight, q_raw), (k_weight, k_raw), (v_weight, v)];
        // The second type of the mixed kernel takes two rows a block (matvec_quant.cu).
        let (projections, blocks) =
            Projections::table(device, &mut group, |p| if mixed && p == 2 { 2 } else { 4 })?;
        let HeadShape { pool_rows, n_heads, n_kv_heads, head_dim, rotary_dim, neox, .. } = head_shape;
        let mut arrivals = self.head_arrivals.lock().unwrap_or_else(PoisonError::into_inner);
        let arrivals = arrivals.at_least(device, HEADS_OP, (n_heads + 2 * n_kv_heads) as usize)?;
        // The backend's context tracks no events: the guards hold nothing.
        let targets = HeadTargets {
            q_norm: heads.q_norm.buf.device_ptr(&device.stream).0,
            k_norm: heads.k_norm.buf.device_ptr(&device.stream).0,
            positions: heads.positions.buf.device_ptr(&device.stream).0,
            slots: heads.slots.buf.device_ptr(&device.stream).0,
            q: q.buf.device_ptr_mut(&device.stream).0,
            k: k.buf.device_ptr_mut(&device.stream).0,
            k_pool: k_pool.buf.device_ptr_mut(&device.stream).0,
            v_pool: v_pool.buf.device_ptr_mut(&device.stream).0,
            arrivals: arrivals.device_ptr_mut(&device.stream).0,
            eps: heads.eps,
            theta: heads.q_rope.theta,
            pool_rows,
            n_heads,
            n_kv_heads,
            head_dim,
            rotary_dim,
            neox,
        };
        let (cols, n_rows) = (to_u32(HEADS_OP, "weight cols", cols)?, 1u32);
        let config =
            LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut launch = device.launch(HEADS_OP, kernel)?;
        launch.arg(values).arg(scales).value(&projections).arg(&cols).arg(&n_rows).value(&targets);
        // SAFETY: the copy holds `x` quantized (cols values, whole blocks); the weights hold
        // `rows * row_bytes` bytes in the layout of layout.rs, their rows whole heads of a
        // multiple of 4 dimensions (`heads_kernel`), and every output, norm, index and pool is
        // shape-checked for one token (`HeadShape::of`), with one zero counter per head; pool
        // slots are bounds-checked in the kernel.
        unsafe { launch.launch(config) }.map_err(driver(HEADS_OP))?;
        Ok(())
    }
}

/// The fused SwiGLU kernel for a weight type.
fn swiglu_kernel(ty: GgmlType) -> Option<&'static str> {
    match ty {
        GgmlType::Q8_0 => Some("matvec_q8_swiglu_q8_0"),
        GgmlType::Q4K => Some("matvec_q8_swiglu_q4_k"),
        GgmlType::Q5K => Some("matvec_q8_swiglu_q5_k"),
        GgmlType::Q6K => Some("matvec_q8_swiglu_q6_k"),
        _ => None,
    }
}
