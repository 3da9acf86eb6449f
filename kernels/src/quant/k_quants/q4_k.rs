//! Q4_K: super-blocks of 256 in eight sub-blocks of 32, each decoding as
//! `d * scale * q - dmin * min` with 4-bit `q` and 6-bit `scale`, `min`. The quants of sub-blocks
//! `2k` and `2k + 1` share bytes `32k..32k + 32`: low nibbles for the first, high for the second.
//!
//! Quantization ([`super::quantize_affine_super_block`]) keeps the relative RMS error on Gaussian
//! data below 9%.

use super::{AFFINE_SUB_BLOCKS, SCALE_MIN_BYTES, quantize_affine_super_block, unpack_scale_min};
use crate::quant::le::f16_to_f32;
use crate::quant::{GgmlType, QK_K, RowKernels, ScaleFit};

/// d: f16, dmin: f16, scales: 12 bytes, qs: 128 bytes.
const Q4_K_BYTES: usize = 2 + 2 + SCALE_MIN_BYTES + QK_K / 2;
const _: () = assert!(Q4_K_BYTES == GgmlType::Q4K.type_size() && QK_K == GgmlType::Q4K.block_size());
const QS_OFFSET: usize = 4 + SCALE_MIN_BYTES;

pub(in crate::quant) const Q4K: RowKernels =
    RowKernels { dequantize: dequantize_q4_k, dot: dot_q4_k, quantize: Some(quantize_q4_k) };

/// The per-sub-block multipliers `d * scale` and offsets `dmin * min` of a block.
#[inline]
fn sub_block_params(block: &[u8; Q4_K_BYTES]) -> ([f32; AFFINE_SUB_BLOCKS], [f32; AFFINE_SUB_BLOCKS]) {
    let d = f16_to_f32([block[0], block[1]]);
    let dmin = f16_to_f32([block[2], block[3]]);
    let (scales, mins) = unpack_scale_min(&std::array::from_fn(|i| block[4 + i]));
    (scales.map(|s| d * f32::from(s)), mins.map(|m| dmin * f32::from(m)))
}

fn dequantize_q4_k(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src.as_chunks::<Q4_K_BYTES>().0.iter().zip(dst.as_chunks_mut::<QK_K>().0) {
        let (scales, mins) = sub_block_params(block);
        let qs = block[QS_OFFSET..].as_chunks::<32>().0;
        for (k, (bytes, out)) in qs.iter().zip(out.as_chunks_mut::<64>().0).enumerate() {
            let (lo, hi) = out.split_at_mut(32);
            let (d_lo, m_lo, d_hi, m_hi) = (scales[2 * k], mins[2 * k], scales[2 * k + 1], mins[2 * k + 1]);
            for ((&byte, lo), hi) in bytes.iter().zip(lo).zip(hi) {
                *lo = d_lo * f32::from(byte & 0x0f) - m_lo;
                *hi = d_hi * f32::from(byte >> 4) - m_hi;
            }
        }
    }
}

fn dot_q4_k(src: &[u8], x: &[f32]) -> f32 {
    let mut acc = 0.0;
    for (block, x) in src.as_chunks::<Q4_K_BYTES>().0.iter().zip(x.as_chunks::<QK_K>().0) {
        let (scales, mins) = sub_block_params(block);
        let qs = block[QS_OFFSET..].as_chunks::<32>().0;
        for (k, (bytes, x)) in qs.iter().zip(x.as_chunks::<64>().0).enumerate() {
            let (x_lo, x_hi) = x.split_at(32);
            let (mut qx_lo, mut qx_hi, mut sum_lo, mut sum_hi) = (0.0, 0.0, 0.0, 0.0);
            for ((&byte, &a), &b) in bytes.iter().zip(x_lo).zip(x_hi) {
                qx_lo += f32::from(byte & 0x0f) * a;
                qx_hi += f32::from(byte >> 4) * b;
                sum_lo += a;
                sum_hi += b;
            }
            acc += scales[2 * k] * qx_lo - mins[2 * k] * sum_lo + scales[2 * k + 1] * qx_hi
                - mins[2 * k + 1] * sum_hi;
        }
    }
    acc
}

fn quantize_q4_k(src: &[f32], dst: &mut [u8]) {
    quantize_q4_k_with(src, dst, ScaleFit::Search)
}

pub(super) fn quantize_q4_k_nominal(src: &[f32], dst: &mut [u8]) {
    quantize_q4_k_with(src, dst, ScaleFit::Nominal)
}

fn quantize_q4_k_with(src: &[f32], dst: &mut [u8], fit: ScaleFit) {
    for (x, block) in src.as_chunks::<QK_K>().0.iter().zip(dst.as_chunks_mut::<Q4_K_BYTES>().0) {
        let quantized = quantize_affine_super_block(x, 15, fit);
        block[0..2].copy_from_slice(&quantized.d);
        block[2..4].copy_from_slice(&quantized.dmin);
        block[4..QS_OFFSET].copy_from_slice(&quantized.packed_scale_min);
        let quants = quantized.quants.as_chunks::<64>().0;
        for (bytes, quants) in block[QS_OFFSET..].as_chunks_mut::<32>().0.iter_mut().zip(quants) {
            let (lo, hi) = quants.split_at(32);
            for ((byte, &lo), &hi) in bytes.iter_mut().zip(lo).zip(hi) {
                *byte = lo | (hi << 4);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_blocks_take_their_own_scale_and_min() {
        // d = 1, dmin = 0.5; sub-block 3 (high nibbles of bytes 32..64) has scale 2 and min 4;
        // every other scale and min is 0. Every quant byte is 0x5a.
        let mut block = [0u8; Q4_K_BYTES];
        block[..4].copy_from_slice(&[0x00, 0x3c, 0x00, 0x38]);
        block[4 + 3] = 2;
        block[4 + 4 + 3] = 4;
        block[QS_OFFSET..].fill(0x5a);
        let mut out = [1f32; QK_K];
        dequantize_q4_k(&block, &mut out);
        for (i, &v) in out.iter().enumerate() {
            let expected = if i / 32 == 3 { 2.0 * 5.0 - 0.5 * 4.0 } else { 0.0 };
            assert_eq!(v, expected, "element {i}");
        }
    }
}
