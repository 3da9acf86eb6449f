//! The shape contract of every op, written once for all backends.
//!
//! Buffers may be larger than an op needs (a step reuses buffers sized for the largest batch);
//! an op touches only the leading elements its explicit shapes describe. These checks run on the
//! host before any kernel, so a backend that passes them may index its buffers freely.

use super::attention::{AttentionBatch, AttentionParams};
use super::rope::RopeParams;
use super::{Backend, BackendError, DeviceArray, WeightMatrix};

/// `n_rows * row_len`, or an error when it overflows.
pub(crate) fn elements(op: &'static str, n_rows: usize, row_len: usize) -> Result<usize, BackendError> {
    n_rows
        .checked_mul(row_len)
        .ok_or_else(|| BackendError::shape(op, format!("{n_rows} rows of {row_len} overflow usize")))
}

/// Checks that buffer `what` holds at least `needed` elements.
pub(crate) fn holds(op: &'static str, what: &str, len: usize, needed: usize) -> Result<(), BackendError> {
    if len < needed {
        return Err(BackendError::shape(op, format!("{what} holds {len} elements, {needed} needed")));
    }
    Ok(())
}

/// Checks that buffer `what` holds `n_rows` rows of `row_len` elements.
pub(crate) fn holds_rows(
    op: &'static str,
    what: &str,
    len: usize,
    n_rows: usize,
    row_len: usize,
) -> Result<(), BackendError> {
    holds(op, what, len, elements(op, n_rows, row_len)?)
}

fn positive(op: &'static str, what: &str, value: usize) -> Result<(), BackendError> {
    if value == 0 {
        return Err(BackendError::shape(op, format!("{what} must be positive")));
    }
    Ok(())
}

/// The number of whole rows of `row_len` in a pool of `len` elements, which must be whole rows.
fn pool_rows(op: &'static str, len: usize, row_len: usize) -> Result<usize, BackendError> {
    positive(op, "row_len", row_len)?;
    if !len.is_multiple_of(row_len) {
        return Err(BackendError::shape(
            op,
            format!("pool of {len} elements is not whole rows of {row_len}"),
        ));
    }
    Ok(len / row_len)
}

pub(crate) fn embed(
    table: &impl WeightMatrix,
    ids: &impl DeviceArray,
    n_rows: usize,
    out: &impl DeviceArray,
) -> Result<(), BackendError> {
    const OP: &str = "embed";
    holds(OP, "ids", ids.len(), n_rows)?;
    holds_rows(OP, "out", out.len(), n_rows, table.cols())
}

/// Returns the row length (the weight's length).
pub(crate) fn rms_norm(
    op: &'static str,
    inputs: &[(&str, usize)],
    weight: &impl DeviceArray,
    n_rows: usize,
    eps: f32,
) -> Result<usize, BackendError> {
    let row_len = weight.len();
    positive(op, "weight length", row_len)?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(BackendError::shape(op, format!("eps {eps} must be finite and non-negative")));
    }
    for &(what, len) in inputs {
        holds_rows(op, what, len, n_rows, row_len)?;
    }
    Ok(row_len)
}

pub(crate) fn matmul(
    x: &impl DeviceArray,
    weight: &impl WeightMatrix,
    n_rows: usize,
    out: &impl DeviceArray,
) -> Result<(), BackendError> {
    const OP: &str = "matmul";
    holds_rows(OP, "x", x.len(), n_rows, weight.cols())?;
    holds_rows(OP, "out", out.len(), n_rows, weight.rows())
}

/// Checks both projections of [`Backend::swiglu_matmuls`] and its output; returns the number of
/// values of `act`.
pub(crate) fn swiglu_matmuls(
    x: &impl DeviceArray,
    n_rows: usize,
    (gate_weight, gate): (&impl WeightMatrix, &impl DeviceArray),
    (up_weight, up): (&impl WeightMatrix, &impl DeviceArray),
    act: &impl DeviceArray,
) -> Result<usize, BackendError> {
    const OP: &str = "swiglu_matmuls";
    if (gate_weight.rows(), gate_weight.cols()) != (up_weight.rows(), up_weight.cols()) {
        let detail = format!(
            "gate is {}x{} but up is {}x{}",
            gate_weight.rows(),
            gate_weight.cols(),
            up_weight.rows(),
            up_weight.cols()
        );
        return Err(BackendError::shape(OP, detail));
    }
    matmul(x, gate_weight, n_rows, gate)?;
    matmul(x, up_weight, n_rows, up)?;
    let len = elements(OP, n_rows, gate_weight.rows())?;
    holds(OP, "act", act.len(), len)?;
    Ok(len)
}

pub(crate) fn rope(
    x: &impl DeviceArray,
    positions: &impl DeviceArray,
    n_rows: usize,
    params: &RopeParams,
) -> Result<(), BackendError> {
    const OP: &str = "rope";
    params.validate(OP)?;
    holds(OP, "positions", positions.len(), n_rows)?;
    holds_rows(OP, "x", x.len(), n_rows, params.row_len())
}

/// Returns the number of rows in the pool.
pub(crate) fn write_kv(
    pool: &impl DeviceArray,
    new: &impl DeviceArray,
    slots: &impl DeviceArray,
    n_rows: usize,
    row_len: usize,
) -> Result<usize, BackendError> {
    const OP: &str = "write_kv";
    let pool_rows = pool_rows(OP, pool.len(), row_len)?;
    holds(OP, "slots", slots.len(), n_rows)?;
    holds_rows(OP, "new", new.len(), n_rows, row_len)?;
    Ok(pool_rows)
}

/// Returns the number of rows in the pool.
pub(crate) fn copy_kv(
    pool: &impl DeviceArray,
    src_slots: &impl DeviceArray,
    dst_slots: &impl DeviceArray,
    n_rows: usize,
    row_len: usize,
) -> Result<usize, BackendError> {
    const OP: &str = "copy_kv";
    let pool_rows = pool_rows(OP, pool.len(), row_len)?;
    holds(OP, "src_slots", src_slots.len(), n_rows)?;
    holds(OP, "dst_slots", dst_slots.len(), n_rows)?;
    Ok(pool_rows)
}

/// Returns the number of rows in `src`.
pub(crate) fn gather_rows(
    src: &impl DeviceArray,
    rows: &impl DeviceArray,
    n_rows: usize,
    row_len: usize,
    out: &impl DeviceArray,
) -> Result<usize, BackendError> {
    const OP: &str = "gather_rows";
    positive(OP, "row_len", row_len)?;
    holds(OP, "rows", rows.len(), n_rows)?;
    holds_rows(OP, "out", out.len(), n_rows, row_len)?;
    Ok(src.len() / row_len)
}

pub(crate) fn attention<B: Backend>(
    q: &B::Tensor,
    k_pool: &B::KvPool,
    v_pool: &B::KvPool,
    batch: &AttentionBatch<B>,
    params: &AttentionParams,
    out: &B::Tensor,
) -> Result<(), BackendError> {
    const OP: &str = "attention";
    params.validate(OP)?;
    let q_row_len = params.q_row_len();
    holds_rows(OP, "q", q.len(), batch.n_rows(), q_row_len)?;
    holds_rows(OP, "out", out.len(), batch.n_rows(), q_row_len)?;
    let kv_row_len = params.kv_row_len();
    for (what, pool) in [("k_pool", k_pool), ("v_pool", v_pool)] {
        let rows = pool_rows(OP, pool.len(), kv_row_len)?;
        if rows < batch.slots_needed() {
            let detail =
                format!("{what} has {rows} slots, the batch's block tables reach {}", batch.slots_needed());
            return Err(BackendError::shape(OP, detail));
        }
    }
    Ok(())
}

pub(crate) fn elementwise(
    op: &'static str,
    inputs: &[(&str, usize)],
    len: usize,
) -> Result<(), BackendError> {
    for &(what, buffer_len) in inputs {
        holds(op, what, buffer_len, len)?;
    }
    Ok(())
}

/// Checks the logits of a row-wise reduction and the host output of `per_row` values per row.
pub(crate) fn row_reduction(
    op: &'static str,
    x: &impl DeviceArray,
    n_rows: usize,
    row_len: usize,
    outputs: &[(&str, usize)],
    per_row: usize,
) -> Result<(), BackendError> {
    positive(op, "row_len", row_len)?;
    holds_rows(op, "logits", x.len(), n_rows, row_len)?;
    for &(what, len) in outputs {
        holds_rows(op, what, len, n_rows, per_row)?;
    }
    Ok(())
}
