//! Elementwise ops: the SwiGLU activation and the residual add.

use rayon::prelude::*;

use super::memory::CpuTensor;
use crate::backend::{BackendError, shape};

/// Elements per rayon task; below this, splitting costs more than it saves.
const CHUNK: usize = 8192;

pub(super) fn swiglu(
    gate: &CpuTensor,
    up: &CpuTensor,
    len: usize,
    out: &mut CpuTensor,
) -> Result<(), BackendError> {
    let inputs = [("gate", gate.0.len()), ("up", up.0.len()), ("out", out.0.len())];
    shape::elementwise("swiglu", &inputs, len)?;
    out.0[..len]
        .par_chunks_mut(CHUNK)
        .zip(gate.0[..len].par_chunks(CHUNK))
        .zip(up.0[..len].par_chunks(CHUNK))
        .for_each(|((out, gate), up)| {
            for ((out, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                // silu(g) = g * sigmoid(g); for very negative g, exp overflows to inf and the
                // quotient goes to -0 as it should.
                *out = g / (1.0 + (-g).exp()) * u;
            }
        });
    Ok(())
}

pub(super) fn add(acc: &mut CpuTensor, x: &CpuTensor, len: usize) -> Result<(), BackendError> {
    shape::elementwise("add", &[("acc", acc.0.len()), ("x", x.0.len())], len)?;
    acc.0[..len].par_chunks_mut(CHUNK).zip(x.0[..len].par_chunks(CHUNK)).for_each(|(acc, x)| {
        for (a, &b) in acc.iter_mut().zip(x) {
            *a += b;
        }
    });
    Ok(())
}
