//! The elementwise kernels (elementwise.cu), emulated, against the CPU backend: `add`, `swiglu`
//! and `swiglu_q8` with its int8 copy of the output, on the device tests' lengths.
//!
//! Tolerances: 0 for `add`, one f32 add either way; 2e-6 for SwiGLU, the device tests' bound for
//! the device's `expf` (within 2 ulp; the emulator calls the host's, as the CPU does). The int8
//! copy is checked against the CPU's output by `check_q8_copy`.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::backend::Backend;
use canopy_kernels::backend::cpu::CpuBackend;
use common::{Rng, gaussian_row};
use emulated::{DeviceBuffer, Q8Copy, check, check_q8_copy, fetch, ptr, run};

const SWIGLU_TOLERANCE: f32 = 2e-6;

/// elementwise.rs's launch: a thread per element (per float4 for `swiglu_q8`), 256 a block.
fn per_element(n: usize) -> LaunchShape {
    LaunchShape::linear(n.div_ceil(256) as u32, 256)
}

/// The gate and up inputs: gates of 4 standard deviations, the first -200, whose `expf(-g)`
/// overflows to inf.
fn swiglu_inputs(len: usize, rng: &mut Rng) -> (Vec<f32>, Vec<f32>) {
    let mut gate = gaussian_row(len, 4.0, rng);
    gate[0] = -200.0;
    (gate, gaussian_row(len, 1.0, rng))
}

fn cpu_swiglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
    let cpu = CpuBackend::new();
    let mut out = cpu.zeros(gate.len()).unwrap();
    cpu.swiglu(&cpu.upload(gate).unwrap(), &cpu.upload(up).unwrap(), gate.len(), &mut out).unwrap();
    fetch(&cpu, &out, gate.len())
}

/// Only the first `len - 1` elements are added: the last must stay.
#[test]
fn add_matches_cpu() {
    let mut rng = Rng::new(51);
    let len = 10_001;
    let (acc, x) = (gaussian_row(len, 4.0, &mut rng), gaussian_row(len, 1.0, &mut rng));
    let cpu = CpuBackend::new();
    let mut want = cpu.upload(&acc).unwrap();
    cpu.add(&mut want, &cpu.upload(&x).unwrap(), len - 1).unwrap();

    let (mut acc_buf, mut x_buf) = (DeviceBuffer::from_floats(&acc), DeviceBuffer::from_floats(&x));
    let (mut acc_ptr, mut x_ptr, mut n) = (acc_buf.address(), x_buf.address(), (len - 1) as u64);
    run("add", per_element(len - 1), &mut [ptr(&mut acc_ptr), ptr(&mut x_ptr), ptr(&mut n)]);
    check("add", &acc_buf.floats(len), &fetch(&cpu, &want, len), 0.0);
}

/// 10001 elements (no whole block of 32: elementwise.rs's `swiglu` kernel), past the last of
/// which nothing may be written.
#[test]
fn swiglu_matches_cpu() {
    let mut rng = Rng::new(52);
    let len = 10_001;
    let (gate, up) = swiglu_inputs(len, &mut rng);
    let want = cpu_swiglu(&gate, &up);
    let (mut gate_buf, mut up_buf) = (DeviceBuffer::from_floats(&gate), DeviceBuffer::from_floats(&up));
    let mut out = DeviceBuffer::from_floats(&vec![f32::NAN; len + 1]);
    let (mut gate_ptr, mut up_ptr, mut n, mut out_ptr) =
        (gate_buf.address(), up_buf.address(), len as u64, out.address());
    run(
        "swiglu",
        per_element(len),
        &mut [ptr(&mut gate_ptr), ptr(&mut up_ptr), ptr(&mut n), ptr(&mut out_ptr)],
    );
    let got = out.floats(len + 1);
    assert!(got[len].is_nan(), "swiglu wrote past its length");
    assert!(got[0] == 0.0 && got[0].is_sign_negative() == want[0].is_sign_negative(), "silu(-200)");
    check("swiglu", &got[..len], &want, SWIGLU_TOLERANCE);
}

/// 10016 elements (313 blocks of 32, a partial last block of threads) and 96 (fewer threads than
/// a block): the `swiglu_q8` kernel, output and int8 copy.
#[test]
fn swiglu_q8_matches_cpu() {
    let mut rng = Rng::new(53);
    for len in [10_016, 96] {
        let (gate, up) = swiglu_inputs(len, &mut rng);
        let want = cpu_swiglu(&gate, &up);
        let (mut gate_buf, mut up_buf) = (DeviceBuffer::from_floats(&gate), DeviceBuffer::from_floats(&up));
        let mut out = DeviceBuffer::from_floats(&vec![f32::NAN; len]);
        let mut copy = Q8Copy::zeroed(len);
        let (mut gate_ptr, mut up_ptr, mut n_quads, mut out_ptr) =
            (gate_buf.address(), up_buf.address(), (len / 4) as u32, out.address());
        // A decode row's down projection follows: the kernel lets it start early.
        let mut next_rows = 1u32;
        let (mut q_ptr, mut scales_ptr) = (copy.values.address(), copy.scales.address());
        run(
            "swiglu_q8",
            per_element(len / 4),
            &mut [
                ptr(&mut gate_ptr),
                ptr(&mut up_ptr),
                ptr(&mut n_quads),
                ptr(&mut next_rows),
                ptr(&mut out_ptr),
                ptr(&mut q_ptr),
                ptr(&mut scales_ptr),
            ],
        );
        let label = format!("swiglu_q8 {len}");
        check(&label, &out.floats(len), &want, SWIGLU_TOLERANCE);
        check_q8_copy(&label, &copy, &want, SWIGLU_TOLERANCE);
    }
}
