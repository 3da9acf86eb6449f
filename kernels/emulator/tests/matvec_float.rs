//! The matrix-vector kernels of the element-wise formats (matvec_float.cu), emulated, against the
//! CPU backend: f32, f16 and bf16 weights, the decode kernel (one input row), the batch kernel (2
//! to 11 rows) and the one-element-per-lane kernel for rows that are no whole number of 16-byte
//! loads, on the device test's shapes below 16 input rows (from 16 the host takes cuBLAS).
//!
//! Tolerance 2e-5, the device tests': the same products as the CPU's, summed in another order
//! over up to 5376 terms.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::quant::GgmlType;
use common::{Rng, gaussian_row};
use emulated::{DeviceBuffer, DeviceWeight, check, cpu_matmul, ptr, run};

const TOLERANCE: f32 = 2e-5;

/// matmul.rs's `float_kernel`: the kernel, weight rows per block and input rows per block.
fn float_kernel(ty: GgmlType, cols: usize, n_rows: usize) -> (String, usize, usize) {
    let (suffix, per_load) = match ty {
        GgmlType::F32 => ("f32", 4),
        GgmlType::F16 => ("f16", 8),
        GgmlType::Bf16 => ("bf16", 8),
        _ => unreachable!("element-wise formats only"),
    };
    if !cols.is_multiple_of(per_load) {
        (format!("matvec_any_{suffix}"), 4, 8)
    } else if n_rows == 1 {
        (format!("matvec_decode_{suffix}"), 4, 1)
    } else {
        (format!("matvec_batch_{suffix}"), 1, 8)
    }
}

/// The kernel matmul.rs picks, launched as it launches it (128 threads a block).
fn parity(ty: GgmlType, (rows, cols): (usize, usize), batches: &[usize], rng: &mut Rng) {
    let mut weight = DeviceWeight::random(ty, rows, cols, rng);
    for &n_rows in batches {
        let x = gaussian_row(n_rows * cols, 1.0, rng);
        let want = cpu_matmul(&weight, &x, n_rows);
        let (kernel, rows_per_block, tile) = float_kernel(ty, cols, n_rows);
        let mut x_buf = DeviceBuffer::from_floats(&x);
        let mut out = DeviceBuffer::from_floats(&vec![f32::NAN; n_rows * rows]);
        let (mut x_ptr, mut w_ptr, mut out_ptr) = (x_buf.address(), weight.device.address(), out.address());
        let mut row_bytes = weight.row_bytes as u64;
        let [mut rows_arg, mut cols_arg, mut n_rows_arg] = [rows, cols, n_rows].map(|v| v as u32);
        let shape = LaunchShape {
            grid: [rows.div_ceil(rows_per_block) as u32, n_rows.div_ceil(tile) as u32, 1],
            block: [128, 1, 1],
            dynamic_shared_bytes: 0,
        };
        run(
            &kernel,
            shape,
            &mut [
                ptr(&mut x_ptr),
                ptr(&mut w_ptr),
                ptr(&mut row_bytes),
                ptr(&mut rows_arg),
                ptr(&mut cols_arg),
                ptr(&mut n_rows_arg),
                ptr(&mut out_ptr),
            ],
        );
        check(&format!("{kernel} {rows}x{cols} by {n_rows}"), &out.floats(n_rows * rows), &want, TOLERANCE);
    }
}

/// 37 weight rows leave a partial block of rows; 256 columns leave warps without a group, 1280 a
/// partial group, 5376 more groups than warps; 1030 columns (and 1028 for the 2-byte formats)
/// are no whole number of 16-byte loads. 1 input row takes the decode kernel, 3, 8 and 11 the
/// batch kernel (3 and 11 partial tiles of 8); the device test's 2, 4 and 5 add nothing here.
#[test]
fn float_matvec_kernels_match_cpu_for_every_format_and_batch() {
    let mut rng = Rng::new(111);
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Bf16] {
        for cols in [256, 1280, 5376, 1030, 1028] {
            parity(ty, (37, cols), &[1, 3, 8, 11], &mut rng);
        }
    }
}

/// One input row over 129 blocks of four weight rows (the last partial), with one group of
/// columns (warps without one) or several per warp. The device test's 4099 rows exist to
/// outnumber a GPU's resident blocks, which is no concern here, and take 20 s.
#[test]
fn decode_kernel_covers_many_row_blocks() {
    let mut rng = Rng::new(112);
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::Bf16] {
        for cols in [512, 5376] {
            parity(ty, (515, cols), &[1], &mut rng);
        }
    }
}
