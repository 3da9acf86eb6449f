//! Row movement: embedding lookup, row gathers, and KV pool writes and compaction.

use rayon::prelude::*;

use super::memory::{CpuIndex, CpuTensor, CpuWeight};
use super::scratch::Scratch;
use crate::backend::{BackendError, WeightMatrix, shape};
use crate::quant::dequantize_row;

/// Checks every index against `limit` before anything is written, so a refused op changes nothing.
fn check_indices(op: &'static str, what: &str, indices: &[u32], limit: usize) -> Result<(), BackendError> {
    match indices.iter().position(|&i| i as usize >= limit) {
        Some(at) => {
            Err(BackendError::index(op, format!("{what}[{at}] = {} is not below {limit}", indices[at])))
        }
        None => Ok(()),
    }
}

pub(super) fn embed(
    table: &CpuWeight,
    ids: &CpuIndex,
    n_rows: usize,
    out: &mut CpuTensor,
) -> Result<(), BackendError> {
    const OP: &str = "embed";
    shape::embed(table, ids, n_rows, out)?;
    let ids = &ids.0[..n_rows];
    check_indices(OP, "ids", ids, table.rows())?;
    let cols = table.cols();
    if cols == 0 {
        return Ok(());
    }
    out.0[..n_rows * cols].par_chunks_mut(cols).zip(ids).try_for_each(|(out, &id)| {
        let bytes = table
            .encoded_row(id as usize)
            .ok_or_else(|| BackendError::index(OP, format!("table row {id} is missing")))?;
        dequantize_row(table.ty(), bytes, out)?;
        Ok(())
    })
}

pub(super) fn gather_rows(
    src: &CpuTensor,
    rows: &CpuIndex,
    n_rows: usize,
    row_len: usize,
    out: &mut CpuTensor,
) -> Result<(), BackendError> {
    let src_rows = shape::gather_rows(src, rows, n_rows, row_len, out)?;
    let rows = &rows.0[..n_rows];
    check_indices("gather_rows", "rows", rows, src_rows)?;
    for (out, &row) in out.0[..n_rows * row_len].chunks_exact_mut(row_len).zip(rows) {
        let start = row as usize * row_len;
        out.copy_from_slice(&src.0[start..start + row_len]);
    }
    Ok(())
}

pub(super) fn write_kv(
    pool: &mut CpuTensor,
    new: &CpuTensor,
    slots: &CpuIndex,
    n_rows: usize,
    row_len: usize,
) -> Result<(), BackendError> {
    let pool_rows = shape::write_kv(pool, new, slots, n_rows, row_len)?;
    let slots = &slots.0[..n_rows];
    check_indices("write_kv", "slots", slots, pool_rows)?;
    for (row, &slot) in new.0[..n_rows * row_len].chunks_exact(row_len).zip(slots) {
        let start = slot as usize * row_len;
        pool.0[start..start + row_len].copy_from_slice(row);
    }
    Ok(())
}

pub(super) fn copy_kv(
    pool: &mut CpuTensor,
    src_slots: &CpuIndex,
    dst_slots: &CpuIndex,
    n_rows: usize,
    row_len: usize,
    scratch: &Scratch,
) -> Result<(), BackendError> {
    const OP: &str = "copy_kv";
    let pool_rows = shape::copy_kv(pool, src_slots, dst_slots, n_rows, row_len)?;
    let (src_slots, dst_slots) = (&src_slots.0[..n_rows], &dst_slots.0[..n_rows]);
    check_indices(OP, "src_slots", src_slots, pool_rows)?;
    check_indices(OP, "dst_slots", dst_slots, pool_rows)?;
    let staged_len = shape::elements(OP, n_rows, row_len)?;
    scratch.with(staged_len, |staged| {
        for (staged, &slot) in staged.chunks_exact_mut(row_len).zip(src_slots) {
            let start = slot as usize * row_len;
            staged.copy_from_slice(&pool.0[start..start + row_len]);
        }
        for (staged, &slot) in staged.chunks_exact(row_len).zip(dst_slots) {
            let start = slot as usize * row_len;
            pool.0[start..start + row_len].copy_from_slice(staged);
        }
    });
    Ok(())
}
