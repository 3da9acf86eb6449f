//! Device buffers of the CUDA backend.

use std::sync::{Mutex, PoisonError};

use cudarc::driver::{CudaSlice, DeviceRepr};

use super::context::{Device, device_error, driver};

use crate::backend::{BackendError, DeviceArray, WeightMatrix};
use crate::quant::GgmlType;

/// A dense f32 array in device memory.
#[derive(Debug)]
pub struct CudaTensor {
    pub(super) buf: CudaSlice<f32>,
    /// The logical length: zero-length arrays hold a one-element allocation.
    pub(super) len: usize,
    /// The int8 and f16 copies the quantized matmuls made of this tensor, reused by every matmul
    /// that reads it until it is written again (the q, k and v projections share one input).
    pub(super) quantized: Mutex<QuantizedCopy>,
}

impl CudaTensor {
    pub(super) fn new(buf: CudaSlice<f32>, len: usize) -> Self {
        Self { buf, len, quantized: Mutex::default() }
    }

    /// Marks the copies stale: every op that writes the tensor calls this.
    pub(super) fn invalidate_quantized(&mut self) {
        self.quantized.get_mut().unwrap_or_else(PoisonError::into_inner).invalidate();
    }
}

/// Rows of a tensor rounded to int8 in blocks of 32 (matvec_quant.cu's `quantize_q8`): the values,
/// and per block its scale d and the sum of its floats; and the same rows rounded to f16, each
/// divided by a power of two that keeps it in f16's range, and those scales (`half_row_scale` in
/// quant.cuh; mmq_f16.cu reads them). Each copy is valid for a backend epoch and a number of
/// leading values.
#[derive(Debug, Default)]
pub(super) struct QuantizedCopy {
    pub values: ScratchBuffer<u8>,
    pub scales: ScratchBuffer<f32>,
    pub halves: ScratchBuffer<u16>,
    pub half_scales: ScratchBuffer<f32>,
    int8_valid_for: Option<(u64, usize)>,
    halves_valid_for: Option<(u64, usize)>,
}

/// The buffers a kernel writes a tensor's copies into along with the tensor (see
/// [`QuantizedCopy::buffers`]); `halves` and `half_scales` are `None` when it writes no f16 copy,
/// which kernels take as null pointers.
pub(super) struct CopyBuffers<'a> {
    pub values: &'a mut CudaSlice<u8>,
    pub scales: &'a mut CudaSlice<f32>,
    pub halves: Option<&'a mut CudaSlice<u16>>,
    pub half_scales: Option<&'a mut CudaSlice<f32>>,
}

/// Values per scale of the int8 copy (`Q8_BLOCK` in quant.cuh).
pub(super) const Q8_BLOCK: usize = 32;

fn holds(valid_for: Option<(u64, usize)>, epoch: u64, n_values: usize) -> bool {
    // Blocks never straddle rows (rows are whole blocks), so a copy of more values serves.
    matches!(valid_for, Some((copy_epoch, held)) if copy_epoch == epoch && held >= n_values)
}

impl QuantizedCopy {
    /// The tensor was written: neither copy holds it.
    pub fn invalidate(&mut self) {
        self.int8_valid_for = None;
        self.halves_valid_for = None;
    }

    /// The tensor was written along with its int8 copy of `n_values` values, and its f16 copy
    /// when `halves`; else the f16 copy is stale.
    pub fn mark_written(&mut self, epoch: u64, n_values: usize, halves: bool) {
        self.int8_valid_for = Some((epoch, n_values));
        self.halves_valid_for = halves.then_some((epoch, n_values));
    }

    /// The int8 copy of the tensor's first `n_values` values for `epoch`; `write` fills the
    /// buffers (values, scales) first unless they already hold it.
    pub fn int8<'a>(
        &'a mut self,
        device: &Device,
        op: &'static str,
        (epoch, n_values): (u64, usize),
        write: impl FnOnce(&mut CudaSlice<u8>, &mut CudaSlice<f32>) -> Result<(), BackendError>,
    ) -> Result<(&'a CudaSlice<u8>, &'a CudaSlice<f32>), BackendError> {
        let held = holds(self.int8_valid_for, epoch, n_values);
        let values = self.values.at_least(device, op, n_values)?;
        let scales = self.scales.at_least(device, op, 2 * n_values / Q8_BLOCK)?;
        if !held {
            write(&mut *values, &mut *scales)?;
            self.int8_valid_for = Some((epoch, n_values));
        }
        Ok((values, scales))
    }

    /// The f16 copy of the tensor's first `n_values` values, `n_rows` rows, for `epoch`, and its
    /// row scales. Unless they already hold it, `write` fills them from the int8 copy's block
    /// scales (which give each row's largest magnitude), which `write_int8` makes first when it
    /// is stale, as in [`Self::int8`].
    #[allow(clippy::type_complexity)]
    pub fn halves<'a>(
        &'a mut self,
        device: &Device,
        op: &'static str,
        validity: (u64, usize),
        n_rows: usize,
        write_int8: impl FnOnce(&mut CudaSlice<u8>, &mut CudaSlice<f32>) -> Result<(), BackendError>,
        write: impl FnOnce(&CudaSlice<f32>, &mut CudaSlice<u16>, &mut CudaSlice<f32>) -> Result<(), BackendError>,
    ) -> Result<(&'a CudaSlice<u16>, &'a CudaSlice<f32>), BackendError> {
        let (epoch, n_values) = validity;
        let held = holds(self.halves_valid_for, epoch, n_values);
        if !held {
            self.int8(device, op, validity, write_int8)?;
        }
        let halves = self.halves.at_least(device, op, n_values)?;
        let half_scales = self.half_scales.at_least(device, op, n_rows)?;
        if !held {
            let int8_scales = self.scales.at_least(device, op, 2 * n_values / Q8_BLOCK)?;
            write(int8_scales, &mut *halves, &mut *half_scales)?;
            self.halves_valid_for = Some((epoch, n_values));
        }
        Ok((halves, half_scales))
    }

    /// The buffers for copies of `n_values` values in `n_rows` rows, a whole number of blocks,
    /// written by a kernel along with its float output: a byte per value and a (d, sum) pair of
    /// floats per block, and with `halves` the f16 copy and a scale per row. The caller marks the
    /// copies valid once the kernel is queued.
    pub fn buffers(
        &mut self,
        device: &Device,
        op: &'static str,
        n_values: usize,
        n_rows: usize,
        halves: bool,
    ) -> Result<CopyBuffers<'_>, BackendError> {
        let (halves, half_scales) = if halves {
            (
                Some(self.halves.at_least(device, op, n_values)?),
                Some(self.half_scales.at_least(device, op, n_rows)?),
            )
        } else {
            (None, None)
        };
        Ok(CopyBuffers {
            values: self.values.at_least(device, op, n_values)?,
            scales: self.scales.at_least(device, op, 2 * n_values / Q8_BLOCK)?,
            halves,
            half_scales,
        })
    }
}

/// A layer's keys or values in device memory, as f16 bits: half the bytes of f32 for decode
/// attention to read at every step, where long contexts spend most of a step. Values beyond f16's
/// range are stored as its largest finite magnitude.
#[derive(Debug)]
pub struct CudaKvPool {
    pub(super) buf: CudaSlice<u16>,
    /// The logical length: zero-length pools hold a one-element allocation.
    pub(super) len: usize,
}

/// A `u32` array in device memory.
#[derive(Debug)]
pub struct CudaIndex {
    pub(super) buf: CudaSlice<u32>,
    pub(super) len: usize,
}

/// A weight matrix in device memory, its rows laid out as `layout.rs` describes.
#[derive(Debug)]
pub struct CudaWeight {
    pub(super) ty: GgmlType,
    pub(super) rows: usize,
    pub(super) cols: usize,
    /// The stride between device rows.
    pub(super) row_bytes: usize,
    pub(super) bytes: CudaSlice<u8>,
}

impl DeviceArray for CudaTensor {
    fn len(&self) -> usize {
        self.len
    }
}

impl DeviceArray for CudaKvPool {
    fn len(&self) -> usize {
        self.len
    }
}

impl DeviceArray for CudaIndex {
    fn len(&self) -> usize {
        self.len
    }
}

impl WeightMatrix for CudaWeight {
    fn ty(&self) -> GgmlType {
        self.ty
    }

    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }
}

/// The weight types the backend has kernels for.
pub fn is_weight_supported(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::F32
            | GgmlType::F16
            | GgmlType::Bf16
            | GgmlType::Q8_0
            | GgmlType::Q4K
            | GgmlType::Q5K
            | GgmlType::Q6K
    )
}

/// Checks an upload's type and size; returns the bytes per row.
pub(super) fn weight_row_bytes(
    ty: GgmlType,
    rows: usize,
    cols: usize,
    len: usize,
) -> Result<usize, BackendError> {
    const OP: &str = "upload_weight";
    if !is_weight_supported(ty) {
        return Err(BackendError::Unsupported { op: OP, ty });
    }
    let row_bytes = ty
        .bytes_for(cols as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| BackendError::shape(OP, format!("{cols} columns are not whole {ty} blocks")))?;
    let expected = rows.checked_mul(row_bytes);
    if expected != Some(len) {
        let detail = format!("{rows} rows of {cols} {ty} elements need {expected:?} bytes, got {len}");
        return Err(BackendError::shape(OP, detail));
    }
    Ok(row_bytes)
}

/// A scratch buffer that only grows. A buffer it outgrows is retired rather than freed: recorded
/// graphs may still launch kernels on it, so it lives as long as the backend (each is smaller
/// than the one that replaced it).
#[derive(Debug)]
pub(super) struct ScratchBuffer<T> {
    current: Option<CudaSlice<T>>,
    retired: Vec<CudaSlice<T>>,
}

impl<T> Default for ScratchBuffer<T> {
    fn default() -> Self {
        Self { current: None, retired: Vec::new() }
    }
}

impl<T: DeviceRepr> ScratchBuffer<T> {
    /// The buffer, grown to hold at least `len` elements. Its contents are unspecified: callers
    /// write every element they read.
    pub fn at_least(
        &mut self,
        device: &Device,
        op: &'static str,
        len: usize,
    ) -> Result<&mut CudaSlice<T>, BackendError> {
        if self.current.as_ref().is_none_or(|buf| buf.len() < len) {
            // SAFETY: uninitialised device memory; see the contract above.
            let larger = unsafe { device.stream.alloc::<T>(len.max(1)) }.map_err(driver(op))?;
            self.retired.extend(self.current.replace(larger));
        }
        self.current.as_mut().ok_or_else(|| device_error(op, "no scratch buffer after allocation"))
    }
}

/// A grow-only buffer of counters that is zero when allocated; the kernels leave it zero. Like
/// [`ScratchBuffer`], it retires rather than frees what it outgrows, which recorded graphs may use.
#[derive(Default)]
pub(super) struct Counters {
    current: Option<CudaSlice<u32>>,
    retired: Vec<CudaSlice<u32>>,
}

impl Counters {
    pub fn at_least(
        &mut self,
        device: &Device,
        op: &'static str,
        len: usize,
    ) -> Result<&mut CudaSlice<u32>, BackendError> {
        if self.current.as_ref().is_none_or(|buf| buf.len() < len) {
            let larger = device.stream.alloc_zeros::<u32>(len.max(1)).map_err(driver(op))?;
            self.retired.extend(self.current.replace(larger));
        }
        self.current.as_mut().ok_or_else(|| device_error(op, "no counters after allocation"))
    }
}
