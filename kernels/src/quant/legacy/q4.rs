//! Q4_0 (`d * (q - 8)`) and Q4_1 (`d * q + m`): 4-bit quants, two per byte. Byte `j` of a block's
//! quants holds element `j` in its low nibble and element `j + 16` in its high nibble.
//!
//! Quantization is round-to-nearest against the block's extremes: Q4_0 relative RMS error on
//! Gaussian data is below 11%, Q4_1 below 10%.

use super::{QK, inverse_or_zero, min_max, signed_abs_max};
use crate::quant::le::{f16_to_f32, f32_to_f16, round_clamped};
use crate::quant::{GgmlType, RowKernels};

/// d: f16, qs: 16 bytes.
const Q4_0_BYTES: usize = 2 + QK / 2;
/// d: f16, m: f16, qs: 16 bytes.
const Q4_1_BYTES: usize = 2 + 2 + QK / 2;
const _: () = assert!(Q4_0_BYTES == GgmlType::Q4_0.type_size() && QK == GgmlType::Q4_0.block_size());
const _: () = assert!(Q4_1_BYTES == GgmlType::Q4_1.type_size() && QK == GgmlType::Q4_1.block_size());

pub(in crate::quant) const Q4_0: RowKernels =
    RowKernels { dequantize: dequantize_q4_0, dot: dot_q4_0, quantize: Some(quantize_q4_0) };
pub(in crate::quant) const Q4_1: RowKernels =
    RowKernels { dequantize: dequantize_q4_1, dot: dot_q4_1, quantize: Some(quantize_q4_1) };

fn dequantize_q4_0(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src.as_chunks::<Q4_0_BYTES>().0.iter().zip(dst.as_chunks_mut::<QK>().0) {
        let d = f16_to_f32([block[0], block[1]]);
        let (lo, hi) = out.split_at_mut(QK / 2);
        for ((&byte, lo), hi) in block[2..].iter().zip(lo).zip(hi) {
            *lo = (i32::from(byte & 0x0f) - 8) as f32 * d;
            *hi = (i32::from(byte >> 4) - 8) as f32 * d;
        }
    }
}

fn dot_q4_0(src: &[u8], x: &[f32]) -> f32 {
    let mut acc = 0.0;
    for (block, x) in src.as_chunks::<Q4_0_BYTES>().0.iter().zip(x.as_chunks::<QK>().0) {
        let d = f16_to_f32([block[0], block[1]]);
        let (x_lo, x_hi) = x.split_at(QK / 2);
        let mut sum = 0.0;
        for ((&byte, &a), &b) in block[2..].iter().zip(x_lo).zip(x_hi) {
            sum += (i32::from(byte & 0x0f) - 8) as f32 * a + (i32::from(byte >> 4) - 8) as f32 * b;
        }
        acc += d * sum;
    }
    acc
}

fn quantize_q4_0(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.as_chunks::<QK>().0.iter().zip(dst.as_chunks_mut::<Q4_0_BYTES>().0) {
        let (d_bytes, d) = f32_to_f16(signed_abs_max(x) / -8.0);
        let inv = inverse_or_zero(d);
        let (head, qs) = block.split_at_mut(2);
        head.copy_from_slice(&d_bytes);
        let (x_lo, x_hi) = x.split_at(QK / 2);
        for ((byte, &a), &b) in qs.iter_mut().zip(x_lo).zip(x_hi) {
            let lo = round_clamped(a * inv, -8, 7) + 8;
            let hi = round_clamped(b * inv, -8, 7) + 8;
            *byte = (lo | (hi << 4)) as u8;
        }
    }
}

fn dequantize_q4_1(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src.as_chunks::<Q4_1_BYTES>().0.iter().zip(dst.as_chunks_mut::<QK>().0) {
        let d = f16_to_f32([block[0], block[1]]);
        let m = f16_to_f32([block[2], block[3]]);
        let (lo, hi) = out.split_at_mut(QK / 2);
        for ((&byte, lo), hi) in block[4..].iter().zip(lo).zip(hi) {
            *lo = f32::from(byte & 0x0f) * d + m;
            *hi = f32::from(byte >> 4) * d + m;
        }
    }
}

fn dot_q4_1(src: &[u8], x: &[f32]) -> f32 {
    let mut acc = 0.0;
    for (block, x) in src.as_chunks::<Q4_1_BYTES>().0.iter().zip(x.as_chunks::<QK>().0) {
        let d = f16_to_f32([block[0], block[1]]);
        let m = f16_to_f32([block[2], block[3]]);
        let (x_lo, x_hi) = x.split_at(QK / 2);
        let (mut sum_qx, mut sum_x) = (0.0, 0.0);
        for ((&byte, &a), &b) in block[4..].iter().zip(x_lo).zip(x_hi) {
            sum_qx += f32::from(byte & 0x0f) * a + f32::from(byte >> 4) * b;
            sum_x += a + b;
        }
        acc += d * sum_qx + m * sum_x;
    }
    acc
}

fn quantize_q4_1(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.as_chunks::<QK>().0.iter().zip(dst.as_chunks_mut::<Q4_1_BYTES>().0) {
        let (lo, hi) = min_max(x);
        let (d_bytes, d) = f32_to_f16((hi - lo) / 15.0);
        let (m_bytes, m) = f32_to_f16(lo);
        let inv = inverse_or_zero(d);
        let (head, qs) = block.split_at_mut(4);
        head[..2].copy_from_slice(&d_bytes);
        head[2..].copy_from_slice(&m_bytes);
        let (x_lo, x_hi) = x.split_at(QK / 2);
        for ((byte, &a), &b) in qs.iter_mut().zip(x_lo).zip(x_hi) {
            let lo = round_clamped((a - m) * inv, 0, 15);
            let hi = round_clamped((b - m) * inv, 0, 15);
            *byte = (lo | (hi << 4)) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4_0_nibbles_split_the_block_in_halves() {
        // d = 0.5 (f16 0x3800); byte j = (low: j, high: 15 - j).
        let mut block = vec![0x00, 0x38];
        block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let mut out = [0f32; 32];
        dequantize_q4_0(&block, &mut out);
        for j in 0..16 {
            assert_eq!(out[j], (j as f32 - 8.0) * 0.5);
            assert_eq!(out[j + 16], (7.0 - j as f32) * 0.5);
        }
    }

    #[test]
    fn q4_1_adds_the_offset() {
        // d = 2 (0x4000), m = -1 (0xbc00), every quant 3.
        let mut block = vec![0x00, 0x40, 0x00, 0xbc];
        block.extend([0x33; 16]);
        let mut out = [0f32; 32];
        dequantize_q4_1(&block, &mut out);
        assert_eq!(out, [5.0; 32]);
    }

    #[test]
    fn extremes_survive_quantization() {
        let mut x = [0.2f32; 32];
        x[3] = -4.0;
        x[20] = 3.5;
        let mut block = [0u8; Q4_0_BYTES];
        quantize_q4_0(&x, &mut block);
        let mut out = [0f32; 32];
        dequantize_q4_0(&block, &mut out);
        assert_eq!((out[3], out[20], out[0]), (-4.0, 3.5, 0.0));

        let mut block = [0u8; Q4_1_BYTES];
        quantize_q4_1(&x, &mut block);
        dequantize_q4_1(&block, &mut out);
        assert_eq!((out[3], out[20], out[0]), (-4.0, 3.5, 0.0));
    }
}
