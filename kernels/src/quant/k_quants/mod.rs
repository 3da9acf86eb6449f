//! ggml's K formats: super-blocks of [`QK_K`] elements split into sub-blocks of 16 or 32, whose
//! scales (and mins) are themselves quantized against one or two f16 super-block scales.

pub(super) mod fit;
pub(super) mod q2_k;
pub(super) mod q3_k;
pub(super) mod q4_k;
pub(super) mod q5_k;
pub(super) mod q6_k;
pub(super) mod q8_k;

use super::le::{f32_to_f16_at_least, round_clamped};
use super::{GgmlType, QK_K, QuantizeFn, ScaleFit};

/// The quantizer of `ty` that fits scales on the nominal grid only ([`ScaleFit::Nominal`]), for
/// the formats that search.
pub(super) fn nominal_quantizer(ty: GgmlType) -> Option<QuantizeFn> {
    match ty {
        GgmlType::Q4K => Some(q4_k::quantize_q4_k_nominal),
        GgmlType::Q5K => Some(q5_k::quantize_q5_k_nominal),
        GgmlType::Q6K => Some(q6_k::quantize_q6_k_nominal),
        _ => None,
    }
}

/// Sub-blocks of 16 elements in a Q3_K/Q6_K super-block.
const SIGNED_SUB_BLOCKS: usize = QK_K / 16;

/// A Q3_K/Q6_K super-block decoded to its signed quants and the scale of each 16-element
/// sub-block: element `i` is `scales[i / 16] * quants[i]`.
type SignedBlock = ([i8; QK_K], [f32; SIGNED_SUB_BLOCKS]);

/// Dequantizes the formats whose values are a per-sub-block scale times a signed quant.
fn dequantize_signed<const BYTES: usize>(
    src: &[u8],
    dst: &mut [f32],
    decode: fn(&[u8; BYTES]) -> SignedBlock,
) {
    for (block, out) in src.as_chunks::<BYTES>().0.iter().zip(dst.as_chunks_mut::<QK_K>().0) {
        let (quants, scales) = decode(block);
        let groups = quants.as_chunks::<16>().0.iter().zip(out.as_chunks_mut::<16>().0);
        for ((quants, out), &scale) in groups.zip(&scales) {
            for (&q, out) in quants.iter().zip(out) {
                *out = scale * f32::from(q);
            }
        }
    }
}

/// The dot product of a row of such a format with `x`, summing each sub-block before scaling it.
fn dot_signed<const BYTES: usize>(src: &[u8], x: &[f32], decode: fn(&[u8; BYTES]) -> SignedBlock) -> f32 {
    let mut acc = 0.0;
    for (block, x) in src.as_chunks::<BYTES>().0.iter().zip(x.as_chunks::<QK_K>().0) {
        let (quants, scales) = decode(block);
        let groups = quants.as_chunks::<16>().0.iter().zip(x.as_chunks::<16>().0);
        for ((quants, x), &scale) in groups.zip(&scales) {
            let sum = quants.iter().zip(x).fold(0.0, |sum, (&q, &x)| sum + f32::from(q) * x);
            acc += scale * sum;
        }
    }
    acc
}

/// Bytes of the packed 6-bit scales and mins of Q4_K and Q5_K.
const SCALE_MIN_BYTES: usize = 12;
/// Sub-blocks of 32 elements in a Q4_K/Q5_K super-block.
const AFFINE_SUB_BLOCKS: usize = QK_K / 32;

/// Unpacks the eight 6-bit scales and eight 6-bit mins of a Q4_K/Q5_K super-block. Bytes 0..4 hold
/// scales 0..4 and bytes 4..8 mins 0..4 in their low six bits; sub-blocks 4..8 keep their low
/// four bits in bytes 8..12 (scale low nibble, min high nibble) and their top two bits in the
/// spare top bits of bytes 0..8.
fn unpack_scale_min(packed: &[u8; SCALE_MIN_BYTES]) -> ([u8; AFFINE_SUB_BLOCKS], [u8; AFFINE_SUB_BLOCKS]) {
    let mut scales = [0u8; AFFINE_SUB_BLOCKS];
    let mut mins = [0u8; AFFINE_SUB_BLOCKS];
    for j in 0..4 {
        scales[j] = packed[j] & 0x3f;
        mins[j] = packed[j + 4] & 0x3f;
        scales[j + 4] = (packed[j + 8] & 0x0f) | ((packed[j] >> 6) << 4);
        mins[j + 4] = (packed[j + 8] >> 4) | ((packed[j + 4] >> 6) << 4);
    }
    (scales, mins)
}

/// The inverse of [`unpack_scale_min`]; inputs must be below 64.
fn pack_scale_min(scales: &[u8; AFFINE_SUB_BLOCKS], mins: &[u8; AFFINE_SUB_BLOCKS]) -> [u8; SCALE_MIN_BYTES] {
    let mut packed = [0u8; SCALE_MIN_BYTES];
    for j in 0..4 {
        packed[j] = scales[j] | ((scales[j + 4] >> 4) << 6);
        packed[j + 4] = mins[j] | ((mins[j + 4] >> 4) << 6);
        packed[j + 8] = (scales[j + 4] & 0x0f) | ((mins[j + 4] & 0x0f) << 4);
    }
    packed
}

/// A Q4_K/Q5_K super-block before bit packing: element `i` decodes to
/// `d * scales[i / 32] * quants[i] - dmin * mins[i / 32]`.
struct AffineSuperBlock {
    d: [u8; 2],
    dmin: [u8; 2],
    packed_scale_min: [u8; SCALE_MIN_BYTES],
    quants: [u8; QK_K],
}

/// Quantizes a super-block to quants in `0..=max_q`: fits each 32-element sub-block's scale and
/// min ([`fit::fit_scale_min`]), quantizes those to 6 bits against the largest of each, then picks
/// every quant against the scale and min a reader will decode.
fn quantize_affine_super_block(x: &[f32; QK_K], max_q: u8, scale_fit: ScaleFit) -> AffineSuperBlock {
    let (sub_blocks, _) = x.as_chunks::<32>();
    let mut fitted = [(0.0f32, 0.0f32); AFFINE_SUB_BLOCKS];
    for (fit, sub) in fitted.iter_mut().zip(sub_blocks) {
        *fit = fit::fit_scale_min(sub, max_q, scale_fit);
    }
    let max_scale = fitted.iter().fold(0.0f32, |m, f| m.max(f.0));
    let max_min = fitted.iter().fold(0.0f32, |m, f| m.max(f.1));
    let (d_bytes, d) = f32_to_f16_at_least(max_scale / 63.0);
    let (dmin_bytes, dmin) = f32_to_f16_at_least(max_min / 63.0);
    let to_six_bits = |value: f32, unit: f32| {
        if unit > 0.0 { round_clamped(value / unit, 0, 63) as u8 } else { 0 }
    };
    let scales = fitted.map(|(scale, _)| to_six_bits(scale, d));
    let mins = fitted.map(|(_, min)| to_six_bits(min, dmin));

    let mut quants = [0u8; QK_K];
    for (j, (sub, out)) in sub_blocks.iter().zip(quants.as_chunks_mut::<32>().0).enumerate() {
        let scale = d * f32::from(scales[j]);
        let min = dmin * f32::from(mins[j]);
        if scale > 0.0 {
            for (q, &v) in out.iter_mut().zip(sub) {
                *q = round_clamped((v + min) / scale, 0, i32::from(max_q)) as u8;
            }
        }
    }
    AffineSuperBlock {
        d: d_bytes,
        dmin: dmin_bytes,
        packed_scale_min: pack_scale_min(&scales, &mins),
        quants,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_min_packing_round_trips_every_value() {
        for base in 0..64 {
            let scales: [u8; 8] = std::array::from_fn(|j| ((base + 7 * j) % 64) as u8);
            let mins: [u8; 8] = std::array::from_fn(|j| ((base * 3 + 11 * j) % 64) as u8);
            assert_eq!(unpack_scale_min(&pack_scale_min(&scales, &mins)), (scales, mins));
        }
    }

    #[test]
    fn scale_min_layout_matches_ggml() {
        // Sub-block 5: scale 0b10_0110, min 0b01_1001. Its top bits go to bytes 1 and 5, its low
        // nibbles to byte 9.
        let mut packed = [0u8; 12];
        packed[1] = 0b10 << 6;
        packed[5] = 0b01 << 6;
        packed[9] = 0b1001_0110;
        let (scales, mins) = unpack_scale_min(&packed);
        assert_eq!((scales[5], mins[5]), (0b10_0110, 0b01_1001));
        assert_eq!((scales[1], mins[1]), (0, 0));
    }
}
