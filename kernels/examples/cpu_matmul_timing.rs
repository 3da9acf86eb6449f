//! Times the CPU backend's matmul with a 4096 x 4096 Q4_K weight for 1 and 16 tokens.
//!
//! `cargo run --release -p canopy-kernels --example cpu_matmul_timing`

use std::time::{Duration, Instant};

mod common;

use canopy_kernels::backend::Backend;
use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::quant::{GgmlType, quantize_row};
use common::pseudo_random;

const DIM: usize = 4096;
const RUNS: usize = 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let backend = CpuBackend::new();
    let ty = GgmlType::Q4K;
    let row_bytes = DIM / ty.block_size() * ty.type_size();
    let values = pseudo_random(DIM * DIM, 1);
    let mut bytes = vec![0u8; DIM * row_bytes];
    for (row, out) in values.chunks_exact(DIM).zip(bytes.chunks_exact_mut(row_bytes)) {
        quantize_row(ty, row, out)?;
    }
    let weight = backend.upload_weight(ty, DIM, DIM, &bytes)?;
    println!("threads: {}", rayon::current_num_threads());
    for n_tokens in [1, 16] {
        let x = backend.upload(&pseudo_random(n_tokens * DIM, 2))?;
        let mut out = backend.zeros(n_tokens * DIM)?;
        backend.matmul(&x, &weight, n_tokens, &mut out)?;
        let mut times: Vec<Duration> = (0..RUNS)
            .map(|_| {
                let start = Instant::now();
                backend.matmul(&x, &weight, n_tokens, &mut out).map(|()| start.elapsed())
            })
            .collect::<Result<_, _>>()?;
        times.sort();
        let median = times[RUNS / 2].as_secs_f64() * 1e3;
        let best = times[0].as_secs_f64() * 1e3;
        let weight_gb_s = bytes.len() as f64 / (median * 1e-3) / 1e9;
        println!(
            "{DIM}x{DIM} {ty} matmul, m={n_tokens:2}: median {median:.2} ms, best {best:.2} ms \
             ({:.2} ms/token, weights read at {weight_gb_s:.1} GB/s)",
            median / n_tokens as f64
        );
    }
    Ok(())
}
