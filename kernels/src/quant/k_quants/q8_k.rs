//! Q8_K: super-blocks of 256 signed 8-bit quants with an f32 scale, plus the sums of each group
//! of 16 quants (`bsums`, used by ggml's integer dot products; decoding ignores them). ggml uses
//! Q8_K for activations; quantization is round-to-nearest with `d = max|x| / 127`, relative RMS
//! error on Gaussian data below 1%.

use crate::quant::le::round_clamped;
use crate::quant::{GgmlType, QK_K, RowKernels};

/// d: f32, qs: 256 × i8, bsums: 16 × i16.
const Q8_K_BYTES: usize = 4 + QK_K + 2 * (QK_K / 16);
const _: () = assert!(Q8_K_BYTES == GgmlType::Q8K.type_size() && QK_K == GgmlType::Q8K.block_size());
const QS_END: usize = 4 + QK_K;

pub(in crate::quant) const Q8K: RowKernels =
    RowKernels { dequantize: dequantize_q8_k, dot: dot_q8_k, quantize: Some(quantize_q8_k) };

fn dequantize_q8_k(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src.as_chunks::<Q8_K_BYTES>().0.iter().zip(dst.as_chunks_mut::<QK_K>().0) {
        let d = f32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        for (&q, out) in block[4..QS_END].iter().zip(out) {
            *out = d * f32::from(q as i8);
        }
    }
}

fn dot_q8_k(src: &[u8], x: &[f32]) -> f32 {
    let mut acc = 0.0;
    for (block, x) in src.as_chunks::<Q8_K_BYTES>().0.iter().zip(x.as_chunks::<QK_K>().0) {
        let d = f32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        let sum = block[4..QS_END].iter().zip(x).fold(0.0, |sum, (&q, &x)| sum + f32::from(q as i8) * x);
        acc += d * sum;
    }
    acc
}

fn quantize_q8_k(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.as_chunks::<QK_K>().0.iter().zip(dst.as_chunks_mut::<Q8_K_BYTES>().0) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
        let (d_out, rest) = block.split_at_mut(4);
        let (qs, bsums) = rest.split_at_mut(QK_K);
        d_out.copy_from_slice(&d.to_le_bytes());
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = round_clamped(v * inv, -127, 127) as i8 as u8;
        }
        for (sum_out, group) in bsums.as_chunks_mut::<2>().0.iter_mut().zip(qs.as_chunks::<16>().0) {
            let sum: i16 = group.iter().map(|&q| i16::from(q as i8)).sum();
            *sum_out = sum.to_le_bytes();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantize_fills_group_sums() {
        let x: Vec<f32> = (0..QK_K).map(|i| if i < 16 { -127.0 } else { (i % 3) as f32 }).collect();
        let mut block = [0u8; Q8_K_BYTES];
        quantize_q8_k(&x, &mut block);
        assert_eq!(f32::from_le_bytes([block[0], block[1], block[2], block[3]]), 1.0);
        let bsum = |g: usize| i16::from_le_bytes([block[QS_END + 2 * g], block[QS_END + 2 * g + 1]]);
        assert_eq!(bsum(0), -127 * 16);
        // Group 1 holds i = 16..32, whose i % 3 sum to 16.
        assert_eq!(bsum(1), 16);
        let mut out = vec![0f32; QK_K];
        dequantize_q8_k(&block, &mut out);
        assert_eq!(out, x);
    }
}
