//! Allocation and host-device copies.

use super::context::{Device, driver};
use super::layout;
use super::memory::{CudaIndex, CudaKvPool, CudaTensor, CudaWeight, weight_row_bytes};
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

/// f16's largest finite magnitude: KV values beyond it saturate there, as `f32_to_kv` in
/// common.cuh stores them, rather than becoming infinite.
const KV_MAX: f32 = 65504.0;

/// The f16 bits a KV pool stores for `value`.
fn kv_bits(value: f32) -> u16 {
    let saturated = if value.abs() > KV_MAX { KV_MAX.copysign(value) } else { value };
    half::f16::from_f32(saturated).to_bits()
}

pub(super) fn kv_pool(device: &Device, len: usize) -> Result<CudaKvPool, BackendError> {
    Ok(CudaKvPool { buf: zeroed(device, "kv_pool", len)?, len })
}

pub(super) fn upload_kv_pool(device: &Device, data: &[f32]) -> Result<CudaKvPool, BackendError> {
    const OP: &str = "upload_kv_pool";
    let mut buf = zeroed(device, OP, data.len())?;
    if !data.is_empty() {
        let bits: Vec<u16> = data.iter().copied().map(kv_bits).collect();
        device.stream.memcpy_htod(&bits, &mut buf.slice_mut(..data.len())).map_err(driver(OP))?;
    }
    Ok(CudaKvPool { buf, len: data.len() })
}

pub(super) fn download_kv_pool(
    device: &Device,
    pool: &CudaKvPool,
    out: &mut [f32],
) -> Result<(), BackendError> {
    const OP: &str = "download_kv_pool";
    if out.len() > pool.len {
        return Err(BackendError::shape(OP, format!("{} elements requested from {}", out.len(), pool.len)));
    }
    let mut bits = vec![0u16; out.len()];
    if !out.is_empty() {
        device.stream.memcpy_dtoh(&pool.buf.slice(..out.len()), &mut bits).map_err(driver(OP))?;
    }
    device.stream.synchronize().map_err(driver(OP))?;
    for (value, bits) in out.iter_mut().zip(bits) {
        *value = half::f16::from_bits(bits).to_f32();
    }
    Ok(())
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
    let laid_out = layout::device_bytes(ty, bytes, gguf_row_bytes);
    let device_bytes = laid_out.as_deref().unwrap_or(bytes);
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

#[cfg(test)]
mod tests {
    use super::kv_bits;

    #[test]
    fn kv_values_round_to_f16_and_saturate_at_its_largest_finite_value() {
        assert_eq!(kv_bits(1.0), 0x3c00);
        assert_eq!(kv_bits(-2.5), half::f16::from_f32(-2.5).to_bits());
        assert_eq!(kv_bits(1.0e6), half::f16::MAX.to_bits());
        assert_eq!(kv_bits(-1.0e6), half::f16::MIN.to_bits());
        assert!(half::f16::from_bits(kv_bits(f32::NAN)).is_nan());
    }
}
