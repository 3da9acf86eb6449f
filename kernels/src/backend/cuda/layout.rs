//! How weight rows lie in device memory.
//!
//! Q5_K (whose blocks are whole 16-byte multiples) and the element-wise types keep their GGUF
//! bytes. Q8_0 (34-byte blocks) and Q6_K (210) would leave every other block only 2-byte aligned,
//! which limits the matrix-vector kernels to 16-bit loads; their rows are stored split instead:
//! first every block's quant bytes in order (Q8_0: the 32 quants; Q6_K: ql, qh and the scales, 208
//! bytes), then every block's f16 scale `d`, the row padded to 16 bytes. Q4_K rows are interleaved
//! in tiles of 16 rows by one block: the 16 blocks' 16-byte heads, then their first 32 quant bytes,
//! their next 32, and so on, so that the tensor-core kernels' lanes, each of which reads 8 bytes of
//! a quant run for two rows 8 apart, load 256 consecutive bytes a warp (quant.cuh); the rows are
//! padded with zeros to a whole tile. The kernels' `Format` decoders (quant.cuh) read this layout.

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

/// Rows of a Q4_K tile, and the bytes of a block's head and of one quant run.
const Q4K_TILE_ROWS: usize = 16;
const Q4K_HEAD_BYTES: usize = 16;
const Q4K_RUN_BYTES: usize = 32;

/// The device bytes of GGUF rows of `gguf_row_bytes` each, or `None` when the format is stored
/// as it is.
pub fn device_bytes(ty: GgmlType, bytes: &[u8], gguf_row_bytes: usize) -> Option<Vec<u8>> {
    match ty {
        GgmlType::Q4K => Some(tile_q4_k(bytes, gguf_row_bytes)),
        _ => split_rows(ty, bytes, gguf_row_bytes),
    }
}

fn split_rows(ty: GgmlType, bytes: &[u8], gguf_row_bytes: usize) -> Option<Vec<u8>> {
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

/// Q4_K rows in tiles of 16 rows by one block, each tile the 16 heads, then quant run 0 of the
/// 16 rows, run 1, and so on; a tile row's tiles in column order, the last tile row padded with
/// zero rows.
fn tile_q4_k(bytes: &[u8], gguf_row_bytes: usize) -> Vec<u8> {
    let block_bytes = GgmlType::Q4K.type_size();
    let tile_bytes = Q4K_TILE_ROWS * block_bytes;
    let rows = bytes.len().checked_div(gguf_row_bytes).unwrap_or(0);
    let tile_row_bytes = Q4K_TILE_ROWS * gguf_row_bytes;
    let mut out = vec![0u8; rows.div_ceil(Q4K_TILE_ROWS) * tile_row_bytes];
    for (row, src) in bytes.chunks_exact(gguf_row_bytes).enumerate() {
        let tile_row = &mut out[row / Q4K_TILE_ROWS * tile_row_bytes..][..tile_row_bytes];
        let in_tile = row % Q4K_TILE_ROWS;
        for (block, tile) in src.chunks_exact(block_bytes).zip(tile_row.chunks_exact_mut(tile_bytes)) {
            let (head, quants) = block.split_at(Q4K_HEAD_BYTES);
            tile[Q4K_HEAD_BYTES * in_tile..][..Q4K_HEAD_BYTES].copy_from_slice(head);
            let runs = &mut tile[Q4K_TILE_ROWS * Q4K_HEAD_BYTES..];
            for (run, quant_run) in quants.chunks_exact(Q4K_RUN_BYTES).enumerate() {
                runs[Q4K_RUN_BYTES * (Q4K_TILE_ROWS * run + in_tile)..][..Q4K_RUN_BYTES]
                    .copy_from_slice(quant_run);
            }
        }
    }
    out
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
        let out = device_bytes(ty, &gguf, 3 * 34).unwrap();
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
        let out = device_bytes(ty, &gguf, 2 * 210).unwrap();
        assert_eq!(out.len(), 432);
        assert_eq!(out[..208], gguf[..208]);
        assert_eq!(out[208..416], gguf[210..418]);
        assert_eq!(out[416..418], gguf[208..210]);
        assert_eq!(out[418..420], gguf[418..420]);
    }

    #[test]
    fn q4_k_rows_interleave_in_tiles_of_sixteen() {
        let ty = GgmlType::Q4K;
        // 17 rows of two blocks: two tile rows, the second padded; byte i of block b of row r is
        // a function of all three.
        let value = |r: usize, b: usize, i: usize| ((r * 7 + b * 3 + i) % 251) as u8;
        let gguf: Vec<u8> =
            (0..17).flat_map(|r| (0..2).flat_map(move |b| (0..144).map(move |i| value(r, b, i)))).collect();
        let out = device_bytes(ty, &gguf, 288).unwrap();
        assert_eq!(out.len(), 32 * 288);
        assert_eq!(device_row_bytes(ty, 288), 288);
        for r in 0..17 {
            for b in 0..2 {
                let tile = &out[(r / 16 * 2 + b) * 2304..][..2304];
                let in_tile = r % 16;
                for i in 0..16 {
                    assert_eq!(tile[16 * in_tile + i], value(r, b, i), "head byte {i} of row {r} block {b}");
                }
                for q in 0..128 {
                    let at = 256 + 32 * (16 * (q / 32) + in_tile) + q % 32;
                    assert_eq!(tile[at], value(r, b, 16 + q), "quant byte {q} of row {r} block {b}");
                }
            }
        }
        // The second tile row holds row 16 and zero rows: its heads and runs past in-tile row 0.
        for tile in out[16 * 288..].chunks_exact(2304) {
            assert!(tile[16..256].iter().all(|&byte| byte == 0));
            assert!(
                tile[256..].chunks_exact(32).enumerate().all(|(slot, run)| slot % 16 == 0 || run == [0; 32])
            );
        }
    }

    #[test]
    fn other_formats_stay_as_they_are() {
        assert_eq!(device_bytes(GgmlType::Q5K, &[0; 176], 176), None);
        assert_eq!(device_row_bytes(GgmlType::Q5K, 176), 176);
        assert_eq!(device_row_bytes(GgmlType::Bf16, 6), 6);
    }
}
