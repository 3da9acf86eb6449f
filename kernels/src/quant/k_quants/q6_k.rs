//! Q6_K: super-blocks of 256 in sixteen sub-blocks of 16, each decoding as `d * scale * (q - 32)`
//! with 6-bit `q` and signed 8-bit `scale`. Each half of 128 elements keeps its low nibbles in 64
//! bytes of `ql` (element `p` in byte `p % 64`, high nibble when `p >= 64`) and its top two bits in
//! 32 bytes of `qh` (element `p` in byte `p % 32` at bit `2 * (p / 32)`).
//!
//! Quantization fits each sub-block's scale ([`super::fit::fit_symmetric`]) and quantizes the
//! scales to 8 bits against their largest magnitude; relative RMS error on Gaussian data stays
//! below 2.5%.

use super::fit::fit_symmetric;
use super::{SignedBlock, dequantize_signed, dot_signed};
use crate::quant::le::{f16_to_f32, f32_to_f16_at_least, round_clamped};
use crate::quant::{GgmlType, QK_K, RowKernels, ScaleFit};

/// ql: 128 bytes, qh: 64 bytes, scales: 16 × i8, d: f16.
const Q6_K_BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;
const _: () = assert!(Q6_K_BYTES == GgmlType::Q6K.type_size() && QK_K == GgmlType::Q6K.block_size());
const QH_OFFSET: usize = QK_K / 2;
const SCALES_OFFSET: usize = QH_OFFSET + QK_K / 4;
const D_OFFSET: usize = SCALES_OFFSET + QK_K / 16;
const SUB_BLOCKS: usize = super::SIGNED_SUB_BLOCKS;

pub(in crate::quant) const Q6K: RowKernels =
    RowKernels { dequantize: dequantize_q6_k, dot: dot_q6_k, quantize: Some(quantize_q6_k) };

/// The signed quants `q - 32` of a block, in element order.
#[inline]
fn unpack_quants(block: &[u8; Q6_K_BYTES]) -> [i8; QK_K] {
    let mut quants = [0i8; QK_K];
    let ql = block[..QH_OFFSET].as_chunks::<64>().0;
    let qh = block[QH_OFFSET..SCALES_OFFSET].as_chunks::<32>().0;
    for ((ql, qh), out) in ql.iter().zip(qh).zip(quants.as_chunks_mut::<128>().0) {
        // Position l carries elements l, l + 32, l + 64 and l + 96 of the half.
        for l in 0..32 {
            let top = qh[l];
            out[l] = ((ql[l] & 0x0f) | ((top & 0x03) << 4)) as i8 - 32;
            out[l + 32] = ((ql[l + 32] & 0x0f) | (((top >> 2) & 0x03) << 4)) as i8 - 32;
            out[l + 64] = ((ql[l] >> 4) | (((top >> 4) & 0x03) << 4)) as i8 - 32;
            out[l + 96] = ((ql[l + 32] >> 4) | ((top >> 6) << 4)) as i8 - 32;
        }
    }
    quants
}

/// The per-sub-block multipliers `d * scale` of a block.
#[inline]
fn sub_block_scales(block: &[u8; Q6_K_BYTES]) -> [f32; SUB_BLOCKS] {
    let d = f16_to_f32([block[D_OFFSET], block[D_OFFSET + 1]]);
    std::array::from_fn(|j| d * f32::from(block[SCALES_OFFSET + j] as i8))
}

fn decode(block: &[u8; Q6_K_BYTES]) -> SignedBlock {
    (unpack_quants(block), sub_block_scales(block))
}

fn dequantize_q6_k(src: &[u8], dst: &mut [f32]) {
    dequantize_signed(src, dst, decode)
}

fn dot_q6_k(src: &[u8], x: &[f32]) -> f32 {
    dot_signed(src, x, decode)
}

fn quantize_q6_k(src: &[f32], dst: &mut [u8]) {
    quantize_q6_k_with(src, dst, ScaleFit::Search)
}

pub(super) fn quantize_q6_k_nominal(src: &[f32], dst: &mut [u8]) {
    quantize_q6_k_with(src, dst, ScaleFit::Nominal)
}

fn quantize_q6_k_with(src: &[f32], dst: &mut [u8], fit: ScaleFit) {
    for (x, block) in src.as_chunks::<QK_K>().0.iter().zip(dst.as_chunks_mut::<Q6_K_BYTES>().0) {
        let sub_blocks = x.as_chunks::<16>().0;
        let fitted: [f32; SUB_BLOCKS] = std::array::from_fn(|j| fit_symmetric(&sub_blocks[j], -32, 31, fit));
        let max_abs = fitted.iter().fold(0.0f32, |m, s| m.max(s.abs()));
        let (d_bytes, d) = f32_to_f16_at_least(max_abs / 127.0);
        let scales = fitted.map(|s| if d > 0.0 { round_clamped(s / d, -128, 127) as i8 } else { 0 });

        let mut quants = [0u8; QK_K];
        for ((sub, out), &scale) in sub_blocks.iter().zip(quants.as_chunks_mut::<16>().0).zip(&scales) {
            let step = d * f32::from(scale);
            for (q, &v) in out.iter_mut().zip(sub) {
                let signed = if step != 0.0 { round_clamped(v / step, -32, 31) } else { 0 };
                *q = (signed + 32) as u8;
            }
        }

        let (ql, rest) = block.split_at_mut(QH_OFFSET);
        let (qh, rest) = rest.split_at_mut(QK_K / 4);
        let (scale_bytes, d_out) = rest.split_at_mut(SUB_BLOCKS);
        d_out.copy_from_slice(&d_bytes);
        for (byte, &scale) in scale_bytes.iter_mut().zip(&scales) {
            *byte = scale as u8;
        }
        qh.fill(0);
        let halves = ql.as_chunks_mut::<64>().0.iter_mut().zip(qh.as_chunks_mut::<32>().0);
        for ((ql, qh), quants) in halves.zip(quants.as_chunks::<128>().0) {
            let (low_half, high_half) = quants.split_at(64);
            for ((byte, &lo), &hi) in ql.iter_mut().zip(low_half).zip(high_half) {
                *byte = (lo & 0x0f) | ((hi & 0x0f) << 4);
            }
            for (p, &q) in quants.iter().enumerate() {
                qh[p % 32] |= (q >> 4) << (2 * (p / 32));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quants_combine_ql_nibbles_and_qh_pairs() {
        // d = 1; scale j = j - 8; in the first half, element 70 has low nibble 0x3 (high nibble of
        // ql[6]) and top bits 0b10 (qh[6] bits 4..6): q = 0b10_0011 = 35, so 3 after the offset.
        // Every other quant is 0 (decoding to -32).
        let mut block = [0u8; Q6_K_BYTES];
        block[6] = 0x30;
        block[QH_OFFSET + 6] = 0b10 << 4;
        for j in 0..SUB_BLOCKS {
            block[SCALES_OFFSET + j] = (j as i8 - 8) as u8;
        }
        block[D_OFFSET..].copy_from_slice(&[0x00, 0x3c]);
        let mut out = [0f32; QK_K];
        dequantize_q6_k(&block, &mut out);
        for (i, &v) in out.iter().enumerate() {
            let scale = (i / 16) as f32 - 8.0;
            let q = if i == 70 { 3.0 } else { -32.0 };
            assert_eq!(v, scale * q, "element {i}");
        }
    }
}
