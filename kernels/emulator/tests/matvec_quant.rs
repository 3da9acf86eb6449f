//! The int8 matrix-vector kernels (matvec_quant.cu), emulated, against the CPU backend: every
//! block-quantized format, each kernel by its batch sizes, several projections in one launch, and
//! the mixed Q4_K/Q6_K decode kernel, and the decode kernels that read whole lines of the tiles.
//! The activations are ones that round to int8 exactly
//! (`int8_exact_row`), so the kernels must match the CPU's f32 products up to summation order.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernels::quant::GgmlType;
use common::Rng;
use emulated::{
    DeviceWeight, Projections, check, cpu_matmul, int8_exact_row, quantize_q8, run_matvec, type_suffix,
};

const QUANTIZED: [GgmlType; 4] = [GgmlType::Q8_0, GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K];
/// Summation order only, over up to 5376 products.
const TOLERANCE: f32 = 1e-5;

fn kernel(ty: GgmlType, n_rows: usize) -> String {
    let suffix = type_suffix(ty);
    let size = match n_rows {
        1 => "decode",
        2 => "pair",
        3 | 4 => "quad",
        _ => "batch",
    };
    format!("matvec_q8_{size}_{suffix}")
}

fn rows_per_block(n_rows: usize) -> usize {
    if n_rows <= 4 { 4 } else { 2 }
}

/// 37 weight rows leave a partial block of rows; 256 columns leave warps without a group, 1280 a
/// partial group, 5376 more groups than warps. 1 to 11 input rows take each kernel, 3 and 11
/// partial tiles.
#[test]
fn int8_matvec_kernels_match_cpu_for_every_quantized_type_and_batch() {
    let mut rng = Rng::new(21);
    for ty in QUANTIZED {
        for cols in [256, 1280, 5376] {
            let weight = DeviceWeight::random(ty, 37, cols, &mut rng);
            for n_rows in [1, 2, 3, 4, 5, 11] {
                let x = int8_exact_row(n_rows * cols, &mut rng);
                let want = cpu_matmul(&weight, &x, n_rows);
                let copy = quantize_q8(&x);
                let mut out = vec![f32::NAN; n_rows * weight.rows];
                let mut projections = Projections::default();
                projections.push(&weight, &mut out, rows_per_block(n_rows));
                run_matvec(&kernel(ty, n_rows), &copy, &projections, cols, n_rows, None);
                check(&format!("{} {ty} 37x{cols} by {n_rows}", kernel(ty, n_rows)), &out, &want, TOLERANCE);
            }
        }
    }
}

/// q, k and v of one input in one launch; 37, 9 and 20 rows number the blocks unevenly.
#[test]
fn one_launch_serves_three_projections() {
    let mut rng = Rng::new(22);
    let cols = 1280;
    for ty in QUANTIZED {
        for n_rows in [1, 3] {
            let weights = [37, 9, 20].map(|rows| DeviceWeight::random(ty, rows, cols, &mut rng));
            let x = int8_exact_row(n_rows * cols, &mut rng);
            let copy = quantize_q8(&x);
            let mut outs = weights.each_ref().map(|w| vec![f32::NAN; n_rows * w.rows]);
            let mut projections = Projections::default();
            for (weight, out) in weights.iter().zip(outs.iter_mut()) {
                projections.push(weight, out, rows_per_block(n_rows));
            }
            run_matvec(&kernel(ty, n_rows), &copy, &projections, cols, n_rows, None);
            for (p, (weight, out)) in weights.iter().zip(&outs).enumerate() {
                check(
                    &format!("{ty} projection {p} by {n_rows}"),
                    out,
                    &cpu_matmul(weight, &x, n_rows),
                    TOLERANCE,
                );
            }
        }
    }
}

/// Q4_K_M's q and k in Q4_K with v in Q6_K in one launch of `kernel`, whose Q6_K blocks take
/// `q6_k_rows_per_block` rows each.
fn mixed_launch_matches_cpu(kernel: &str, q6_k_rows_per_block: usize, rng: &mut Rng) {
    let cols = 2048;
    let weights = [
        DeviceWeight::random(GgmlType::Q4K, 64, cols, rng),
        DeviceWeight::random(GgmlType::Q4K, 18, cols, rng),
        DeviceWeight::random(GgmlType::Q6K, 19, cols, rng),
    ];
    let x = int8_exact_row(cols, rng);
    let copy = quantize_q8(&x);
    let mut outs = weights.each_ref().map(|w| vec![f32::NAN; w.rows]);
    let mut projections = Projections::default();
    for (weight, out) in weights.iter().zip(outs.iter_mut()) {
        let rows_per_block = if weight.ty == GgmlType::Q6K { q6_k_rows_per_block } else { 4 };
        projections.push(weight, out, rows_per_block);
    }
    let second_block = projections.first_block[2];
    run_matvec(kernel, &copy, &projections, cols, 1, Some(second_block));
    for (p, (weight, out)) in weights.iter().zip(&outs).enumerate() {
        check(&format!("{kernel} projection {p}"), out, &cpu_matmul(weight, &x, 1), TOLERANCE);
    }
}

#[test]
fn mixed_decode_kernel_matches_cpu() {
    mixed_launch_matches_cpu("matvec_q8_decode_q4_k_q6_k", 2, &mut Rng::new(23));
}

/// The decode kernels whose lanes read whole lines of the tiles (`matvec_q8_lines_*`), for one
/// format (37 rows, so a partial tile; columns as above) and for three projections, the last of
/// another format, in one launch.
#[test]
fn line_decode_kernels_match_cpu() {
    let mut rng = Rng::new(24);
    for ty in [GgmlType::Q4K, GgmlType::Q6K] {
        for cols in [256, 1280, 5376] {
            let weight = DeviceWeight::random(ty, 37, cols, &mut rng);
            let x = int8_exact_row(cols, &mut rng);
            let mut out = vec![f32::NAN; weight.rows];
            let mut projections = Projections::default();
            projections.push(&weight, &mut out, 4);
            let kernel = format!("matvec_q8_lines_{}", type_suffix(ty));
            run_matvec(&kernel, &quantize_q8(&x), &projections, cols, 1, Some(projections.blocks()));
            check(&format!("{kernel} 37x{cols}"), &out, &cpu_matmul(&weight, &x, 1), TOLERANCE);
        }
    }
    mixed_launch_matches_cpu("matvec_q8_lines_q4_k_q6_k", 4, &mut rng);
}
