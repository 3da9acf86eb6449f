//! Parity of every CUDA op with the CPU backend, the reference, on fresh random inputs.
//!
//! Each check prints `parity <op>: max error <e> (tolerance <t>)`, the error being
//! `max |cuda - cpu| / max(1, max |cpu|)`. The CUDA backend's KV pools hold f16, the CPU's f32: the tests fill
//! pools with values an f16 holds exactly (`common::kv_row`), so that both attend over the same
//! keys and values, and allow 1e-3 where new keys and values are rounded into the pools (2.4-4.1e-4
//! measured on an H100). Tolerances: exact (0) for pure data movement and for embedding lookups,
//! which decode identically; below 16 input rows, 2e-5 for matmul of the element-wise formats (same
//! values, different summation order over up to 5376 terms); up to 64 rows, 2e-2 for the
//! block-quantized ones, whose kernels (the dp4a matrix-vector kernels up to 4 rows, the int8
//! tensor-core kernels of mmq.cu from 5 to 64) round the activations to int8 in blocks of 32 (up to
//! max|x| / 254 per element; 1.2e-2 measured on an H200 for the dp4a kernels, the worst of about
//! 100 shapes), and the f16 kernels of mmq_f16.cu (Q4_K and Q6_K, 5 to 32 rows) round weights and
//! activations to f16 (2-6e-4 in the CPU emulator, kernels/emulator); beyond that the cuBLAS GEMM
//! rounds activations (and decoded weights) to f16, or to bf16 for bf16 weights, as it does from 16
//! rows for the element-wise formats: 2e-3, 1e-2 for bf16, 2e-5 for f32 weights (an f32 GEMM); 1e-5
//! for norms and attention, except 2e-3 for attention with heads of 128 (decode, verify and
//! prefill), which multiplies f16 copies of the queries and softmax weights with the keys and
//! values on the tensor cores (8.5e-4 measured on an H200); 2e-6 for elementwise ops and
//! softmax (expf within 2 ulp); 1e-4 for RoPE at positions up to 4096 (an ulp of difference in
//! `theta^x` turns into up to 4096 ulps of angle; 3.5e-6 measured on an H200), and for the fused
//! attention inputs, which rotate too (3.9e-6 measured).
//!
//! The matmul kernels' tests are in matmul.rs, the attention kernels' in attention.rs.
//!
//! Without a CUDA driver or device every test prints "skipped: no CUDA device" and passes, unless
//! `CANOPY_REQUIRE_CUDA=1`.

// The helpers unwrap like the tests calling them: an error there is a test failure.
#![allow(clippy::unwrap_used)]

mod attention;
#[path = "../common/mod.rs"]
mod common;
mod matmul;

use std::sync::OnceLock;

use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::backend::cuda::{CudaBackend, CudaGraphExec};
use canopy_kernels::backend::{
    AttentionBatch, AttentionInputs, AttentionLayout, AttentionParams, AttentionProjections,
    AttentionTargets, Backend, BackendError, DeviceArray, HeadParams, Mask, RopeParams, RopeStyle,
    SequenceSpec, TREE_ROOT, WeightMatrix,
};
use canopy_kernels::quant::GgmlType;
use common::{Floats, Rng, gaussian_row, kv_row, random_blocks};

/// The shared device, or `None` (after printing why) when there is none.
fn cuda() -> Option<&'static CudaBackend> {
    static BACKEND: OnceLock<Result<CudaBackend, String>> = OnceLock::new();
    match BACKEND.get_or_init(|| CudaBackend::new(0).map_err(|e| e.to_string())) {
        Ok(backend) => Some(backend),
        Err(why) => {
            assert!(
                std::env::var("CANOPY_REQUIRE_CUDA").as_deref() != Ok("1"),
                "CANOPY_REQUIRE_CUDA=1: {why}"
            );
            println!("skipped: no CUDA device ({why})");
            None
        }
    }
}

fn fetch<B: Backend>(backend: &B, tensor: &B::Tensor, len: usize) -> Vec<f32> {
    let mut out = vec![0.0; len];
    backend.download(tensor, &mut out).unwrap();
    out
}

/// The first `len` elements of a KV pool, as f32.
fn fetch_pool<B: Backend>(backend: &B, pool: &B::KvPool, len: usize) -> Vec<f32> {
    let mut out = vec![0.0; len];
    backend.download_kv_pool(pool, &mut out).unwrap();
    out
}

/// Asserts `got` matches `want` within `tolerance` (see the module docs) and prints the error.
fn check(label: &str, got: &[f32], want: &[f32], tolerance: f32) {
    assert_eq!(got.len(), want.len(), "{label}: lengths");
    let scale = want.iter().filter(|v| v.is_finite()).fold(1.0f32, |m, v| m.max(v.abs()));
    let mut worst = 0.0f32;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() || !w.is_finite() {
            assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{label}[{i}]: {g} vs {w}");
            continue;
        }
        let error = (g - w).abs() / scale;
        assert!(error <= tolerance, "{label}[{i}]: cuda {g}, cpu {w}, error {error:e} > {tolerance:e}");
        worst = worst.max(error);
    }
    println!("parity {label}: max error {worst:.2e} (tolerance {tolerance:.0e})");
}

/// Runs `op` on both backends with the same inputs and compares `len` elements of its output.
fn compare_tensor_op(
    label: &str,
    inputs: &[Vec<f32>],
    output_len: usize,
    tolerance: f32,
    cpu_op: impl Fn(&CpuBackend, &[<CpuBackend as Backend>::Tensor], &mut <CpuBackend as Backend>::Tensor),
    cuda_op: impl Fn(&CudaBackend, &[<CudaBackend as Backend>::Tensor], &mut <CudaBackend as Backend>::Tensor),
) {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let cpu_inputs: Vec<_> = inputs.iter().map(|x| cpu.upload(x).unwrap()).collect();
    let gpu_inputs: Vec<_> = inputs.iter().map(|x| gpu.upload(x).unwrap()).collect();
    let mut cpu_out = cpu.zeros(output_len).unwrap();
    let mut gpu_out = gpu.zeros(output_len).unwrap();
    cpu_op(&cpu, &cpu_inputs, &mut cpu_out);
    cuda_op(gpu, &gpu_inputs, &mut gpu_out);
    check(label, &fetch(gpu, &gpu_out, output_len), &fetch(&cpu, &cpu_out, output_len), tolerance);
}

/// Random GGUF bytes of a `rows x cols` weight: moderate floats, any quant bits.
fn random_weight(ty: GgmlType, rows: usize, cols: usize, rng: &mut Rng) -> Vec<u8> {
    random_blocks(ty, rows * cols / ty.block_size(), rng, Floats::Moderate)
}

const WEIGHT_TYPES: [GgmlType; 7] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Bf16,
    GgmlType::Q8_0,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

#[test]
fn embed_matches_cpu_for_every_supported_type() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(1);
    let (rows, cols) = (9, 768);
    let ids = [3u32, 0, 8, 3, 5];
    for ty in WEIGHT_TYPES {
        let bytes = random_weight(ty, rows, cols, &mut rng);
        let cpu_table = cpu.upload_weight(ty, rows, cols, &bytes).unwrap();
        let gpu_table = gpu.upload_weight(ty, rows, cols, &bytes).unwrap();
        let mut cpu_out = cpu.zeros(ids.len() * cols).unwrap();
        let mut gpu_out = gpu.zeros(ids.len() * cols).unwrap();
        cpu.embed(&cpu_table, &cpu.upload_index(&ids).unwrap(), ids.len(), &mut cpu_out).unwrap();
        gpu.embed(&gpu_table, &gpu.upload_index(&ids).unwrap(), ids.len(), &mut gpu_out).unwrap();
        let n = ids.len() * cols;
        check(&format!("embed {ty}"), &fetch(gpu, &gpu_out, n), &fetch(&cpu, &cpu_out, n), 0.0);
    }
}

#[test]
fn norms_match_cpu() {
    let mut rng = Rng::new(3);
    // One warp per row (128 wide, 11 rows leave a block part empty), one block per row (1000 and
    // 4096 wide), and the looping kernels (rows that are no whole float4, or too long to hold).
    for (n_rows, row_len) in [(11, 128), (5, 1000), (3, 4096), (2, 1001), (2, 16388)] {
        let x = gaussian_row(n_rows * row_len, 2.0, &mut rng);
        let delta = gaussian_row(n_rows * row_len, 1.0, &mut rng);
        let weight = gaussian_row(row_len, 1.0, &mut rng);
        let inputs = [x, delta, weight];
        compare_tensor_op(
            &format!("rms_norm {n_rows}x{row_len}"),
            &inputs,
            n_rows * row_len,
            1e-5,
            |b, i, out| b.rms_norm(&i[0], &i[2], n_rows, 1e-6, out).unwrap(),
            |b, i, out| b.rms_norm(&i[0], &i[2], n_rows, 1e-6, out).unwrap(),
        );
        let Some(gpu) = cuda() else { return };
        let cpu = CpuBackend::new();
        let n = n_rows * row_len;
        let (mut cpu_residual, mut gpu_residual) =
            (cpu.upload(&inputs[0]).unwrap(), gpu.upload(&inputs[0]).unwrap());
        let (mut cpu_out, mut gpu_out) = (cpu.zeros(n).unwrap(), gpu.zeros(n).unwrap());
        let (cpu_w, gpu_w) = (cpu.upload(&inputs[2]).unwrap(), gpu.upload(&inputs[2]).unwrap());
        let (cpu_d, gpu_d) = (cpu.upload(&inputs[1]).unwrap(), gpu.upload(&inputs[1]).unwrap());
        cpu.add_rms_norm(&mut cpu_residual, &cpu_d, &cpu_w, n_rows, 1e-5, &mut cpu_out).unwrap();
        gpu.add_rms_norm(&mut gpu_residual, &gpu_d, &gpu_w, n_rows, 1e-5, &mut gpu_out).unwrap();
        let label = format!("add_rms_norm {n_rows}x{row_len}");
        check(
            &format!("{label} residual"),
            &fetch(gpu, &gpu_residual, n),
            &fetch(&cpu, &cpu_residual, n),
            0.0,
        );
        check(&format!("{label} out"), &fetch(gpu, &gpu_out, n), &fetch(&cpu, &cpu_out, n), 1e-5);
    }
}

#[test]
fn elementwise_ops_match_cpu() {
    let mut rng = Rng::new(4);
    let len = 10_001;
    let mut gate = gaussian_row(len, 4.0, &mut rng);
    gate[0] = -200.0;
    let inputs = [gate, gaussian_row(len, 1.0, &mut rng)];
    compare_tensor_op(
        "swiglu",
        &inputs,
        len,
        2e-6,
        |b, i, out| b.swiglu(&i[0], &i[1], len, out).unwrap(),
        |b, i, out| b.swiglu(&i[0], &i[1], len, out).unwrap(),
    );
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let (mut cpu_acc, mut gpu_acc) = (cpu.upload(&inputs[0]).unwrap(), gpu.upload(&inputs[0]).unwrap());
    // Only the first `len - 1` elements are added: the last must stay.
    cpu.add(&mut cpu_acc, &cpu.upload(&inputs[1]).unwrap(), len - 1).unwrap();
    gpu.add(&mut gpu_acc, &gpu.upload(&inputs[1]).unwrap(), len - 1).unwrap();
    check("add", &fetch(gpu, &gpu_acc, len), &fetch(&cpu, &cpu_acc, len), 0.0);
}

#[test]
fn rope_matches_cpu_for_both_styles_and_partial_rotation() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(5);
    let positions = [0u32, 1, 7, 100, 1000, 4096];
    let n_rows = positions.len();
    for style in [RopeStyle::Neox, RopeStyle::Normal] {
        for rotary_dim in [128, 64] {
            let params = RopeParams { n_heads: 3, head_dim: 128, rotary_dim, theta: 1_000_000.0, style };
            let x = gaussian_row(n_rows * params.row_len(), 1.0, &mut rng);
            let (mut cpu_x, mut gpu_x) = (cpu.upload(&x).unwrap(), gpu.upload(&x).unwrap());
            cpu.rope(&mut cpu_x, &cpu.upload_index(&positions).unwrap(), n_rows, &params).unwrap();
            gpu.rope(&mut gpu_x, &gpu.upload_index(&positions).unwrap(), n_rows, &params).unwrap();
            let n = x.len();
            let label = format!("rope {style:?} rotary {rotary_dim}/128");
            check(&label, &fetch(gpu, &gpu_x, n), &fetch(&cpu, &cpu_x, n), 1e-4);
        }
    }
}

#[test]
fn row_movement_matches_cpu() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(6);
    let (pool_rows, row_len) = (16, 96);
    // Values an f16 pool holds exactly: every backend stores them unchanged.
    let pool = kv_row(pool_rows * row_len, 1.0, &mut rng);
    let new = kv_row(3 * row_len, 1.0, &mut rng);
    let (mut cpu_pool, mut gpu_pool) =
        (cpu.upload_kv_pool(&pool).unwrap(), gpu.upload_kv_pool(&pool).unwrap());
    let slots = [9u32, 2, 15];
    cpu.write_kv(&mut cpu_pool, &cpu.upload(&new).unwrap(), &cpu.upload_index(&slots).unwrap(), 3, row_len)
        .unwrap();
    gpu.write_kv(&mut gpu_pool, &gpu.upload(&new).unwrap(), &gpu.upload_index(&slots).unwrap(), 3, row_len)
        .unwrap();
    let n = pool.len();
    check("write_kv", &fetch_pool(gpu, &gpu_pool, n), &fetch_pool(&cpu, &cpu_pool, n), 0.0);

    // Overlapping sources and destinations: row 4 is read before it is overwritten.
    let (src, dst) = ([4u32, 6, 9, 1], [3u32, 4, 5, 6]);
    cpu.copy_kv(
        &mut cpu_pool,
        &cpu.upload_index(&src).unwrap(),
        &cpu.upload_index(&dst).unwrap(),
        4,
        row_len,
    )
    .unwrap();
    gpu.copy_kv(
        &mut gpu_pool,
        &gpu.upload_index(&src).unwrap(),
        &gpu.upload_index(&dst).unwrap(),
        4,
        row_len,
    )
    .unwrap();
    check("copy_kv", &fetch_pool(gpu, &gpu_pool, n), &fetch_pool(&cpu, &cpu_pool, n), 0.0);

    // The index array is rewritten in place before the gather reads it.
    let mut gpu_rows = gpu.upload_index(&[0, 0, 0, 0, 0]).unwrap();
    gpu.write_index(&mut gpu_rows, &[12, 3, 3]).unwrap();
    let (mut cpu_out, mut gpu_out) = (cpu.zeros(3 * row_len).unwrap(), gpu.zeros(3 * row_len).unwrap());
    let (cpu_src, gpu_src) = (cpu.upload(&pool).unwrap(), gpu.upload(&pool).unwrap());
    cpu.gather_rows(&cpu_src, &cpu.upload_index(&[12, 3, 3]).unwrap(), 3, row_len, &mut cpu_out).unwrap();
    gpu.gather_rows(&gpu_src, &gpu_rows, 3, row_len, &mut gpu_out).unwrap();
    check("gather_rows", &fetch(gpu, &gpu_out, 3 * row_len), &fetch(&cpu, &cpu_out, 3 * row_len), 0.0);
}

#[test]
fn out_of_range_indices_touch_nothing() {
    let Some(gpu) = cuda() else { return };
    let row_len = 8;
    let src = gpu.upload(&[1.0; 16]).unwrap();
    let mut out = gpu.upload(&[7.0; 16]).unwrap();
    gpu.gather_rows(&src, &gpu.upload_index(&[1, 99]).unwrap(), 2, row_len, &mut out).unwrap();
    let got = fetch(gpu, &out, 16);
    assert_eq!(&got[..8], &[1.0; 8]);
    assert_eq!(&got[8..], &[7.0; 8], "the row of the out-of-range index stays");
}

#[test]
fn softmax_matches_cpu() {
    let mut rng = Rng::new(7);
    let (n_rows, row_len) = (4, 5000);
    let mut x = gaussian_row(n_rows * row_len, 5.0, &mut rng);
    x[17] = f32::NAN;
    compare_tensor_op(
        "softmax_rows",
        &[x],
        n_rows * row_len,
        2e-6,
        |b, _, out| b.softmax_rows(out, n_rows, row_len).unwrap(),
        |b, _, out| b.softmax_rows(out, n_rows, row_len).unwrap(),
    );
}

/// Rows with ties, NaN and an all-NaN row, for argmax and top-k.
fn awkward_logits(row_len: usize, rng: &mut Rng) -> Vec<f32> {
    let mut x = gaussian_row(5 * row_len, 3.0, rng);
    x[10] = 50.0;
    x[20] = 50.0;
    x[row_len + 3] = f32::NAN;
    x[row_len + 4] = 40.0;
    x[2 * row_len..3 * row_len].fill(f32::NAN);
    x[3 * row_len..4 * row_len].fill(1.5);
    x
}

#[test]
fn argmax_and_top_k_match_cpu() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(8);
    for row_len in [3000, 151_936] {
        let x = awkward_logits(row_len, &mut rng);
        let n_rows = 5;
        let (cpu_x, gpu_x) = (cpu.upload(&x).unwrap(), gpu.upload(&x).unwrap());
        let (mut cpu_ids, mut gpu_ids) = (vec![0u32; n_rows], vec![u32::MAX; n_rows]);
        cpu.argmax_rows(&cpu_x, n_rows, row_len, &mut cpu_ids).unwrap();
        gpu.argmax_rows(&gpu_x, n_rows, row_len, &mut gpu_ids).unwrap();
        assert_eq!(gpu_ids, cpu_ids, "argmax over rows of {row_len}");
        println!("parity argmax_rows {row_len}: ids equal");
        for k in [1, 8, 64] {
            let (mut cpu_top, mut gpu_top) = (vec![0u32; n_rows * k], vec![u32::MAX; n_rows * k]);
            let (mut cpu_lp, mut gpu_lp) = (vec![0f32; n_rows * k], vec![0f32; n_rows * k]);
            cpu.top_k_rows(&cpu_x, n_rows, row_len, k, &mut cpu_top, &mut cpu_lp).unwrap();
            gpu.top_k_rows(&gpu_x, n_rows, row_len, k, &mut gpu_top, &mut gpu_lp).unwrap();
            assert_eq!(gpu_top, cpu_top, "top-{k} ids over rows of {row_len}");
            check(&format!("top_k_rows k={k} row {row_len}"), &gpu_lp, &cpu_lp, 1e-5);
        }
    }
}

#[test]
fn construction_without_a_driver_is_an_error_not_a_panic() {
    // On a machine with CUDA this opens the device; without, it must return an error.
    match CudaBackend::new(0) {
        Ok(backend) => assert!(backend.arch().starts_with("sm_"), "{backend:?}"),
        Err(error) => println!("skipped: no CUDA device ({error})"),
    }
}
