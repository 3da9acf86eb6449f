//! Q8_0: `d * q` with signed 8-bit quants. Quantization is round-to-nearest with
//! `d = max|x| / 127`; relative RMS error on Gaussian data is below 1%.

use super::{QK, inverse_or_zero};
use crate::quant::le::{f16_to_f32, f32_to_f16, round_clamped};
use crate::quant::{GgmlType, RowKernels};

/// d: f16, qs: 32 × i8.
const Q8_0_BYTES: usize = 2 + QK;
const _: () = assert!(Q8_0_BYTES == GgmlType::Q8_0.type_size() && QK == GgmlType::Q8_0.block_size());

pub(in crate::quant) const Q8_0: RowKernels =
    RowKernels { dequantize: dequantize_q8_0, dot: dot_q8_0, quantize: Some(quantize_q8_0) };

fn dequantize_q8_0(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src.as_chunks::<Q8_0_BYTES>().0.iter().zip(dst.as_chunks_mut::<QK>().0) {
        let d = f16_to_f32([block[0], block[1]]);
        for (&q, out) in block[2..].iter().zip(out) {
            *out = f32::from(q as i8) * d;
        }
    }
}

fn dot_q8_0(src: &[u8], x: &[f32]) -> f32 {
    let mut acc = 0.0;
    for (block, x) in src.as_chunks::<Q8_0_BYTES>().0.iter().zip(x.as_chunks::<QK>().0) {
        let d = f16_to_f32([block[0], block[1]]);
        let sum = block[2..].iter().zip(x).fold(0.0, |sum, (&q, &x)| sum + f32::from(q as i8) * x);
        acc += d * sum;
    }
    acc
}

fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    for (x, block) in src.as_chunks::<QK>().0.iter().zip(dst.as_chunks_mut::<Q8_0_BYTES>().0) {
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let (d_bytes, d) = f32_to_f16(amax / 127.0);
        let inv = inverse_or_zero(d);
        let (head, qs) = block.split_at_mut(2);
        head.copy_from_slice(&d_bytes);
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = round_clamped(v * inv, -127, 127) as i8 as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quants_are_signed_bytes() {
        // d = 0.25 (f16 0x3400); quants 0, 1, -1, 127, -128, then zeros.
        let mut block = vec![0x00, 0x34, 0, 1, 0xff, 0x7f, 0x80];
        block.extend([0u8; 27]);
        let mut out = [1f32; 32];
        dequantize_q8_0(&block, &mut out);
        assert_eq!(out[..5], [0.0, 0.25, -0.25, 31.75, -32.0]);
        assert!(out[5..].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn integers_up_to_127_quantize_exactly() {
        let mut x: [f32; QK] = std::array::from_fn(|i| (i as f32 - 16.0) * 3.0);
        x[0] = -127.0;
        let mut block = [0u8; Q8_0_BYTES];
        quantize_q8_0(&x, &mut block);
        let mut out = [0f32; QK];
        dequantize_q8_0(&block, &mut out);
        assert_eq!(out, x);
    }
}
