//! Times the CUDA matmul at the weight shapes of a Qwen3-8B Q4_K_M decode and verify step, and
//! reports each as a fraction of the device's measured read bandwidth: the per-kernel view that
//! `canopy bench` cannot give (and that nsys would, where it is installed). Then the other ops of
//! a decode step, at the same shapes, and decode attention at depths from 1 to 16384 keys.
//!
//! `cargo run --release -p canopy-kernels --example cuda_matmul_timing [N_ROWS,...]`
//! (default 1,8,23). Calls are recorded into a graph and replayed, so each time includes the gap
//! between dependent kernels of a graph, as in a recorded decode step; weights rotate over enough
//! copies to keep each matrix out of the 50 MB L2. Every call reads the same input, so its int8
//! copy is made once per replay, as for the q, k and v projections of a layer.

use std::time::Instant;

mod common;

use canopy_kernels::backend::cuda::CudaBackend;
use canopy_kernels::backend::{
    AttentionBatch, AttentionLayout, AttentionParams, Backend, BackendError, Mask, RopeParams, RopeStyle,
    SequenceSpec,
};
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
            let per_call = time_calls(&backend, &mut calls)?;
            let rate = bytes.len() as f64 / per_call;
            println!(
                "| {name} | {rows} x {cols} | {ty} | {n_rows} | {:.1} | {:.0} | {:.1} |",
                per_call * 1e6,
                rate / 1e9,
                100.0 * rate / bandwidth
            );
        }
    }
    step_ops(&backend)
}

type Outcome = Result<(), Box<dyn std::error::Error>>;
/// One op call, repeated by the timing.
type Op<'a> = &'a mut dyn FnMut() -> Result<(), BackendError>;

/// Median seconds per call of `calls` (CALLS_PER_GRAPH of them), recorded once and replayed.
fn time_calls(
    backend: &CudaBackend,
    calls: &mut dyn FnMut() -> Result<(), BackendError>,
) -> Result<f64, Box<dyn std::error::Error>> {
    // A first run outside the recording creates whatever the op allocates lazily.
    calls()?;
    let graph = backend.record(&mut *calls)?.ok_or("the CUDA backend did not record")?;
    let mut seconds = Vec::with_capacity(REPLAYS);
    for _ in 0..REPLAYS {
        backend.synchronize()?;
        let start = Instant::now();
        backend.replay(&graph)?;
        backend.synchronize()?;
        seconds.push(start.elapsed().as_secs_f64() / CALLS_PER_GRAPH as f64);
    }
    seconds.sort_by(f64::total_cmp);
    Ok(seconds[REPLAYS / 2])
}

/// The non-matmul ops of one Qwen3-8B decode step (one token), each timed like the matmuls.
fn step_ops(backend: &CudaBackend) -> Outcome {
    const HIDDEN: usize = 4096;
    const FFN: usize = 12288;
    const HEADS: usize = 32;
    const KV_HEADS: usize = 8;
    const HEAD_DIM: usize = 128;
    let hidden = backend.upload(&pseudo_random(HIDDEN, 1))?;
    let weight = backend.upload(&pseudo_random(HIDDEN, 2))?;
    let mut residual = backend.upload(&pseudo_random(HIDDEN, 3))?;
    let mut out = backend.zeros(FFN)?;
    let heads = backend.upload(&pseudo_random(HEADS * HEAD_DIM, 4))?;
    let head_weight = backend.upload(&pseudo_random(HEAD_DIM, 5))?;
    let mut q = backend.upload(&pseudo_random(HEADS * HEAD_DIM, 6))?;
    let positions = backend.upload_index(&[1234])?;
    let rope = RopeParams {
        n_heads: HEADS,
        head_dim: HEAD_DIM,
        rotary_dim: HEAD_DIM,
        theta: 1e6,
        style: RopeStyle::Neox,
    };
    let k = backend.upload(&pseudo_random(KV_HEADS * HEAD_DIM, 7))?;
    let mut pool = backend.kv_pool(4096 * KV_HEADS * HEAD_DIM)?;
    let slots = backend.upload_index(&[77])?;
    let gate = backend.upload(&pseudo_random(FFN, 8))?;
    let up = backend.upload(&pseudo_random(FFN, 9))?;
    println!();
    println!("| op (8B decode shape) | us per call |");
    println!("|---|---:|");
    let report = |name: &str, op: Op<'_>| -> Outcome {
        let mut calls = || (0..CALLS_PER_GRAPH).try_for_each(|_| op());
        let seconds = time_calls(backend, &mut calls)?;
        println!("| {name} | {:.2} |", seconds * 1e6);
        Ok(())
    };
    report("rms_norm 1 x 4096", &mut || backend.rms_norm(&hidden, &weight, 1, 1e-6, &mut out))?;
    report("add_rms_norm 1 x 4096", &mut || {
        backend.add_rms_norm(&mut residual, &hidden, &weight, 1, 1e-6, &mut out)
    })?;
    report("rms_norm 32 heads x 128", &mut || backend.rms_norm(&heads, &head_weight, HEADS, 1e-6, &mut out))?;
    report("rope 32 heads x 128", &mut || backend.rope(&mut q, &positions, 1, &rope))?;
    report("write_kv 1 x 1024", &mut || backend.write_kv(&mut pool, &k, &slots, 1, KV_HEADS * HEAD_DIM))?;
    report("swiglu 12288", &mut || backend.swiglu(&gate, &up, FFN, &mut out))?;
    report("add 4096", &mut || backend.add(&mut residual, &hidden, HIDDEN))?;
    for depth in [1, 32, 128, 1024, 4096, 16384] {
        attention_at(backend, depth, &report)?;
    }
    Ok(())
}

/// One decode row's attention (the 8B's 32 query and 8 KV heads of 128) over `depth` keys, in
/// blocks of 16 slots laid out in order.
fn attention_at(
    backend: &CudaBackend,
    depth: usize,
    report: &dyn Fn(&str, Op<'_>) -> Outcome,
) -> Result<(), Box<dyn std::error::Error>> {
    const BLOCK_SIZE: usize = 16;
    let params = AttentionParams { n_heads: 32, n_kv_heads: 8, head_dim: 128, scale: 128f32.powf(-0.5) };
    let table: Vec<u32> = (0..depth.div_ceil(BLOCK_SIZE) as u32).collect();
    let spec = SequenceSpec { n_past: depth - 1, n_new: 1, block_table: &table, mask: Mask::Causal };
    let layout = AttentionLayout::new(BLOCK_SIZE, &[spec])?;
    let batch = AttentionBatch::upload(backend, &layout)?;
    let pool_len = layout.slots_needed() * params.kv_row_len();
    let k_pool = backend.upload_kv_pool(&pseudo_random(pool_len, 10))?;
    let v_pool = backend.upload_kv_pool(&pseudo_random(pool_len, 11))?;
    let q = backend.upload(&pseudo_random(params.q_row_len(), 12))?;
    let mut out = backend.zeros(params.q_row_len())?;
    report(&format!("attention 1 row, {depth} keys"), &mut || {
        backend.attention(&q, &k_pool, &v_pool, &batch, &params, &mut out)
    })
}
