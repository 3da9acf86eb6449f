//! `attention_mma_decode` and `attention_mma_projected`, emulated, against the CPU backend's
//! attention inputs (per-head norms, RoPE, KV writes) and attention: decode rows and verify
//! batches straight from their q/k/v projections, the blocks holding the batch's new keys making
//! them and their values, storing them in the pools and putting them in their tiles.
//!
//! Tolerances: 2e-3 for the output, as for the tensor-core attention (f16 queries, keys and
//! weights); 1e-3 for the pools, whose new rows are the CPU's f32 keys and values rounded to f16.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::backend::cuda::FastDivisor;
use canopy_kernels::backend::{
    AttentionBatch, AttentionInputs, AttentionParams, AttentionTargets, Backend, HeadParams, Mask,
    RopeParams, RopeStyle, TREE_ROOT,
};
use common::{Rng, gaussian_row, kv_row};
use emulated::batch::{Sequence, flatten, layout_of, merge};
use emulated::{DeviceBuffer, Q8Copy, check, fetch, ptr, run};

const HEAD_DIM: usize = 128;
const THETA: f32 = 1_000_000.0;
const EPS: f32 = 1e-6;
static TREE: [u32; 6] = [TREE_ROOT, 0, 0, 1, TREE_ROOT, 4];

/// A projected kernel as attention_mma.rs launches it: warps a block, the tiles of its ring and the
/// tile-sized stages past the ring that hold its queries.
struct Kernel {
    name: &'static str,
    warps: usize,
    stages: usize,
    query_stages: usize,
}

const DECODE: Kernel = Kernel { name: "attention_mma_decode", warps: 1, stages: 3, query_stages: 0 };
const PROJECTED: Kernel = Kernel { name: "attention_mma_projected", warps: 8, stages: 6, query_stages: 1 };

/// Random projections, norm weights and pools for decode rows, and the CPU's outputs.
struct Case {
    params: AttentionParams,
    q_raw: Vec<f32>,
    k_raw: Vec<f32>,
    v_raw: Vec<f32>,
    norms: [Vec<f32>; 2],
    pools: [Vec<f32>; 2],
    positions: Vec<u32>,
    slots: Vec<u32>,
    want_out: Vec<f32>,
    want_pools: [Vec<f32>; 2],
}

fn rope(n_heads: usize) -> RopeParams {
    RopeParams { n_heads, head_dim: HEAD_DIM, rotary_dim: HEAD_DIM, theta: THETA, style: RopeStyle::Neox }
}

impl Case {
    fn new(
        block_size: usize,
        sequences: &[Sequence],
        (n_heads, n_kv_heads): (usize, usize),
        rng: &mut Rng,
    ) -> Self {
        let layout = layout_of(block_size, sequences);
        let n_rows = layout.n_rows();
        let params = AttentionParams {
            n_heads,
            n_kv_heads,
            head_dim: HEAD_DIM,
            scale: 1.0 / (HEAD_DIM as f32).sqrt(),
        };
        let q_raw = gaussian_row(n_rows * params.q_row_len(), 1.0, rng);
        let [k_raw, v_raw] = [(); 2].map(|_| gaussian_row(n_rows * params.kv_row_len(), 1.0, rng));
        let norms =
            [(); 2].map(|_| gaussian_row(HEAD_DIM, 0.5, rng).iter().map(|w| w + 1.0).collect::<Vec<_>>());
        let pool_len = layout.slots_needed() * params.kv_row_len();
        let pools = [(); 2].map(|_| kv_row(pool_len, 1.0, rng));
        let (positions, slots) = (layout.positions().to_vec(), layout.slots().to_vec());

        let cpu = CpuBackend::new();
        let [q_raw_t, k_raw_t, v_t] = [&q_raw, &k_raw, &v_raw].map(|x| cpu.upload(x).unwrap());
        let [q_norm, k_norm] = norms.each_ref().map(|n| cpu.upload(n).unwrap());
        let [mut k_pool, mut v_pool] = pools.each_ref().map(|p| cpu.upload_kv_pool(p).unwrap());
        let [positions_t, slots_t] = [&positions, &slots].map(|i| cpu.upload_index(i).unwrap());
        let [mut q, mut k] = [q_raw.len(), k_raw.len()].map(|len| cpu.zeros(len).unwrap());
        let heads = HeadParams {
            q_norm: &q_norm,
            k_norm: &k_norm,
            eps: EPS,
            positions: &positions_t,
            slots: &slots_t,
            n_rows,
            q_rope: rope(n_heads),
            k_rope: rope(n_kv_heads),
        };
        let inputs = AttentionInputs { q_raw: &q_raw_t, k_raw: &k_raw_t, v: &v_t, heads };
        let targets = AttentionTargets { q: &mut q, k: &mut k, k_pool: &mut k_pool, v_pool: &mut v_pool };
        cpu.attention_inputs(&inputs, targets).unwrap();
        let batch = AttentionBatch::upload(&cpu, &layout).unwrap();
        let mut out = cpu.zeros(q_raw.len()).unwrap();
        cpu.attention(&q, &k_pool, &v_pool, &batch, &params, &mut out).unwrap();
        let want_out = fetch(&cpu, &out, q_raw.len());
        let want_pools = [&k_pool, &v_pool].map(|p| {
            let mut host = vec![0.0; pool_len];
            cpu.download_kv_pool(p, &mut host).unwrap();
            host
        });
        Self { params, q_raw, k_raw, v_raw, norms, pools, positions, slots, want_out, want_pools }
    }
}

/// Runs `kernel` over the case as attention_mma.rs launches it, with `splits` splits of each
/// block's keys and the merge when there are several; checks the output and both pools.
fn attend(
    kernel: &Kernel,
    label: &str,
    block_size: usize,
    sequences: &[Sequence],
    case: &Case,
    splits: usize,
) {
    let AttentionParams { n_heads, n_kv_heads, scale, .. } = case.params;
    let n_rows = case.positions.len();
    let group = n_heads / n_kv_heads;
    let heads_per_block = group.div_ceil(group.div_ceil(8));
    let chunks = group.div_ceil(heads_per_block);
    let row_blocks = n_rows.div_ceil(kernel.warps * 16 / heads_per_block) + sequences.len() - 1;
    let n_states = n_rows * n_heads * splits;
    let pool_rows = case.pools[0].len() / case.params.kv_row_len();

    let mut flat = flatten(block_size, sequences);
    let [mut q_raw, mut k_raw, mut v_raw, mut q_norm, mut k_norm] =
        [&case.q_raw, &case.k_raw, &case.v_raw, &case.norms[0], &case.norms[1]]
            .map(|x| DeviceBuffer::from_floats(x));
    let [mut k_pool, mut v_pool] = case.pools.each_ref().map(|p| DeviceBuffer::from_halves(p));
    let [mut positions, mut slots] = [&case.positions, &case.slots].map(|i| DeviceBuffer::from_words(i));
    let mut stats = DeviceBuffer::from_floats(&vec![f32::NAN; 2 * n_states]);
    let mut parts = DeviceBuffer::from_floats(&vec![f32::NAN; n_states * HEAD_DIM]);
    let mut out = DeviceBuffer::from_floats(&vec![f32::NAN; case.q_raw.len()]);
    let mut copy = Q8Copy::zeroed(case.q_raw.len());
    let mut pointers = [
        &mut q_raw,
        &mut k_pool,
        &mut v_pool,
        &mut flat.sequences,
        &mut flat.block_tables,
        &mut flat.tree_parents,
        &mut stats,
        &mut parts,
        &mut out,
        &mut k_raw,
        &mut v_raw,
        &mut q_norm,
        &mut k_norm,
        &mut positions,
        &mut slots,
        &mut copy.values,
        &mut copy.scales,
        &mut copy.halves,
        &mut copy.half_scales,
    ]
    .map(|buffer| buffer.address());
    let [
        q_ptr,
        k_pool_ptr,
        v_pool_ptr,
        seq_ptr,
        tables_ptr,
        parents_ptr,
        stats_ptr,
        parts_ptr,
        out_ptr,
        k_raw_ptr,
        v_raw_ptr,
        q_norm_ptr,
        k_norm_ptr,
        positions_ptr,
        slots_ptr,
        oq_ptr,
        os_ptr,
        oh_ptr,
        ohs_ptr,
    ] = &mut pointers;
    let (mut scale, mut eps, mut theta) = (scale, EPS, THETA);
    let mut block_size_arg = FastDivisor::new("attention_mma", block_size).unwrap();
    let [
        mut n_sequences,
        mut n_heads_arg,
        mut n_kv_heads_arg,
        mut heads_per_block,
        mut n_splits,
        mut pool_rows,
    ] = [sequences.len(), n_heads, n_kv_heads, heads_per_block, splits, pool_rows].map(|v| v as u32);
    let shape = LaunchShape {
        grid: [row_blocks as u32, (n_kv_heads * chunks) as u32, n_splits],
        block: [32 * kernel.warps as u32, 1, 1],
        dynamic_shared_bytes: (kernel.stages + kernel.query_stages) * 2 * 32 * 136 * 2,
    };
    run(
        kernel.name,
        shape,
        &mut [
            ptr(q_ptr),
            ptr(k_pool_ptr),
            ptr(v_pool_ptr),
            ptr(seq_ptr),
            ptr(&mut n_sequences),
            ptr(tables_ptr),
            ptr(parents_ptr),
            ptr(&mut block_size_arg),
            ptr(&mut n_heads_arg),
            ptr(&mut n_kv_heads_arg),
            ptr(&mut scale),
            ptr(&mut heads_per_block),
            ptr(&mut n_splits),
            ptr(stats_ptr),
            ptr(parts_ptr),
            ptr(out_ptr),
            ptr(k_raw_ptr),
            ptr(v_raw_ptr),
            ptr(q_norm_ptr),
            ptr(k_norm_ptr),
            ptr(&mut eps),
            ptr(positions_ptr),
            ptr(slots_ptr),
            ptr(&mut pool_rows),
            ptr(&mut theta),
        ],
    );
    if splits > 1 {
        merge(
            n_rows * n_heads,
            splits,
            n_heads,
            [stats_ptr, parts_ptr, out_ptr, oq_ptr, os_ptr, oh_ptr, ohs_ptr],
        );
    }
    let label = format!("{} {label}, {splits} splits", kernel.name);
    check(&format!("{label}: out"), &out.floats(case.q_raw.len()), &case.want_out, 2e-3);
    for (name, (pool, want)) in
        ["k_pool", "v_pool"].iter().zip([&k_pool, &v_pool].iter().zip(&case.want_pools))
    {
        check(&format!("{label}: {name}"), &pool.halves(want.len()), want, 1e-3);
    }
}

/// Three decode rows (after 200 keys, 37, none) in narrow blocks, unsplit, split 4 ways and 40
/// (more splits than a warp has lanes, for the merge), over groups of 4, 2, 8 and 3 query heads
/// and of 16 (two chunks of 8 a KV head, of which only the first stores the new rows).
#[test]
fn decode_rows_attend_from_their_projections() {
    let mut rng = Rng::new(87);
    let block_size = 12;
    let sequences = [
        Sequence { n_past: 200, n_new: 1, mask: Mask::Causal, table: (0..17).rev().collect() },
        Sequence { n_past: 37, n_new: 1, mask: Mask::Causal, table: (17..21).collect() },
        Sequence { n_past: 0, n_new: 1, mask: Mask::Causal, table: vec![21] },
    ];
    for heads in [(32, 8), (16, 8), (8, 1), (6, 2), (16, 1)] {
        let case = Case::new(block_size, &sequences, heads, &mut rng);
        let label = format!("3 decode rows, heads {}/{}", heads.0, heads.1);
        for splits in [1, 4, 40] {
            attend(&DECODE, &label, block_size, &sequences, &case, splits);
        }
    }
}

/// Verify batches in wide blocks, a sequence's rows in one: a causal chunk of 7 whose new keys
/// cross a tile (keys 60 to 66), a tree of 6 nodes, a binary tree of 16 with no context (new keys
/// made by every warp, two each) and a decode row, over groups of 4, 2, 8 (16 rows a block, the
/// most these kernels take), 3 (the last slots dead) and 16 (two chunks); unsplit and split 3
/// ways (the chunk's new keys then in two splits, and some splits without keys).
#[test]
fn verify_batches_attend_from_their_projections() {
    let mut rng = Rng::new(88);
    let block_size = 12;
    let sequences = [
        Sequence { n_past: 60, n_new: 7, mask: Mask::Causal, table: (0..6).rev().collect() },
        Sequence { n_past: 9, n_new: 6, mask: Mask::Tree(&TREE), table: vec![6, 7] },
        Sequence { n_past: 0, n_new: 16, mask: Mask::Tree(binary_tree(16)), table: vec![8, 9] },
        Sequence { n_past: 100, n_new: 1, mask: Mask::Causal, table: (10..19).collect() },
    ];
    for heads in [(32, 8), (16, 8), (8, 1), (6, 2), (16, 1)] {
        let case = Case::new(block_size, &sequences, heads, &mut rng);
        let label = format!("30 verify rows, heads {}/{}", heads.0, heads.1);
        for splits in [1, 3] {
            attend(&PROJECTED, &label, block_size, &sequences, &case, splits);
        }
    }
}

/// Qwen3-8B's verify batch: a binary tree of 23 draft tokens after 300 keys (the new keys 300 to
/// 322, in tiles 9 and 10), groups of 4, unsplit and split 4 ways (three tiles a split, the last
/// holding both of the new keys' tiles).
#[test]
fn a_tree_of_23_after_a_context_attends_from_its_projections() {
    let mut rng = Rng::new(89);
    let (n_past, block_size) = (300usize, 12);
    let table: Vec<u32> = (0..(n_past + 23).div_ceil(block_size) as u32).rev().collect();
    let sequences = [Sequence { n_past, n_new: 23, mask: Mask::Tree(binary_tree(23)), table }];
    let case = Case::new(block_size, &sequences, (32, 8), &mut rng);
    for splits in [1, 4] {
        attend(&PROJECTED, "23 tree rows after 300, heads 32/8", block_size, &sequences, &case, splits);
    }
}

/// The parents of a binary tree of `n` nodes, node 0 its root.
fn binary_tree(n: u32) -> &'static [u32] {
    let parents: Vec<u32> = (0..n).map(|i| if i == 0 { TREE_ROOT } else { (i - 1) / 2 }).collect();
    Box::leak(parents.into_boxed_slice())
}
