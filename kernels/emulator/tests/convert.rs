//! The GEMM operand conversions (convert.cu), emulated: block-format weights decoded to f16, and
//! activations rounded to f16 or bf16. The reference is the CPU backend's decoding (`embed` of
//! every row) rounded by the `half` crate, as are the CPU's own f16 and bf16 conversions.
//!
//! Tolerance 0: decoding and round-to-nearest-even are exact, so every 16-bit pattern must match.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::backend::Backend;
use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::quant::GgmlType;
use common::{Rng, gaussian_row};
use emulated::{DeviceBuffer, DeviceWeight, fetch, ptr, run};
use half::{bf16, f16};

/// gemm.rs's launch: a thread per element in blocks of 256, at most 4096 blocks, each thread
/// striding over the grid; and, to make the threads stride, a grid of 3 blocks.
fn shapes(total: usize) -> [LaunchShape; 2] {
    [LaunchShape::linear(total.div_ceil(256).clamp(1, 4096) as u32, 256), LaunchShape::linear(3, 256)]
}

fn halves(buffer: &DeviceBuffer, n: usize) -> Vec<u16> {
    buffer.bytes()[..2 * n].chunks_exact(2).map(|h| u16::from_le_bytes([h[0], h[1]])).collect()
}

/// Asserts equal 16-bit patterns and prints the parity line.
fn check_bits(label: &str, got: &[u16], want: &[u16]) {
    assert_eq!(got.len(), want.len(), "{label}: lengths");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!("{label}[{i}]: emulated {:#06x}, reference {:#06x}", got[i], want[i]);
    }
    println!("parity {label}: {} bit patterns equal", got.len());
}

/// 37 rows of 768 and of 5376 columns of every block format the GEMM decodes.
#[test]
fn dequantize_f16_matches_cpu_decoding() {
    let mut rng = Rng::new(121);
    let cpu = CpuBackend::new();
    for (ty, suffix) in
        [(GgmlType::Q8_0, "q8_0"), (GgmlType::Q4K, "q4_k"), (GgmlType::Q5K, "q5_k"), (GgmlType::Q6K, "q6_k")]
    {
        for (rows, cols) in [(37, 768), (37, 5376)] {
            let mut weight = DeviceWeight::random(ty, rows, cols, &mut rng);
            let table = cpu.upload_weight(ty, rows, cols, &weight.gguf).unwrap();
            let ids: Vec<u32> = (0..rows as u32).collect();
            let mut decoded = cpu.zeros(rows * cols).unwrap();
            cpu.embed(&table, &cpu.upload_index(&ids).unwrap(), rows, &mut decoded).unwrap();
            let want: Vec<u16> =
                fetch(&cpu, &decoded, rows * cols).iter().map(|&v| f16::from_f32(v).to_bits()).collect();
            for shape in shapes(rows * cols) {
                let mut out = DeviceBuffer::zeroed(2 * rows * cols);
                let (mut w_ptr, mut out_ptr) = (weight.device.address(), out.address());
                let (mut row_bytes, mut rows_arg, mut cols_arg) =
                    (weight.row_bytes as u64, rows as u32, cols as u32);
                let kernel = format!("dequantize_f16_{suffix}");
                run(
                    &kernel,
                    shape,
                    &mut [
                        ptr(&mut w_ptr),
                        ptr(&mut row_bytes),
                        ptr(&mut rows_arg),
                        ptr(&mut cols_arg),
                        ptr(&mut out_ptr),
                    ],
                );
                let label = format!("{kernel} {rows}x{cols}, {} blocks", shape.grid[0]);
                check_bits(&label, &halves(&out, rows * cols), &want);
            }
        }
    }
}

/// Values of every kind: normal ones near 1 and large, ties between two 16-bit values, ones
/// past f16's range, subnormal in f16 and in f32, both zeros, both infinities and NaNs.
fn awkward_values(rng: &mut Rng) -> Vec<f32> {
    let mut x = gaussian_row(5001, 1.0, rng);
    x.extend(gaussian_row(1000, 3e4, rng));
    x.extend(gaussian_row(1000, 1e-6, rng));
    x.extend(gaussian_row(1000, 1e-39, rng));
    x.extend([
        1.0 + f32::EPSILON * 1024.0,
        1.0 + f32::EPSILON * 3072.0,
        f32::from_bits(0x3f80_8000),
        f32::from_bits(0x3f81_8000),
        65520.0,
        -65519.0,
        1e9,
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
    ]);
    x
}

/// round_f16 and round_bf16 against `half`'s rounding (which keeps a NaN a NaN; bf16 sets its
/// quiet bit).
#[test]
fn rounding_matches_half() {
    let mut rng = Rng::new(122);
    let x = awkward_values(&mut rng);
    let n = x.len();
    let want_f16: Vec<u16> = x.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
    let want_bf16: Vec<u16> = x.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
    let mut input = DeviceBuffer::from_floats(&x);
    for (kernel, want) in [("round_f16", &want_f16), ("round_bf16", &want_bf16)] {
        for shape in shapes(n) {
            let mut out = DeviceBuffer::zeroed(2 * n);
            let (mut x_ptr, mut count, mut out_ptr) = (input.address(), n as u64, out.address());
            run(kernel, shape, &mut [ptr(&mut x_ptr), ptr(&mut count), ptr(&mut out_ptr)]);
            let got = halves(&out, n);
            if kernel == "round_f16" {
                // Any NaN pattern is a NaN; the device's and the host's NaN payloads may differ.
                let nan = |b: u16| b & 0x7c00 == 0x7c00 && b & 0x03ff != 0;
                let (got, want): (Vec<u16>, Vec<u16>) = got
                    .iter()
                    .zip(want)
                    .map(|(&g, &w)| if nan(g) && nan(w) { (0, 0) } else { (g, w) })
                    .unzip();
                check_bits(&format!("{kernel}, {} blocks", shape.grid[0]), &got, &want);
            } else {
                check_bits(&format!("{kernel}, {} blocks", shape.grid[0]), &got, want);
            }
        }
    }
}
