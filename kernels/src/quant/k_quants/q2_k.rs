//! Q2_K (decode only): super-blocks of 256 in sixteen sub-blocks of 16, each decoding as
//! `d * scale * q - dmin * min` with 2-bit `q` and 4-bit `scale` (low nibble of the sub-block's
//! byte) and `min` (high nibble). Each half of 128 elements packs its quants into 32 bytes:
//! element `p` sits in byte `p % 32` at bit `2 * (p / 32)`.

use crate::quant::le::f16_to_f32;
use crate::quant::{GgmlType, QK_K, RowKernels};

/// scales: 16 bytes, qs: 64 bytes, d: f16, dmin: f16.
const Q2_K_BYTES: usize = QK_K / 16 + QK_K / 4 + 2 + 2;
const _: () = assert!(Q2_K_BYTES == GgmlType::Q2K.type_size() && QK_K == GgmlType::Q2K.block_size());
const QS_OFFSET: usize = QK_K / 16;
const D_OFFSET: usize = QS_OFFSET + QK_K / 4;
const SUB_BLOCKS: usize = QK_K / 16;

pub(in crate::quant) const Q2K: RowKernels =
    RowKernels { dequantize: dequantize_q2_k, dot: dot_q2_k, quantize: None };

/// The quants of a block, in element order.
#[inline]
fn unpack_quants(block: &[u8; Q2_K_BYTES]) -> [u8; QK_K] {
    let mut quants = [0u8; QK_K];
    let qs = block[QS_OFFSET..D_OFFSET].as_chunks::<32>().0;
    for (bytes, out) in qs.iter().zip(quants.as_chunks_mut::<128>().0) {
        // Byte l carries elements l, l + 32, l + 64 and l + 96 of the half.
        for (l, &byte) in bytes.iter().enumerate() {
            out[l] = byte & 0x03;
            out[l + 32] = (byte >> 2) & 0x03;
            out[l + 64] = (byte >> 4) & 0x03;
            out[l + 96] = byte >> 6;
        }
    }
    quants
}

/// The per-sub-block multipliers `d * scale` and offsets `dmin * min` of a block.
#[inline]
fn sub_block_params(block: &[u8; Q2_K_BYTES]) -> ([f32; SUB_BLOCKS], [f32; SUB_BLOCKS]) {
    let d = f16_to_f32([block[D_OFFSET], block[D_OFFSET + 1]]);
    let dmin = f16_to_f32([block[D_OFFSET + 2], block[D_OFFSET + 3]]);
    let scales = std::array::from_fn(|j| d * f32::from(block[j] & 0x0f));
    let mins = std::array::from_fn(|j| dmin * f32::from(block[j] >> 4));
    (scales, mins)
}

fn dequantize_q2_k(src: &[u8], dst: &mut [f32]) {
    for (block, out) in src.as_chunks::<Q2_K_BYTES>().0.iter().zip(dst.as_chunks_mut::<QK_K>().0) {
        let quants = unpack_quants(block);
        let (scales, mins) = sub_block_params(block);
        let groups = quants.as_chunks::<16>().0.iter().zip(out.as_chunks_mut::<16>().0);
        for (j, (quants, out)) in groups.enumerate() {
            for (&q, out) in quants.iter().zip(out) {
                *out = scales[j] * f32::from(q) - mins[j];
            }
        }
    }
}

fn dot_q2_k(src: &[u8], x: &[f32]) -> f32 {
    let mut acc = 0.0;
    for (block, x) in src.as_chunks::<Q2_K_BYTES>().0.iter().zip(x.as_chunks::<QK_K>().0) {
        let quants = unpack_quants(block);
        let (scales, mins) = sub_block_params(block);
        let groups = quants.as_chunks::<16>().0.iter().zip(x.as_chunks::<16>().0);
        for (j, (quants, x)) in groups.enumerate() {
            let (mut sum_qx, mut sum_x) = (0.0, 0.0);
            for (&q, &x) in quants.iter().zip(x) {
                sum_qx += f32::from(q) * x;
                sum_x += x;
            }
            acc += scales[j] * sum_qx - mins[j] * sum_x;
        }
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quants_are_bit_pairs_across_four_groups_of_32() {
        // d = 1, dmin = 1; sub-block j has scale 1 and min j % 4; byte 0 of the first half holds
        // quants 1, 2, 3, 0 for elements 0, 32, 64, 96.
        let mut block = [0u8; Q2_K_BYTES];
        for (j, scale_min) in block[..SUB_BLOCKS].iter_mut().enumerate() {
            *scale_min = 1 | (((j % 4) as u8) << 4);
        }
        block[QS_OFFSET] = 0b00_11_10_01;
        block[D_OFFSET..].copy_from_slice(&[0x00, 0x3c, 0x00, 0x3c]);
        let mut out = [0f32; QK_K];
        dequantize_q2_k(&block, &mut out);
        for (i, &v) in out.iter().enumerate() {
            let q = match i {
                0 => 1.0,
                32 => 2.0,
                64 => 3.0,
                _ => 0.0,
            };
            assert_eq!(v, q - ((i / 16) % 4) as f32, "element {i}");
        }
    }
}
