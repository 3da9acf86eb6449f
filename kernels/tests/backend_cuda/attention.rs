//! Attention and its fused inputs against the CPU: every mask, split decode rows, recorded
//! replays, and verify and prefill batches on the tensor cores, split and whole.

use super::*;

/// The new keys and values as the CUDA backend's f16 pools hold them, against the CPU's f32:
/// rounded to 11 significant bits (a relative error of at most 2^-11), on top of the rotation's
/// 1e-4.
const KV_TOLERANCE: f32 = 1e-3;

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
                kv_row(pool_rows * k_rope.row_len(), 1.0, &mut rng),
            ];
            let label = format!(
                "attention_inputs {style:?} {n_heads}/{n_kv_heads} heads of {head_dim}, rotary {rotary_dim}"
            );
            let on_cpu = fused_inputs(&cpu, &host, &positions, &slots, q_rope, k_rope);
            let on_gpu = fused_inputs(gpu, &host, &positions, &slots, q_rope, k_rope);
            for (name, (got, want)) in ["q", "k", "k_pool", "v_pool"].iter().zip(on_gpu.iter().zip(&on_cpu)) {
                let tolerance = if name.ends_with("pool") { KV_TOLERANCE } else { 1e-4 };
                check(&format!("{label}: {name}"), got, want, tolerance);
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
    let [q_raw, k_raw, v, q_norm, k_norm] = [0, 1, 2, 3, 4].map(|i| backend.upload(&host[i]).unwrap());
    let (positions, slots) = (backend.upload_index(positions).unwrap(), backend.upload_index(slots).unwrap());
    let n_rows = positions.len();
    let heads = HeadParams {
        q_norm: &q_norm,
        k_norm: &k_norm,
        eps: 1e-6,
        positions: &positions,
        slots: &slots,
        n_rows,
        q_rope,
        k_rope,
    };
    let inputs = AttentionInputs { q_raw: &q_raw, k_raw: &k_raw, v: &v, heads };
    let (mut q, mut k) = (backend.zeros(q_raw.len()).unwrap(), backend.zeros(k_raw.len()).unwrap());
    let [mut k_pool, mut v_pool] = [(); 2].map(|_| backend.upload_kv_pool(&host[5]).unwrap());
    let targets = AttentionTargets { q: &mut q, k: &mut k, k_pool: &mut k_pool, v_pool: &mut v_pool };
    backend.attention_inputs(&inputs, targets).unwrap();
    let mut outputs = [&q, &k].map(|tensor| fetch(backend, tensor, tensor.len())).to_vec();
    outputs.extend([&k_pool, &v_pool].map(|pool| fetch_pool(backend, pool, pool.len())));
    outputs
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
    // The 161 rows with heads of 128 take the tensor-core kernel, every mask included; the
    // other head sizes the split kernels, those of 64 and 256 several rows a block.
    for heads in [(8, 2, 128), (4, 4, 64), (2, 1, 256), (3, 1, 30)] {
        attention_parity(gpu, &layout, heads, &mut rng);
    }
}

/// Prefill-sized batches with heads of 128 take the tensor-core kernel: row tiles of 16 that end
/// mid-sequence, a chunk after 300 cached positions (keys in tiles of 32 that the rows see in
/// part), several sequences in one batch, and groups of 4, 2 and 8 query heads (two, four and
/// one row tiles a block).
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

/// Verify batches after long contexts take the tensor-core kernel with each block's keys split
/// across blocks and merged: a tree of 23 draft tokens (Qwen3-8B's and Qwen3-0.6B's groups) and
/// a causal chunk of 64 rows, after 700 and 5000 keys.
#[test]
fn verify_attention_splits_long_contexts() {
    let Some(gpu) = cuda() else { return };
    let mut rng = Rng::new(16);
    let block_size = 16;
    let parents = binary_tree(23);
    for n_past in [700usize, 5000] {
        let table: Vec<u32> = (0..(n_past + 64).div_ceil(block_size) as u32).rev().collect();
        for (n_new, mask) in [(23, Mask::Tree(&parents)), (64, Mask::Causal)] {
            let spec = SequenceSpec { n_past, n_new, block_table: &table, mask };
            let layout = AttentionLayout::new(block_size, &[spec]).unwrap();
            for heads in [(32, 8, 128), (16, 8, 128)] {
                attention_parity(gpu, &layout, heads, &mut rng);
            }
        }
    }
}

/// The parents of an n-node binary tree of draft tokens: node i's parent is (i - 1) / 2.
fn binary_tree(n: u32) -> Vec<u32> {
    (0..n).map(|i| if i == 0 { TREE_ROOT } else { (i - 1) / 2 }).collect()
}

/// A decode row over a long context is only a few tasks (one per KV head), so its keys are split
/// across many blocks, some of which get no tile at all at 700 keys: for heads of 128 on the
/// tensor cores, merged by a second kernel; for the others by the split kernels, whose last block
/// of each task merges their states.
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
/// next. A decode row with heads of 64 (split kernel, merged by its last block), and with heads of
/// 128 a decode row and a verify tree of 23 rows (tensor-core kernel, merged by a second kernel).
#[test]
fn recorded_attention_replays_at_every_context_length() {
    let Some(gpu) = cuda() else { return };
    let parents = binary_tree(23);
    replay_at_context_lengths(gpu, 1, Mask::Causal, 64, 1e-5);
    replay_at_context_lengths(gpu, 1, Mask::Causal, 128, 2e-3);
    replay_at_context_lengths(gpu, 23, Mask::Tree(&parents), 128, 2e-3);
}

/// Records attention over `n_new` rows (32 query heads of `head_dim` on 8 KV heads) after 700
/// keys, then replays it after 700, 701 and 2999 keys with fresh queries, against the CPU.
fn replay_at_context_lengths(
    gpu: &CudaBackend,
    n_new: usize,
    mask: Mask<'_>,
    head_dim: usize,
    tolerance: f32,
) {
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(12);
    let (n_heads, n_kv_heads) = (32, 8);
    let params = AttentionParams { n_heads, n_kv_heads, head_dim, scale: 1.0 / (head_dim as f32).sqrt() };
    let (block_size, max_keys) = (16, 3000 + n_new);
    let table: Vec<u32> = (0..max_keys.div_ceil(block_size) as u32).rev().collect();
    let layout_at = |n_past| {
        let spec = SequenceSpec { n_past, n_new, block_table: &table, mask };
        AttentionLayout::new(block_size, &[spec]).unwrap()
    };
    let pool_len = table.len() * block_size * params.kv_row_len();
    let pools = [kv_row(pool_len, 1.0, &mut rng), kv_row(pool_len, 1.0, &mut rng)];
    let [cpu_k, cpu_v] = pools.each_ref().map(|x| cpu.upload_kv_pool(x).unwrap());
    let [gpu_k, gpu_v] = pools.each_ref().map(|x| gpu.upload_kv_pool(x).unwrap());
    let n = n_new * params.q_row_len();
    let q = gaussian_row(n, 2.0, &mut rng);
    let (mut cpu_q, mut gpu_q) = (cpu.upload(&q).unwrap(), gpu.upload(&q).unwrap());
    let (mut cpu_out, mut gpu_out) = (cpu.zeros(n).unwrap(), gpu.zeros(n).unwrap());
    let mut gpu_batch = AttentionBatch::with_capacity(gpu, 1, n_new, table.len()).unwrap();
    gpu_batch.update(gpu, &layout_at(700)).unwrap();
    // Run once before recording, as recorded steps are (step_graphs.rs): the first call allocates
    // the output's int8 copy, which a recording cannot.
    gpu.attention(&gpu_q, &gpu_k, &gpu_v, &gpu_batch, &params, &mut gpu_out).unwrap();
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
        let label = format!(
            "replayed attention of {n_new} rows of heads of {head_dim} {}, after {n_past} keys",
            step + 1
        );
        check(&label, &fetch(gpu, &gpu_out, n), &fetch(&cpu, &cpu_out, n), tolerance);
    }
}

/// The decode attention writes its output's int8 copy for heads of whole blocks of 32, which the
/// output projection then reads instead of quantizing: one row unsplit and split, a verify batch
/// on the tensor-core int8 kernels, and heads of 40 dimensions, whose output is quantized by the
/// matmul as before.
#[test]
fn attention_output_int8_copy_feeds_the_output_projection() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(15);
    let block_size = 16;
    let table: Vec<u32> = (0..64).rev().collect();
    for (n_past, n_new) in [(5, 1), (600, 1), (40, 23)] {
        let spec = SequenceSpec { n_past, n_new, block_table: &table, mask: Mask::Causal };
        let layout = AttentionLayout::new(block_size, &[spec]).unwrap();
        for ((n_heads, n_kv_heads, head_dim), ty) in
            [((32, 8, 128), GgmlType::Q4K), ((18, 2, 64), GgmlType::Q8_0), ((8, 2, 40), GgmlType::Q8_0)]
        {
            let params =
                AttentionParams { n_heads, n_kv_heads, head_dim, scale: 1.0 / (head_dim as f32).sqrt() };
            let pool_len = layout.slots_needed() * params.kv_row_len();
            let pools = [kv_row(pool_len, 1.0, &mut rng), kv_row(pool_len, 1.0, &mut rng)];
            let q = gaussian_row(layout.n_rows() * params.q_row_len(), 2.0, &mut rng);
            let (n, cols, rows) = (q.len(), params.q_row_len(), 96);
            let bytes = random_weight(ty, rows, cols, &mut rng);
            let cpu_weight = cpu.upload_weight(ty, rows, cols, &bytes).unwrap();
            let gpu_weight = gpu.upload_weight(ty, rows, cols, &bytes).unwrap();
            let (cpu_q, gpu_q) = (cpu.upload(&q).unwrap(), gpu.upload(&q).unwrap());
            let [cpu_k, cpu_v] = pools.each_ref().map(|x| cpu.upload_kv_pool(x).unwrap());
            let [gpu_k, gpu_v] = pools.each_ref().map(|x| gpu.upload_kv_pool(x).unwrap());
            let (mut cpu_attn, mut gpu_attn) = (cpu.zeros(n).unwrap(), gpu.zeros(n).unwrap());
            let cpu_batch = AttentionBatch::upload(&cpu, &layout).unwrap();
            let gpu_batch = AttentionBatch::upload(gpu, &layout).unwrap();
            cpu.attention(&cpu_q, &cpu_k, &cpu_v, &cpu_batch, &params, &mut cpu_attn).unwrap();
            gpu.attention(&gpu_q, &gpu_k, &gpu_v, &gpu_batch, &params, &mut gpu_attn).unwrap();
            let label = format!(
                "attention -> {ty} matmul, {n_new} rows after {n_past}, heads {n_heads} of {head_dim}"
            );
            let weights = (&cpu_weight, &gpu_weight);
            super::matmul::check_matmul(
                &label,
                (&cpu, gpu),
                (&cpu_attn, &gpu_attn),
                weights,
                layout.n_rows(),
            );
        }
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
    let k_pool = kv_row(pool_len, 1.0, rng);
    let v_pool = kv_row(pool_len, 1.0, rng);
    let q = gaussian_row(layout.n_rows() * params.q_row_len(), 2.0, rng);
    let n = q.len();
    let cpu_batch = AttentionBatch::upload(&cpu, layout).unwrap();
    let gpu_batch = AttentionBatch::upload(gpu, layout).unwrap();
    let (mut cpu_out, mut gpu_out) = (cpu.zeros(n).unwrap(), gpu.zeros(n).unwrap());
    let (cpu_q, gpu_q) = (cpu.upload(&q).unwrap(), gpu.upload(&q).unwrap());
    let [cpu_k, cpu_v] = [&k_pool, &v_pool].map(|x| cpu.upload_kv_pool(x).unwrap());
    let [gpu_k, gpu_v] = [&k_pool, &v_pool].map(|x| gpu.upload_kv_pool(x).unwrap());
    cpu.attention(&cpu_q, &cpu_k, &cpu_v, &cpu_batch, &params, &mut cpu_out).unwrap();
    gpu.attention(&gpu_q, &gpu_k, &gpu_v, &gpu_batch, &params, &mut gpu_out).unwrap();
    let label = format!("attention {} rows, heads {n_heads}/{n_kv_heads} dim {head_dim}", layout.n_rows());
    // Batches with heads of 128 take the tensor-core kernel, on f16 copies of the queries and
    // weights.
    let tensor_cores = head_dim == 128;
    let tolerance = if tensor_cores { 2e-3 } else { 1e-5 };
    check(&label, &fetch(gpu, &gpu_out, n), &fetch(&cpu, &cpu_out, n), tolerance);
}

/// `project_attention_inputs` (the q/k/v projections, then the attention inputs) against the CPU,
/// for one token and for three, with Q8_0, Q4_K and Q4_K_M's Q4_K/Q6_K mix (whose decode step
/// projects q, k and v in one launch). The int8 activations bound the error (the matmul
/// tolerance, carried through the norms).
#[test]
fn projected_attention_inputs_match_cpu() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(13);
    let (n_heads, n_kv_heads, head_dim, cols, pool_rows) = (8, 2, 128, 1024, 16);
    let rope = |n_heads| RopeParams {
        n_heads,
        head_dim,
        rotary_dim: head_dim,
        theta: 1_000_000.0,
        style: RopeStyle::Neox,
    };
    let (q_rope, k_rope) = (rope(n_heads), rope(n_kv_heads));
    for (ty, v_ty) in
        [(GgmlType::Q8_0, GgmlType::Q8_0), (GgmlType::Q4K, GgmlType::Q4K), (GgmlType::Q4K, GgmlType::Q6K)]
    {
        let shapes = [(ty, n_heads * head_dim), (ty, n_kv_heads * head_dim), (v_ty, n_kv_heads * head_dim)];
        let bytes = shapes.map(|(ty, rows)| random_weight(ty, rows, cols, &mut rng));
        let cpu_weights: Vec<_> = shapes
            .iter()
            .zip(&bytes)
            .map(|(&(ty, rows), b)| cpu.upload_weight(ty, rows, cols, b).unwrap())
            .collect();
        let gpu_weights: Vec<_> = shapes
            .iter()
            .zip(&bytes)
            .map(|(&(ty, rows), b)| gpu.upload_weight(ty, rows, cols, b).unwrap())
            .collect();
        for n_rows in [1, 3] {
            let x = gaussian_row(n_rows * cols, 1.0, &mut rng);
            let norms = [(); 2]
                .map(|_| gaussian_row(head_dim, 0.5, &mut rng).iter().map(|w| w + 1.0).collect::<Vec<_>>());
            let pools = [(); 2].map(|_| kv_row(pool_rows * n_kv_heads * head_dim, 1.0, &mut rng));
            let positions: Vec<u32> = (0..n_rows as u32).map(|i| 700 + i).collect();
            let slots: Vec<u32> = (0..n_rows as u32).map(|i| 3 + 5 * i).collect();
            let indices = (positions.as_slice(), slots.as_slice());
            let on_cpu = project(&cpu, &cpu_weights, &x, &norms, &pools, indices, (q_rope, k_rope));
            let on_gpu = project(gpu, &gpu_weights, &x, &norms, &pools, indices, (q_rope, k_rope));
            let label = format!("project_attention_inputs {ty}/{v_ty} by {n_rows}");
            let names = ["q_raw", "k_raw", "v", "q", "k", "k_pool", "v_pool"];
            for (name, (got, want)) in names.iter().zip(on_gpu.iter().zip(&on_cpu)) {
                check(&format!("{label}: {name}"), got, want, 2e-2);
            }
        }
    }
}

/// The seven outputs of `project_attention_inputs` on `backend`.
fn project<B: Backend>(
    backend: &B,
    weights: &[B::Weight],
    x: &[f32],
    norms: &[Vec<f32>; 2],
    pools: &[Vec<f32>; 2],
    (positions, slots): (&[u32], &[u32]),
    (q_rope, k_rope): (RopeParams, RopeParams),
) -> [Vec<f32>; 7] {
    let n_rows = positions.len();
    let x = backend.upload(x).unwrap();
    let [mut q_raw, mut k_raw, mut v] = [0, 1, 2].map(|p| backend.zeros(n_rows * weights[p].rows()).unwrap());
    let [mut q, mut k] = [q_rope, k_rope].map(|rope| backend.zeros(n_rows * rope.row_len()).unwrap());
    let [q_norm, k_norm] = norms.each_ref().map(|n| backend.upload(n).unwrap());
    let [mut k_pool, mut v_pool] = pools.each_ref().map(|p| backend.upload_kv_pool(p).unwrap());
    let (positions, slots) = (backend.upload_index(positions).unwrap(), backend.upload_index(slots).unwrap());
    let heads = HeadParams {
        q_norm: &q_norm,
        k_norm: &k_norm,
        eps: 1e-6,
        positions: &positions,
        slots: &slots,
        n_rows,
        q_rope,
        k_rope,
    };
    let projections = AttentionProjections {
        x: &x,
        q: (&weights[0], &mut q_raw),
        k: (&weights[1], &mut k_raw),
        v: (&weights[2], &mut v),
    };
    let targets = AttentionTargets { q: &mut q, k: &mut k, k_pool: &mut k_pool, v_pool: &mut v_pool };
    backend.project_attention_inputs(projections, &heads, targets).unwrap();
    let [q_raw, k_raw, v, q, k] = [&q_raw, &k_raw, &v, &q, &k].map(|t| fetch(backend, t, t.len()));
    let [k_pool, v_pool] = [&k_pool, &v_pool].map(|p| fetch_pool(backend, p, p.len()));
    [q_raw, k_raw, v, q, k, k_pool, v_pool]
}
