//! Allocation and host-device copies.

use super::context::{Device, driver};
use super::layout;
use super::memory::{CudaIndex, CudaTensor, CudaWeight, weight_row_bytes};
use crate::backend::BackendError;
use crate::quant::GgmlType;

/// A zeroed device array of `len` elements; an empty one still holds one element, since the
/// driver refuses empty allocations.
fn zeroed<T>(
    device: &Device,
    op: &'static str,
    len: usize,
) -> Result<cudarc::driver::CudaSlice<T>, BackendError>
where
    T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits,
{
    device.stream.alloc_zeros::<T>(len.max(1)).map_err(driver(op))
}

pub(super) fn zeros(device: &Device, len: usize) -> Result<CudaTensor, BackendError> {
    Ok(CudaTensor::new(zeroed(device, "zeros", len)?, len))
}

pub(super) fn upload(device: &Device, data: &[f32]) -> Result<CudaTensor, BackendError> {
    const OP: &str = "upload";
    let mut buf = zeroed(device, OP, data.len())?;
    if !data.is_empty() {
        device.stream.memcpy_htod(data, &mut buf.slice_mut(..data.len())).map_err(driver(OP))?;
    }
    Ok(CudaTensor::new(buf, data.len()))
}

pub(super) fn download(device: &Device, src: &CudaTensor, out: &mut [f32]) -> Result<(), BackendError> {
    const OP: &str = "download";
    if out.len() > src.len {
        return Err(BackendError::shape(OP, format!("{} elements requested from {}", out.len(), src.len)));
    }
    if !out.is_empty() {
        device.stream.memcpy_dtoh(&src.buf.slice(..out.len()), out).map_err(driver(OP))?;
    }
    device.stream.synchronize().map_err(driver(OP))
}

pub(super) fn upload_index(device: &Device, data: &[u32]) -> Result<CudaIndex, BackendError> {
    const OP: &str = "upload_index";
    let mut buf = zeroed(device, OP, data.len())?;
    if !data.is_empty() {
        device.stream.memcpy_htod(data, &mut buf.slice_mut(..data.len())).map_err(driver(OP))?;
    }
    Ok(CudaIndex { buf, len: data.len() })
}

pub(super) fn write_index(device: &Device, dst: &mut CudaIndex, data: &[u32]) -> Result<(), BackendError> {
    const OP: &str = "write_index";
    if data.len() > dst.len {
        return Err(BackendError::shape(OP, format!("{} elements written to {}", data.len(), dst.len)));
    }
    if !data.is_empty() {
        device.stream.memcpy_htod(data, &mut dst.buf.slice_mut(..data.len())).map_err(driver(OP))?;
    }
    Ok(())
}

pub(super) fn upload_weight(
    device: &Device,
    ty: GgmlType,
    rows: usize,
    cols: usize,
    bytes: &[u8],
) -> Result<CudaWeight, BackendError> {
    const OP: &str = "upload_weight";
    let gguf_row_bytes = weight_row_bytes(ty, rows, cols, bytes.len())?;
    let split = layout::split_rows(ty, bytes, gguf_row_bytes);
    let device_bytes = split.as_deref().unwrap_or(bytes);
    let mut buf = zeroed(device, OP, device_bytes.len())?;
    if !device_bytes.is_empty() {
        device
            .stream
            .memcpy_htod(device_bytes, &mut buf.slice_mut(..device_bytes.len()))
            .map_err(driver(OP))?;
    }
    let row_bytes = layout::device_row_bytes(ty, gguf_row_bytes);
    Ok(CudaWeight { ty, rows, cols, row_bytes, bytes: buf })
}

/// Copies `n` values of a device index array back to the host, after every submitted op.
pub(super) fn download_index(
    device: &Device,
    op: &'static str,
    src: &cudarc::driver::CudaSlice<u32>,
    out: &mut [u32],
) -> Result<(), BackendError> {
    if !out.is_empty() {
        device.stream.memcpy_dtoh(&src.slice(..out.len()), out).map_err(driver(op))?;
    }
    device.stream.synchronize().map_err(driver(op))
}
