//! The rotary embedding kernel (rope.cu), emulated, against the CPU backend: both pairings, whole
//! and partial rotation, positions up to 4096.
//!
//! Tolerance 1e-5: the kernel computes each angle as the CPU does, in f32 with `powf` and
//! `sincosf`, which here are the host's, as the CPU's are. (The device tests allow 1e-4, for the
//! device's own `powf`, whose last ulp an angle of 4096 radians magnifies.)

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::backend::{Backend, RopeParams, RopeStyle};
use common::{Rng, gaussian_row};
use emulated::{DeviceBuffer, check, fetch, ptr, run};

const TOLERANCE: f32 = 1e-5;

/// Rotates `x` with the emulated kernel, launched as rope.rs does: a thread per rotated pair of
/// each head of each row, 256 a block.
fn emulate(x: &[f32], positions: &[u32], params: &RopeParams) -> Vec<f32> {
    let n_rows = positions.len();
    let tasks = n_rows * params.n_heads * params.rotary_dim / 2;
    let (mut x_buf, mut positions_buf) = (DeviceBuffer::from_floats(x), DeviceBuffer::from_words(positions));
    let (mut x_ptr, mut positions_ptr) = (x_buf.address(), positions_buf.address());
    let (mut n_rows_arg, mut n_heads, mut head_dim, mut rotary_dim) =
        (n_rows as u32, params.n_heads as u32, params.head_dim as u32, params.rotary_dim as u32);
    let (mut theta, mut neox) = (params.theta, u32::from(params.style == RopeStyle::Neox));
    run(
        "rope",
        LaunchShape::linear(tasks.div_ceil(256) as u32, 256),
        &mut [
            ptr(&mut x_ptr),
            ptr(&mut positions_ptr),
            ptr(&mut n_rows_arg),
            ptr(&mut n_heads),
            ptr(&mut head_dim),
            ptr(&mut rotary_dim),
            ptr(&mut theta),
            ptr(&mut neox),
        ],
    );
    x_buf.floats(x.len())
}

/// The device test's heads of 128, rotated whole and by half, and heads of 96 rotated by 32 with
/// theta 10000.
#[test]
fn rope_matches_cpu_for_both_styles_and_partial_rotation() {
    let mut rng = Rng::new(61);
    let positions = [0u32, 1, 7, 100, 1000, 4096];
    let cpu = CpuBackend::new();
    for style in [RopeStyle::Neox, RopeStyle::Normal] {
        for (n_heads, head_dim, rotary_dim, theta) in
            [(3, 128, 128, 1_000_000.0), (3, 128, 64, 1_000_000.0), (2, 96, 32, 10_000.0)]
        {
            let params = RopeParams { n_heads, head_dim, rotary_dim, theta, style };
            let x = gaussian_row(positions.len() * params.row_len(), 1.0, &mut rng);
            let mut want = cpu.upload(&x).unwrap();
            cpu.rope(&mut want, &cpu.upload_index(&positions).unwrap(), positions.len(), &params).unwrap();
            let label = format!("rope {style:?} {n_heads}x{head_dim} rotary {rotary_dim}");
            check(&label, &emulate(&x, &positions, &params), &fetch(&cpu, &want, x.len()), TOLERANCE);
        }
    }
}
