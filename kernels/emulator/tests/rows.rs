//! Row movement (rows.cu), emulated, against the CPU backend: the embedding lookup of every
//! table format, and the gather and scatter kernels as `gather_rows`, `write_kv` (into an f16
//! pool) and `copy_kv` (gather into a staging buffer, then scatter) use them, with out-of-range
//! indices skipped.
//!
//! Tolerance 0 throughout: the kernels move values or decode them exactly as the CPU does, and
//! round to f16 as the `half` crate does.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::backend::Backend;
use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::quant::GgmlType;
use common::{Rng, gaussian_row, kv_row};
use emulated::{DeviceBuffer, DeviceWeight, check, fetch, ptr, run};

/// rows.rs's launch of gather_rows and scatter_rows: a thread per element, 256 a block.
fn per_element(total: usize) -> LaunchShape {
    LaunchShape::linear(total.div_ceil(256) as u32, 256)
}

fn embed_kernel(ty: GgmlType) -> &'static str {
    match ty {
        GgmlType::F32 => "embed_f32",
        GgmlType::F16 => "embed_f16",
        GgmlType::Bf16 => "embed_bf16",
        GgmlType::Q8_0 => "embed_q8_0",
        GgmlType::Q4K => "embed_q4_k",
        GgmlType::Q5K => "embed_q5_k",
        GgmlType::Q6K => "embed_q6_k",
        _ => unreachable!("the embedding kernels' formats"),
    }
}

/// The device test's table of 9 rows of 768 and a wider one of 5376, looked up by ids with
/// repeats; a block a row of 256 threads, as rows.rs launches it. An id past the table (99)
/// leaves its output row untouched.
#[test]
fn embed_matches_cpu_for_every_format() {
    let mut rng = Rng::new(101);
    let ids = [3u32, 0, 8, 3, 5];
    let cpu = CpuBackend::new();
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Bf16,
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
    ] {
        for (rows, cols) in [(9, 768), (9, 5376)] {
            let mut table = DeviceWeight::random(ty, rows, cols, &mut rng);
            let cpu_table = cpu.upload_weight(ty, rows, cols, &table.gguf).unwrap();
            let mut want = cpu.zeros(ids.len() * cols).unwrap();
            cpu.embed(&cpu_table, &cpu.upload_index(&ids).unwrap(), ids.len(), &mut want).unwrap();

            let with_stray: Vec<u32> = ids.iter().copied().chain([99]).collect();
            let mut ids_buf = DeviceBuffer::from_words(&with_stray);
            let mut out = DeviceBuffer::from_floats(&vec![f32::NAN; with_stray.len() * cols]);
            let (mut table_ptr, mut ids_ptr, mut out_ptr) =
                (table.device.address(), ids_buf.address(), out.address());
            let (mut row_bytes, mut table_rows, mut cols_arg) =
                (table.row_bytes as u64, rows as u32, cols as u32);
            run(
                embed_kernel(ty),
                LaunchShape::linear(with_stray.len() as u32, 256),
                &mut [
                    ptr(&mut table_ptr),
                    ptr(&mut row_bytes),
                    ptr(&mut table_rows),
                    ptr(&mut cols_arg),
                    ptr(&mut ids_ptr),
                    ptr(&mut out_ptr),
                ],
            );
            let got = out.floats(with_stray.len() * cols);
            let n = ids.len() * cols;
            check(&format!("{} {rows}x{cols}", embed_kernel(ty)), &got[..n], &fetch(&cpu, &want, n), 0.0);
            assert!(got[n..].iter().all(|v| v.is_nan()), "{ty}: the out-of-range id's row stays");
        }
    }
}

/// Launches one of rows.cu's gathers (`gather_rows`, `gather_kv_rows`).
fn gather(
    kernel: &str,
    src: &mut DeviceBuffer,
    src_rows: usize,
    index: &[u32],
    row_len: usize,
    dst: &mut DeviceBuffer,
) {
    let mut index_buf = DeviceBuffer::from_words(index);
    let (mut src_ptr, mut index_ptr, mut dst_ptr) = (src.address(), index_buf.address(), dst.address());
    let (mut src_rows, mut row_len_arg, mut total) =
        (src_rows as u32, row_len as u32, (index.len() * row_len) as u64);
    run(
        kernel,
        per_element(index.len() * row_len),
        &mut [
            ptr(&mut src_ptr),
            ptr(&mut src_rows),
            ptr(&mut index_ptr),
            ptr(&mut row_len_arg),
            ptr(&mut total),
            ptr(&mut dst_ptr),
        ],
    );
}

/// Launches one of rows.cu's scatters (`write_kv_rows`, `scatter_kv_rows`).
fn scatter(
    kernel: &str,
    src: &mut DeviceBuffer,
    index: &[u32],
    row_len: usize,
    dst_rows: usize,
    dst: &mut DeviceBuffer,
) {
    let mut index_buf = DeviceBuffer::from_words(index);
    let (mut src_ptr, mut index_ptr, mut dst_ptr) = (src.address(), index_buf.address(), dst.address());
    let (mut row_len_arg, mut total, mut dst_rows) =
        (row_len as u32, (index.len() * row_len) as u64, dst_rows as u32);
    run(
        kernel,
        per_element(index.len() * row_len),
        &mut [
            ptr(&mut src_ptr),
            ptr(&mut index_ptr),
            ptr(&mut row_len_arg),
            ptr(&mut total),
            ptr(&mut dst_rows),
            ptr(&mut dst_ptr),
        ],
    );
}

/// The f16 values an f16 KV pool stores for `values`.
fn as_kv(values: &[f32]) -> Vec<f32> {
    values.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
}

/// The device test's sequence on an f16 pool of 16 rows of 96: write_kv of 3 rows of f32 (rounded
/// to f16 as the CPU's values round), copy_kv with overlapping sources and destinations (row 4 is
/// read before it is overwritten), then indices past the pool: a scatter leaves that pool row as
/// it was. And gather_rows on f32 rows, with a repeated row and one past the source, whose output
/// row stays as it was.
#[test]
fn row_movement_matches_cpu() {
    let mut rng = Rng::new(102);
    let (pool_rows, row_len) = (16, 96);
    let pool = kv_row(pool_rows * row_len, 1.0, &mut rng);
    let new = gaussian_row(3 * row_len, 1.0, &mut rng);
    let n = pool.len();
    let cpu = CpuBackend::new();
    let mut cpu_pool = cpu.upload_kv_pool(&pool).unwrap();
    let mut device_pool = DeviceBuffer::from_halves(&pool);

    let slots = [9u32, 2, 15];
    cpu.write_kv(&mut cpu_pool, &cpu.upload(&new).unwrap(), &cpu.upload_index(&slots).unwrap(), 3, row_len)
        .unwrap();
    scatter(
        "write_kv_rows",
        &mut DeviceBuffer::from_floats(&new),
        &slots,
        row_len,
        pool_rows,
        &mut device_pool,
    );
    check("write_kv_rows", &device_pool.halves(n), &as_kv(&fetch(&cpu, &cpu_pool, n)), 0.0);

    let (src, dst) = ([4u32, 6, 9, 1], [3u32, 4, 5, 6]);
    let (src_index, dst_index) = (cpu.upload_index(&src).unwrap(), cpu.upload_index(&dst).unwrap());
    cpu.copy_kv(&mut cpu_pool, &src_index, &dst_index, 4, row_len).unwrap();
    let mut staged = DeviceBuffer::zeroed(2 * 4 * row_len);
    gather("gather_kv_rows", &mut device_pool, pool_rows, &src, row_len, &mut staged);
    scatter("scatter_kv_rows", &mut staged, &dst, row_len, pool_rows, &mut device_pool);
    let label = "gather_kv_rows + scatter_kv_rows as copy_kv";
    check(label, &device_pool.halves(n), &as_kv(&fetch(&cpu, &cpu_pool, n)), 0.0);

    let before = device_pool.halves(n);
    scatter(
        "write_kv_rows",
        &mut DeviceBuffer::from_floats(&new),
        &[99, 0, 99],
        row_len,
        pool_rows,
        &mut device_pool,
    );
    let after = device_pool.halves(n);
    assert_eq!(&after[..row_len], &as_kv(&new[row_len..2 * row_len]), "the in-range row is written");
    assert_eq!(&after[row_len..], &before[row_len..], "out-of-range destinations write nothing");

    let rows = [12u32, 3, 3];
    let table = gaussian_row(pool_rows * row_len, 1.0, &mut rng);
    let mut want = cpu.zeros(3 * row_len).unwrap();
    cpu.gather_rows(&cpu.upload(&table).unwrap(), &cpu.upload_index(&rows).unwrap(), 3, row_len, &mut want)
        .unwrap();
    let mut out = DeviceBuffer::from_floats(&vec![f32::NAN; 4 * row_len]);
    gather(
        "gather_rows",
        &mut DeviceBuffer::from_floats(&table),
        pool_rows,
        &[12, 3, 99, 3],
        row_len,
        &mut out,
    );
    let got = out.floats(4 * row_len);
    let want = fetch(&cpu, &want, 3 * row_len);
    let got_in_range: Vec<f32> =
        [0, 1, 3].iter().flat_map(|&r| got[r * row_len..(r + 1) * row_len].to_vec()).collect();
    check("gather_rows", &got_in_range, &want, 0.0);
    assert!(
        got[2 * row_len..3 * row_len].iter().all(|v| v.is_nan()),
        "an out-of-range source row writes nothing"
    );
}

/// Values past f16's range saturate at its largest finite magnitude instead of becoming infinite;
/// NaN stays NaN and the rest round to nearest.
#[test]
fn write_kv_saturates_beyond_f16() {
    let row = [1.0e6f32, -7.0e4, 65504.0, 0.1, f32::NAN, -3.0e-8, 65519.0, 65520.0];
    let mut pool = DeviceBuffer::from_halves(&[0.0; 8]);
    scatter("write_kv_rows", &mut DeviceBuffer::from_floats(&row), &[0], row.len(), 1, &mut pool);
    let got = pool.halves(row.len());
    let want = [65504.0, -65504.0, 65504.0, half::f16::from_f32(0.1).to_f32()];
    assert_eq!(&got[..4], &want);
    assert!(got[4].is_nan());
    assert_eq!(got[5], half::f16::from_f32(-3.0e-8).to_f32());
    assert_eq!(&got[6..], &[65504.0, 65504.0], "saturated before rounding");
}
