//! How weight rows lie in device memory.
//!
//! Formats whose blocks are whole 16-byte multiples (Q4_K, Q5_K) and the element-wise types keep
//! their GGUF bytes. Q8_0 (34-byte blocks) and Q6_K (210) would leave every other block only
//! 2-byte aligned, which limits the matrix-vector kernels to 16-bit loads; their rows are stored
//! split instead: first every block's quant bytes in order (Q8_0: the 32 quants; Q6_K: ql, qh and
//! the scales, 208 bytes), then every block's f16 scale `d`, the row padded to 16 bytes. The
//! kernels' `Format` decoders (quant.cuh) read this layout.

use crate::quant::GgmlType;

/// Rows are padded to this many bytes, the widest load the kernels issue.
const ROW_ALIGN: usize = 16;
/// Bytes of the f16 scale moved to the row's tail.
const SCALE_BYTES: usize = 2;

/// Where a split format keeps `d` inside its GGUF block.
fn scale_offset(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::Q8_0 => Some(0),
        GgmlType::Q6K => Some(ty.type_size() - SCALE_BYTES),
        _ => None,
    }
}

/// Bytes per device row of a weight whose GGUF rows hold `gguf_row_bytes`.
pub fn device_row_bytes(ty: GgmlType, gguf_row_bytes: usize) -> usize {
    match scale_offset(ty) {
        Some(_) => gguf_row_bytes.next_multiple_of(ROW_ALIGN),
        None => gguf_row_bytes,
    }
}

/// The device bytes of `rows` GGUF rows, or `None` when the format is stored as it is.
pub fn split_rows(ty: GgmlType, bytes: &[u8], gguf_row_bytes: usize) -> Option<Vec<u8>> {
    let scale_at = scale_offset(ty)?;
    let block_bytes = ty.type_size();
    let body_bytes = block_bytes - SCALE_BYTES;
    let row_bytes = device_row_bytes(ty, gguf_row_bytes);
    let blocks_per_row = gguf_row_bytes / block_bytes;
    let rows = bytes.len().checked_div(gguf_row_bytes).unwrap_or(0);
    let mut out = vec![0u8; rows * row_bytes];
    for (src, dst) in bytes.chunks_exact(gguf_row_bytes).zip(out.chunks_exact_mut(row_bytes)) {
        let (bodies, scales) = dst.split_at_mut(blocks_per_row * body_bytes);
        for ((block, body), scale) in src
            .chunks_exact(block_bytes)
            .zip(bodies.chunks_exact_mut(body_bytes))
            .zip(scales.chunks_exact_mut(SCALE_BYTES))
        {
            scale.copy_from_slice(&block[scale_at..scale_at + SCALE_BYTES]);
            body[..scale_at].copy_from_slice(&block[..scale_at]);
            body[scale_at..].copy_from_slice(&block[scale_at + SCALE_BYTES..]);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_rows_split_into_quants_then_scales() {
        let ty = GgmlType::Q8_0;
        // Two rows of three blocks; block i of row r has d = [10r+i, 0xd0] and quants all 10r+i.
        let block = |value: u8| [[value, 0xd0].as_slice(), &[value; 32]].concat();
        let gguf: Vec<u8> = (0..2u8).flat_map(|r| (0..3u8).flat_map(move |i| block(10 * r + i))).collect();
        let out = split_rows(ty, &gguf, 3 * 34).unwrap();
        let row_bytes = device_row_bytes(ty, 3 * 34);
        assert_eq!(row_bytes, 112);
        assert_eq!(out.len(), 2 * row_bytes);
        for r in 0..2u8 {
            let row = &out[r as usize * row_bytes..][..row_bytes];
            for i in 0..3u8 {
                assert!(row[32 * i as usize..][..32].iter().all(|&q| q == 10 * r + i));
                assert_eq!(row[96 + 2 * i as usize..][..2], [10 * r + i, 0xd0]);
            }
            assert_eq!(row[102..], [0; 10]);
        }
    }

    #[test]
    fn q6_k_moves_the_trailing_scale() {
        let ty = GgmlType::Q6K;
        let gguf: Vec<u8> = (0..2 * 210).map(|i| (i % 251) as u8).collect();
        let out = split_rows(ty, &gguf, 2 * 210).unwrap();
        assert_eq!(out.len(), 432);
        assert_eq!(out[..208], gguf[..208]);
        assert_eq!(out[208..416], gguf[210..418]);
        assert_eq!(out[416..418], gguf[208..210]);
        assert_eq!(out[418..420], gguf[418..420]);
    }

    #[test]
    fn other_formats_stay_as_they_are() {
        assert_eq!(split_rows(GgmlType::Q4K, &[0; 144], 144), None);
        assert_eq!(device_row_bytes(GgmlType::Q4K, 144), 144);
        assert_eq!(device_row_bytes(GgmlType::Bf16, 6), 6);
    }
}
