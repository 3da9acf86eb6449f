//! Times the CUDA matmul at the weight shapes of a Qwen3-8B Q4_K_M decode and verify step, and
//! reports each as a fraction of the device's measured read bandwidth: the per-kernel view that
//! `canopy bench` cannot give (and that nsys would, where it is installed).
//!
//! `cargo run --release -p canopy-kernels --example cuda_matmul_timing [N_ROWS,...]`
//! (default 1,8,23). Calls are recorded into a graph and replayed, so launch gaps do not count;
//! weights rotate over enough copies to keep each matrix out of the 50 MB L2.

use std::time::Instant;

mod common;

use canopy_kernels::backend::Backend;
use canopy_kernels::backend::cuda::CudaBackend;
use canopy_kernels::quant::{GgmlType, quantize_row};
use common::pseudo_random;

/// (name, rows, cols, type) of one layer's matmuls and the LM head.
const SHAPES: [(&str, usize, usize, GgmlType); 7] = [
    ("attn_q", 4096, 4096, GgmlType::Q4K),
    ("attn_k", 1024, 4096, GgmlType::Q4K),
    ("attn_v", 1024, 4096, GgmlType::Q6K),
    ("attn_output", 4096, 4096, GgmlType::Q4K),
    ("ffn_gate/up", 12288, 4096, GgmlType::Q4K),
    ("ffn_down", 4096, 12288, GgmlType::Q6K),
    ("output", 151936, 4096, GgmlType::Q6K),
];
/// Bytes of weights each shape's rotation covers at least.
const ROTATION_BYTES: usize = 256 << 20;
const CALLS_PER_GRAPH: usize = 32;
const REPLAYS: usize = 11;
/// Distinct quantized rows; the rest repeat them (contents do not change the speed).
const DISTINCT_ROWS: usize = 64;

fn weight_bytes(ty: GgmlType, rows: usize, cols: usize) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let row_bytes = cols / ty.block_size() * ty.type_size();
    let mut distinct = vec![0u8; DISTINCT_ROWS * row_bytes];
    let values = pseudo_random(DISTINCT_ROWS * cols, rows as u64);
    for (row, out) in values.chunks_exact(cols).zip(distinct.chunks_exact_mut(row_bytes)) {
        quantize_row(ty, row, out)?;
    }
    Ok(distinct.iter().copied().cycle().take(rows * row_bytes).collect())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let batches: Vec<usize> = match std::env::args().nth(1) {
        Some(list) => list.split(',').map(str::parse).collect::<Result<_, _>>()?,
        None => vec![1, 8, 23],
    };
    let backend = CudaBackend::new(0).map_err(|error| format!("no usable CUDA device: {error}"))?;
    let bandwidth = backend.read_bandwidth()?;
    println!("read bandwidth {:.0} GB/s ({})", bandwidth / 1e9, backend.arch());
    println!("| weight | rows x cols | type | tokens | us per call | GB/s | % of read bandwidth |");
    println!("|---|---|---|---:|---:|---:|---:|");
    for (name, rows, cols, ty) in SHAPES {
        let bytes = weight_bytes(ty, rows, cols)?;
        let copies = ROTATION_BYTES.div_ceil(bytes.len()).max(1);
        let weights = (0..copies)
            .map(|_| backend.upload_weight(ty, rows, cols, &bytes))
            .collect::<Result<Vec<_>, _>>()?;
        for &n_rows in &batches {
            let x = backend.upload(&pseudo_random(n_rows * cols, 7))?;
            let mut out = backend.zeros(n_rows * rows)?;
            let mut calls = || {
                (0..CALLS_PER_GRAPH)
                    .try_for_each(|call| backend.matmul(&x, &weights[call % copies], n_rows, &mut out))
            };
            // A first run outside the recording creates whatever the matmul allocates lazily.
            calls()?;
            let graph = backend.record(&mut calls)?.ok_or("the CUDA backend did not record")?;
            let mut seconds = Vec::with_capacity(REPLAYS);
            for _ in 0..REPLAYS {
                backend.synchronize()?;
                let start = Instant::now();
                backend.replay(&graph)?;
                backend.synchronize()?;
                seconds.push(start.elapsed().as_secs_f64() / CALLS_PER_GRAPH as f64);
            }
            seconds.sort_by(f64::total_cmp);
            let per_call = seconds[REPLAYS / 2];
            let rate = bytes.len() as f64 / per_call;
            println!(
                "| {name} | {rows} x {cols} | {ty} | {n_rows} | {:.1} | {:.0} | {:.1} |",
                per_call * 1e6,
                rate / 1e9,
                100.0 * rate / bandwidth
            );
        }
    }
    Ok(())
}
