//! The int8 tensor-core kernels (mmq.cu), emulated with their warp-shuffle fallback for
//! mma.sync, against the CPU backend: every block-quantized format and tile of input rows, K
//! whole and split between blocks. Activations round to int8 exactly (`int8_exact_row`), so only
//! the order of summation differs from the CPU.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernels::quant::GgmlType;
use common::Rng;
use common::gaussian_row;
use emulated::{
    DeviceWeight, MmqInput, Projections, check, cpu_matmul, int8_exact_row, quantize_q8, round_f16_rows,
    run_mmq, type_suffix,
};

const TOLERANCE: f32 = 1e-5;

fn kernel(ty: GgmlType, n_rows: usize) -> String {
    let suffix = type_suffix(ty);
    let tile = [8, 16, 24, 32, 48, 64].into_iter().find(|&t| t >= n_rows).unwrap();
    format!("mmq_{suffix}_{tile}")
}

fn parity(ty: GgmlType, (rows, cols): (usize, usize), n_rows: usize, splits: u32, rng: &mut Rng) {
    let weights = [DeviceWeight::random(ty, rows, cols, rng), DeviceWeight::random(ty, 16, cols, rng)];
    let x = int8_exact_row(n_rows * cols, rng);
    let copy = quantize_q8(&x);
    let mut outs = weights.each_ref().map(|w| vec![f32::NAN; n_rows * w.rows]);
    let mut projections = Projections::default();
    for (weight, out) in weights.iter().zip(outs.iter_mut()) {
        projections.push(weight, out, 64);
    }
    let kernel = kernel(ty, n_rows);
    run_mmq(&kernel, MmqInput::Int8(&copy), &projections, (cols, n_rows), splits, None);
    for (p, (weight, out)) in weights.iter().zip(&outs).enumerate() {
        let label = format!("{kernel} projection {p} {}x{cols} by {n_rows}, {splits} splits", weight.rows);
        check(&label, out, &cpu_matmul(weight, &x, n_rows), TOLERANCE);
    }
}

/// 70 weight rows leave part of the second 64-row tile empty (and a second projection of 16
/// rows follows); 5 to 64 input rows fill or leave part of each tile of input rows.
#[test]
fn mmq_kernels_match_cpu_for_every_quantized_type_and_tile() {
    let mut rng = Rng::new(31);
    for ty in [GgmlType::Q8_0, GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        for n_rows in [5, 16, 23, 32, 40, 64] {
            parity(ty, (70, 512), n_rows, 1, &mut rng);
        }
    }
}

/// Five groups of 256 columns split three ways (the last split shorter) and four ways (the last
/// split empty): every split writes a partial tile and the last to arrive sums them.
#[test]
fn mmq_kernels_sum_k_splits() {
    let mut rng = Rng::new(32);
    for ty in [GgmlType::Q4K, GgmlType::Q6K] {
        for splits in [3, 4] {
            parity(ty, (37, 1280), 23, splits, &mut rng);
        }
    }
}

/// The f16 kernels (mmq_f16.cu) round each weight and activation to f16 and accumulate in f32:
/// up to 2^-11 of each factor, on sums of up to a few hundred products of random signs.
const F16_TOLERANCE: f32 = 2e-3;

/// Input rows of every third size: ordinary, past f16's range (the copy divides them by a power
/// of two) and small.
const F16_ROW_SIZES: [f32; 3] = [1.0, 3e5, 1e-3];

/// The f16 kernel for `types` (one type, or Q4_K then Q6_K) and `n_rows`.
fn f16_kernel(types: &[GgmlType], n_rows: usize) -> String {
    let tile = [8, 16, 24, 32].into_iter().find(|&t| t >= n_rows).unwrap();
    let suffixes: Vec<&str> = types.iter().map(|&ty| type_suffix(ty)).collect();
    format!("mmq_f16_{}_{tile}", suffixes.join("_"))
}

/// A projection of `rows` rows of the first type and one of 16 rows of the second (or the same)
/// type, by `n_rows` inputs.
fn f16_parity(types: [GgmlType; 2], (rows, cols): (usize, usize), n_rows: usize, splits: u32, rng: &mut Rng) {
    let weights =
        [DeviceWeight::random(types[0], rows, cols, rng), DeviceWeight::random(types[1], 16, cols, rng)];
    let x: Vec<f32> = (0..n_rows).flat_map(|n| gaussian_row(cols, F16_ROW_SIZES[n % 3], rng)).collect();
    let halves = round_f16_rows(&x, cols);
    let mut outs = weights.each_ref().map(|w| vec![f32::NAN; n_rows * w.rows]);
    let mut projections = Projections::default();
    for (weight, out) in weights.iter().zip(outs.iter_mut()) {
        projections.push(weight, out, 64);
    }
    let (kernel, second_block) = if types[0] == types[1] {
        (f16_kernel(&types[..1], n_rows), None)
    } else {
        (f16_kernel(&types, n_rows), Some(projections.first_block[1]))
    };
    run_mmq(&kernel, MmqInput::Half(&halves), &projections, (cols, n_rows), splits, second_block);
    for (p, (weight, out)) in weights.iter().zip(&outs).enumerate() {
        let want = cpu_matmul(weight, &x, n_rows);
        // Row by row: each against its own size.
        for (n, (got, want)) in out.chunks_exact(weight.rows).zip(want.chunks_exact(weight.rows)).enumerate()
        {
            let label = format!(
                "{kernel} projection {p} {}x{cols} by {n_rows}, {splits} splits, row {n}",
                weight.rows
            );
            check(&label, got, want, F16_TOLERANCE);
        }
    }
}

/// Every tile of the f16 kernels, 70 weight rows (a partial second tile) and a second
/// projection; then five groups of K split three ways. The same for the kernel of Q4_K
/// projections followed by a Q6_K one.
#[test]
fn f16_mmq_kernels_match_cpu() {
    let mut rng = Rng::new(33);
    let (q4_k, q6_k) = (GgmlType::Q4K, GgmlType::Q6K);
    for types in [[q4_k, q4_k], [q6_k, q6_k], [q4_k, q6_k]] {
        for n_rows in [5, 16, 23, 32] {
            f16_parity(types, (70, 512), n_rows, 1, &mut rng);
        }
        f16_parity(types, (37, 1280), 23, 3, &mut rng);
    }
}
