//! Row movement: embedding lookup, row gathers, KV pool writes and compaction.
//!
//! Index arrays live on the device, so out-of-range entries are not reported: the kernels skip
//! them and leave their destination rows untouched.

use cudarc::driver::CudaSlice;

use super::context::{Device, driver, grid, per_element, to_u32};
use super::memory::{CudaIndex, CudaKvPool, CudaTensor, CudaWeight};
use crate::backend::{BackendError, shape};
use crate::quant::GgmlType;

/// The embedding kernel for tables of type `ty`.
fn embed_kernel(op: &'static str, ty: GgmlType) -> Result<&'static str, BackendError> {
    Ok(match ty {
        GgmlType::F32 => "embed_f32",
        GgmlType::F16 => "embed_f16",
        GgmlType::Bf16 => "embed_bf16",
        GgmlType::Q8_0 => "embed_q8_0",
        GgmlType::Q4K => "embed_q4_k",
        GgmlType::Q5K => "embed_q5_k",
        GgmlType::Q6K => "embed_q6_k",
        _ => return Err(BackendError::Unsupported { op, ty }),
    })
}

pub(super) fn embed(
    device: &Device,
    table: &CudaWeight,
    ids: &CudaIndex,
    n_rows: usize,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    const OP: &str = "embed";
    shape::embed(table, ids, n_rows, out)?;
    if n_rows == 0 || table.cols == 0 {
        return Ok(());
    }
    let kernel = embed_kernel(OP, table.ty)?;
    let row_bytes = table.row_bytes as u64;
    let table_rows = to_u32(OP, "table rows", table.rows)?;
    let cols = to_u32(OP, "cols", table.cols)?;
    let mut launch = device.launch(OP, kernel)?;
    launch.arg(&table.bytes).arg(&row_bytes).arg(&table_rows).arg(&cols).arg(&ids.buf).arg(&mut out.buf);
    // SAFETY: the shape check guarantees `n_rows` ids and output rows; ids are bounds-checked.
    unsafe { launch.launch(grid(OP, n_rows, 256)?) }.map_err(driver(OP))?;
    Ok(())
}

pub(super) fn gather_rows(
    device: &Device,
    src: &CudaTensor,
    rows: &CudaIndex,
    n_rows: usize,
    row_len: usize,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    const OP: &str = "gather_rows";
    let src_rows = shape::gather_rows(src, rows, n_rows, row_len, out)?;
    let rows = IndexedRows { index: &rows.buf, n_rows, row_len };
    gather(device, OP, "gather_rows", (&src.buf, src_rows), rows, &mut out.buf)
}

/// Stores the f32 rows of `new` in the f16 pool, saturating as `f32_to_kv` does.
pub(super) fn write_kv(
    device: &Device,
    pool: &mut CudaKvPool,
    new: &CudaTensor,
    slots: &CudaIndex,
    n_rows: usize,
    row_len: usize,
) -> Result<(), BackendError> {
    const OP: &str = "write_kv";
    let pool_rows = shape::write_kv(pool, new, slots, n_rows, row_len)?;
    let rows = IndexedRows { index: &slots.buf, n_rows, row_len };
    scatter(device, OP, "write_kv_rows", &new.buf, rows, (&mut pool.buf, pool_rows))
}

pub(super) fn copy_kv(
    device: &Device,
    pool: &mut CudaKvPool,
    src_slots: &CudaIndex,
    dst_slots: &CudaIndex,
    n_rows: usize,
    row_len: usize,
) -> Result<(), BackendError> {
    const OP: &str = "copy_kv";
    let pool_rows = shape::copy_kv(pool, src_slots, dst_slots, n_rows, row_len)?;
    let staged_len = shape::elements(OP, n_rows, row_len)?;
    if staged_len == 0 {
        return Ok(());
    }
    // Every source row is staged before any destination is written, so they may overlap.
    let mut staged = device.stream.alloc_zeros::<u16>(staged_len).map_err(driver(OP))?;
    let sources = IndexedRows { index: &src_slots.buf, n_rows, row_len };
    gather(device, OP, "gather_kv_rows", (&pool.buf, pool_rows), sources, &mut staged)?;
    let destinations = IndexedRows { index: &dst_slots.buf, n_rows, row_len };
    scatter(device, OP, "scatter_kv_rows", &staged, destinations, (&mut pool.buf, pool_rows))
}

/// `n_rows` rows of `row_len` elements, row `i` paired with row `index[i]` of another array.
struct IndexedRows<'a> {
    index: &'a CudaSlice<u32>,
    n_rows: usize,
    row_len: usize,
}

/// `dst` row `i` = `src` row `index[i]` for `i < n_rows`, by `kernel` (rows.cu's gathers).
fn gather<T>(
    device: &Device,
    op: &'static str,
    kernel: &'static str,
    (src, src_rows): (&CudaSlice<T>, usize),
    rows: IndexedRows<'_>,
    dst: &mut CudaSlice<T>,
) -> Result<(), BackendError> {
    let total = shape::elements(op, rows.n_rows, rows.row_len)?;
    if total == 0 {
        return Ok(());
    }
    let src_rows = to_u32(op, "source rows", src_rows)?;
    let row_len = to_u32(op, "row_len", rows.row_len)?;
    let total_u64 = total as u64;
    let mut launch = device.launch(op, kernel)?;
    launch.arg(src).arg(&src_rows).arg(rows.index).arg(&row_len).arg(&total_u64).arg(dst);
    // SAFETY: the callers' shape checks size `index` and `dst`; source rows are bounds-checked.
    unsafe { launch.launch(per_element(op, total)?) }.map_err(driver(op))?;
    Ok(())
}

/// `dst` row `index[i]` = `src` row `i` for `i < n_rows`, by `kernel` (rows.cu's scatters, which
/// may convert the elements).
fn scatter<S, D>(
    device: &Device,
    op: &'static str,
    kernel: &'static str,
    src: &CudaSlice<S>,
    rows: IndexedRows<'_>,
    (dst, dst_rows): (&mut CudaSlice<D>, usize),
) -> Result<(), BackendError> {
    let total = shape::elements(op, rows.n_rows, rows.row_len)?;
    if total == 0 {
        return Ok(());
    }
    let dst_rows = to_u32(op, "destination rows", dst_rows)?;
    let row_len = to_u32(op, "row_len", rows.row_len)?;
    let total_u64 = total as u64;
    let mut launch = device.launch(op, kernel)?;
    launch.arg(src).arg(rows.index).arg(&row_len).arg(&total_u64).arg(&dst_rows).arg(dst);
    // SAFETY: the callers' shape checks size `src` and `index`; destination rows are bounds-checked.
    unsafe { launch.launch(per_element(op, total)?) }.map_err(driver(op))?;
    Ok(())
}
