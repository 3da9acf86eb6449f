//! The tensor-core matmuls of mmq.cu and mmq_f16.cu, for verify-sized batches of block-quantized
//! weights: on the int8 copy of the activations, or, for Q4_K and Q6_K batches of up to 32 rows,
//! on an f16 copy (weights decoded to f16 in registers, f32 accumulation over all of K, far fewer
//! instructions per weight; `CANOPY_CUDA_MMQ_F16=0` keeps them on the int8 kernels). Q4_K
//! projections followed by Q6_K ones (a Q4_K_M layer's q, k and v) share one f16 launch.
//!
//! A block computes [`TILE_ROWS`] weight rows by every input row (up to [`MAX_ROWS`]; the kernel
//! for the smallest input-row tile that holds the batch), so each weight byte is read once. A
//! weight of few rows makes few such blocks, so K is also split over `grid.y`, into splits that
//! fill the waves of the kernel's resident blocks (see [`k_splits`]); the splits' partial tiles
//! go to a scratch buffer and the last split of each tile to finish adds them up (see mmq.cu).
//!
//! Batches from 3 rows (`$CANOPY_CUDA_MMQ_MIN_ROWS`, see [`Mmq::new`]) to 64 of Q8_0, Q4_K,
//! Q5_K and Q6_K weights take it on sm_80 and later devices; rows must be whole groups of
//! [`GROUP_COLS`] columns (always so for the K-quants).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use cudarc::driver::{CudaSlice, LaunchConfig};

use super::context::{Device, driver, enabled_from_env, rows_from_env, to_u32};
use super::matmul::Projections;
use super::memory::{Counters, ScratchBuffer};
use crate::backend::BackendError;
use crate::quant::GgmlType;

const OP: &str = "matmul";
/// The largest batch the kernels take.
pub(super) const MAX_ROWS: usize = 64;
/// The smallest batch that takes them by default. Two rows are faster on the dp4a pair kernel;
/// from three, with the f16 kernels, mmq is faster even with the 8-row tile's unused rows
/// (Qwen3-8B Q4_K_M on an H200, same call: fwd2 2.94 ms on dp4a against 3.46 on mmq, fwd3 3.72
/// against 3.53, fwd4 3.92 against 3.54).
const DEFAULT_MIN_ROWS: usize = 3;
/// Weight rows per block (`MMQ_ROWS`).
pub(super) const TILE_ROWS: usize = 64;
/// Columns per step of the kernels' K loop (`MMQ_GROUP_COLS`).
const GROUP_COLS: usize = 256;
/// Threads per block of the int8 kernels (`MMQ_THREADS`).
const THREADS: u32 = 128;
/// Threads per block of the f16 kernels (`MMQ_F16_THREADS`): two sets of four warps, each set
/// taking half of every group's sub-blocks.
const HALF_THREADS: u32 = 2 * THREADS;
/// The largest batch of the f16 kernels (mmq_f16.cu).
const HALF_MAX_ROWS: usize = 32;
/// The input-row tiles there are kernels for, smallest first.
const TILES: [usize; 6] = [8, 16, 24, 32, 48, 64];
/// Each split covers at least this many groups, so that its prologue (first loads) and partial
/// tile stay small against its work.
const MIN_GROUPS_PER_SPLIT: usize = 4;

/// The kernels' configuration and the split-K scratch they share.
pub(super) struct Mmq {
    min_rows: usize,
    /// Whether Q4_K and Q6_K batches of up to 32 rows take the f16 kernels (mmq_f16.cu); off with
    /// `CANOPY_CUDA_MMQ_F16=0`.
    halves: bool,
    scratch: Mutex<SplitScratch>,
}

#[derive(Default)]
struct SplitScratch {
    /// Partial tiles of the splits: contents unspecified between launches.
    partials: ScratchBuffer<f32>,
    /// One arrival counter per tile, zero between launches.
    arrivals: Counters,
    /// Blocks of each kernel an SM holds at once, asked of the driver at the kernel's first launch.
    resident: HashMap<&'static str, usize>,
}

impl Mmq {
    /// The kernels for `device`, or `None` before sm_80 (no int8 mma.sync or cp.async). Batches of
    /// `$CANOPY_CUDA_MMQ_MIN_ROWS` rows (when set to a positive number, for tuning; above 64 it
    /// turns the kernels off) to 64 take them, else [`DEFAULT_MIN_ROWS`] to 64.
    pub fn new(device: &Device) -> Option<Self> {
        let sm = device.arch.strip_prefix("sm_")?.parse::<u32>().ok()?;
        if sm < 80 {
            return None;
        }
        let min_rows = rows_from_env("CANOPY_CUDA_MMQ_MIN_ROWS", DEFAULT_MIN_ROWS);
        let halves = enabled_from_env("CANOPY_CUDA_MMQ_F16");
        Some(Self { min_rows, halves, scratch: Mutex::default() })
    }

    /// Whether a batch of `n_rows` takes the kernels (for the weights [`supports`]).
    pub fn covers(&self, n_rows: usize) -> bool {
        (self.min_rows..=MAX_ROWS).contains(&n_rows)
    }

    /// Whether batches of `n_rows` of Q4_K and Q6_K weights take the f16 kernels, which read the
    /// f16 copy of their input: the ops that write an input also write that copy then.
    pub fn reads_halves(&self, n_rows: usize) -> bool {
        self.halves && self.covers(n_rows) && n_rows <= HALF_MAX_ROWS
    }

    /// Whether a covered batch of `n_rows` of `ty` weights takes the f16 kernels.
    pub fn takes_halves(&self, ty: GgmlType, n_rows: usize) -> bool {
        self.reads_halves(n_rows) && half_kernel(ty, HALF_MAX_ROWS).is_some()
    }

    /// Whether a covered batch of `n_rows` takes projections of type `first` followed by ones of
    /// type `second` in one launch (an f16 kernel of both formats).
    pub fn takes_mixed(&self, first: GgmlType, second: GgmlType, n_rows: usize) -> bool {
        self.reads_halves(n_rows) && mixed_half_kernel(first, second, HALF_MAX_ROWS).is_some()
    }

    /// `out = x · weightᵀ` for the projections (their blocks of [`TILE_ROWS`] rows numbered
    /// consecutively, `tiles` in all), shapes checked by the caller. `input` is `x`'s int8 copy
    /// (`quantize_q8`) or, for the f16 kernels ([`Self::takes_halves`]), its f16 copy. The
    /// weights are of type `ty`, or with `second` = (type, block), of that type from that block
    /// on ([`Self::takes_mixed`]).
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &self,
        device: &Device,
        ty: GgmlType,
        second: Option<(GgmlType, u32)>,
        input: MmqInput,
        projections: &Projections,
        tiles: u32,
        cols: usize,
        n_rows: usize,
    ) -> Result<(), BackendError> {
        let tile = TILES.into_iter().find(|&tile| tile >= n_rows).ok_or_else(|| {
            BackendError::shape(OP, format!("{n_rows} input rows exceed the {MAX_ROWS} of the mmq kernels"))
        })?;
        let (kernel, threads) = match (&input, second) {
            (MmqInput::Int8(..), None) => (kernel(ty, tile), THREADS),
            (MmqInput::Half(..), None) => (half_kernel(ty, tile), HALF_THREADS),
            (MmqInput::Half(..), Some((second_ty, _))) => {
                (mixed_half_kernel(ty, second_ty, tile), HALF_THREADS)
            }
            (MmqInput::Int8(..), Some(_)) => (None, THREADS),
        };
        let kernel = kernel.ok_or(BackendError::Unsupported { op: OP, ty })?;

        let mut scratch = self.scratch.lock().unwrap_or_else(PoisonError::into_inner);
        let SplitScratch { partials, arrivals, resident } = &mut *scratch;
        let resident = match resident.get(kernel) {
            Some(&blocks) => blocks,
            None => {
                let blocks = device
                    .function(OP, kernel)?
                    .occupancy_max_active_blocks_per_multiprocessor(threads, 0, None)
                    .map_err(driver(OP))? as usize;
                resident.insert(kernel, blocks);
                blocks
            }
        };
        let splits = k_splits(tiles as usize, cols / GROUP_COLS, resident * device.sm_count);
        // Without a split the kernel writes the output directly and touches neither buffer.
        let (partials_len, arrivals_len) =
            if splits > 1 { (tiles as usize * splits * TILE_ROWS * tile, tiles as usize) } else { (1, 1) };
        let partials = partials.at_least(device, OP, partials_len)?;
        let arrivals = arrivals.at_least(device, OP, arrivals_len)?;

        let config = LaunchConfig {
            grid_dim: (tiles, to_u32(OP, "K splits", splits)?, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let cols = to_u32(OP, "weight cols", cols)?;
        let n_rows = to_u32(OP, "n_rows", n_rows)?;
        let mut launch = device.launch(OP, kernel)?;
        match input {
            MmqInput::Int8(values, scales) => launch.arg(values).arg(scales),
            MmqInput::Half(halves, scales) => launch.arg(halves).arg(scales),
        };
        launch.value(projections).arg(&cols).arg(&n_rows).arg(&mut *partials).arg(&mut *arrivals);
        let second_block = second.map(|(_, block)| block);
        if let Some(second_block) = &second_block {
            launch.arg(second_block);
        }
        // SAFETY: the copy holds `x` quantized (n_rows * cols values, two floats per 32 of them)
        // or rounded to f16 (n_rows * cols halves and a scale per row), as the kernel takes;
        // the projections address weights of `rows * row_bytes` bytes in the layout of layout.rs
        // and outputs of n_rows * rows floats, their blocks numbered 0..tiles; `cols` is whole
        // groups (`supports`) and n_rows at most the kernel's tile. With splits, the scratch holds
        // every tile's partials and a zero counter per tile. A mixed kernel gets the first block
        // of the second type, all of whose projections have that type.
        unsafe { launch.launch(config) }.map_err(driver(OP))?;
        Ok(())
    }
}

/// The activations the kernels read: the int8 copy (values, scales) or the f16 copy (halves, row
/// scales).
pub(super) enum MmqInput<'a> {
    Int8(&'a CudaSlice<u8>, &'a CudaSlice<f32>),
    Half(&'a CudaSlice<u16>, &'a CudaSlice<f32>),
}

/// How many K splits a launch of `tiles` tiles by `n_groups` groups takes on a device that holds
/// `slots` of its blocks at once, each split of at least [`MIN_GROUPS_PER_SPLIT`] groups. A
/// block's time is about proportional to its groups (a split takes ceil(n_groups / s), as in
/// mmq.cu) and a partial wave takes as long as a full one: the fewest splits that minimise waves
/// times groups a block. (Qwen3-8B's down projection at 23 rows on 132 SMs of three blocks: 6
/// splits of its 64 tiles, one wave of 8 groups, where 9 made 576 blocks, 1.45 waves of 6.)
fn k_splits(tiles: usize, n_groups: usize, slots: usize) -> usize {
    let most = (n_groups / MIN_GROUPS_PER_SPLIT).max(1);
    let cost = |splits: usize| (tiles * splits).div_ceil(slots.max(1)) * n_groups.div_ceil(splits);
    (2..=most).fold(1, |best, splits| if cost(splits) < cost(best) { splits } else { best })
}

/// The f16 kernel of mmq_f16.cu for Q4_K or Q6_K weights and an input-row tile of up to 32.
fn half_kernel(ty: GgmlType, tile: usize) -> Option<&'static str> {
    let names = match ty {
        GgmlType::Q4K => ["mmq_f16_q4_k_8", "mmq_f16_q4_k_16", "mmq_f16_q4_k_24", "mmq_f16_q4_k_32"],
        GgmlType::Q6K => ["mmq_f16_q6_k_8", "mmq_f16_q6_k_16", "mmq_f16_q6_k_24", "mmq_f16_q6_k_32"],
        _ => return None,
    };
    TILES.iter().position(|&t| t == tile).and_then(|index| names.get(index).copied())
}

/// The f16 kernel of mmq_f16.cu for projections of type `first` followed by ones of type
/// `second`, and an input-row tile of up to 32.
fn mixed_half_kernel(first: GgmlType, second: GgmlType, tile: usize) -> Option<&'static str> {
    let names = match (first, second) {
        (GgmlType::Q4K, GgmlType::Q6K) => {
            ["mmq_f16_q4_k_q6_k_8", "mmq_f16_q4_k_q6_k_16", "mmq_f16_q4_k_q6_k_24", "mmq_f16_q4_k_q6_k_32"]
        }
        _ => return None,
    };
    TILES.iter().position(|&t| t == tile).and_then(|index| names.get(index).copied())
}

/// Whether the kernels take weights of type `ty` with `cols` columns.
pub(super) fn supports(ty: GgmlType, cols: usize) -> bool {
    kernel(ty, MAX_ROWS).is_some() && cols.is_multiple_of(GROUP_COLS)
}

/// The kernel of a weight type for an input-row tile of [`TILES`].
fn kernel(ty: GgmlType, tile: usize) -> Option<&'static str> {
    let names = match ty {
        GgmlType::Q8_0 => {
            ["mmq_q8_0_8", "mmq_q8_0_16", "mmq_q8_0_24", "mmq_q8_0_32", "mmq_q8_0_48", "mmq_q8_0_64"]
        }
        GgmlType::Q4K => {
            ["mmq_q4_k_8", "mmq_q4_k_16", "mmq_q4_k_24", "mmq_q4_k_32", "mmq_q4_k_48", "mmq_q4_k_64"]
        }
        GgmlType::Q5K => {
            ["mmq_q5_k_8", "mmq_q5_k_16", "mmq_q5_k_24", "mmq_q5_k_32", "mmq_q5_k_48", "mmq_q5_k_64"]
        }
        GgmlType::Q6K => {
            ["mmq_q6_k_8", "mmq_q6_k_16", "mmq_q6_k_24", "mmq_q6_k_32", "mmq_q6_k_48", "mmq_q6_k_64"]
        }
        _ => return None,
    };
    TILES.iter().position(|&t| t == tile).map(|index| names[index])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tile_of_every_format_has_a_kernel_listed_in_the_sources() {
        let listed: Vec<&str> = super::super::sources::KERNEL_SOURCES
            .iter()
            .filter(|source| source.name == "mmq.cu")
            .flat_map(|source| source.kernels.iter().copied())
            .collect();
        for ty in [GgmlType::Q8_0, GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
            for tile in TILES {
                let name = kernel(ty, tile).unwrap();
                assert!(listed.contains(&name), "{name}");
            }
        }
        assert_eq!(kernel(GgmlType::F16, 16), None);
        assert_eq!(kernel(GgmlType::Q4K, 20), None);
        for ty in [GgmlType::Q4K, GgmlType::Q6K] {
            for tile in [8, 16, 24, 32] {
                let name = half_kernel(ty, tile).unwrap();
                assert!(listed.contains(&name), "{name}");
            }
            assert_eq!(half_kernel(ty, 48), None);
        }
        assert_eq!(half_kernel(GgmlType::Q8_0, 8), None);
        for tile in [8, 16, 24, 32] {
            let name = mixed_half_kernel(GgmlType::Q4K, GgmlType::Q6K, tile).unwrap();
            assert!(listed.contains(&name), "{name}");
        }
        assert_eq!(mixed_half_kernel(GgmlType::Q4K, GgmlType::Q6K, 48), None);
        assert_eq!(mixed_half_kernel(GgmlType::Q6K, GgmlType::Q4K, 8), None);
    }

    #[test]
    fn k_splits_fill_whole_waves_with_splits_of_at_least_four_groups() {
        // Qwen3-8B at 23 rows on 132 SMs of three blocks: q and k, o, gate and up, down.
        assert_eq!(k_splits(80, 16, 396), 4);
        assert_eq!(k_splits(64, 16, 396), 4);
        assert_eq!(k_splits(384, 16, 396), 1);
        assert_eq!(k_splits(64, 48, 396), 6);
        assert_eq!(k_splits(64, 48, 384), 6);
        // 5 splits of 10 groups in one wave, or 11 of 5 in two: the fewer.
        assert_eq!(k_splits(64, 48, 383), 5);
        // Two blocks an SM: one split of gate and up is 1.45 waves, two are 2.9 of half the work.
        assert_eq!(k_splits(384, 16, 264), 2);
        // More tiles than slots in whole waves, too few groups to split, a device with no room.
        assert_eq!(k_splits(2376, 16, 396), 1);
        assert_eq!(k_splits(4, 7, 396), 1);
        assert_eq!(k_splits(4, 8, 0), 1);
    }

    #[test]
    fn rows_must_be_whole_groups() {
        assert!(supports(GgmlType::Q4K, 1280));
        assert!(supports(GgmlType::Q8_0, 512));
        assert!(!supports(GgmlType::Q8_0, 288));
        assert!(!supports(GgmlType::Bf16, 512));
    }
}
