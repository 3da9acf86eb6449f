//! Q5_K: Q4_K's layout plus a fifth bit per quant. Quants decode as `d * scale * q - dmin * min`
//! with 5-bit `q`; the low nibbles are packed as in Q4_K and bit `j` of `qh[l]` is the fifth bit
//! of element `l` of sub-block `j`.
//!
//! Quantization ([`super::quantize_affine_super_block`]) keeps the relative RMS error on Gaussian
//! data below 4.5%.

use super::{AFFINE_SUB_BLOCKS, SCALE_MIN_BYTES, quantize_affine_super_block, unpack_scale_min};
use crate::quant::le::f16_to_f32;
use crate::quant::{GgmlType, QK_K, RowKernels, ScaleFit};

/// d: f16, dmin: f16, scales: 12 bytes, qh: 32 bytes, qs: 128 bytes.
const Q5_K_BYTES: usize = 2 + 2 + SCALE_MIN_BYTES + QK_K / 8 + QK_K / 2;
const _: () = assert!(Q5_K_BYTES == GgmlType::Q5K.type_size() && QK_K == GgmlType::Q5K.block_size());
const QH_OFFSET: usize = 4 + SCALE_MIN_BYTES;
const QS_OFFSET: usize = QH_OFFSET + QK_K / 8;

pub(in crate::quant) const Q5K: RowKernels =
    RowKernels { dequantize: dequantize_q5_k, dot: dot_q5_k, quantize: Some(quantize_q5_k) };

/// The per-sub-block multipliers `d * scale` and offsets `dmin * min` of a block.
#[inline]
fn sub_block_params(block: &[u8; Q5_K_BYTES]) -> ([f32; AFFINE_SUB_BLOCKS], [f32; AFFINE_SUB_BLOCKS]) {
    let d = f16_to_f32([block[0], block[1]]);
    let dmin = f16_to_f32([block[2], block[3]]);
    let (scales, mins) = unpack_scale_min(&std::array::from_fn(|i| block[4 + i]));
    (scales.map(|s| d * f32::from(s)), mins.map(|m| dmin * f32::from(m)))
}

/// The 5-bit quants of element `l` of sub-blocks `2k` and `2k + 1`.
#[inline]
fn quant_pair(qs_byte: u8, qh_byte: u8, k: usize) -> (u8, u8) {
    let lo = (qs_byte & 0x0f) | (((qh_byte >> (2 * k)) & 1) << 4);
    let hi = (qs_byte >> 4) | (((qh_byte >> (2 * k + 1)) & 1) << 4);
    (lo, hi)
}

fn dequantize_q5_k(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src.as_chunks::<Q5_K_BYTES>().0.iter().zip(dst.as_chunks_mut::<QK_K>().0) {
        let (scales, mins) = sub_block_params(block);
        let qh = &block[QH_OFFSET..QS_OFFSET];
        let qs = block[QS_OFFSET..].as_chunks::<32>().0;
        for (k, (bytes, out)) in qs.iter().zip(out.as_chunks_mut::<64>().0).enumerate() {
            let (lo, hi) = out.split_at_mut(32);
            let (d_lo, m_lo, d_hi, m_hi) = (scales[2 * k], mins[2 * k], scales[2 * k + 1], mins[2 * k + 1]);
            for (((&byte, &high_bits), lo), hi) in bytes.iter().zip(qh).zip(lo).zip(hi) {
                let (q_lo, q_hi) = quant_pair(byte, high_bits, k);
                *lo = d_lo * f32::from(q_lo) - m_lo;
                *hi = d_hi * f32::from(q_hi) - m_hi;
            }
        }
    }
}

fn dot_q5_k(src: &[u8], x: &[f32]) -> f32 {
    let mut acc = 0.0;
    for (block, x) in src.as_chunks::<Q5_K_BYTES>().0.iter().zip(x.as_chunks::<QK_K>().0) {
        let (scales, mins) = sub_block_params(block);
        let qh = &block[QH_OFFSET..QS_OFFSET];
        let qs = block[QS_OFFSET..].as_chunks::<32>().0;
        for (k, (bytes, x)) in qs.iter().zip(x.as_chunks::<64>().0).enumerate() {
            let (x_lo, x_hi) = x.split_at(32);
            let (mut qx_lo, mut qx_hi, mut sum_lo, mut sum_hi) = (0.0, 0.0, 0.0, 0.0);
            for (((&byte, &high_bits), &a), &b) in bytes.iter().zip(qh).zip(x_lo).zip(x_hi) {
                let (q_lo, q_hi) = quant_pair(byte, high_bits, k);
                qx_lo += f32::from(q_lo) * a;
                qx_hi += f32::from(q_hi) * b;
                sum_lo += a;
                sum_hi += b;
            }
            acc += scales[2 * k] * qx_lo - mins[2 * k] * sum_lo + scales[2 * k + 1] * qx_hi
                - mins[2 * k + 1] * sum_hi;
        }
    }
    acc
}

fn quantize_q5_k(src: &[f32], dst: &mut [u8]) {
    quantize_q5_k_with(src, dst, ScaleFit::Search)
}

pub(super) fn quantize_q5_k_nominal(src: &[f32], dst: &mut [u8]) {
    quantize_q5_k_with(src, dst, ScaleFit::Nominal)
}

fn quantize_q5_k_with(src: &[f32], dst: &mut [u8], fit: ScaleFit) {
    for (x, block) in src.as_chunks::<QK_K>().0.iter().zip(dst.as_chunks_mut::<Q5_K_BYTES>().0) {
        let quantized = quantize_affine_super_block(x, 31, fit);
        block[0..2].copy_from_slice(&quantized.d);
        block[2..4].copy_from_slice(&quantized.dmin);
        block[4..QH_OFFSET].copy_from_slice(&quantized.packed_scale_min);
        let (qh, qs) = block[QH_OFFSET..].split_at_mut(QK_K / 8);
        qh.fill(0);
        let quants = quantized.quants.as_chunks::<32>().0;
        for (j, sub_block) in quants.iter().enumerate() {
            for (high_bits, &q) in qh.iter_mut().zip(sub_block) {
                *high_bits |= (q >> 4) << j;
            }
        }
        for (bytes, pair) in qs.as_chunks_mut::<32>().0.iter_mut().zip(quants.as_chunks::<2>().0) {
            for ((byte, &lo), &hi) in bytes.iter_mut().zip(&pair[0]).zip(&pair[1]) {
                *byte = (lo & 0x0f) | (hi << 4);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifth_bit_of_sub_block_j_is_bit_j_of_qh() {
        // d = 1, dmin = 0; scale 1 for all sub-blocks; nibbles 0; qh[l] = 1 << (l % 8), so
        // element l of sub-block j has q = 16 exactly when j == l % 8.
        let mut block = [0u8; Q5_K_BYTES];
        block[..2].copy_from_slice(&[0x00, 0x3c]);
        block[4..8].fill(1);
        block[12..16].fill(1);
        for (l, byte) in block[QH_OFFSET..QS_OFFSET].iter_mut().enumerate() {
            *byte = 1 << (l % 8);
        }
        let mut out = [0f32; QK_K];
        dequantize_q5_k(&block, &mut out);
        for (i, &v) in out.iter().enumerate() {
            let (j, l) = (i / 32, i % 32);
            assert_eq!(v, if j == l % 8 { 16.0 } else { 0.0 }, "element {i}");
        }
    }
}
