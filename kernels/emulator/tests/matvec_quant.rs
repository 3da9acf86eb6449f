//! The int8 matrix-vector kernels (matvec_quant.cu), emulated, against the CPU backend: every
//! block-quantized format, each kernel by its batch sizes, several projections in one launch, and
//! the mixed Q4_K/Q6_K decode kernel. The activations are ones that round to int8 exactly
//! (`int8_exact_row`), so the kernels must match the CPU's f32 products up to summation order.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::quant::GgmlType;
use common::Rng;
use emulated::{
    DeviceBuffer, DeviceWeight, Projections, Q8Copy, check, check_q8_copy, cpu_matmul, int8_exact_row, ptr,
    quantize_q8, run, run_matvec, type_suffix,
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

/// Q4_K_M's q and k in Q4_K with v in Q6_K: Q6_K blocks take two rows each.
#[test]
fn mixed_decode_kernel_matches_cpu() {
    let mut rng = Rng::new(23);
    let cols = 2048;
    let weights = [
        DeviceWeight::random(GgmlType::Q4K, 64, cols, &mut rng),
        DeviceWeight::random(GgmlType::Q4K, 18, cols, &mut rng),
        DeviceWeight::random(GgmlType::Q6K, 19, cols, &mut rng),
    ];
    let x = int8_exact_row(cols, &mut rng);
    let copy = quantize_q8(&x);
    let mut outs = weights.each_ref().map(|w| vec![f32::NAN; w.rows]);
    let mut projections = Projections::default();
    for (weight, out) in weights.iter().zip(outs.iter_mut()) {
        let rows_per_block = if weight.ty == GgmlType::Q6K { 2 } else { 4 };
        projections.push(weight, out, rows_per_block);
    }
    let second_block = projections.first_block[2];
    run_matvec("matvec_q8_decode_q4_k_q6_k", &copy, &projections, cols, 1, Some(second_block));
    for (p, (weight, out)) in weights.iter().zip(&outs).enumerate() {
        check(&format!("mixed projection {p}"), out, &cpu_matmul(weight, &x, 1), TOLERANCE);
    }
}

/// The fused kernels' `SwigluTarget` (matvec_quant.cu), field for field.
#[repr(C)]
struct SwigluTarget {
    act: u64,
    q: u64,
    q_scales: u64,
    arrivals: u64,
}

/// Decode gate and up projections that finish SwiGLU and its int8 copy in the same launch: 96
/// rows are three chunks of 32; 1280 columns leave a partial group.
#[test]
fn fused_swiglu_decode_matches_cpu() {
    let mut rng = Rng::new(24);
    let (rows, cols) = (96, 1280);
    for ty in QUANTIZED {
        let [gate_weight, up_weight] = [0, 1].map(|_| DeviceWeight::random(ty, rows, cols, &mut rng));
        let x = int8_exact_row(cols, &mut rng);
        let mut copy = quantize_q8(&x);
        let (mut gate, mut up) = (vec![f32::NAN; rows], vec![f32::NAN; rows]);
        let mut projections = Projections::default();
        projections.push(&gate_weight, &mut gate, 4);
        projections.push(&up_weight, &mut up, 4);
        let mut act = DeviceBuffer::from_floats(&vec![f32::NAN; rows]);
        let mut act_copy = Q8Copy::zeroed(rows);
        let mut arrivals = DeviceBuffer::zeroed(4 * rows / 32);
        let mut target = SwigluTarget {
            act: act.address(),
            q: act_copy.values.address(),
            q_scales: act_copy.scales.address(),
            arrivals: arrivals.address(),
        };
        let (mut q, mut scales) = (copy.values.address(), copy.scales.address());
        let mut projections_arg = Projections { ..projections };
        let (mut cols_arg, mut n_rows) = (cols as u32, 1u32);
        let kernel = kernel(ty, 1).replace("decode", "swiglu");
        run(
            &kernel,
            LaunchShape::linear(projections_arg.blocks(), 128),
            &mut [
                ptr(&mut q),
                ptr(&mut scales),
                ptr(&mut projections_arg),
                ptr(&mut cols_arg),
                ptr(&mut n_rows),
                ptr(&mut target),
            ],
        );
        let (want_gate, want_up) = (cpu_matmul(&gate_weight, &x, 1), cpu_matmul(&up_weight, &x, 1));
        let want: Vec<f32> =
            want_gate.iter().zip(&want_up).map(|(&g, &u)| g / (1.0 + (-g).exp()) * u).collect();
        check(&format!("{kernel} gate"), &gate, &want_gate, TOLERANCE);
        check(&format!("{kernel} up"), &up, &want_up, TOLERANCE);
        check(&format!("{kernel} act"), &act.floats(rows), &want, TOLERANCE);
        check_q8_copy(&kernel, &act_copy, &want, TOLERANCE);
        assert!(arrivals.words(rows / 32).iter().all(|&c| c == 0), "{kernel}: arrival counters reset");
    }
}
