//! Tensor descriptions and the shape rules the reader and writer share.

use canopy_kernels::quant::GgmlType;

use super::error::GgufError;

/// The most dimensions a GGML tensor has.
pub const MAX_DIMS: usize = 4;

/// A tensor as a GGUF file describes it; its bytes stay in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name, unique in its file.
    pub name: String,
    /// Dimensions in GGML order: `dims[0]` is the length of the contiguous rows.
    pub dims: Vec<u64>,
    /// The element type.
    pub ggml_type: GgmlType,
    /// Offset of the tensor's data, relative to the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Number of elements (the product of the dimensions; 1 for no dimensions). Saturates at
    /// `u64::MAX` for a hand-built info whose product overflows; infos read from a file never do.
    pub fn n_elements(&self) -> u64 {
        element_count(&self.dims).unwrap_or(u64::MAX)
    }

    /// Size of the tensor's data in bytes. Saturates at `u64::MAX` for a hand-built info that is not
    /// a whole number of blocks or whose size overflows; infos read from a file never are.
    pub fn n_bytes(&self) -> u64 {
        self.ggml_type.bytes_for(self.n_elements()).unwrap_or(u64::MAX)
    }
}

/// A tensor to write: its name, shape and type; the writer computes the offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// The tensor's name, unique in its file.
    pub name: String,
    /// Dimensions in GGML order: `dims[0]` is the length of the contiguous rows.
    pub dims: Vec<u64>,
    /// The element type.
    pub ggml_type: GgmlType,
}

impl From<&TensorInfo> for TensorSpec {
    fn from(info: &TensorInfo) -> Self {
        Self { name: info.name.clone(), dims: info.dims.clone(), ggml_type: info.ggml_type }
    }
}

fn element_count(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// The byte size of a tensor of this shape and type, checking what GGML requires of a shape: at most
/// [`MAX_DIMS`] dimensions, none zero, an element count that fits GGML's signed 64-bit sizes, and
/// rows that are a whole number of blocks.
pub(crate) fn checked_byte_size(name: &str, dims: &[u64], ggml_type: GgmlType) -> Result<u64, GgufError> {
    if dims.len() > MAX_DIMS {
        return Err(GgufError::TooManyDims {
            tensor: name.to_owned(),
            n_dims: dims.len() as u64,
            max: MAX_DIMS,
        });
    }
    let bad_shape = |reason| GgufError::BadShape { tensor: name.to_owned(), dims: dims.to_vec(), reason };
    if dims.contains(&0) {
        return Err(bad_shape("a dimension is zero"));
    }
    let n_elements = element_count(dims)
        .filter(|&n| i64::try_from(n).is_ok())
        .ok_or_else(|| bad_shape("the element count overflows"))?;
    let row_len = dims.first().copied().unwrap_or(1);
    let block_size = ggml_type.block_size();
    if !row_len.is_multiple_of(block_size as u64) {
        return Err(GgufError::PartialBlock { tensor: name.to_owned(), row_len, ggml_type, block_size });
    }
    ggml_type
        .bytes_for(n_elements)
        .filter(|&n| i64::try_from(n).is_ok())
        .ok_or_else(|| bad_shape("the byte size overflows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_size_follows_block_layout() {
        // Q8_0 blocks are 32 elements in 34 bytes; F32 is 4 bytes per element.
        assert_eq!(checked_byte_size("t", &[64, 3], GgmlType::Q8_0).unwrap(), 2 * 3 * 34);
        assert_eq!(checked_byte_size("t", &[5, 7], GgmlType::F32).unwrap(), 140);
        assert_eq!(checked_byte_size("scalar", &[], GgmlType::F32).unwrap(), 4);
    }

    #[test]
    fn invalid_shapes_are_rejected_with_the_tensor_name() {
        let err = checked_byte_size("w", &[1, 1, 1, 1, 1], GgmlType::F32).unwrap_err();
        assert!(matches!(err, GgufError::TooManyDims { n_dims: 5, max: 4, ref tensor } if tensor == "w"));
        let err = checked_byte_size("w", &[4, 0], GgmlType::F32).unwrap_err();
        assert!(matches!(err, GgufError::BadShape { reason: "a dimension is zero", .. }), "{err}");
        let err = checked_byte_size("w", &[1 << 32, 1 << 32], GgmlType::F32).unwrap_err();
        assert!(matches!(err, GgufError::BadShape { reason: "the element count overflows", .. }), "{err}");
        let err = checked_byte_size("w", &[1 << 62], GgmlType::F32).unwrap_err();
        assert!(matches!(err, GgufError::BadShape { reason: "the byte size overflows", .. }), "{err}");
        let err = checked_byte_size("w", &[48, 2], GgmlType::Q8_0).unwrap_err();
        assert!(matches!(err, GgufError::PartialBlock { row_len: 48, block_size: 32, .. }), "{err}");
    }

    #[test]
    fn info_sizes_match_the_checked_size() {
        let info = TensorInfo { name: "x".into(), dims: vec![256, 2], ggml_type: GgmlType::Q4K, offset: 0 };
        assert_eq!(info.n_elements(), 512);
        assert_eq!(info.n_bytes(), 288);
        assert_eq!(TensorSpec::from(&info).dims, vec![256, 2]);
    }
}
