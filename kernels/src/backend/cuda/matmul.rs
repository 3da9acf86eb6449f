//! `out = x · weightᵀ` by matrix-vector kernels, for decode and verify-sized batches.
//!
//! Block-quantized weights (Q8_0, Q4_K, Q5_K, Q6_K) take the int8 kernels of matvec_quant.cu:
//! `quantize_q8` rounds `x` to int8 blocks of 32 into a copy kept with the tensor (reused until
//! the tensor is written again; norms and SwiGLU write it along with their output, norm.rs and
//! elementwise.rs), then dp4a dot products read each weight byte once; up to three
//! weights of one type applied to the same input share a launch. Verify-sized batches (5 to 64
//! rows, see mmq.rs) take the tensor-core kernels of mmq.cu on the same int8 copy instead.
//! Element-wise weights (F32, F16, BF16) take the float kernels of matvec_float.cu. The int8 and
//! the float matrix-vector kernels each have a decode kernel that applies each activation load to
//! four weight rows and a batch kernel for more than one input row.

use std::sync::{OnceLock, PoisonError};

use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig};

use super::context::{Device, driver, opted_in_from_env, per_element, to_u32};
use super::memory::{CudaTensor, CudaWeight, Q8_BLOCK};
use super::mmq::{self, Mmq, MmqInput};
use crate::backend::{BackendError, shape};
use crate::quant::GgmlType;

const OP: &str = "matmul";
/// Warps per block, which split each row between them (`MATVEC_WARPS`, `QMATVEC_WARPS`).
const WARPS: u32 = 4;
/// Activation blocks `quantize_q8` gives one thread each group of eight lanes.
const LANES_PER_Q8_BLOCK: usize = 8;
/// Weights the int8 kernels multiply by one input in one launch (`MAX_PROJECTIONS`).
const MAX_PROJECTIONS: usize = 3;

/// The kernels' `Projections` (quant.cuh), field for field.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(super) struct Projections {
    weight: [u64; MAX_PROJECTIONS],
    out: [u64; MAX_PROJECTIONS],
    row_bytes: [u64; MAX_PROJECTIONS],
    rows: [u32; MAX_PROJECTIONS],
    first_block: [u32; MAX_PROJECTIONS + 1],
    count: u32,
}

// SAFETY: plain old data with the C layout the kernels declare.
unsafe impl DeviceRepr for Projections {}

/// The shape of the work one block of a float kernel does.
struct FloatKernel {
    name: &'static str,
    /// Weight rows per block.
    rows: usize,
    /// Input rows per block (grid.y tiles them).
    tile: usize,
}

/// `out = x · weightᵀ` for each projection: runs of block-quantized weights of one type share a
/// launch (and the int8 copy of `x`); element-wise weights take one launch each. `epoch` is the
/// backend's: an int8 copy of `x` made in an earlier epoch is never reused. `mmq`, when given,
/// takes the batches it covers.
pub(super) fn matmuls(
    device: &Device,
    epoch: u64,
    x: &CudaTensor,
    n_rows: usize,
    projections: &mut [(&CudaWeight, &mut CudaTensor)],
    mmq: Option<&Mmq>,
) -> Result<(), BackendError> {
    for (weight, out) in projections.iter() {
        shape::matmul(x, *weight, n_rows, &**out)?;
    }
    if n_rows == 0 {
        return Ok(());
    }
    let mut rest = projections;
    while let Some(((weight, _), _)) = rest.split_first() {
        let ty = weight.ty;
        // The runs are never longer than MAX_PROJECTIONS, so the types of as many will do.
        let mut types = [ty; MAX_PROJECTIONS];
        for (slot, (w, _)) in types.iter_mut().zip(rest.iter()) {
            *slot = w.ty;
        }
        let cols = weight.cols;
        let mixed = |first, second| {
            (n_rows == 1 && mixed_decode_kernel(first, second).is_some())
                || mmq_taking(mmq, (first, Some(second)), n_rows, cols).is_some()
        };
        let run = launch_run(&types[..rest.len().min(MAX_PROJECTIONS)], mixed);
        let (group, tail) = rest.split_at_mut(run);
        match group {
            [(weight, out)] if q8_kernels(ty).is_none() => float_matmul(device, x, weight, n_rows, out)?,
            _ => quantized_matmuls(device, epoch, x, n_rows, group, mmq)?,
        }
        rest = tail;
    }
    Ok(())
}

/// How many of the leading projections, of weight types `types` (at least one), share the first
/// one's launch: up to [`MAX_PROJECTIONS`] of one block-quantized type, followed by those of a
/// second type where `mixed(first, second)` says a kernel takes both (a layer's q and k with a v
/// of another format: [`mixed_decode_kernel`] for one row, an f16 mmq kernel for a batch); an
/// element-wise weight has a launch of its own.
fn launch_run(types: &[GgmlType], mixed: impl Fn(GgmlType, GgmlType) -> bool) -> usize {
    let Some(&ty) = types.first() else { return 0 };
    if q8_kernels(ty).is_none() {
        return 1;
    }
    let limit = types.len().min(MAX_PROJECTIONS);
    let same = types[..limit].iter().take_while(|&&t| t == ty).count();
    match types.get(same) {
        Some(&other) if same < limit && mixed(ty, other) => {
            same + types[same..limit].iter().take_while(|&&t| t == other).count()
        }
        _ => same,
    }
}

/// The decode kernel for projections of type `first` followed by projections of type `second`
/// (matvec_quant.cu): Q4_K_M files keep a layer's q and k in Q4_K but half of its v in Q6_K, and
/// a 1024-row v launched alone costs as much in launch and tail as it streams.
fn mixed_decode_kernel(first: GgmlType, second: GgmlType) -> Option<&'static str> {
    match (first, second) {
        (GgmlType::Q4K, GgmlType::Q6K) => Some("matvec_q8_decode_q4_k_q6_k"),
        _ => None,
    }
}

/// The decode kernel whose lanes read whole lines of the Q4_K and Q6_K tiles (matvec_quant.cu's
/// `matvec_q8_lines`), for projections of type `first` followed by ones of type `second`, when
/// `CANOPY_CUDA_DECODE_LINES=1` selects it (read once); until it is measured against the kernels of
/// [`q8_kernels`], those stay the default.
fn line_decode_kernel(first: GgmlType, second: Option<GgmlType>) -> Option<&'static str> {
    static SELECTED: OnceLock<bool> = OnceLock::new();
    if !*SELECTED.get_or_init(|| opted_in_from_env("CANOPY_CUDA_DECODE_LINES")) {
        return None;
    }
    match (first, second) {
        (GgmlType::Q4K, None) => Some("matvec_q8_lines_q4_k"),
        (GgmlType::Q6K, None) => Some("matvec_q8_lines_q6_k"),
        (GgmlType::Q4K, Some(GgmlType::Q6K)) => Some("matvec_q8_lines_q4_k_q6_k"),
        _ => None,
    }
}

/// The kernels of a block-quantized type, by input rows: one, two, up to four, more.
fn q8_kernels(ty: GgmlType) -> Option<[&'static str; 4]> {
    match ty {
        GgmlType::Q8_0 => Some([
            "matvec_q8_decode_q8_0",
            "matvec_q8_pair_q8_0",
            "matvec_q8_quad_q8_0",
            "matvec_q8_batch_q8_0",
        ]),
        GgmlType::Q4K => Some([
            "matvec_q8_decode_q4_k",
            "matvec_q8_pair_q4_k",
            "matvec_q8_quad_q4_k",
            "matvec_q8_batch_q4_k",
        ]),
        GgmlType::Q5K => Some([
            "matvec_q8_decode_q5_k",
            "matvec_q8_pair_q5_k",
            "matvec_q8_quad_q5_k",
            "matvec_q8_batch_q5_k",
        ]),
        GgmlType::Q6K => Some([
            "matvec_q8_decode_q6_k",
            "matvec_q8_pair_q6_k",
            "matvec_q8_quad_q6_k",
            "matvec_q8_batch_q6_k",
        ]),
        _ => None,
    }
}

/// Up to MAX_PROJECTIONS weights of one block-quantized type, or of two types that one kernel
/// takes ([`launch_run`]), shapes already checked.
fn quantized_matmuls(
    device: &Device,
    epoch: u64,
    x: &CudaTensor,
    n_rows: usize,
    group: &mut [(&CudaWeight, &mut CudaTensor)],
    mmq: Option<&Mmq>,
) -> Result<(), BackendError> {
    let Some(((first, _), _)) = group.split_first() else { return Ok(()) };
    let (ty, cols) = (first.ty, first.cols);
    let [one, two, four, more] = q8_kernels(ty).ok_or(BackendError::Unsupported { op: OP, ty })?;
    // Where the second type of a mixed group starts, and that type.
    let second = group.iter().position(|(weight, _)| weight.ty != ty);
    let second_ty = second.map(|second| group[second].0.ty);
    let mmq = mmq_taking(mmq, (ty, second_ty), n_rows, cols);
    let line_kernel = if n_rows == 1 && mmq.is_none() { line_decode_kernel(ty, second_ty) } else { None };
    let mixed_kernel =
        match (second_ty, mmq, line_kernel) {
            (Some(second_ty), None, None) => Some(mixed_decode_kernel(ty, second_ty).ok_or_else(|| {
                BackendError::shape(OP, "projections of two types without a kernel for both")
            })?),
            _ => None,
        };
    // Up to four input rows, each activation load serves four weight rows; larger batches keep
    // two rows' weights in registers against tiles of eight input rows (matvec_quant.cu); mmq
    // blocks take a tile of weight rows by every input row.
    let rows_per_block = match (mmq, n_rows) {
        (Some(_), _) => mmq::TILE_ROWS,
        (None, 1..=4) => 4,
        (None, _) => 2,
    };

    let mut quantized = x.quantized.lock().unwrap_or_else(PoisonError::into_inner);
    let n_values = n_rows * cols;
    let validity = (epoch, n_values);
    let input = match mmq {
        Some(mmq) if mmq.takes_halves(ty, n_rows) => {
            let (halves, scales) = quantized.halves(
                device,
                OP,
                validity,
                n_rows,
                |values, scales| quantize(device, x, n_values, values, scales),
                |int8_scales, halves, scales| {
                    round_f16_rows(device, x, int8_scales, (n_rows, cols), halves, scales)
                },
            )?;
            MmqInput::Half(halves, scales)
        }
        _ => {
            let (values, scales) = quantized
                .int8(device, OP, validity, |values, scales| quantize(device, x, n_values, values, scales))?;
            MmqInput::Int8(values, scales)
        }
    };

    // The second type of a mixed decode group takes two rows a block (matvec_quant.cu).
    let (projections, blocks) = Projections::table(device, group, |p| {
        if mixed_kernel.is_some() && second.is_some_and(|second| p >= second) { 2 } else { rows_per_block }
    })?;
    if blocks == 0 {
        return Ok(());
    }
    if let Some(mmq) = mmq {
        let second =
            second.zip(second_ty).map(|(second, second_ty)| (second_ty, projections.first_block[second]));
        mmq.launch(device, ty, second, input, &projections, blocks, cols, n_rows)?;
    } else {
        let MmqInput::Int8(values, scales) = input else {
            return Err(BackendError::shape(OP, "f16 activations for a matrix-vector kernel"));
        };
        let kernel = match (line_kernel.or(mixed_kernel), n_rows) {
            (Some(kernel), 1) => kernel,
            (Some(_), _) => {
                return Err(BackendError::shape(OP, "projections of two types for more than one row"));
            }
            (None, 1) => one,
            (None, 2) => two,
            (None, 3 | 4) => four,
            (None, _) => more,
        };
        let config =
            LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (32 * WARPS, 1, 1), shared_mem_bytes: 0 };
        let cols = to_u32(OP, "weight cols", cols)?;
        let n_rows = to_u32(OP, "n_rows", n_rows)?;
        let mut launch = device.launch(OP, kernel)?;
        launch.arg(values).arg(scales).value(&projections).arg(&cols).arg(&n_rows);
        // A line kernel of one format takes all the blocks as its first format's.
        let second_block = match second {
            Some(second) => Some(projections.first_block[second]),
            None => line_kernel.map(|_| blocks),
        };
        if let Some(second_block) = &second_block {
            launch.arg(second_block);
        }
        // SAFETY: the copy holds the quantized `x`; each weight holds `rows * row_bytes` bytes in
        // the layout of layout.rs, whose rows the kernels read with aligned loads, and each output
        // holds n_rows * rows floats (shape-checked). A mixed kernel gets the first block of its
        // first projection of the second type, all of whose weights have that type, numbered at
        // two rows a block as that branch computes them; a line kernel, four rows a block in
        // both formats, reads its rows past the end in the zero rows that pad the tiles.
        unsafe { launch.launch(config) }.map_err(driver(OP))?;
    }
    Ok(())
}

/// `mmq` if its kernels take a batch of `n_rows` by `cols`-column weights of type `types.0`, followed
/// by ones of type `types.1` if given.
fn mmq_taking(
    mmq: Option<&Mmq>,
    (ty, second): (GgmlType, Option<GgmlType>),
    n_rows: usize,
    cols: usize,
) -> Option<&Mmq> {
    mmq.filter(|mmq| {
        mmq.covers(n_rows)
            && mmq::supports(ty, cols)
            && second.is_none_or(|second| mmq.takes_mixed(ty, second, n_rows))
    })
}

/// Rounds the first `n_values` of `x` (whole rows of whole blocks of 32) into its int8 copy.
fn quantize(
    device: &Device,
    x: &CudaTensor,
    n_values: usize,
    values: &mut CudaSlice<u8>,
    scales: &mut CudaSlice<f32>,
) -> Result<(), BackendError> {
    let n_blocks = to_u32(OP, "activation blocks", n_values / Q8_BLOCK)?;
    let mut launch = device.launch(OP, "quantize_q8")?;
    launch.arg(&x.buf).arg(&n_blocks).arg(values).arg(scales);
    // SAFETY: the callers pass n_values within `x`, a whole number of blocks; the copy holds one
    // byte per value and two floats per block.
    unsafe { launch.launch(per_element(OP, n_values / Q8_BLOCK * LANES_PER_Q8_BLOCK)?) }.map_err(driver(OP))
}

/// The f16 copy of `x`'s `n_rows` rows of `cols` values and its row scales, for the f16 mmq
/// kernels, from `x` and its int8 copy's block scales (convert.cu's `round_f16_rows`).
fn round_f16_rows(
    device: &Device,
    x: &CudaTensor,
    int8_scales: &CudaSlice<f32>,
    (n_rows, cols): (usize, usize),
    halves: &mut CudaSlice<u16>,
    scales: &mut CudaSlice<f32>,
) -> Result<(), BackendError> {
    const THREADS: u32 = 256;
    let chunks = cols.div_ceil(4 * THREADS as usize);
    let config = LaunchConfig {
        grid_dim: (to_u32(OP, "column chunks", chunks)?, to_u32(OP, "n_rows", n_rows)?, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let cols = to_u32(OP, "weight cols", cols)?;
    let mut launch = device.launch(OP, "round_f16_rows")?;
    launch.arg(&x.buf).arg(int8_scales).arg(&cols).arg(halves).arg(scales);
    // SAFETY: `x` holds n_rows * cols floats (shape-checked), cols a multiple of 256 (mmq's
    // groups), and its int8 copy two floats per 32 of them; the f16 copy holds as many halves and
    // a float per row.
    unsafe { launch.launch(config) }.map_err(driver(OP))
}

impl Projections {
    /// The table of `group`'s weights and outputs, projection p taking `rows_per_block(p)` rows a
    /// block, and the number of blocks.
    fn table(
        device: &Device,
        group: &mut [(&CudaWeight, &mut CudaTensor)],
        rows_per_block: impl Fn(usize) -> usize,
    ) -> Result<(Self, u32), BackendError> {
        let count = group.len();
        if count > MAX_PROJECTIONS {
            return Err(BackendError::shape(OP, format!("{count} projections in one launch")));
        }
        let mut projections =
            Projections { count: to_u32(OP, "projections", count)?, ..Projections::default() };
        let mut blocks = 0u32;
        for (p, (weight, out)) in group.iter_mut().enumerate() {
            projections.first_block[p] = blocks;
            // The backend's context tracks no events, so the guards hold nothing; the launch that
            // takes the table borrows the buffers.
            let (weight_ptr, _) = weight.bytes.device_ptr(&device.stream);
            let (out_ptr, _) = out.buf.device_ptr_mut(&device.stream);
            projections.weight[p] = weight_ptr;
            projections.out[p] = out_ptr;
            projections.row_bytes[p] = weight.row_bytes as u64;
            projections.rows[p] = to_u32(OP, "weight rows", weight.rows)?;
            blocks = blocks
                .checked_add(to_u32(OP, "weight row blocks", weight.rows.div_ceil(rows_per_block(p)))?)
                .ok_or_else(|| BackendError::shape(OP, "more weight row blocks than a grid holds"))?;
        }
        projections.first_block[count..].fill(blocks);
        Ok((projections, blocks))
    }
}

/// One element-wise weight (F32, F16, BF16) by the float kernels.
fn float_matmul(
    device: &Device,
    x: &CudaTensor,
    weight: &CudaWeight,
    n_rows: usize,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    if weight.rows == 0 {
        return Ok(());
    }
    let kernel = float_kernel(weight.ty, weight.cols, n_rows)?;
    let config = LaunchConfig {
        grid_dim: (
            to_u32(OP, "weight row blocks", weight.rows.div_ceil(kernel.rows))?,
            to_u32(OP, "input row tiles", n_rows.div_ceil(kernel.tile))?,
            1,
        ),
        block_dim: (32 * WARPS, 1, 1),
        shared_mem_bytes: 0,
    };
    let row_bytes = weight.row_bytes as u64;
    let rows = to_u32(OP, "weight rows", weight.rows)?;
    let cols = to_u32(OP, "weight cols", weight.cols)?;
    let n_rows = to_u32(OP, "n_rows", n_rows)?;
    let mut launch = device.launch(OP, kernel.name)?;
    launch
        .arg(&x.buf)
        .arg(&weight.bytes)
        .arg(&row_bytes)
        .arg(&rows)
        .arg(&cols)
        .arg(&n_rows)
        .arg(&mut out.buf);
    // SAFETY: the shape check guarantees `n_rows` rows of `x` and `out`; the weight holds
    // `rows * row_bytes` bytes by construction, and `float_kernel` only picks a 16-byte-load
    // kernel for rows that are whole numbers of such loads.
    unsafe { launch.launch(config) }.map_err(driver(OP))?;
    Ok(())
}

/// The float kernel for an element-wise type, row length and batch size.
fn float_kernel(ty: GgmlType, cols: usize, n_rows: usize) -> Result<FloatKernel, BackendError> {
    let (decode, batch, any, per_load) = match ty {
        GgmlType::F32 => ("matvec_decode_f32", "matvec_batch_f32", "matvec_any_f32", 4),
        GgmlType::F16 => ("matvec_decode_f16", "matvec_batch_f16", "matvec_any_f16", 8),
        GgmlType::Bf16 => ("matvec_decode_bf16", "matvec_batch_bf16", "matvec_any_bf16", 8),
        _ => return Err(BackendError::Unsupported { op: OP, ty }),
    };
    // Rows that are not whole 16-byte loads take the one-element-per-lane kernel, one warp (row)
    // per block slot.
    Ok(if !cols.is_multiple_of(per_load) {
        FloatKernel { name: any, rows: WARPS as usize, tile: 8 }
    } else if n_rows == 1 {
        FloatKernel { name: decode, rows: 4, tile: 1 }
    } else {
        FloatKernel { name: batch, rows: 1, tile: 8 }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launches_group_runs_of_one_quantized_type_and_mixed_projections() {
        use GgmlType::{Bf16, F16, Q4K, Q6K, Q8_0};
        // As for one row: Q4_K followed by Q6_K has a kernel.
        let mixed = |first, second| mixed_decode_kernel(first, second).is_some();
        let none = |_, _| false;
        let cases: [(&[GgmlType], bool, usize); 10] = [
            // A layer's q, k and v, and gate and up.
            (&[Q4K, Q4K, Q4K], true, 3),
            (&[Q4K, Q4K], false, 2),
            // Q4_K_M's mixed layers: one launch where a kernel takes both types, else two.
            (&[Q4K, Q4K, Q6K], true, 3),
            (&[Q4K, Q4K, Q6K], false, 2),
            // At most three, and the second type only after the first.
            (&[Q4K, Q6K, Q6K, Q6K], true, 3),
            (&[Q4K, Q6K, Q4K], true, 2),
            (&[Q6K, Q4K], true, 1),
            (&[Q8_0, Q6K], true, 1),
            // Element-wise weights launch alone.
            (&[F16, F16], true, 1),
            (&[Bf16], false, 1),
        ];
        for (types, has_mixed, run) in cases {
            let got = if has_mixed { launch_run(types, mixed) } else { launch_run(types, none) };
            assert_eq!(got, run, "{types:?}, mixed kernels: {has_mixed}");
        }
        assert_eq!(launch_run(&[], mixed), 0);
    }
}
