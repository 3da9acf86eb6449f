//! Q5_0 (`d * (q - 16)`) and Q5_1 (`d * q + m`): 5-bit quants. The low four bits are packed like
//! Q4 (byte `j` holds elements `j` and `j + 16`); bit `i` of the little-endian u32 `qh` is the
//! fifth bit of element `i`.
//!
//! Quantization is round-to-nearest against the block's extremes: relative RMS error on Gaussian
//! data is below 5.5% for Q5_0 and below 5% for Q5_1.

use super::{QK, inverse_or_zero, min_max, signed_abs_max};
use crate::quant::le::{f16_to_f32, f32_to_f16, round_clamped};
use crate::quant::{GgmlType, RowKernels};

/// d: f16, qh: u32, qs: 16 bytes.
const Q5_0_BYTES: usize = 2 + 4 + QK / 2;
/// d: f16, m: f16, qh: u32, qs: 16 bytes.
const Q5_1_BYTES: usize = 2 + 2 + 4 + QK / 2;
const _: () = assert!(Q5_0_BYTES == GgmlType::Q5_0.type_size() && QK == GgmlType::Q5_0.block_size());
const _: () = assert!(Q5_1_BYTES == GgmlType::Q5_1.type_size() && QK == GgmlType::Q5_1.block_size());

pub(in crate::quant) const Q5_0: RowKernels =
    RowKernels { dequantize: dequantize_q5_0, dot: dot_q5_0, quantize: Some(quantize_q5_0) };
pub(in crate::quant) const Q5_1: RowKernels =
    RowKernels { dequantize: dequantize_q5_1, dot: dot_q5_1, quantize: Some(quantize_q5_1) };

/// The unsigned 5-bit quants of elements `j` and `j + 16`.
#[inline]
fn quant_pair(qs_byte: u8, qh: u32, j: usize) -> (u8, u8) {
    let lo = (qs_byte & 0x0f) | ((((qh >> j) & 1) as u8) << 4);
    let hi = (qs_byte >> 4) | ((((qh >> (j + QK / 2)) & 1) as u8) << 4);
    (lo, hi)
}

/// Packs 32 unsigned 5-bit quants into the `qh` word and the 16 nibble bytes.
fn pack_quants(quants: &[u8; QK], qh_out: &mut [u8], qs_out: &mut [u8]) {
    let qh = quants.iter().enumerate().fold(0u32, |qh, (i, &q)| qh | (u32::from(q >> 4) << i));
    qh_out.copy_from_slice(&qh.to_le_bytes());
    let (lo, hi) = quants.split_at(QK / 2);
    for ((byte, &lo), &hi) in qs_out.iter_mut().zip(lo).zip(hi) {
        *byte = (lo & 0x0f) | (hi << 4);
    }
}

fn dequantize_q5_0(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src.as_chunks::<Q5_0_BYTES>().0.iter().zip(dst.as_chunks_mut::<QK>().0) {
        let d = f16_to_f32([block[0], block[1]]);
        let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
        let (lo, hi) = out.split_at_mut(QK / 2);
        for (j, ((&byte, lo), hi)) in block[6..].iter().zip(lo).zip(hi).enumerate() {
            let (q_lo, q_hi) = quant_pair(byte, qh, j);
            *lo = (i32::from(q_lo) - 16) as f32 * d;
            *hi = (i32::from(q_hi) - 16) as f32 * d;
        }
    }
}

fn dot_q5_0(src: &[u8], x: &[f32]) -> f32 {
    let mut acc = 0.0;
    for (block, x) in src.as_chunks::<Q5_0_BYTES>().0.iter().zip(x.as_chunks::<QK>().0) {
        let d = f16_to_f32([block[0], block[1]]);
        let qh = u32::from_le_bytes([block[2], block[3], block[4], block[5]]);
        let (x_lo, x_hi) = x.split_at(QK / 2);
        let mut sum = 0.0;
        for (j, ((&byte, &a), &b)) in block[6..].iter().zip(x_lo).zip(x_hi).enumerate() {
            let (q_lo, q_hi) = quant_pair(byte, qh, j);
            sum += (i32::from(q_lo) - 16) as f32 * a + (i32::from(q_hi) - 16) as f32 * b;
        }
        acc += d * sum;
    }
    acc
}

fn quantize_q5_0(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.as_chunks::<QK>().0.iter().zip(dst.as_chunks_mut::<Q5_0_BYTES>().0) {
        let (d_bytes, d) = f32_to_f16(signed_abs_max(x) / -16.0);
        let inv = inverse_or_zero(d);
        let quants = x.map(|v| (round_clamped(v * inv, -16, 15) + 16) as u8);
        let (head, rest) = block.split_at_mut(2);
        head.copy_from_slice(&d_bytes);
        let (qh, qs) = rest.split_at_mut(4);
        pack_quants(&quants, qh, qs);
    }
}

fn dequantize_q5_1(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src.as_chunks::<Q5_1_BYTES>().0.iter().zip(dst.as_chunks_mut::<QK>().0) {
        let d = f16_to_f32([block[0], block[1]]);
        let m = f16_to_f32([block[2], block[3]]);
        let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
        let (lo, hi) = out.split_at_mut(QK / 2);
        for (j, ((&byte, lo), hi)) in block[8..].iter().zip(lo).zip(hi).enumerate() {
            let (q_lo, q_hi) = quant_pair(byte, qh, j);
            *lo = f32::from(q_lo) * d + m;
            *hi = f32::from(q_hi) * d + m;
        }
    }
}

fn dot_q5_1(src: &[u8], x: &[f32]) -> f32 {
    let mut acc = 0.0;
    for (block, x) in src.as_chunks::<Q5_1_BYTES>().0.iter().zip(x.as_chunks::<QK>().0) {
        let d = f16_to_f32([block[0], block[1]]);
        let m = f16_to_f32([block[2], block[3]]);
        let qh = u32::from_le_bytes([block[4], block[5], block[6], block[7]]);
        let (x_lo, x_hi) = x.split_at(QK / 2);
        let (mut sum_qx, mut sum_x) = (0.0, 0.0);
        for (j, ((&byte, &a), &b)) in block[8..].iter().zip(x_lo).zip(x_hi).enumerate() {
            let (q_lo, q_hi) = quant_pair(byte, qh, j);
            sum_qx += f32::from(q_lo) * a + f32::from(q_hi) * b;
            sum_x += a + b;
        }
        acc += d * sum_qx + m * sum_x;
    }
    acc
}

fn quantize_q5_1(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.as_chunks::<QK>().0.iter().zip(dst.as_chunks_mut::<Q5_1_BYTES>().0) {
        let (lo, hi) = min_max(x);
        let (d_bytes, d) = f32_to_f16((hi - lo) / 31.0);
        let (m_bytes, m) = f32_to_f16(lo);
        let inv = inverse_or_zero(d);
        let quants = x.map(|v| round_clamped((v - m) * inv, 0, 31) as u8);
        let (head, rest) = block.split_at_mut(4);
        head[..2].copy_from_slice(&d_bytes);
        head[2..].copy_from_slice(&m_bytes);
        let (qh, qs) = rest.split_at_mut(4);
        pack_quants(&quants, qh, qs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q5_0_fifth_bits_come_from_qh() {
        // d = 1; low nibbles all 0; qh sets the fifth bit of elements 1 and 17 only.
        let mut block = vec![0x00, 0x3c];
        block.extend(((1u32 << 1) | (1 << 17)).to_le_bytes());
        block.extend([0u8; 16]);
        let mut out = [0f32; 32];
        dequantize_q5_0(&block, &mut out);
        for (i, &v) in out.iter().enumerate() {
            assert_eq!(v, if i == 1 || i == 17 { 0.0 } else { -16.0 }, "element {i}");
        }
    }

    #[test]
    fn q5_1_combines_nibble_and_fifth_bit() {
        // d = 0.5, m = 1; element 0 gets nibble 0xf and fifth bit: q = 31.
        let mut block = vec![0x00, 0x38, 0x00, 0x3c];
        block.extend(1u32.to_le_bytes());
        block.push(0x0f);
        block.extend([0u8; 15]);
        let mut out = [0f32; 32];
        dequantize_q5_1(&block, &mut out);
        assert_eq!(out[0], 31.0 * 0.5 + 1.0);
        assert!(out[1..].iter().all(|&v| v == 1.0));
    }

    #[test]
    fn quantized_bits_land_in_the_right_places() {
        let x: [f32; QK] = std::array::from_fn(|i| i as f32 - 16.0);
        let mut block = [0u8; Q5_0_BYTES];
        quantize_q5_0(&x, &mut block);
        let mut out = [0f32; QK];
        dequantize_q5_0(&block, &mut out);
        assert_eq!(out, x);

        let mut block = [0u8; Q5_1_BYTES];
        quantize_q5_1(&x, &mut block);
        dequantize_q5_1(&block, &mut out);
        assert_eq!(out, x);
    }
}
