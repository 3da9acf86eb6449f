//! GGML tensor element types and their block layouts, with CPU reference kernels.
//!
//! Every type stores a row as consecutive blocks of `block_size()` elements taking `type_size()`
//! bytes each. The numeric ids are the ones GGUF files store (ggml's `ggml_type`); ids that ggml has
//! retired are not listed, so a file naming one is rejected by [`GgmlType::from_id`].
//!
//! The row kernels ([`dequantize_row`], [`dot_row`], [`quantize_row`]) decode blocks from byte
//! slices with explicit little-endian reads, so they accept any alignment. Dequantization matches
//! ggml's (and gguf-py's) arithmetic order, so results are bit-identical to theirs. The kernels
//! never allocate and never panic on malformed input: lengths are checked up front and every bit
//! pattern of a block decodes to some value.

mod float;
mod k_quants;
mod le;
mod legacy;
mod types;

pub use types::{GgmlType, QK_K};

/// Why a row kernel refused its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The type has no kernel for this operation (`"dequantize"`, `"dot"` or `"quantize"`).
    #[error("{1} is not supported for {0}")]
    Unsupported(GgmlType, &'static str),
    /// The element count is not a whole number of blocks.
    #[error("{elements} elements are not a whole number of {ty} blocks of {block_size}")]
    PartialBlock { ty: GgmlType, elements: usize, block_size: usize },
    /// The byte slice does not hold exactly the blocks of the element count.
    #[error("{elements} {ty} elements take {expected} bytes, got {actual}")]
    Length { ty: GgmlType, elements: usize, expected: usize, actual: usize },
}

type DequantizeFn = fn(&[u8], &mut [f32]);
type DotFn = fn(&[u8], &[f32]) -> f32;
type QuantizeFn = fn(&[f32], &mut [u8]);

/// How the K-format quantizers (Q4_K, Q5_K, Q6_K) choose each sub-block's scale.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ScaleFit {
    /// Tries grids slightly finer and coarser than the one the sub-block's extremes span and
    /// keeps the least-squares fit with the smallest error, as llama.cpp's quantizers do.
    #[default]
    Search,
    /// Only the grid the extremes span, refit by least squares: a twentieth of the search's work
    /// for a slightly larger rounding error. Meant for synthetic benchmark weights.
    Nominal,
}

/// The CPU kernels of one block format. Each kernel takes slices whose lengths have already been
/// checked against each other, holding whole blocks.
struct RowKernels {
    dequantize: DequantizeFn,
    dot: DotFn,
    quantize: Option<QuantizeFn>,
}

fn row_kernels(ty: GgmlType) -> Option<&'static RowKernels> {
    match ty {
        GgmlType::F32 => Some(&float::F32),
        GgmlType::F16 => Some(&float::F16),
        GgmlType::Bf16 => Some(&float::BF16),
        GgmlType::Q4_0 => Some(&legacy::q4::Q4_0),
        GgmlType::Q4_1 => Some(&legacy::q4::Q4_1),
        GgmlType::Q5_0 => Some(&legacy::q5::Q5_0),
        GgmlType::Q5_1 => Some(&legacy::q5::Q5_1),
        GgmlType::Q8_0 => Some(&legacy::q8_0::Q8_0),
        GgmlType::Q2K => Some(&k_quants::q2_k::Q2K),
        GgmlType::Q3K => Some(&k_quants::q3_k::Q3K),
        GgmlType::Q4K => Some(&k_quants::q4_k::Q4K),
        GgmlType::Q5K => Some(&k_quants::q5_k::Q5K),
        GgmlType::Q6K => Some(&k_quants::q6_k::Q6K),
        GgmlType::Q8K => Some(&k_quants::q8_k::Q8K),
        _ => None,
    }
}

/// Whether [`dequantize_row`] and [`dot_row`] accept `ty`.
pub fn is_dequantize_supported(ty: GgmlType) -> bool {
    row_kernels(ty).is_some()
}

/// Whether [`quantize_row`] accepts `ty`.
pub fn is_quantize_supported(ty: GgmlType) -> bool {
    row_kernels(ty).is_some_and(|k| k.quantize.is_some())
}

/// Decodes `dst.len()` elements of type `ty` from `src`, which must hold exactly their bytes.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    let kernels = row_kernels(ty).ok_or(QuantError::Unsupported(ty, "dequantize"))?;
    check_lengths(ty, dst.len(), src.len())?;
    (kernels.dequantize)(src, dst);
    Ok(())
}

/// The dot product of the row of type `ty` in `src` with `x`, decoding one block at a time instead
/// of materialising the row. `src` must hold exactly the bytes of `x.len()` elements.
///
/// Each block's sum is factored through its scales (`d * Σ q·x`), so the result differs from the
/// dot product of [`dequantize_row`]'s output by float rounding only.
pub fn dot_row(ty: GgmlType, src: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    let kernels = row_kernels(ty).ok_or(QuantError::Unsupported(ty, "dot"))?;
    check_lengths(ty, x.len(), src.len())?;
    Ok((kernels.dot)(src, x))
}

/// Encodes `src` as type `ty` into `dst`, which must be exactly the bytes of `src.len()` elements.
///
/// Blocks holding non-finite values, or magnitudes whose scale overflows the format's f16 scale
/// (beyond about 65504 times the format's largest quant), do not panic but decode to unspecified
/// values.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    quantize_row_with(ty, src, dst, ScaleFit::Search)
}

/// [`quantize_row`] with the K formats' scales chosen by `fit`; other formats ignore it.
pub fn quantize_row_with(ty: GgmlType, src: &[f32], dst: &mut [u8], fit: ScaleFit) -> Result<(), QuantError> {
    let searched = row_kernels(ty).and_then(|k| k.quantize);
    let quantize = match fit {
        ScaleFit::Search => searched,
        ScaleFit::Nominal => k_quants::nominal_quantizer(ty).or(searched),
    }
    .ok_or(QuantError::Unsupported(ty, "quantize"))?;
    check_lengths(ty, src.len(), dst.len())?;
    quantize(src, dst);
    Ok(())
}

fn check_lengths(ty: GgmlType, elements: usize, bytes: usize) -> Result<(), QuantError> {
    let block_size = ty.block_size();
    if !elements.is_multiple_of(block_size) {
        return Err(QuantError::PartialBlock { ty, elements, block_size });
    }
    // Saturating: a count whose bytes overflow cannot match any real slice length.
    let expected = (elements / block_size).saturating_mul(ty.type_size());
    if bytes != expected {
        return Err(QuantError::Length { ty, elements, expected, actual: bytes });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_sets_cover_the_listed_formats_only() {
        use GgmlType::*;
        let round_trip = [F32, F16, Bf16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4K, Q5K, Q6K, Q8K];
        let decode_only = [Q2K, Q3K];
        for ty in GgmlType::ALL {
            let expect_decode = round_trip.contains(&ty) || decode_only.contains(&ty);
            assert_eq!(is_dequantize_supported(ty), expect_decode, "{ty}");
            assert_eq!(is_quantize_supported(ty), round_trip.contains(&ty), "{ty}");
        }
    }

    #[test]
    fn unsupported_types_are_errors() {
        let mut out = [0f32; 256];
        let err = dequantize_row(GgmlType::Iq2Xxs, &[0; 66], &mut out);
        assert_eq!(err, Err(QuantError::Unsupported(GgmlType::Iq2Xxs, "dequantize")));
        let err = dot_row(GgmlType::Mxfp4, &[0; 17], &out[..32]);
        assert_eq!(err, Err(QuantError::Unsupported(GgmlType::Mxfp4, "dot")));
        let err = quantize_row(GgmlType::Q3K, &out, &mut [0; 110]);
        assert_eq!(err, Err(QuantError::Unsupported(GgmlType::Q3K, "quantize")));
    }

    #[test]
    fn partial_blocks_and_wrong_byte_counts_are_errors() {
        let ty = GgmlType::Q4K;
        let mut out = vec![0f32; 300];
        assert_eq!(
            dequantize_row(ty, &[0; 144], &mut out),
            Err(QuantError::PartialBlock { ty, elements: 300, block_size: 256 })
        );
        let length = |actual| QuantError::Length { ty, elements: 256, expected: 144, actual };
        assert_eq!(dequantize_row(ty, &[0; 143], &mut out[..256]), Err(length(143)));
        assert_eq!(dot_row(ty, &[0; 145], &out[..256]), Err(length(145)));
        assert_eq!(quantize_row(ty, &out[..256], &mut [0; 288]), Err(length(288)));
        assert_eq!(
            dot_row(GgmlType::Q8_0, &[0; 34], &out[..31]),
            Err(QuantError::PartialBlock { ty: GgmlType::Q8_0, elements: 31, block_size: 32 })
        );
    }

    /// The nominal fit of the K formats decodes close to the searched one (a little worse on
    /// average over many blocks); other formats ignore the fit; errors are the same.
    #[test]
    fn nominal_scale_fit_stays_close_to_the_search() {
        let n = 64 * QK_K;
        // A deterministic spread of values with some large ones, like a weight row.
        let x: Vec<f32> =
            (0..n).map(|i| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * (1 + i % 5) as f32).collect();
        let squared_error = |ty: GgmlType, fit: ScaleFit| {
            let mut bytes = vec![0u8; n / ty.block_size() * ty.type_size()];
            quantize_row_with(ty, &x, &mut bytes, fit).unwrap();
            let mut decoded = vec![0f32; n];
            dequantize_row(ty, &bytes, &mut decoded).unwrap();
            x.iter().zip(&decoded).map(|(a, b)| f64::from(a - b).powi(2)).sum::<f64>()
        };
        for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
            let (search, nominal) =
                (squared_error(ty, ScaleFit::Search), squared_error(ty, ScaleFit::Nominal));
            assert!(search <= nominal && nominal < 1.3 * search, "{ty}: search {search}, nominal {nominal}");
        }
        assert_eq!(
            squared_error(GgmlType::Q8_0, ScaleFit::Nominal),
            squared_error(GgmlType::Q8_0, ScaleFit::Search)
        );
        let err = quantize_row_with(GgmlType::Q3K, &x, &mut [0; 110], ScaleFit::Nominal);
        assert_eq!(err, Err(QuantError::Unsupported(GgmlType::Q3K, "quantize")));
    }

    #[test]
    fn empty_rows_are_fine() {
        assert_eq!(dequantize_row(GgmlType::Q6K, &[], &mut []), Ok(()));
        assert_eq!(dot_row(GgmlType::F16, &[], &[]), Ok(0.0));
        assert_eq!(quantize_row(GgmlType::Q8_0, &[], &mut []), Ok(()));
    }
}
