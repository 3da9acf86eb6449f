//! Q3_K (decode only): super-blocks of 256 in sixteen sub-blocks of 16, each decoding as
//! `d * (scale - 32) * q` with 6-bit `scale` and 3-bit signed `q` in `-4..=3`. The low two bits
//! of `q` are packed as in Q2_K; bit `p / 32` of `hmask[p % 32]` is the high bit of element `p`,
//! and a *clear* bit subtracts 4. Scale `i` keeps its low nibble in byte `i % 8` (high nibble for
//! `i >= 8`) and its top two bits in byte `8 + i % 4` at bit `2 * (i / 4)`.

use super::{SignedBlock, dequantize_signed, dot_signed};
use crate::quant::le::f16_to_f32;
use crate::quant::{GgmlType, QK_K, RowKernels};

/// hmask: 32 bytes, qs: 64 bytes, scales: 12 bytes, d: f16.
const Q3_K_BYTES: usize = QK_K / 8 + QK_K / 4 + 12 + 2;
const _: () = assert!(Q3_K_BYTES == GgmlType::Q3K.type_size() && QK_K == GgmlType::Q3K.block_size());
const QS_OFFSET: usize = QK_K / 8;
const SCALES_OFFSET: usize = QS_OFFSET + QK_K / 4;
const D_OFFSET: usize = SCALES_OFFSET + 12;
const SUB_BLOCKS: usize = super::SIGNED_SUB_BLOCKS;

pub(in crate::quant) const Q3K: RowKernels =
    RowKernels { dequantize: dequantize_q3_k, dot: dot_q3_k, quantize: None };

/// The signed quants of a block, in element order.
#[inline]
fn unpack_quants(block: &[u8; Q3_K_BYTES]) -> [i8; QK_K] {
    let mut quants = [0i8; QK_K];
    let hmask = &block[..QS_OFFSET];
    let qs = block[QS_OFFSET..SCALES_OFFSET].as_chunks::<32>().0;
    for (half, (bytes, out)) in qs.iter().zip(quants.as_chunks_mut::<128>().0).enumerate() {
        // Position l carries elements l, l + 32, l + 64 and l + 96 of the half.
        for (l, (&byte, &mask)) in bytes.iter().zip(hmask).enumerate() {
            let high_bits = mask >> (4 * half);
            for group in 0..4 {
                let low = ((byte >> (2 * group)) & 0x03) as i8;
                let subtract = if (high_bits >> group) & 1 == 1 { 0 } else { 4 };
                out[l + 32 * group] = low - subtract;
            }
        }
    }
    quants
}

/// The per-sub-block multipliers `d * (scale - 32)` of a block.
#[inline]
fn sub_block_scales(block: &[u8; Q3_K_BYTES]) -> [f32; SUB_BLOCKS] {
    let d = f16_to_f32([block[D_OFFSET], block[D_OFFSET + 1]]);
    let packed = &block[SCALES_OFFSET..D_OFFSET];
    std::array::from_fn(|i| {
        let low = if i < 8 { packed[i] & 0x0f } else { packed[i - 8] >> 4 };
        let high = (packed[8 + i % 4] >> (2 * (i / 4))) & 0x03;
        d * f32::from(((low | (high << 4)) as i8) - 32)
    })
}

fn decode(block: &[u8; Q3_K_BYTES]) -> SignedBlock {
    (unpack_quants(block), sub_block_scales(block))
}

fn dequantize_q3_k(src: &[u8], dst: &mut [f32]) {
    dequantize_signed(src, dst, decode)
}

fn dot_q3_k(src: &[u8], x: &[f32]) -> f32 {
    dot_signed(src, x, decode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clear_high_bits_subtract_four() {
        // d = 1; every scale 33 (so a multiplier of 1): low nibble 1 in bytes 0..8, top bits 0b10
        // in bytes 8..12. All low bits 0; hmask sets only element 40's high bit (byte 8, bit 1).
        let mut block = [0u8; Q3_K_BYTES];
        block[8] = 0b10;
        block[SCALES_OFFSET..SCALES_OFFSET + 8].fill(0x11);
        block[SCALES_OFFSET + 8..D_OFFSET].fill(0b1010_1010);
        block[D_OFFSET..].copy_from_slice(&[0x00, 0x3c]);
        let mut out = [0f32; QK_K];
        dequantize_q3_k(&block, &mut out);
        for (i, &v) in out.iter().enumerate() {
            assert_eq!(v, if i == 40 { 0.0 } else { -4.0 }, "element {i}");
        }
    }
}
