//! Rotary position embeddings, NeoX and interleaved pairing, with partial rotation.

use rayon::prelude::*;

use super::memory::{CpuIndex, CpuTensor};
use crate::backend::{BackendError, RopeParams, RopeStyle, shape};

const MAX_PAIRS: usize = RopeParams::MAX_ROTARY_DIM / 2;

pub(super) fn rope(
    x: &mut CpuTensor,
    positions: &CpuIndex,
    n_rows: usize,
    params: &RopeParams,
) -> Result<(), BackendError> {
    shape::rope(x, positions, n_rows, params)?;
    let pairs = params.rotary_dim / 2;
    // Computed in f32 like the reference implementations, so that results match theirs.
    let mut inv_freq = [0f32; MAX_PAIRS];
    for (i, f) in inv_freq[..pairs].iter_mut().enumerate() {
        *f = 1.0 / params.theta.powf((2 * i) as f32 / params.rotary_dim as f32);
    }
    let inv_freq = &inv_freq[..pairs];
    let row_len = params.row_len();
    x.0[..n_rows * row_len].par_chunks_mut(row_len).zip(&positions.0[..n_rows]).for_each(
        |(row, &position)| {
            let mut cos = [0f32; MAX_PAIRS];
            let mut sin = [0f32; MAX_PAIRS];
            for ((cos, sin), &f) in cos.iter_mut().zip(&mut sin).zip(inv_freq) {
                (*sin, *cos) = (position as f32 * f).sin_cos();
            }
            for head in row.chunks_exact_mut(params.head_dim) {
                rotate_head(&mut head[..params.rotary_dim], &cos[..pairs], &sin[..pairs], params.style);
            }
        },
    );
    Ok(())
}

/// Rotates the `rotary` leading dimensions of one head, pair `i` by the angle of `cos[i]`, `sin[i]`.
fn rotate_head(rotary: &mut [f32], cos: &[f32], sin: &[f32], style: RopeStyle) {
    let turn = |a: f32, b: f32, cos: f32, sin: f32| (a * cos - b * sin, a * sin + b * cos);
    match style {
        RopeStyle::Neox => {
            let (first, second) = rotary.split_at_mut(cos.len());
            for (((a, b), &cos), &sin) in first.iter_mut().zip(second).zip(cos).zip(sin) {
                (*a, *b) = turn(*a, *b, cos, sin);
            }
        }
        RopeStyle::Normal => {
            for ((pair, &cos), &sin) in rotary.as_chunks_mut::<2>().0.iter_mut().zip(cos).zip(sin) {
                (pair[0], pair[1]) = turn(pair[0], pair[1], cos, sin);
            }
        }
    }
}
