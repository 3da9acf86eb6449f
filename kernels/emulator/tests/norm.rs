//! The RMS norms (norm.cu), emulated, against the CPU backend: the looping kernels, the
//! one-warp-per-row and one-block-per-row register kernels, each with and without the residual
//! add, and the register kernels' `_q8` forms with their int8 copy of the output.
//!
//! Tolerances: 1e-5 for the output (the same f32 math as the CPU's but for the order in which the
//! squares are summed, as in the device tests); 0 for the residual, one f32 add either way. The
//! int8 copy is checked against the CPU's output by `check_q8_copy`.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::backend::Backend;
use canopy_kernels::backend::cpu::CpuBackend;
use common::{Rng, gaussian_row};
use emulated::{DeviceBuffer, Q8Copy, check, check_f16_copy, check_q8_copy, fetch, ptr, run};

const TOLERANCE: f32 = 1e-5;

/// norm.rs's kernel families.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Variant {
    Looping,
    PerWarp,
    PerBlock,
}

/// Every kernel family that can norm rows of `row_len`, not only the one norm.rs picks: the
/// block kernel also takes the short rows the warp kernel gets.
fn variants(row_len: usize) -> Vec<Variant> {
    let vecs = row_len / 4;
    let mut variants = vec![Variant::Looping];
    if row_len.is_multiple_of(4) && vecs <= 32 * 4 {
        variants.push(Variant::PerWarp);
    }
    if row_len.is_multiple_of(4) && vecs <= 1024 * 4 {
        variants.push(Variant::PerBlock);
    }
    variants
}

/// norm.rs's launch: 256 threads a block, 8 rows a block for the warp kernels, and for the block
/// kernels a thread per float4 up to 1024.
fn launch_shape(variant: Variant, row_len: usize, n_rows: usize) -> LaunchShape {
    match variant {
        Variant::Looping => LaunchShape::linear(n_rows as u32, 256),
        Variant::PerWarp => LaunchShape::linear(n_rows.div_ceil(8) as u32, 256),
        Variant::PerBlock => {
            LaunchShape::linear(n_rows as u32, (row_len / 4).next_multiple_of(32).min(1024) as u32)
        }
    }
}

fn kernel(variant: Variant, add: bool, quantize: bool) -> String {
    let add = if add { "add_" } else { "" };
    let q8 = if quantize { "_q8" } else { "" };
    match variant {
        Variant::Looping => format!("{add}rms_norm"),
        Variant::PerWarp => format!("{add}rms_norm{q8}_warp"),
        Variant::PerBlock => format!("{add}rms_norm{q8}_block"),
    }
}

struct Inputs {
    x: Vec<f32>,
    delta: Vec<f32>,
    weight: Vec<f32>,
    n_rows: usize,
    eps: f32,
}

/// Runs one emulated norm (`add` selects the residual form): the residual after the kernel, the
/// output and, when `quantize`, the int8 copy.
fn emulate(variant: Variant, add: bool, quantize: bool, inputs: &Inputs) -> (Vec<f32>, Vec<f32>, Q8Copy) {
    let (row_len, n) = (inputs.weight.len(), inputs.x.len());
    let mut residual = DeviceBuffer::from_floats(&inputs.x);
    let mut delta = DeviceBuffer::from_floats(&inputs.delta);
    let mut weight = DeviceBuffer::from_floats(&inputs.weight);
    let mut out = DeviceBuffer::from_floats(&vec![f32::NAN; n]);
    let mut copy = Q8Copy::zeroed(n);
    let (mut residual_ptr, mut delta_ptr, mut weight_ptr, mut out_ptr) =
        (residual.address(), delta.address(), weight.address(), out.address());
    let (mut q_ptr, mut scales_ptr, mut halves_ptr, mut half_scales_ptr) =
        (copy.values.address(), copy.scales.address(), copy.halves.address(), copy.half_scales.address());
    let (mut row_len_arg, mut n_rows_arg, mut eps) = (row_len as u32, inputs.n_rows as u32, inputs.eps);
    let mut args = vec![ptr(&mut residual_ptr)];
    if add {
        args.push(ptr(&mut delta_ptr));
    }
    args.extend([ptr(&mut weight_ptr), ptr(&mut row_len_arg)]);
    if variant != Variant::Looping {
        args.push(ptr(&mut n_rows_arg));
    }
    args.extend([ptr(&mut eps), ptr(&mut out_ptr)]);
    if quantize {
        args.extend([ptr(&mut q_ptr), ptr(&mut scales_ptr), ptr(&mut halves_ptr), ptr(&mut half_scales_ptr)]);
    }
    run(&kernel(variant, add, quantize), launch_shape(variant, row_len, inputs.n_rows), &mut args);
    (residual.floats(n), out.floats(n), copy)
}

/// The CPU's residual after the add (the input itself without it) and output.
fn reference(add: bool, inputs: &Inputs) -> (Vec<f32>, Vec<f32>) {
    let cpu = CpuBackend::new();
    let n = inputs.x.len();
    let mut residual = cpu.upload(&inputs.x).unwrap();
    let weight = cpu.upload(&inputs.weight).unwrap();
    let mut out = cpu.zeros(n).unwrap();
    if add {
        let delta = cpu.upload(&inputs.delta).unwrap();
        cpu.add_rms_norm(&mut residual, &delta, &weight, inputs.n_rows, inputs.eps, &mut out).unwrap();
    } else {
        cpu.rms_norm(&residual, &weight, inputs.n_rows, inputs.eps, &mut out).unwrap();
    }
    (fetch(&cpu, &residual, n), fetch(&cpu, &out, n))
}

/// The device tests' shapes: 128 wide (one warp a row; 11 rows leave part of the second block
/// idle), 1000 and 4096 (a block a row), 1001 (no whole float4) and 16388 (too long to hold),
/// plus 96 (a warp with idle lanes), 2560 (640 threads) and 16384 (the longest row held, four
/// float4 a thread). Rows of whole blocks of 32 also take the `_q8` kernels.
#[test]
fn norms_match_cpu_for_every_kernel() {
    let mut rng = Rng::new(41);
    let shapes = [(11, 128), (5, 1000), (3, 4096), (2, 1001), (2, 16388), (3, 96), (2, 2560), (1, 16384)];
    for (n_rows, row_len) in shapes {
        for add in [false, true] {
            let inputs = Inputs {
                x: gaussian_row(n_rows * row_len, 2.0, &mut rng),
                delta: gaussian_row(n_rows * row_len, 1.0, &mut rng),
                // 4096-wide rows also take weights whose outputs pass f16's range, which the f16
                // copy divides by a power of two.
                weight: gaussian_row(row_len, if row_len == 4096 { 3e4 } else { 1.0 }, &mut rng),
                n_rows,
                eps: if add { 1e-5 } else { 1e-6 },
            };
            let (want_residual, want) = reference(add, &inputs);
            for variant in variants(row_len) {
                let quantizing = variant != Variant::Looping && row_len.is_multiple_of(32);
                for quantize in [false, true].into_iter().filter(|&q| !q || quantizing) {
                    let name = kernel(variant, add, quantize);
                    let label = format!("{name} {n_rows}x{row_len}");
                    let (residual, out, copy) = emulate(variant, add, quantize, &inputs);
                    check(&format!("{label} out"), &out, &want, TOLERANCE);
                    if add {
                        check(&format!("{label} residual"), &residual, &want_residual, 0.0);
                    }
                    if quantize {
                        check_q8_copy(&label, &copy, &want, TOLERANCE);
                        check_f16_copy(&label, &copy, &want, row_len, TOLERANCE);
                    }
                }
            }
        }
    }
}
