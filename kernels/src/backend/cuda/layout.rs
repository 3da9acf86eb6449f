//! How weight rows lie in device memory.
//!
//! Q5_K (whose blocks are whole 16-byte multiples) and the element-wise types keep their GGUF
//! bytes. Q8_0 (34-byte blocks) would leave every other block only 2-byte aligned, which limits
//! the matrix-vector kernels to 16-bit loads; its rows are stored split instead: first every
//! block's 32 quants in order, then every block's f16 scale `d`, the row padded to 16 bytes.
//!
//! Q4_K and Q6_K rows are interleaved in tiles of 16 rows by one block, which hold each part of the
//! 16 blocks for all 16 rows in turn (Q6_K: the f16 scales `d`; then the 16-byte heads; then each
//! 32-byte run of quant bytes), a tile row's tiles in column order, the last tile row padded with
//! zero rows. The tensor-core kernels' lanes, each of which reads 8 bytes of a run for two rows 8
//! apart, then load 256 consecutive bytes a warp. The kernels' `Format` decoders and
//! `weight_row` (quant.cuh) read this layout.

use crate::quant::GgmlType;

/// Rows are padded to this many bytes, the widest load the kernels issue.
const ROW_ALIGN: usize = 16;
/// Bytes of Q8_0's f16 scale, which leads its GGUF block and moves to the row's tail.
const SCALE_BYTES: usize = 2;
/// Rows of a tile.
const TILE_ROWS: usize = 16;

/// A tiled format's parts of a GGUF block, as (offset, bytes), in the order of the tile.
fn tile_parts(ty: GgmlType) -> Option<&'static [(usize, usize)]> {
    match ty {
        // The head (d, dmin, the packed scales and mins), then the four runs of nibbles.
        GgmlType::Q4K => Some(&[(0, 16), (16, 32), (48, 32), (80, 32), (112, 32)]),
        // d, the 16 signed scales, then the runs of ql (four) and qh (two).
        GgmlType::Q6K => {
            Some(&[(208, 2), (192, 16), (0, 32), (32, 32), (64, 32), (96, 32), (128, 32), (160, 32)])
        }
        _ => None,
    }
}

/// Bytes per device row of a weight whose GGUF rows hold `gguf_row_bytes` (for the tiled formats,
/// a sixteenth of a tile row).
pub fn device_row_bytes(ty: GgmlType, gguf_row_bytes: usize) -> usize {
    match ty {
        GgmlType::Q8_0 => gguf_row_bytes.next_multiple_of(ROW_ALIGN),
        _ => gguf_row_bytes,
    }
}

/// The device bytes of GGUF rows of `gguf_row_bytes` each, or `None` when the format is stored
/// as it is.
pub fn device_bytes(ty: GgmlType, bytes: &[u8], gguf_row_bytes: usize) -> Option<Vec<u8>> {
    match (ty, tile_parts(ty)) {
        (GgmlType::Q8_0, _) => Some(split_q8_0(bytes, gguf_row_bytes)),
        (_, Some(parts)) => Some(tile_rows(ty.type_size(), parts, bytes, gguf_row_bytes)),
        _ => None,
    }
}

fn split_q8_0(bytes: &[u8], gguf_row_bytes: usize) -> Vec<u8> {
    let block_bytes = GgmlType::Q8_0.type_size();
    let row_bytes = device_row_bytes(GgmlType::Q8_0, gguf_row_bytes);
    let blocks_per_row = gguf_row_bytes / block_bytes;
    let rows = bytes.len().checked_div(gguf_row_bytes).unwrap_or(0);
    let mut out = vec![0u8; rows * row_bytes];
    for (src, dst) in bytes.chunks_exact(gguf_row_bytes).zip(out.chunks_exact_mut(row_bytes)) {
        let (bodies, scales) = dst.split_at_mut(blocks_per_row * (block_bytes - SCALE_BYTES));
        for ((block, body), scale) in src
            .chunks_exact(block_bytes)
            .zip(bodies.chunks_exact_mut(block_bytes - SCALE_BYTES))
            .zip(scales.chunks_exact_mut(SCALE_BYTES))
        {
            let (d, quants) = block.split_at(SCALE_BYTES);
            scale.copy_from_slice(d);
            body.copy_from_slice(quants);
        }
    }
    out
}

/// Rows of blocks of `block_bytes` in tiles of [`TILE_ROWS`] rows by one block, each part of
/// `parts` for the tile's rows in turn.
fn tile_rows(block_bytes: usize, parts: &[(usize, usize)], bytes: &[u8], gguf_row_bytes: usize) -> Vec<u8> {
    let tile_bytes = TILE_ROWS * block_bytes;
    let rows = bytes.len().checked_div(gguf_row_bytes).unwrap_or(0);
    let tile_row_bytes = TILE_ROWS * gguf_row_bytes;
    let mut out = vec![0u8; rows.div_ceil(TILE_ROWS) * tile_row_bytes];
    for (row, src) in bytes.chunks_exact(gguf_row_bytes).enumerate() {
        let tile_row = &mut out[row / TILE_ROWS * tile_row_bytes..][..tile_row_bytes];
        let in_tile = row % TILE_ROWS;
        for (block, tile) in src.chunks_exact(block_bytes).zip(tile_row.chunks_exact_mut(tile_bytes)) {
            let mut part_start = 0;
            for &(offset, len) in parts {
                tile[part_start + len * in_tile..][..len].copy_from_slice(&block[offset..offset + len]);
                part_start += TILE_ROWS * len;
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

    /// 17 rows of two blocks of `ty` (two tile rows, the second padded), byte i of block b of row
    /// r a function of all three: each tile holds the bytes of `parts` (GGUF offset, bytes, tile
    /// offset) of its rows at tile offset + bytes * in-tile row, and zeros for the padding rows.
    fn check_tiles(ty: GgmlType, parts: &[(usize, usize, usize)]) {
        let block_bytes = ty.type_size();
        let (row_bytes, tile_bytes) = (2 * block_bytes, 16 * block_bytes);
        let value = |r: usize, b: usize, i: usize| ((r * 7 + b * 3 + i) % 251) as u8;
        let gguf: Vec<u8> = (0..17)
            .flat_map(|r| (0..2).flat_map(move |b| (0..block_bytes).map(move |i| value(r, b, i))))
            .collect();
        let out = device_bytes(ty, &gguf, row_bytes).unwrap();
        assert_eq!(out.len(), 32 * row_bytes);
        assert_eq!(device_row_bytes(ty, row_bytes), row_bytes);
        for r in 0..17 {
            for b in 0..2 {
                let tile = &out[(r / 16 * 2 + b) * tile_bytes..][..tile_bytes];
                for &(offset, len, at) in parts {
                    for i in 0..len {
                        let got = tile[at + len * (r % 16) + i];
                        assert_eq!(
                            got,
                            value(r, b, offset + i),
                            "{ty:?} byte {} of row {r} block {b}",
                            offset + i
                        );
                    }
                }
            }
        }
        for tile in out[16 * row_bytes..].chunks_exact(tile_bytes) {
            for &(_, len, at) in parts {
                assert!(tile[at + len..at + 16 * len].iter().all(|&byte| byte == 0), "{ty:?} padding");
            }
        }
    }

    #[test]
    fn q4_k_and_q6_k_rows_interleave_in_tiles_of_sixteen() {
        // Q4_K: heads, then quant runs of 32 bytes.
        let runs = |first: usize, count: usize, at: usize| {
            (0..count).map(move |p| (first + 32 * p, 32, at + 512 * p))
        };
        let q4_k: Vec<_> = [(0, 16, 0)].into_iter().chain(runs(16, 4, 256)).collect();
        check_tiles(GgmlType::Q4K, &q4_k);
        // Q6_K: d, the scales, then ql's and qh's runs.
        let q6_k: Vec<_> = [(208, 2, 0), (192, 16, 32)].into_iter().chain(runs(0, 6, 288)).collect();
        check_tiles(GgmlType::Q6K, &q6_k);
    }

    #[test]
    fn other_formats_stay_as_they_are() {
        assert_eq!(device_bytes(GgmlType::Q5K, &[0; 176], 176), None);
        assert_eq!(device_row_bytes(GgmlType::Q5K, 176), 176);
        assert_eq!(device_row_bytes(GgmlType::Bf16, 6), 6);
    }
}
