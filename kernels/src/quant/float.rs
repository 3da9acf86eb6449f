//! The unquantized element types: F32, F16 and BF16, one little-endian value per element.
//!
//! Conversion to F16 and BF16 rounds to nearest, ties to even, so each element's relative error
//! is at most 2^-11 (F16, normal range) or 2^-8 (BF16).

use super::RowKernels;
use super::le::f16_to_f32;

pub(super) const F32: RowKernels =
    RowKernels { dequantize: dequantize_f32, dot: dot_f32, quantize: Some(quantize_f32) };
pub(super) const F16: RowKernels =
    RowKernels { dequantize: dequantize_f16, dot: dot_f16, quantize: Some(quantize_f16) };
pub(super) const BF16: RowKernels =
    RowKernels { dequantize: dequantize_bf16, dot: dot_bf16, quantize: Some(quantize_bf16) };

fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (bytes, out) in src.as_chunks::<4>().0.iter().zip(dst) {
        *out = f32::from_le_bytes(*bytes);
    }
}

fn dot_f32(src: &[u8], x: &[f32]) -> f32 {
    src.as_chunks::<4>().0.iter().zip(x).fold(0.0, |acc, (bytes, &x)| acc + f32::from_le_bytes(*bytes) * x)
}

fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (value, out) in src.iter().zip(dst.as_chunks_mut::<4>().0) {
        *out = value.to_le_bytes();
    }
}

fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (bytes, out) in src.as_chunks::<2>().0.iter().zip(dst) {
        *out = f16_to_f32(*bytes);
    }
}

fn dot_f16(src: &[u8], x: &[f32]) -> f32 {
    src.as_chunks::<2>().0.iter().zip(x).fold(0.0, |acc, (bytes, &x)| acc + f16_to_f32(*bytes) * x)
}

/// Round to nearest, ties to even; out-of-range values become infinities, as in C and numpy.
fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (value, out) in src.iter().zip(dst.as_chunks_mut::<2>().0) {
        *out = half::f16::from_f32(*value).to_le_bytes();
    }
}

/// BF16 is the upper half of an f32, so widening is a shift.
#[inline]
fn bf16_to_f32(bytes: [u8; 2]) -> f32 {
    f32::from_bits(u32::from(u16::from_le_bytes(bytes)) << 16)
}

fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (bytes, out) in src.as_chunks::<2>().0.iter().zip(dst) {
        *out = bf16_to_f32(*bytes);
    }
}

fn dot_bf16(src: &[u8], x: &[f32]) -> f32 {
    src.as_chunks::<2>().0.iter().zip(x).fold(0.0, |acc, (bytes, &x)| acc + bf16_to_f32(*bytes) * x)
}

/// ggml's conversion: round to nearest, ties to even, and NaNs kept NaN by forcing the quiet bit
/// (plain truncation could turn a NaN with only low payload bits into an infinity).
fn f32_to_bf16(value: f32) -> u16 {
    let bits = value.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        return ((bits >> 16) | 0x0040) as u16;
    }
    // Non-NaN bits are at most 0xff80_0000, so adding under 2^16 cannot overflow.
    let rounding = 0x7fff + ((bits >> 16) & 1);
    ((bits + rounding) >> 16) as u16
}

fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (value, out) in src.iter().zip(dst.as_chunks_mut::<2>().0) {
        *out = f32_to_bf16(*value).to_le_bytes();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 lies exactly between two bf16 values; the even one (1.0) wins.
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        // 1 + 3 * 2^-8 lies between 1 + 2^-7 (odd mantissa) and 1 + 2^-6 (even); ties go up.
        assert_eq!(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(f32_to_bf16(-2.5), 0xc020);
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
        // The largest finite f32 is past bf16's largest finite value, so it rounds to infinity.
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80);
    }

    #[test]
    fn bf16_keeps_nans_nan() {
        let low_payload_nan = f32::from_bits(0x7f80_0001);
        assert!(bf16_to_f32(f32_to_bf16(low_payload_nan).to_le_bytes()).is_nan());
        assert!(bf16_to_f32(f32_to_bf16(-f32::NAN).to_le_bytes()).is_nan());
    }

    #[test]
    fn float_rows_decode_their_little_endian_values() {
        let mut out = [0f32; 2];
        dequantize_f32(&[0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc1], &mut out);
        assert_eq!(out, [1.0, -10.0]);
        dequantize_f16(&[0x00, 0x3c, 0x00, 0xc5], &mut out);
        assert_eq!(out, [1.0, -5.0]);
        dequantize_bf16(&[0x80, 0x3f, 0x40, 0xc0], &mut out);
        assert_eq!(out, [1.0, -3.0]);
    }
}
