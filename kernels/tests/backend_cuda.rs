//! Parity of every CUDA op with the CPU backend, the reference, on fresh random inputs.
//!
//! Each check prints `parity <op>: max error <e> (tolerance <t>)`, the error being
//! `max |cuda - cpu| / max(1, max |cpu|)`. Tolerances: exact (0) for pure data movement and for
//! embedding lookups, which decode identically; below 16 input rows, 2e-5 for matmul of the
//! element-wise formats (same values, different summation order over up to 5376 terms); up to 64
//! rows, 2e-2 for the block-quantized ones, whose kernels (the dp4a matrix-vector kernels up to 4
//! rows, the int8 tensor-core kernels of mmq.cu from 5 to 64) round the activations to int8 in
//! blocks of 32 (up to max|x| / 254 per element; 1.2e-2 measured on an H200 for the dp4a kernels,
//! the worst of about 100 shapes); beyond that the cuBLAS GEMM rounds activations (and decoded
//! weights) to f16, or to bf16 for bf16 weights, as it does from 16 rows for the element-wise
//! formats: 2e-3, 1e-2 for bf16, 2e-5 for f32 weights (an f32 GEMM); 1e-5 for norms and attention,
//! except 2e-3 for prefill-sized attention (65 rows or more, heads of 128), which multiplies f16
//! copies of the queries, keys, values and softmax weights on the tensor cores (8.5e-4 measured on
//! an H200);
//! 2e-6 for elementwise ops and softmax (expf within 2 ulp); 1e-4 for RoPE at positions up to
//! 4096 (an ulp of difference in `theta^x` turns into up to 4096 ulps of angle; 3.5e-6 measured
//! on an H200), and for the fused attention inputs, which rotate too (3.9e-6 measured).
//!
//! Without a CUDA driver or device every test prints "skipped: no CUDA device" and passes, unless
//! `CANOPY_REQUIRE_CUDA=1`.

// The helpers unwrap like the tests calling them: an error there is a test failure.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::OnceLock;

use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::backend::cuda::{CudaBackend, CudaGraphExec};
use canopy_kernels::backend::{
    AttentionBatch, AttentionInputs, AttentionLayout, AttentionParams, AttentionTargets, Backend,
    BackendError, DeviceArray, Mask, RopeParams, RopeStyle, SequenceSpec, TREE_ROOT,
};
use canopy_kernels::quant::GgmlType;
use common::{Floats, Rng, gaussian_row, random_blocks};

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
fn matmul_matches_cpu_for_every_supported_type_and_batch() {
    let Some(gpu) = cuda() else { return };
    let mut rng = Rng::new(2);
    // 37 rows leave a partial block of rows. 256 columns leave warps without a group of blocks,
    // 1280 a partial group (five Q4_K blocks), 5376 more groups than warps (each warp loops);
    // 1030 columns are no whole number of 16-byte loads for the element-wise formats. 2, 3 and 4
    // input rows take the small-batch kernels (3 a partial tile), 5, 8 and 11 the batch kernel for
    // the element-wise formats and mmq for the block-quantized ones; 70 take the GEMM.
    let rows = 37;
    let element_wise = [GgmlType::F32, GgmlType::F16, GgmlType::Bf16].map(|ty| (ty, 1030));
    let shapes = WEIGHT_TYPES.iter().flat_map(|&ty| [(ty, 256), (ty, 1280), (ty, 5376)]).chain(element_wise);
    for (ty, cols) in shapes {
        matmul_parity(gpu, ty, (rows, cols), &[1, 2, 3, 4, 5, 8, 11, 70], &mut rng);
    }
    // One input row over more blocks of four weight rows than the GPU holds at once (1025 here,
    // the last one partial), with one group of columns (warps without one) or several per warp.
    for ty in WEIGHT_TYPES {
        for cols in [512, 5376] {
            matmul_parity(gpu, ty, (4099, cols), &[1], &mut rng);
        }
    }
}

/// A random `rows x cols` weight of type `ty` by random inputs of each batch size in `batches`,
/// on the device against the CPU.
fn matmul_parity(
    gpu: &CudaBackend,
    ty: GgmlType,
    (rows, cols): (usize, usize),
    batches: &[usize],
    rng: &mut Rng,
) {
    let cpu = CpuBackend::new();
    let bytes = random_weight(ty, rows, cols, rng);
    let cpu_weight = cpu.upload_weight(ty, rows, cols, &bytes).unwrap();
    let gpu_weight = gpu.upload_weight(ty, rows, cols, &bytes).unwrap();
    for &n_rows in batches {
        let x = gaussian_row(n_rows * cols, 1.0, rng);
        let mut cpu_out = cpu.zeros(n_rows * rows).unwrap();
        let mut gpu_out = gpu.zeros(n_rows * rows).unwrap();
        cpu.matmul(&cpu.upload(&x).unwrap(), &cpu_weight, n_rows, &mut cpu_out).unwrap();
        gpu.matmul(&gpu.upload(&x).unwrap(), &gpu_weight, n_rows, &mut gpu_out).unwrap();
        let n = n_rows * rows;
        let label = format!("matmul {ty} {rows}x{cols} by {n_rows}");
        check(&label, &fetch(gpu, &gpu_out, n), &fetch(&cpu, &cpu_out, n), matmul_tolerance(ty, n_rows));
    }
}

/// See the module docs: the block-quantized kernels round activations to int8 up to 64 rows;
/// larger batches, and batches of 16 rows or more of the element-wise formats, take the
/// tensor-core GEMM, whose operands are rounded to 16 bits.
fn matmul_tolerance(ty: GgmlType, n_rows: usize) -> f32 {
    let element_wise = matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16);
    match ty {
        _ if n_rows < 16 && element_wise => 2e-5,
        _ if n_rows <= 64 && !element_wise => 2e-2,
        GgmlType::F32 => 2e-5,
        GgmlType::Bf16 => 1e-2,
        _ => 2e-3,
    }
}

/// Verify-sized batches of the block-quantized formats take the int8 tensor-core kernels (mmq.cu).
/// 37 and 100 weight rows leave part of a 64-row tile empty; 256 columns are one group of the K
/// loop, 1280 five (K not split), 5376 twenty-one (split five ways, the last split shorter) and
/// 12800 fifty (split twelve ways by five groups, the last two splits empty, on all but the
/// smallest GPUs); 5, 8, 16, 23, 32 and 64 input rows fill or leave part of the tiles of 8, 16,
/// 24, 32 and 64.
#[test]
fn verify_batches_match_cpu_for_every_quantized_type() {
    let Some(gpu) = cuda() else { return };
    let mut rng = Rng::new(12);
    for ty in [GgmlType::Q8_0, GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        for (rows, cols) in
            [37, 100].into_iter().flat_map(|rows| [256, 1280, 5376, 12800].map(|cols| (rows, cols)))
        {
            matmul_parity(gpu, ty, (rows, cols), &[5, 8, 16, 23, 32, 64], &mut rng);
        }
    }
}

#[test]
fn unsupported_weight_types_are_refused() {
    let Some(gpu) = cuda() else { return };
    let bytes = vec![0u8; GgmlType::Q4_0.type_size()];
    let refused = gpu.upload_weight(GgmlType::Q4_0, 1, 32, &bytes).unwrap_err();
    assert_eq!(refused, BackendError::Unsupported { op: "upload_weight", ty: GgmlType::Q4_0 });
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

/// The fused attention inputs (per-head norms, RoPE, KV writes) against the CPU's six ops.
#[test]
fn attention_inputs_match_cpu() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(12);
    let positions = [0u32, 1, 7, 100, 1000, 4096];
    let slots = [9u32, 2, 15, 0, 11, 4];
    let (n_rows, pool_rows) = (positions.len(), 16);
    for style in [RopeStyle::Neox, RopeStyle::Normal] {
        for (n_heads, n_kv_heads, head_dim, rotary_dim) in [(32, 8, 128, 128), (4, 2, 64, 32), (6, 3, 96, 96)]
        {
            let rope = |n_heads| RopeParams { n_heads, head_dim, rotary_dim, theta: 1_000_000.0, style };
            let (q_rope, k_rope) = (rope(n_heads), rope(n_kv_heads));
            let host = [
                gaussian_row(n_rows * q_rope.row_len(), 1.0, &mut rng),
                gaussian_row(n_rows * k_rope.row_len(), 1.0, &mut rng),
                gaussian_row(n_rows * k_rope.row_len(), 1.0, &mut rng),
                gaussian_row(head_dim, 0.5, &mut rng).iter().map(|w| w + 1.0).collect(),
                gaussian_row(head_dim, 0.5, &mut rng).iter().map(|w| w + 1.0).collect(),
                gaussian_row(pool_rows * k_rope.row_len(), 1.0, &mut rng),
            ];
            let label = format!(
                "attention_inputs {style:?} {n_heads}/{n_kv_heads} heads of {head_dim}, rotary {rotary_dim}"
            );
            let on_cpu = fused_inputs(&cpu, &host, &positions, &slots, q_rope, k_rope);
            let on_gpu = fused_inputs(gpu, &host, &positions, &slots, q_rope, k_rope);
            for (name, (got, want)) in ["q", "k", "k_pool", "v_pool"].iter().zip(on_gpu.iter().zip(&on_cpu)) {
                check(&format!("{label}: {name}"), got, want, 1e-4);
            }
        }
    }
}

/// Runs `attention_inputs` on `backend` over the host tensors (q_raw, k_raw, v, q_norm, k_norm,
/// and the starting contents of both pools) and returns q, k and both pools.
fn fused_inputs<B: Backend>(
    backend: &B,
    host: &[Vec<f32>; 6],
    positions: &[u32],
    slots: &[u32],
    q_rope: RopeParams,
    k_rope: RopeParams,
) -> Vec<Vec<f32>> {
    let [q_raw, k_raw, v, q_norm, k_norm, pool] = host.each_ref().map(|data| backend.upload(data).unwrap());
    let (positions, slots) = (backend.upload_index(positions).unwrap(), backend.upload_index(slots).unwrap());
    let n_rows = positions.len();
    let inputs = AttentionInputs {
        q_raw: &q_raw,
        k_raw: &k_raw,
        v: &v,
        q_norm: &q_norm,
        k_norm: &k_norm,
        eps: 1e-6,
        positions: &positions,
        slots: &slots,
        n_rows,
        q_rope,
        k_rope,
    };
    let (mut q, mut k) = (backend.zeros(q_raw.len()).unwrap(), backend.zeros(k_raw.len()).unwrap());
    let (mut k_pool, mut v_pool) = (backend.upload(&host[5]).unwrap(), pool);
    let targets = AttentionTargets { q: &mut q, k: &mut k, k_pool: &mut k_pool, v_pool: &mut v_pool };
    backend.attention_inputs(&inputs, targets).unwrap();
    [&q, &k, &k_pool, &v_pool].map(|tensor| fetch(backend, tensor, tensor.len())).to_vec()
}

#[test]
fn row_movement_matches_cpu() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(6);
    let (pool_rows, row_len) = (16, 96);
    let pool = gaussian_row(pool_rows * row_len, 1.0, &mut rng);
    let new = gaussian_row(3 * row_len, 1.0, &mut rng);
    let (mut cpu_pool, mut gpu_pool) = (cpu.upload(&pool).unwrap(), gpu.upload(&pool).unwrap());
    let slots = [9u32, 2, 15];
    cpu.write_kv(&mut cpu_pool, &cpu.upload(&new).unwrap(), &cpu.upload_index(&slots).unwrap(), 3, row_len)
        .unwrap();
    gpu.write_kv(&mut gpu_pool, &gpu.upload(&new).unwrap(), &gpu.upload_index(&slots).unwrap(), 3, row_len)
        .unwrap();
    let n = pool.len();
    check("write_kv", &fetch(gpu, &gpu_pool, n), &fetch(&cpu, &cpu_pool, n), 0.0);

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
    check("copy_kv", &fetch(gpu, &gpu_pool, n), &fetch(&cpu, &cpu_pool, n), 0.0);

    // The index array is rewritten in place before the gather reads it.
    let mut gpu_rows = gpu.upload_index(&[0, 0, 0, 0, 0]).unwrap();
    gpu.write_index(&mut gpu_rows, &[12, 3, 3]).unwrap();
    let (mut cpu_out, mut gpu_out) = (cpu.zeros(3 * row_len).unwrap(), gpu.zeros(3 * row_len).unwrap());
    cpu.gather_rows(&cpu_pool, &cpu.upload_index(&[12, 3, 3]).unwrap(), 3, row_len, &mut cpu_out).unwrap();
    gpu.gather_rows(&gpu_pool, &gpu_rows, 3, row_len, &mut gpu_out).unwrap();
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

/// One sequence of the attention test: its shape and its pool blocks.
struct Sequence {
    n_past: usize,
    n_new: usize,
    mask: Mask<'static>,
    table: Vec<u32>,
}

#[test]
fn attention_matches_cpu_for_every_mask() {
    let Some(gpu) = cuda() else { return };
    let mut rng = Rng::new(9);
    static TREE: [u32; 6] = [TREE_ROOT, 0, 0, 1, TREE_ROOT, 4];
    let block_size = 4;
    let sequences = [
        Sequence { n_past: 0, n_new: 7, mask: Mask::Causal, table: vec![3, 0] },
        Sequence { n_past: 37, n_new: 1, mask: Mask::Causal, table: (4..14).rev().collect() },
        Sequence { n_past: 5, n_new: 4, mask: Mask::Bidirectional, table: vec![14, 1, 2] },
        Sequence { n_past: 9, n_new: 6, mask: Mask::Tree(&TREE), table: vec![15, 16, 17, 18] },
        Sequence { n_past: 3, n_new: 0, mask: Mask::Causal, table: vec![19] },
        // Many tiles of keys.
        Sequence { n_past: 700, n_new: 3, mask: Mask::Causal, table: (20..196).rev().collect() },
        // Enough rows that 4 KV heads fill an H200 (4 x 132 tasks) without splitting a row's keys
        // across blocks; the other head counts still split.
        Sequence { n_past: 0, n_new: 140, mask: Mask::Causal, table: (196..231).collect() },
    ];
    let specs: Vec<SequenceSpec<'_>> = sequences
        .iter()
        .map(|s| SequenceSpec { n_past: s.n_past, n_new: s.n_new, block_table: &s.table, mask: s.mask })
        .collect();
    let layout = AttentionLayout::new(block_size, &specs).unwrap();
    // Groups of 4, 1, 2 and 3 query heads; a head_dim of 30 is no whole number of 4-float loads.
    // The 161 rows with heads of 128 take the tensor-core kernel, every mask included.
    for heads in [(8, 2, 128), (4, 4, 64), (2, 1, 256), (3, 1, 30)] {
        attention_parity(gpu, &layout, heads, &mut rng);
    }
}

/// Prefill-sized batches with heads of 128 take the tensor-core kernel: tiles of 16 rows that end
/// mid-sequence, a chunk after 300 cached positions (keys in tiles of 64 that the rows see in
/// part), several sequences in one batch, and groups of 4, 2 and 8 query heads (two blocks of 4).
#[test]
fn prefill_attention_matches_cpu() {
    let Some(gpu) = cuda() else { return };
    let mut rng = Rng::new(13);
    let sequences = [
        Sequence { n_past: 0, n_new: 77, mask: Mask::Causal, table: (0..5).rev().collect() },
        Sequence { n_past: 300, n_new: 64, mask: Mask::Causal, table: (5..28).collect() },
        Sequence { n_past: 0, n_new: 1, mask: Mask::Causal, table: vec![28] },
    ];
    let specs: Vec<SequenceSpec<'_>> = sequences
        .iter()
        .map(|s| SequenceSpec { n_past: s.n_past, n_new: s.n_new, block_table: &s.table, mask: s.mask })
        .collect();
    let layout = AttentionLayout::new(16, &specs).unwrap();
    for heads in [(32, 8, 128), (16, 8, 128), (8, 1, 128)] {
        attention_parity(gpu, &layout, heads, &mut rng);
    }
}

/// A decode row over a long context is only a few tasks (one per KV head), so its keys are split
/// across many blocks, some of which get no tile at all at 700 keys, and the last block of each
/// task merges their states.
#[test]
fn attention_splits_long_decode_rows() {
    let Some(gpu) = cuda() else { return };
    let mut rng = Rng::new(10);
    let block_size = 16;
    for n_past in [700usize, 5000] {
        let table: Vec<u32> = (0..(n_past + 1).div_ceil(block_size) as u32).rev().collect();
        let spec = SequenceSpec { n_past, n_new: 1, block_table: &table, mask: Mask::Causal };
        let layout = AttentionLayout::new(block_size, &[spec]).unwrap();
        // Groups of 4 and 2; of 9, cut into blocks of 5 and 4 heads; 8 heads of the largest size,
        // whose tiles hold fewer keys than a warp has lanes.
        for heads in [(32, 8, 128), (16, 8, 128), (18, 2, 64), (8, 1, 512)] {
            attention_parity(gpu, &layout, heads, &mut rng);
        }
    }
}

/// A recorded attention call stays right at every replay as the context under it grows: the
/// launch depends on the shape alone, and each launch leaves the merge counters at zero for the
/// next.
#[test]
fn recorded_attention_replays_at_every_context_length() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(12);
    let (n_heads, n_kv_heads, head_dim) = (32, 8, 128);
    let params = AttentionParams { n_heads, n_kv_heads, head_dim, scale: 1.0 / (head_dim as f32).sqrt() };
    let (block_size, max_keys) = (16, 3000usize);
    let table: Vec<u32> = (0..max_keys.div_ceil(block_size) as u32).rev().collect();
    let layout_at = |n_past| {
        let spec = SequenceSpec { n_past, n_new: 1, block_table: &table, mask: Mask::Causal };
        AttentionLayout::new(block_size, &[spec]).unwrap()
    };
    let pool_len = table.len() * block_size * params.kv_row_len();
    let pools = [gaussian_row(pool_len, 1.0, &mut rng), gaussian_row(pool_len, 1.0, &mut rng)];
    let [cpu_k, cpu_v] = pools.each_ref().map(|x| cpu.upload(x).unwrap());
    let [gpu_k, gpu_v] = pools.each_ref().map(|x| gpu.upload(x).unwrap());
    let n = params.q_row_len();
    let q = gaussian_row(n, 2.0, &mut rng);
    let (mut cpu_q, mut gpu_q) = (cpu.upload(&q).unwrap(), gpu.upload(&q).unwrap());
    let (mut cpu_out, mut gpu_out) = (cpu.zeros(n).unwrap(), gpu.zeros(n).unwrap());
    let mut gpu_batch = AttentionBatch::with_capacity(gpu, 1, 1, table.len()).unwrap();
    gpu_batch.update(gpu, &layout_at(700)).unwrap();
    let graph = gpu
        .record(|| gpu.attention(&gpu_q, &gpu_k, &gpu_v, &gpu_batch, &params, &mut gpu_out))
        .unwrap()
        .unwrap();
    for (step, n_past) in [700, 701, 2999].into_iter().enumerate() {
        let layout = layout_at(n_past);
        gpu_batch.update(gpu, &layout).unwrap();
        let delta = gaussian_row(n, 1.0, &mut rng);
        cpu.add(&mut cpu_q, &cpu.upload(&delta).unwrap(), n).unwrap();
        gpu.add(&mut gpu_q, &gpu.upload(&delta).unwrap(), n).unwrap();
        gpu.replay(&graph).unwrap();
        let cpu_batch = AttentionBatch::upload(&cpu, &layout).unwrap();
        cpu.attention(&cpu_q, &cpu_k, &cpu_v, &cpu_batch, &params, &mut cpu_out).unwrap();
        let label = format!("replayed attention {}, {} keys", step + 1, n_past + 1);
        check(&label, &fetch(gpu, &gpu_out, n), &fetch(&cpu, &cpu_out, n), 1e-5);
    }
}

/// Runs attention over `layout` with `(n_heads, n_kv_heads, head_dim)` on random inputs on both
/// backends and compares the outputs.
fn attention_parity(
    gpu: &CudaBackend,
    layout: &AttentionLayout,
    (n_heads, n_kv_heads, head_dim): (usize, usize, usize),
    rng: &mut Rng,
) {
    let cpu = CpuBackend::new();
    let params = AttentionParams { n_heads, n_kv_heads, head_dim, scale: 1.0 / (head_dim as f32).sqrt() };
    let pool_len = layout.slots_needed() * params.kv_row_len();
    let k_pool = gaussian_row(pool_len, 1.0, rng);
    let v_pool = gaussian_row(pool_len, 1.0, rng);
    let q = gaussian_row(layout.n_rows() * params.q_row_len(), 2.0, rng);
    let n = q.len();
    let cpu_batch = AttentionBatch::upload(&cpu, layout).unwrap();
    let gpu_batch = AttentionBatch::upload(gpu, layout).unwrap();
    let (mut cpu_out, mut gpu_out) = (cpu.zeros(n).unwrap(), gpu.zeros(n).unwrap());
    let cpu_in = [&q, &k_pool, &v_pool].map(|x| cpu.upload(x).unwrap());
    let gpu_in = [&q, &k_pool, &v_pool].map(|x| gpu.upload(x).unwrap());
    cpu.attention(&cpu_in[0], &cpu_in[1], &cpu_in[2], &cpu_batch, &params, &mut cpu_out).unwrap();
    gpu.attention(&gpu_in[0], &gpu_in[1], &gpu_in[2], &gpu_batch, &params, &mut gpu_out).unwrap();
    let label = format!("attention {} rows, heads {n_heads}/{n_kv_heads} dim {head_dim}", layout.n_rows());
    // Batches of 65 rows or more with heads of 128 take the tensor-core kernel, on f16 copies.
    let tolerance = if head_dim == 128 && layout.n_rows() >= 65 { 2e-3 } else { 1e-5 };
    check(&label, &fetch(gpu, &gpu_out, n), &fetch(&cpu, &cpu_out, n), tolerance);
}

#[test]
fn construction_without_a_driver_is_an_error_not_a_panic() {
    // On a machine with CUDA this opens the device; without, it must return an error.
    match CudaBackend::new(0) {
        Ok(backend) => assert!(backend.arch().starts_with("sm_"), "{backend:?}"),
        Err(error) => println!("skipped: no CUDA device ({error})"),
    }
}

/// Norms and SwiGLU write the int8 copy of their output that the quantized matmuls read instead
/// of quantizing it themselves (rows of whole blocks of 32: per-warp and per-block norm kernels,
/// SwiGLU over 4 and 23 rows). The matmul after each must match the CPU's.
#[test]
fn int8_copies_written_by_norms_and_swiglu_feed_the_matmuls() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(14);
    for (cols, n_rows) in [(512, 1), (512, 23), (2048, 4), (4096, 1)] {
        let ty = GgmlType::Q4K;
        let rows = 96;
        let bytes = random_weight(ty, rows, cols, &mut rng);
        let weights = (
            cpu.upload_weight(ty, rows, cols, &bytes).unwrap(),
            gpu.upload_weight(ty, rows, cols, &bytes).unwrap(),
        );
        let n = n_rows * cols;
        let [residual, delta, gate, up] = [(); 4].map(|_| gaussian_row(n, 1.0, &mut rng));
        let norm = gaussian_row(cols, 1.0, &mut rng);
        // add_rms_norm, then the matmul.
        let (mut cpu_residual, mut gpu_residual) =
            (cpu.upload(&residual).unwrap(), gpu.upload(&residual).unwrap());
        let (mut cpu_x, mut gpu_x) = (cpu.zeros(n).unwrap(), gpu.zeros(n).unwrap());
        let (cpu_norm, gpu_norm) = (cpu.upload(&norm).unwrap(), gpu.upload(&norm).unwrap());
        cpu.add_rms_norm(
            &mut cpu_residual,
            &cpu.upload(&delta).unwrap(),
            &cpu_norm,
            n_rows,
            1e-6,
            &mut cpu_x,
        )
        .unwrap();
        gpu.add_rms_norm(
            &mut gpu_residual,
            &gpu.upload(&delta).unwrap(),
            &gpu_norm,
            n_rows,
            1e-6,
            &mut gpu_x,
        )
        .unwrap();
        let (mut cpu_out, mut gpu_out) =
            (cpu.zeros(n_rows * rows).unwrap(), gpu.zeros(n_rows * rows).unwrap());
        cpu.matmul(&cpu_x, &weights.0, n_rows, &mut cpu_out).unwrap();
        gpu.matmul(&gpu_x, &weights.1, n_rows, &mut gpu_out).unwrap();
        let m = n_rows * rows;
        let tolerance = matmul_tolerance(ty, n_rows);
        check(
            &format!("norm -> matmul {cols} cols by {n_rows}"),
            &fetch(gpu, &gpu_out, m),
            &fetch(&cpu, &cpu_out, m),
            tolerance,
        );
        // rms_norm of the new residual, then the matmul: the copy is rewritten.
        cpu.rms_norm(&cpu_residual, &cpu_norm, n_rows, 1e-6, &mut cpu_x).unwrap();
        gpu.rms_norm(&gpu_residual, &gpu_norm, n_rows, 1e-6, &mut gpu_x).unwrap();
        cpu.matmul(&cpu_x, &weights.0, n_rows, &mut cpu_out).unwrap();
        gpu.matmul(&gpu_x, &weights.1, n_rows, &mut gpu_out).unwrap();
        check(
            &format!("rms_norm -> matmul {cols} cols by {n_rows}"),
            &fetch(gpu, &gpu_out, m),
            &fetch(&cpu, &cpu_out, m),
            tolerance,
        );
        // SwiGLU, then the matmul.
        let (cpu_gate, gpu_gate) = (cpu.upload(&gate).unwrap(), gpu.upload(&gate).unwrap());
        let (cpu_up, gpu_up) = (cpu.upload(&up).unwrap(), gpu.upload(&up).unwrap());
        cpu.swiglu(&cpu_gate, &cpu_up, n, &mut cpu_x).unwrap();
        gpu.swiglu(&gpu_gate, &gpu_up, n, &mut gpu_x).unwrap();
        check(&format!("swiglu {n}"), &fetch(gpu, &gpu_x, n), &fetch(&cpu, &cpu_x, n), 2e-6);
        cpu.matmul(&cpu_x, &weights.0, n_rows, &mut cpu_out).unwrap();
        gpu.matmul(&gpu_x, &weights.1, n_rows, &mut gpu_out).unwrap();
        check(
            &format!("swiglu -> matmul {cols} cols by {n_rows}"),
            &fetch(gpu, &gpu_out, m),
            &fetch(&cpu, &cpu_out, m),
            tolerance,
        );
    }
}

/// The int8 copy a quantized matmul keeps of its input must not outlive the input's contents:
/// neither when an op rewrites the input between two matmuls, nor across graph replays, whose
/// ops the host never sees. The batch of 23 rows takes the int8 tensor-core kernel with K split in
/// two (eight groups of 256 columns), whose arrival counters must be back at zero after every
/// launch and replay.
#[test]
fn quantized_matmul_requantizes_a_rewritten_input() {
    /// `x = rms_norm(src)`, then `out = x · wᵀ`.
    struct Step<B: Backend> {
        src: B::Tensor,
        norm: B::Tensor,
        weight: B::Weight,
        x: B::Tensor,
        out: B::Tensor,
    }
    impl<B: Backend> Step<B> {
        fn new(
            b: &B,
            source: &[f32],
            norm: &[f32],
            (ty, rows, cols, bytes): (GgmlType, usize, usize, &[u8]),
        ) -> Self {
            Step {
                src: b.upload(source).unwrap(),
                norm: b.upload(norm).unwrap(),
                weight: b.upload_weight(ty, rows, cols, bytes).unwrap(),
                x: b.zeros(source.len()).unwrap(),
                out: b.zeros(source.len() / cols * rows).unwrap(),
            }
        }
        fn run(&mut self, b: &B, n_rows: usize) -> Result<(), BackendError> {
            b.rms_norm(&self.src, &self.norm, n_rows, 1e-6, &mut self.x)?;
            b.matmul(&self.x, &self.weight, n_rows, &mut self.out)
        }
        fn shift_source(&mut self, b: &B, delta: &[f32]) {
            b.add(&mut self.src, &b.upload(delta).unwrap(), delta.len()).unwrap();
        }
    }

    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(9);
    for (ty, rows, cols, n_rows) in [(GgmlType::Q4K, 64, 512, 2), (GgmlType::Q4K, 100, 2048, 23)] {
        let n = n_rows * cols;
        let bytes = random_weight(ty, rows, cols, &mut rng);
        let norm = gaussian_row(cols, 1.0, &mut rng);
        let source = gaussian_row(n, 1.0, &mut rng);
        let mut on_cpu = Step::new(&cpu, &source, &norm, (ty, rows, cols, &bytes));
        let mut on_gpu = Step::new(gpu, &source, &norm, (ty, rows, cols, &bytes));
        let mut compare = |label: &str, on_gpu: &mut Step<CudaBackend>, replay: Option<&CudaGraphExec>| {
            let delta = gaussian_row(n, 1.0, &mut rng);
            on_cpu.shift_source(&cpu, &delta);
            on_gpu.shift_source(gpu, &delta);
            on_cpu.run(&cpu, n_rows).unwrap();
            match replay {
                Some(graph) => gpu.replay(graph).unwrap(),
                None => on_gpu.run(gpu, n_rows).unwrap(),
            }
            let len = n_rows * rows;
            check(
                label,
                &fetch(gpu, &on_gpu.out, len),
                &fetch(&cpu, &on_cpu.out, len),
                matmul_tolerance(ty, n_rows),
            );
        };
        compare("matmul after its input was rewritten, 1", &mut on_gpu, None);
        compare("matmul after its input was rewritten, 2", &mut on_gpu, None);
        // The graph's matmul must quantize what the graph's norm writes at each replay.
        let graph = gpu.record(|| on_gpu.run(gpu, n_rows)).unwrap().unwrap();
        compare("replayed matmul, 1", &mut on_gpu, Some(&graph));
        compare("replayed matmul, 2", &mut on_gpu, Some(&graph));
        compare("matmul after replays", &mut on_gpu, None);
    }
}

/// Projections of one input by several weights: runs of one quantized type share a launch (up to
/// three), other types break the run; every output must equal its own matmul on the CPU.
#[test]
fn matmuls_match_cpu_per_projection() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(11);
    // Ten groups of 256 columns: the int8 tensor-core kernels split K in two.
    let cols = 2560;
    let weights = [
        (GgmlType::Q4K, 37),
        (GgmlType::Q4K, 64),
        (GgmlType::Q4K, 5),
        (GgmlType::Q4K, 9),
        (GgmlType::F16, 12),
        (GgmlType::Q6K, 20),
        (GgmlType::Q8_0, 33),
    ];
    let uploaded: Vec<_> = weights
        .iter()
        .map(|&(ty, rows)| {
            let bytes = random_weight(ty, rows, cols, &mut rng);
            (
                ty,
                rows,
                cpu.upload_weight(ty, rows, cols, &bytes).unwrap(),
                gpu.upload_weight(ty, rows, cols, &bytes).unwrap(),
            )
        })
        .collect();
    // 23 rows take the int8 tensor-core kernels for the quantized weights, cuBLAS for the F16 one.
    for n_rows in [1, 5, 23, 70] {
        let x = gaussian_row(n_rows * cols, 1.0, &mut rng);
        let (cpu_x, gpu_x) = (cpu.upload(&x).unwrap(), gpu.upload(&x).unwrap());
        let mut outs: Vec<_> = weights.iter().map(|&(_, rows)| gpu.zeros(n_rows * rows).unwrap()).collect();
        let mut projections: Vec<_> = uploaded.iter().map(|(_, _, _, w)| w).zip(outs.iter_mut()).collect();
        gpu.matmuls(&gpu_x, n_rows, &mut projections).unwrap();
        for ((ty, rows, cpu_w, _), gpu_out) in uploaded.iter().zip(&outs) {
            let mut cpu_out = cpu.zeros(n_rows * rows).unwrap();
            cpu.matmul(&cpu_x, cpu_w, n_rows, &mut cpu_out).unwrap();
            let n = n_rows * rows;
            let label = format!("matmuls {ty} {rows}x{cols} by {n_rows}");
            check(&label, &fetch(gpu, gpu_out, n), &fetch(&cpu, &cpu_out, n), matmul_tolerance(*ty, n_rows));
        }
    }
}
