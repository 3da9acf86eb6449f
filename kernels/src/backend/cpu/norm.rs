//! RMS normalisation, alone and fused with the residual add that precedes it.

use rayon::prelude::*;

use super::lanes::sum_map;
use super::memory::CpuTensor;
use crate::backend::{BackendError, shape};

/// Elements per rayon task at least; per-head norms have rows of only 64 to 256 elements.
const MIN_ELEMENTS_PER_TASK: usize = 4096;

pub(super) fn rms_norm(
    x: &CpuTensor,
    weight: &CpuTensor,
    n_rows: usize,
    eps: f32,
    out: &mut CpuTensor,
) -> Result<(), BackendError> {
    let inputs = [("x", x.0.len()), ("out", out.0.len())];
    let row_len = shape::rms_norm("rms_norm", &inputs, weight, n_rows, eps)?;
    let len = n_rows * row_len;
    out.0[..len]
        .par_chunks_mut(row_len)
        .zip(x.0[..len].par_chunks(row_len))
        .with_min_len(rows_per_task(row_len))
        .for_each(|(out, x)| normalize(x, &weight.0, eps, out));
    Ok(())
}

pub(super) fn add_rms_norm(
    residual: &mut CpuTensor,
    delta: &CpuTensor,
    weight: &CpuTensor,
    n_rows: usize,
    eps: f32,
    out: &mut CpuTensor,
) -> Result<(), BackendError> {
    let inputs = [("residual", residual.0.len()), ("delta", delta.0.len()), ("out", out.0.len())];
    let row_len = shape::rms_norm("add_rms_norm", &inputs, weight, n_rows, eps)?;
    let len = n_rows * row_len;
    residual.0[..len]
        .par_chunks_mut(row_len)
        .zip(delta.0[..len].par_chunks(row_len))
        .zip(out.0[..len].par_chunks_mut(row_len))
        .with_min_len(rows_per_task(row_len))
        .for_each(|((residual, delta), out)| {
            for (r, d) in residual.iter_mut().zip(delta) {
                *r += d;
            }
            normalize(residual, &weight.0, eps, out);
        });
    Ok(())
}

fn rows_per_task(row_len: usize) -> usize {
    MIN_ELEMENTS_PER_TASK.div_ceil(row_len).max(1)
}

/// `out = x / sqrt(mean(x²) + eps) * weight` for one row.
fn normalize(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let sum_squares = sum_map(x, |v| v * v);
    let inv_rms = 1.0 / (sum_squares / x.len() as f32 + eps).sqrt();
    for ((out, &x), &w) in out.iter_mut().zip(x).zip(weight) {
        *out = x * inv_rms * w;
    }
}
