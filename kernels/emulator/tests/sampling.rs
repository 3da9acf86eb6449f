//! The row reductions over logits (sampling.cu), emulated, against the CPU backend:
//! `softmax_rows`, `argmax_rows` and `top_k_rows`, on rows with NaN, ties and no finite value.
//!
//! Tolerances, as in the device tests: 2e-6 for the softmax (the same f32 math in another order);
//! 1e-5 for top-k's log-probabilities, whose log-sum-exp over the row sums in another order; ids
//! exactly.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::backend::Backend;
use canopy_kernels::backend::cpu::CpuBackend;
use common::{Rng, gaussian_row};
use emulated::{DeviceBuffer, check, fetch, ptr, run};

/// sampling.rs's block sizes: a block per row of 256 threads, 1024 for argmax.
const THREADS: u32 = 256;
const ARGMAX_THREADS: u32 = 1024;

/// Five rows: a tie for the maximum (50 at ids 10 and 20), a NaN beside the maximum, all NaN,
/// all equal, and plain.
fn awkward_logits(row_len: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x = gaussian_row(5 * row_len, 3.0, rng);
    x[10] = 50.0;
    x[20] = 50.0;
    x[row_len + 3] = f32::NAN;
    x[row_len + 4] = 40.0;
    x[2 * row_len..3 * row_len].fill(f32::NAN);
    x[3 * row_len..4 * row_len].fill(1.5);
    x
}

/// 4 rows of 5000 (not a multiple of the block) with a NaN, and 3 of 100 (fewer values than
/// threads).
#[test]
fn softmax_matches_cpu() {
    let mut rng = Rng::new(91);
    for (n_rows, row_len) in [(4, 5000), (3, 100)] {
        let mut x = gaussian_row(n_rows * row_len, 5.0, &mut rng);
        x[17] = f32::NAN;
        let cpu = CpuBackend::new();
        let mut want = cpu.upload(&x).unwrap();
        cpu.softmax_rows(&mut want, n_rows, row_len).unwrap();
        let mut buffer = DeviceBuffer::from_floats(&x);
        let (mut x_ptr, mut row_len_arg) = (buffer.address(), row_len as u32);
        run(
            "softmax_rows",
            LaunchShape::linear(n_rows as u32, THREADS),
            &mut [ptr(&mut x_ptr), ptr(&mut row_len_arg)],
        );
        let n = x.len();
        check(&format!("softmax_rows {n_rows}x{row_len}"), &buffer.floats(n), &fetch(&cpu, &want, n), 2e-6);
    }
}

/// Rows of 3000 (float4 loads), 3001 (float loads) and 151936 (Qwen's vocabulary); top-k of 1, 8
/// and 64 (the kernel's largest k).
#[test]
fn argmax_and_top_k_match_cpu() {
    let mut rng = Rng::new(92);
    let n_rows = 5;
    let cpu = CpuBackend::new();
    for row_len in [3000, 3001, 151_936] {
        let x = awkward_logits(row_len, &mut rng);
        let cpu_x = cpu.upload(&x).unwrap();
        let mut input = DeviceBuffer::from_floats(&x);
        let (mut x_ptr, mut row_len_arg) = (input.address(), row_len as u32);

        let mut want = vec![0u32; n_rows];
        cpu.argmax_rows(&cpu_x, n_rows, row_len, &mut want).unwrap();
        let mut ids = DeviceBuffer::from_words(&[u32::MAX - 1; 5]);
        let mut ids_ptr = ids.address();
        run(
            "argmax_rows",
            LaunchShape::linear(n_rows as u32, ARGMAX_THREADS),
            &mut [ptr(&mut x_ptr), ptr(&mut row_len_arg), ptr(&mut ids_ptr)],
        );
        assert_eq!(ids.words(n_rows), want, "argmax over rows of {row_len}");
        println!("parity argmax_rows {row_len}: ids equal");

        for k in [1, 8, 64] {
            let (mut want_ids, mut want_lp) = (vec![0u32; n_rows * k], vec![0f32; n_rows * k]);
            cpu.top_k_rows(&cpu_x, n_rows, row_len, k, &mut want_ids, &mut want_lp).unwrap();
            let mut ids = DeviceBuffer::from_words(&vec![u32::MAX - 1; n_rows * k]);
            let mut log_probs = DeviceBuffer::zeroed(4 * n_rows * k);
            let (mut ids_ptr, mut lp_ptr, mut k_arg) = (ids.address(), log_probs.address(), k as u32);
            run(
                "top_k_rows",
                LaunchShape::linear(n_rows as u32, THREADS),
                &mut [
                    ptr(&mut x_ptr),
                    ptr(&mut row_len_arg),
                    ptr(&mut k_arg),
                    ptr(&mut ids_ptr),
                    ptr(&mut lp_ptr),
                ],
            );
            assert_eq!(ids.words(n_rows * k), want_ids, "top-{k} ids over rows of {row_len}");
            check(&format!("top_k_rows k={k} row {row_len}"), &log_probs.floats(n_rows * k), &want_lp, 1e-5);
        }
    }
}
