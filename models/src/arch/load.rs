//! Reading an architecture's configuration and weights from a GGUF file, checking each against
//! the other: the file is untrusted, so every value is validated before it sizes anything.

use canopy_kernels::backend::Backend;
use canopy_kernels::quant::{dequantize_row, is_dequantize_supported};

use super::ArchError;
use crate::gguf::GgufFile;

/// Reads metadata keys of one architecture, `{arch}.{suffix}`.
pub(super) struct MetadataReader<'a> {
    pub file: &'a GgufFile,
    pub arch: &'static str,
}

impl MetadataReader<'_> {
    pub fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    /// A positive integer that fits `usize`.
    pub fn positive(&self, suffix: &str) -> Result<usize, ArchError> {
        let key = self.key(suffix);
        let value = self.file.get_u64(&key)?;
        let value =
            usize::try_from(value).map_err(|_| invalid(&key, format!("{value} does not fit usize")))?;
        if value == 0 {
            return Err(invalid(&key, "must be positive".to_owned()));
        }
        Ok(value)
    }

    /// A positive integer, or `None` when the key is absent.
    pub fn optional_positive(&self, suffix: &str) -> Result<Option<usize>, ArchError> {
        match self.file.get(&self.key(suffix)) {
            Some(_) => self.positive(suffix).map(Some),
            None => Ok(None),
        }
    }

    /// A finite, strictly positive number, as `f32`.
    pub fn positive_f32(&self, suffix: &str) -> Result<f32, ArchError> {
        let key = self.key(suffix);
        let value = self.file.get_f64(&key)? as f32;
        if !(value.is_finite() && value > 0.0) {
            return Err(invalid(&key, format!("{value} must be finite and positive")));
        }
        Ok(value)
    }
}

pub(super) fn invalid(key: &str, detail: String) -> ArchError {
    ArchError::InvalidConfig { key: key.to_owned(), detail }
}

/// Uploads the weight matrix `name` of `rows` output features by `cols` input features (GGML
/// dimensions `[cols, rows]`), in its stored format.
pub(super) fn matrix<B: Backend>(
    backend: &B,
    file: &GgufFile,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<B::Weight, ArchError> {
    let info = checked_tensor(file, name, &[cols as u64, rows as u64])?;
    if !is_dequantize_supported(info.ggml_type) {
        return Err(ArchError::TensorType { name: name.to_owned(), ty: info.ggml_type });
    }
    Ok(backend.upload_weight(info.ggml_type, rows, cols, file.tensor_data(info))?)
}

/// Uploads the vector `name` of `len` elements as f32, decoding it if it is stored otherwise.
pub(super) fn vector<B: Backend>(
    backend: &B,
    file: &GgufFile,
    name: &str,
    len: usize,
) -> Result<B::Tensor, ArchError> {
    let info = checked_tensor(file, name, &[len as u64])?;
    let mut values = vec![0.0; len];
    dequantize_row(info.ggml_type, file.tensor_data(info), &mut values)
        .map_err(|_| ArchError::TensorType { name: name.to_owned(), ty: info.ggml_type })?;
    Ok(backend.upload(&values)?)
}

fn checked_tensor<'f>(
    file: &'f GgufFile,
    name: &str,
    expected: &[u64],
) -> Result<&'f crate::gguf::TensorInfo, ArchError> {
    let info = file.tensor(name).ok_or_else(|| ArchError::MissingTensor { name: name.to_owned() })?;
    if info.dims != expected {
        return Err(ArchError::TensorShape {
            name: name.to_owned(),
            expected: expected.to_vec(),
            found: info.dims.clone(),
        });
    }
    Ok(info)
}
