//! Row-wise reductions over logits: softmax, argmax, and top-k with log-probabilities.
//!
//! NaN logits count as `-inf`: they never win and carry no probability mass. A row whose largest
//! logit is infinite has no distribution: its softmax and log-probabilities are NaN.

use rayon::prelude::*;

use super::lanes::sum_map;
use super::memory::CpuTensor;
use crate::backend::{ARGMAX_NONE, BackendError, shape};

pub(super) fn softmax_rows(x: &mut CpuTensor, n_rows: usize, row_len: usize) -> Result<(), BackendError> {
    shape::row_reduction("softmax_rows", x, n_rows, row_len, &[], 0)?;
    x.0[..n_rows * row_len].par_chunks_mut(row_len).for_each(|row| {
        let max = row_max(row);
        for v in row.iter_mut() {
            *v = (ordering_key(*v) - max).exp();
        }
        let inv_sum = 1.0 / sum_map(row, |v| v);
        for v in row.iter_mut() {
            *v *= inv_sum;
        }
    });
    Ok(())
}

pub(super) fn argmax_rows(
    x: &CpuTensor,
    n_rows: usize,
    row_len: usize,
    out: &mut [u32],
) -> Result<(), BackendError> {
    shape::row_reduction("argmax_rows", x, n_rows, row_len, &[("out", out.len())], 1)?;
    out[..n_rows].par_iter_mut().zip(x.0[..n_rows * row_len].par_chunks(row_len)).for_each(|(out, row)| {
        let mut best = ARGMAX_NONE;
        let mut best_value = f32::NEG_INFINITY;
        for (id, &v) in row.iter().enumerate() {
            if ordering_key(v) > best_value {
                best = id as u32;
                best_value = ordering_key(v);
            }
        }
        *out = best;
    });
    Ok(())
}

pub(super) fn top_k_rows(
    logits: &CpuTensor,
    n_rows: usize,
    row_len: usize,
    k: usize,
    ids: &mut [u32],
    log_probs: &mut [f32],
) -> Result<(), BackendError> {
    const OP: &str = "top_k_rows";
    shape::row_reduction(
        OP,
        logits,
        n_rows,
        row_len,
        &[("ids", ids.len()), ("log_probs", log_probs.len())],
        k,
    )?;
    if k > row_len {
        return Err(BackendError::shape(OP, format!("k = {k} exceeds the row length {row_len}")));
    }
    if k == 0 {
        return Ok(());
    }
    let rows = logits.0[..n_rows * row_len].par_chunks(row_len);
    let outputs = ids[..n_rows * k].par_chunks_mut(k).zip(log_probs[..n_rows * k].par_chunks_mut(k));
    rows.zip(outputs).for_each(|(row, (ids, log_probs))| {
        select_top_k(row, ids, log_probs);
        let max = row_max(row);
        let log_sum = max + sum_map(row, |v| (ordering_key(v) - max).exp()).ln();
        for v in log_probs.iter_mut() {
            *v -= log_sum;
        }
    });
    Ok(())
}

/// The value a logit is compared and summed by: NaN becomes `-inf`.
fn ordering_key(v: f32) -> f32 {
    if v.is_nan() { f32::NEG_INFINITY } else { v }
}

fn row_max(row: &[f32]) -> f32 {
    row.iter().fold(f32::NEG_INFINITY, |max, &v| max.max(ordering_key(v)))
}

/// Fills `ids` and `values` (equally long, at most `row.len()`) with the best entries of `row`,
/// best first, lower id first among equals; `values` holds their ordering keys.
fn select_top_k(row: &[f32], ids: &mut [u32], values: &mut [f32]) {
    let k = ids.len();
    let mut filled = 0;
    for (id, &v) in row.iter().enumerate() {
        let v = ordering_key(v);
        if filled == k && v <= values[k - 1] {
            continue;
        }
        // Shift worse entries down one place (dropping the last when full), then insert.
        let mut at = filled.min(k - 1);
        while at > 0 && values[at - 1] < v {
            values[at] = values[at - 1];
            ids[at] = ids[at - 1];
            at -= 1;
        }
        values[at] = v;
        ids[at] = id as u32;
        filled = (filled + 1).min(k);
    }
}
