//! Host-memory buffers of the CPU backend and their transfers.

use crate::backend::{BackendError, DeviceArray, WeightMatrix};
use crate::quant::{GgmlType, is_dequantize_supported};

/// A dense f32 array in host memory.
#[derive(Clone, Debug)]
pub struct CpuTensor(pub(super) Vec<f32>);

/// A `u32` array in host memory.
#[derive(Clone, Debug)]
pub struct CpuIndex(pub(super) Vec<u32>);

/// A weight matrix kept in its GGUF block format and decoded on the fly.
#[derive(Clone, Debug)]
pub struct CpuWeight {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    row_bytes: usize,
    bytes: Vec<u8>,
}

impl DeviceArray for CpuTensor {
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl DeviceArray for CpuIndex {
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl WeightMatrix for CpuWeight {
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

impl CpuWeight {
    pub(super) fn new(ty: GgmlType, rows: usize, cols: usize, bytes: &[u8]) -> Result<Self, BackendError> {
        const OP: &str = "upload_weight";
        if !is_dequantize_supported(ty) {
            return Err(BackendError::Unsupported { op: OP, ty });
        }
        let row_bytes = ty
            .bytes_for(cols as u64)
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| BackendError::shape(OP, format!("{cols} columns are not whole {ty} blocks")))?;
        let expected = rows.checked_mul(row_bytes);
        if expected != Some(bytes.len()) {
            let detail =
                format!("{rows} rows of {cols} {ty} elements need {expected:?} bytes, got {}", bytes.len());
            return Err(BackendError::shape(OP, detail));
        }
        Ok(Self { ty, rows, cols, row_bytes, bytes: bytes.to_vec() })
    }

    /// The encoded bytes of row `row`, if it exists.
    pub(super) fn encoded_row(&self, row: usize) -> Option<&[u8]> {
        let start = row.checked_mul(self.row_bytes)?;
        self.bytes.get(start..start.checked_add(self.row_bytes)?).filter(|_| row < self.rows)
    }
}

pub(super) fn download(src: &CpuTensor, out: &mut [f32]) -> Result<(), BackendError> {
    let data = src.0.get(..out.len()).ok_or_else(|| {
        BackendError::shape("download", format!("{} elements requested from {}", out.len(), src.0.len()))
    })?;
    out.copy_from_slice(data);
    Ok(())
}

pub(super) fn write_index(dst: &mut CpuIndex, data: &[u32]) -> Result<(), BackendError> {
    let capacity = dst.0.len();
    let target = dst.0.get_mut(..data.len()).ok_or_else(|| {
        BackendError::shape("write_index", format!("{} elements written to {capacity}", data.len()))
    })?;
    target.copy_from_slice(data);
    Ok(())
}
