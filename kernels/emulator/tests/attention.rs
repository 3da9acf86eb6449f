//! The paged attention kernels (attention.cu), emulated, against the CPU backend: the decode
//! kernels `attention_dim128` and `attention_dim512` over every mask, whole and with each row's
//! keys split between blocks and merged by the last, with their output's int8 copy; and the
//! tensor-core kernel `attention_mma` (its fallbacks for mma.sync and ldmatrix) over causal,
//! bidirectional and tree masks, whole and split, its states merged by `attention_mma_merge`.
//!
//! Tolerances, as in the device tests: 1e-5 for the decode kernels, the CPU's f32 softmax in
//! another order (`expf` is the host's here); 2e-3 for the tensor-core kernel, which multiplies f16
//! copies of the queries, keys, values and softmax weights. The int8 copy is checked against the
//! CPU's output by `check_q8_copy` (the merge's copies against the kernel's own output).
//!
//! The shapes are the device tests' shrunk to what the emulator runs in a few seconds: contexts
//! of up to 723 keys instead of 5064, no 140-row prefill in the decode test, and tensor-core
//! batches of 39 rows instead of 142.

#![allow(clippy::unwrap_used)]

#[path = "../../tests/common/mod.rs"]
mod common;
mod emulated;

use canopy_kernel_emulator::LaunchShape;
use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::backend::cuda::FastDivisor;
use canopy_kernels::backend::{
    AttentionBatch, AttentionLayout, AttentionParams, Backend, Mask, SequenceSpec, TREE_ROOT,
};
use common::{Rng, gaussian_row, kv_row};
use emulated::{DeviceBuffer, Q8Copy, check, check_f16_copy, check_q8_copy, fetch, ptr, run};

const DECODE_TOLERANCE: f32 = 1e-5;
const MMA_TOLERANCE: f32 = 2e-3;

/// attention.rs's constants: warps a block, the largest head of `attention_dim128`, keys a tile
/// at most, elements a thread loads per tile, the shared floats a block may use, and the SM count
/// (an H200's) its split count aims at.
const WARPS: usize = 8;
const SMALL_HEAD_DIM: usize = 128;
const MAX_TILE_KEYS: usize = 32;
const TILE_LOADS: usize = 4;
const SHARED_FLOATS: usize = (48 * 1024 - 256) / 4;
const SM_COUNT: usize = 132;

/// One of attention_mma.rs's widths: the kernel, warps a block and keys its ring of tiles holds
/// (of keys and values alike, rows of 136 halves).
#[derive(Clone, Copy)]
struct MmaWidth {
    kernel: &'static str,
    warps: usize,
    ring_keys: usize,
}

const WIDE: MmaWidth = MmaWidth { kernel: "attention_mma", warps: 8, ring_keys: 6 * 32 };
const LONG: MmaWidth = MmaWidth { kernel: "attention_mma_long", warps: 8, ring_keys: 3 * 64 };
const NARROW: MmaWidth = MmaWidth { kernel: "attention_mma_narrow", warps: 1, ring_keys: 3 * 32 };

/// One sequence: its shape and its pool blocks.
struct Sequence {
    n_past: usize,
    n_new: usize,
    mask: Mask<'static>,
    table: Vec<u32>,
}

/// The batch description as the kernels read it (AttentionLayout's private arrays): per
/// sequence (q_start, n_new, n_past, table_start, mask code), the block tables cut to the blocks
/// each sequence uses, and every row's tree parent.
struct Flat {
    sequences: DeviceBuffer,
    block_tables: DeviceBuffer,
    tree_parents: DeviceBuffer,
}

fn flatten(block_size: usize, sequences: &[Sequence]) -> Flat {
    let (mut fields, mut tables, mut parents) = (vec![], vec![], vec![]);
    for s in sequences {
        let mask = match s.mask {
            Mask::Causal => 0,
            Mask::Bidirectional => 1,
            Mask::Tree(_) => 2,
        };
        fields.extend([parents.len() as u32, s.n_new as u32, s.n_past as u32, tables.len() as u32, mask]);
        tables.extend_from_slice(&s.table[..(s.n_past + s.n_new).div_ceil(block_size)]);
        match s.mask {
            Mask::Tree(tree) => parents.extend_from_slice(tree),
            _ => parents.extend(std::iter::repeat_n(TREE_ROOT, s.n_new)),
        }
    }
    // An empty array still needs an address.
    parents.push(TREE_ROOT);
    Flat {
        sequences: DeviceBuffer::from_words(&fields),
        block_tables: DeviceBuffer::from_words(&tables),
        tree_parents: DeviceBuffer::from_words(&parents),
    }
}

/// Random queries and pools for `layout`, and the CPU's attention over them.
struct Case {
    params: AttentionParams,
    q: Vec<f32>,
    k_pool: Vec<f32>,
    v_pool: Vec<f32>,
    want: Vec<f32>,
}

impl Case {
    fn new(
        layout: &AttentionLayout,
        (n_heads, n_kv_heads, head_dim): (usize, usize, usize),
        rng: &mut Rng,
    ) -> Self {
        let params = AttentionParams { n_heads, n_kv_heads, head_dim, scale: 1.0 / (head_dim as f32).sqrt() };
        let pool_len = layout.slots_needed() * params.kv_row_len();
        let (k_pool, v_pool) = (kv_row(pool_len, 1.0, rng), kv_row(pool_len, 1.0, rng));
        let q = gaussian_row(layout.n_rows() * params.q_row_len(), 2.0, rng);
        let cpu = CpuBackend::new();
        let batch = AttentionBatch::upload(&cpu, layout).unwrap();
        let q_t = cpu.upload(&q).unwrap();
        let [k_t, v_t] = [&k_pool, &v_pool].map(|x| cpu.upload_kv_pool(x).unwrap());
        let mut out = cpu.zeros(q.len()).unwrap();
        cpu.attention(&q_t, &k_t, &v_t, &batch, &params, &mut out).unwrap();
        let want = fetch(&cpu, &out, q.len());
        Self { params, q, k_pool, v_pool, want }
    }
}

fn layout_of(block_size: usize, sequences: &[Sequence]) -> AttentionLayout {
    let specs: Vec<SequenceSpec<'_>> = sequences
        .iter()
        .map(|s| SequenceSpec { n_past: s.n_past, n_new: s.n_new, block_table: &s.table, mask: s.mask })
        .collect();
    AttentionLayout::new(block_size, &specs).unwrap()
}

/// attention.rs's `key_stride`.
fn key_stride(head_dim: usize) -> usize {
    if !head_dim.is_multiple_of(4) {
        head_dim | 1
    } else if (head_dim / 4).is_multiple_of(2) {
        head_dim + 4
    } else {
        head_dim
    }
}

/// attention.rs's `tile_keys`.
fn tile_keys(block_queries: usize, head_dim: usize) -> usize {
    let row_elements = if head_dim.is_multiple_of(4) { head_dim / 4 } else { head_dim };
    let loaded = TILE_LOADS * 32 * WARPS / row_elements;
    let fit = (SHARED_FLOATS - block_queries * head_dim) / (key_stride(head_dim) + head_dim);
    loaded.min(fit).min(MAX_TILE_KEYS)
}

/// attention.rs's `splits` on an H200, for a states buffer that never limits it.
fn host_splits(tasks: usize) -> usize {
    (4 * SM_COUNT).div_ceil(tasks).clamp(1, 64)
}

/// Runs the decode kernel over the case as attention.rs launches it, with `splits` blocks per
/// task (the host's count when `None`), and for batches that take the attention_rows kernels
/// also the one-row kernel; checks the output, its int8 copy for heads of whole blocks of 32, and
/// that the merge counters are back at zero.
fn decode(label: &str, sequences: &[Sequence], block_size: usize, case: &Case, splits: Option<usize>) {
    let AttentionParams { n_heads, n_kv_heads, .. } = case.params;
    let n_rows = case.q.len() / case.params.q_row_len();
    let group = n_heads / n_kv_heads;
    let heads_per_block = group.div_ceil(group.div_ceil(WARPS));
    let chunks = group.div_ceil(heads_per_block);
    // attention.rs's `rows_per_block`: the warps a one-chunk group leaves take further rows.
    let host_rows = if chunks == 1 && n_rows > sequences.len() { WARPS / heads_per_block } else { 1 };
    decode_with(label, sequences, block_size, case, splits, host_rows);
    if host_rows > 1 {
        decode_with(label, sequences, block_size, case, splits, 1);
    }
}

/// [`decode`] with `rows_per_block` rows a block.
fn decode_with(
    label: &str,
    sequences: &[Sequence],
    block_size: usize,
    case: &Case,
    splits: Option<usize>,
    rows_per_block: usize,
) {
    let AttentionParams { n_heads, n_kv_heads, head_dim, scale } = case.params;
    let n_rows = case.q.len() / case.params.q_row_len();
    let group = n_heads / n_kv_heads;
    let heads_per_block = group.div_ceil(group.div_ceil(WARPS));
    let chunks = group.div_ceil(heads_per_block);
    let block_queries = rows_per_block * heads_per_block;
    let tasks = n_rows * n_kv_heads * chunks;
    let splits = splits.unwrap_or_else(|| host_splits(tasks));
    let tile_keys = tile_keys(block_queries, head_dim);
    let shared_floats = block_queries * head_dim + tile_keys * (key_stride(head_dim) + head_dim);

    let mut flat = flatten(block_size, sequences);
    let mut q = DeviceBuffer::from_floats(&case.q);
    let [mut k_pool, mut v_pool] = [&case.k_pool, &case.v_pool].map(|x| DeviceBuffer::from_halves(x));
    let mut out = DeviceBuffer::from_floats(&vec![f32::NAN; case.q.len()]);
    let mut partials = DeviceBuffer::zeroed(4 * tasks * splits * block_queries * (head_dim + 2));
    let mut counters = DeviceBuffer::zeroed(4 * tasks);
    let mut copy = Q8Copy::zeroed(case.q.len());
    let quantize = head_dim.is_multiple_of(32);
    let mut pointers = [
        &mut q,
        &mut k_pool,
        &mut v_pool,
        &mut flat.sequences,
        &mut flat.block_tables,
        &mut flat.tree_parents,
        &mut partials,
        &mut counters,
        &mut out,
        &mut copy.values,
        &mut copy.scales,
        &mut copy.halves,
        &mut copy.half_scales,
    ]
    .map(|buffer| buffer.address());
    if !quantize {
        pointers[9..].fill(0);
    }
    let [
        q_ptr,
        k_ptr,
        v_ptr,
        seq_ptr,
        tables_ptr,
        parents_ptr,
        partials_ptr,
        counters_ptr,
        out_ptr,
        oq_ptr,
        os_ptr,
        oh_ptr,
        ohs_ptr,
    ] = &mut pointers;
    let mut scale = scale;
    let mut block_size_arg = FastDivisor::new("attention", block_size).unwrap();
    let [
        mut n_sequences,
        mut n_rows_arg,
        mut n_heads,
        mut n_kv_heads,
        mut head_dim_arg,
        mut heads_per_block,
        mut rows_per_block,
        mut tile_keys,
        mut key_stride,
        mut n_splits,
    ] = [
        sequences.len(),
        n_rows,
        n_heads,
        n_kv_heads,
        head_dim,
        heads_per_block,
        rows_per_block,
        tile_keys,
        key_stride(head_dim),
        splits,
    ]
    .map(|v| v as u32);
    let kernel = match (rows_per_block > 1, head_dim <= SMALL_HEAD_DIM) {
        (false, true) => "attention_dim128",
        (false, false) => "attention_dim512",
        (true, true) => "attention_rows_dim128",
        (true, false) => "attention_rows_dim512",
    };
    let shape = LaunchShape {
        grid: [(tasks * splits) as u32, 1, 1],
        block: [32 * WARPS as u32, 1, 1],
        dynamic_shared_bytes: 4 * shared_floats,
    };
    run(
        kernel,
        shape,
        &mut [
            ptr(q_ptr),
            ptr(k_ptr),
            ptr(v_ptr),
            ptr(seq_ptr),
            ptr(&mut n_sequences),
            ptr(tables_ptr),
            ptr(parents_ptr),
            ptr(&mut block_size_arg),
            ptr(&mut n_rows_arg),
            ptr(&mut n_heads),
            ptr(&mut n_kv_heads),
            ptr(&mut head_dim_arg),
            ptr(&mut scale),
            ptr(&mut heads_per_block),
            ptr(&mut rows_per_block),
            ptr(&mut tile_keys),
            ptr(&mut key_stride),
            ptr(&mut n_splits),
            ptr(partials_ptr),
            ptr(counters_ptr),
            ptr(out_ptr),
            ptr(oq_ptr),
            ptr(os_ptr),
            ptr(oh_ptr),
            ptr(ohs_ptr),
        ],
    );
    let label = format!("{kernel} {label}, {splits} splits");
    check(&label, &out.floats(case.q.len()), &case.want, DECODE_TOLERANCE);
    if quantize {
        check_q8_copy(&label, &copy, &case.want, DECODE_TOLERANCE);
        check_f16_copy(&label, &copy, &case.want, case.params.n_heads * head_dim, DECODE_TOLERANCE);
    }
    assert!(counters.words(tasks).iter().all(|&c| c == 0), "{label}: merge counters reset");
}

/// Runs `width`'s kernel over the case as attention_mma.rs launches it, with `splits` splits of
/// each block's keys, and `attention_mma_merge` over the split states when there are several,
/// which also writes the output's int8 and f16 copies.
fn mma(label: &str, width: MmaWidth, sequences: &[Sequence], block_size: usize, case: &Case, splits: usize) {
    let AttentionParams { n_heads, n_kv_heads, head_dim, scale } = case.params;
    assert_eq!(head_dim, 128, "the tensor-core kernel's only head size");
    let n_rows = case.q.len() / case.params.q_row_len();
    let group = n_heads / n_kv_heads;
    let heads_per_block = group.div_ceil(group.div_ceil(WARPS));
    let chunks = group.div_ceil(heads_per_block);
    let row_blocks = n_rows.div_ceil(16 * width.warps / heads_per_block) + sequences.len() - 1;
    let n_states = n_rows * n_heads * splits;
    let mut flat = flatten(block_size, sequences);
    let mut q = DeviceBuffer::from_floats(&case.q);
    let [mut k_pool, mut v_pool] = [&case.k_pool, &case.v_pool].map(|x| DeviceBuffer::from_halves(x));
    let mut stats = DeviceBuffer::from_floats(&vec![f32::NAN; 2 * n_states]);
    let mut parts = DeviceBuffer::from_floats(&vec![f32::NAN; n_states * head_dim]);
    let mut out = DeviceBuffer::from_floats(&vec![f32::NAN; case.q.len()]);
    let mut copy = Q8Copy::zeroed(case.q.len());
    let mut pointers = [
        &mut q,
        &mut k_pool,
        &mut v_pool,
        &mut flat.sequences,
        &mut flat.block_tables,
        &mut flat.tree_parents,
        &mut stats,
        &mut parts,
        &mut out,
        &mut copy.values,
        &mut copy.scales,
        &mut copy.halves,
        &mut copy.half_scales,
    ]
    .map(|buffer| buffer.address());
    let [
        q_ptr,
        k_ptr,
        v_ptr,
        seq_ptr,
        tables_ptr,
        parents_ptr,
        stats_ptr,
        parts_ptr,
        out_ptr,
        oq_ptr,
        os_ptr,
        oh_ptr,
        ohs_ptr,
    ] = &mut pointers;
    let mut scale = scale;
    let mut block_size_arg = FastDivisor::new("attention_mma", block_size).unwrap();
    let [mut n_sequences, mut n_heads, mut n_kv_heads, mut heads_per_block, mut n_splits] =
        [sequences.len(), n_heads, n_kv_heads, heads_per_block, splits].map(|v| v as u32);
    let shape = LaunchShape {
        grid: [row_blocks as u32, n_kv_heads * chunks as u32, n_splits],
        block: [32 * width.warps as u32, 1, 1],
        dynamic_shared_bytes: width.ring_keys * 2 * 136 * 2,
    };
    run(
        width.kernel,
        shape,
        &mut [
            ptr(q_ptr),
            ptr(k_ptr),
            ptr(v_ptr),
            ptr(seq_ptr),
            ptr(&mut n_sequences),
            ptr(tables_ptr),
            ptr(parents_ptr),
            ptr(&mut block_size_arg),
            ptr(&mut n_heads),
            ptr(&mut n_kv_heads),
            ptr(&mut scale),
            ptr(&mut heads_per_block),
            ptr(&mut n_splits),
            ptr(stats_ptr),
            ptr(parts_ptr),
            ptr(out_ptr),
        ],
    );
    if splits > 1 {
        let n_queries = n_rows * n_heads as usize;
        merge(
            n_queries,
            splits,
            n_heads as usize,
            [stats_ptr, parts_ptr, out_ptr, oq_ptr, os_ptr, oh_ptr, ohs_ptr],
        );
    }
    let label = format!("{} {label}, {splits} splits", width.kernel);
    let got = out.floats(case.q.len());
    check(&label, &got, &case.want, MMA_TOLERANCE);
    // The copies round the kernel's own output, whose f16 error against the CPU is larger than
    // the copies' checks allow for.
    if splits > 1 {
        check_q8_copy(&label, &copy, &got, DECODE_TOLERANCE);
        check_f16_copy(&label, &copy, &got, n_heads as usize * 128, DECODE_TOLERANCE);
    }
}

/// Runs `attention_mma_merge` as attention_mma.rs launches it, a warp per query, over the split
/// states at the first two addresses, into the output and its int8 and f16 copies at the rest.
fn merge(n_queries: usize, n_splits: usize, n_heads: usize, addresses: [&mut u64; 7]) {
    let [stats, parts, out, out_q, out_scales, out_halves, out_half_scales] = addresses;
    let [mut n_queries, mut n_splits, mut n_heads] = [n_queries, n_splits, n_heads].map(|v| v as u32);
    run(
        "attention_mma_merge",
        LaunchShape::linear(n_queries.div_ceil(WARPS as u32), 32 * WARPS as u32),
        &mut [
            ptr(stats),
            ptr(parts),
            ptr(&mut n_queries),
            ptr(&mut n_splits),
            ptr(&mut n_heads),
            ptr(out),
            ptr(out_q),
            ptr(out_scales),
            ptr(out_halves),
            ptr(out_half_scales),
        ],
    );
}

static TREE: [u32; 6] = [TREE_ROOT, 0, 0, 1, TREE_ROOT, 4];

/// The device test's sequences of every mask (a fresh causal prompt, a decode row, a
/// bidirectional chunk, a tree of 6 nodes, a sequence without new tokens, three rows after a
/// longer context), in blocks of 4, the longer context 200 keys instead of 700. Groups of 4, 1, 2
/// and 3 query heads; heads of 30 take float loads and write no int8 copy, heads of 256 take
/// `attention_dim512`. The host's split count, and unsplit.
#[test]
fn decode_attention_matches_cpu_for_every_mask() {
    let mut rng = Rng::new(81);
    let sequences = [
        Sequence { n_past: 0, n_new: 7, mask: Mask::Causal, table: vec![3, 0] },
        Sequence { n_past: 37, n_new: 1, mask: Mask::Causal, table: (4..14).rev().collect() },
        Sequence { n_past: 5, n_new: 4, mask: Mask::Bidirectional, table: vec![14, 1, 2] },
        Sequence { n_past: 9, n_new: 6, mask: Mask::Tree(&TREE), table: vec![15, 16, 17, 18] },
        Sequence { n_past: 3, n_new: 0, mask: Mask::Causal, table: vec![19] },
        Sequence { n_past: 200, n_new: 3, mask: Mask::Causal, table: (20..71).rev().collect() },
    ];
    let layout = layout_of(4, &sequences);
    for heads in [(8, 2, 128), (4, 4, 64), (2, 1, 256), (3, 1, 30)] {
        let case = Case::new(&layout, heads, &mut rng);
        let label = format!("{} rows, heads {}/{} of {}", layout.n_rows(), heads.0, heads.1, heads.2);
        decode(&label, &sequences, 4, &case, None);
        decode(&label, &sequences, 4, &case, Some(1));
    }
}

/// One decode row over 701 keys in blocks of 16, split the host's way (64 blocks a task: 22 of
/// them used with heads of up to 128, each a tile of 32 keys; with heads of 512, whose tiles hold
/// 7 keys, all 64, some with one tile and some with two) and 5 ways; and over 101 keys in blocks
/// of 12 (no power of two, for the kernels' division by the block size), fewer tiles than the 5
/// splits for heads of up to 128. Groups of 4 and 2, of 9 cut into blocks of 5
/// and 4 heads, and 8 heads of 512 dimensions. The device test's 5000 keys take too long here.
#[test]
fn decode_attention_splits_long_rows() {
    let mut rng = Rng::new(82);
    for (n_past, block_size) in [(700usize, 16), (100, 12)] {
        let table: Vec<u32> = (0..(n_past + 1).div_ceil(block_size) as u32).rev().collect();
        let sequences = [Sequence { n_past, n_new: 1, mask: Mask::Causal, table }];
        let layout = layout_of(block_size, &sequences);
        for heads in [(32, 8, 128), (16, 8, 128), (18, 2, 64), (8, 1, 512)] {
            let case = Case::new(&layout, heads, &mut rng);
            let label = format!("1 row after {n_past}, heads {}/{} of {}", heads.0, heads.1, heads.2);
            decode(&label, &sequences, block_size, &case, None);
            decode(&label, &sequences, block_size, &case, Some(5));
        }
    }
}

/// Batches of every mask whose warps' 16 (row, head) slots end mid-sequence: a causal prompt of 18
/// rows, a chunk of 10 after 70 cached keys (tiles of 32 keys seen in part), a tree of 6 nodes, a
/// bidirectional chunk and a decode row among them. Groups of 4 query heads (32 rows a block), 8
/// (16 rows), 2 (64 rows) and 3 (42 rows, the last two slots dead); unsplit and split 3 ways,
/// every split but the first left without keys. Smaller than the device test's 77 and 300 + 64
/// rows, which the warp-shuffle mma fallback makes slow here.
#[test]
fn mma_attention_matches_cpu_for_every_mask() {
    let mut rng = Rng::new(83);
    let sequences = [
        Sequence { n_past: 0, n_new: 18, mask: Mask::Causal, table: vec![3, 0] },
        Sequence { n_past: 70, n_new: 10, mask: Mask::Causal, table: (4..10).rev().collect() },
        Sequence { n_past: 9, n_new: 6, mask: Mask::Tree(&TREE), table: vec![10, 11] },
        Sequence { n_past: 37, n_new: 1, mask: Mask::Causal, table: (12..15).collect() },
        Sequence { n_past: 5, n_new: 4, mask: Mask::Bidirectional, table: vec![15] },
    ];
    let block_size = 16;
    let layout = layout_of(block_size, &sequences);
    for heads in [(8, 2, 128), (8, 1, 128), (4, 2, 128), (6, 2, 128)] {
        let case = Case::new(&layout, heads, &mut rng);
        let label = format!("{} rows, heads {}/{} of 128", layout.n_rows(), heads.0, heads.1);
        for width in [WIDE, NARROW] {
            mma(&label, width, &sequences, block_size, &case, 1);
            mma(&label, width, &sequences, block_size, &case, 3);
        }
    }
}

/// A verify batch: a tree of 23 draft tokens (a binary tree) after 700 keys in blocks of 12 (no
/// power of two), whose 22 tiles of 32 keys split 4 ways take 8, 8 and 6 tiles and leave the
/// fourth split none, and whose 12 tiles of 64 (the long width's) take 3 a split; the rows of
/// Qwen3-8B's groups of 4 fill one block. In the same launch, a causal chunk of 5 rows after 37
/// keys.
#[test]
fn mma_attention_splits_a_verify_batch_after_a_long_context() {
    let mut rng = Rng::new(84);
    let parents: Vec<u32> = (0..23u32).map(|i| if i == 0 { TREE_ROOT } else { (i - 1) / 2 }).collect();
    let parents: &'static [u32] = Box::leak(parents.into_boxed_slice());
    let (n_past, block_size) = (700usize, 12);
    let n_blocks = (n_past + 23).div_ceil(block_size) as u32;
    let sequences = [
        Sequence { n_past, n_new: 23, mask: Mask::Tree(parents), table: (0..n_blocks).rev().collect() },
        Sequence { n_past: 37, n_new: 5, mask: Mask::Causal, table: (n_blocks..n_blocks + 4).collect() },
    ];
    let layout = layout_of(block_size, &sequences);
    let case = Case::new(&layout, (8, 2, 128), &mut rng);
    let label = format!("23 tree rows after {n_past} and 5 after 37, heads 8/2 of 128");
    for width in [WIDE, LONG] {
        mma(&label, width, &sequences, block_size, &case, 1);
        mma(&label, width, &sequences, block_size, &case, 4);
    }
}

/// A decode batch: three sequences of one row each, after 700 keys in blocks of 12 (22 tiles, split
/// 4 ways as above), after 37 and with no context at all; the group's query heads fill a warp's
/// first slots. Groups of 4, 2, 8 and 3, in wide blocks and in the narrow ones decode takes.
#[test]
fn mma_attention_takes_decode_rows() {
    let mut rng = Rng::new(85);
    let block_size = 12;
    let sequences = [
        Sequence { n_past: 700, n_new: 1, mask: Mask::Causal, table: (0..59).rev().collect() },
        Sequence { n_past: 37, n_new: 1, mask: Mask::Causal, table: (59..63).collect() },
        Sequence { n_past: 0, n_new: 1, mask: Mask::Causal, table: vec![63] },
    ];
    let layout = layout_of(block_size, &sequences);
    for heads in [(32, 8, 128), (16, 8, 128), (8, 1, 128), (6, 2, 128)] {
        let case = Case::new(&layout, heads, &mut rng);
        let label = format!("3 decode rows, heads {}/{} of 128", heads.0, heads.1);
        mma(&label, WIDE, &sequences, block_size, &case, 4);
        mma(&label, NARROW, &sequences, block_size, &case, 1);
        mma(&label, NARROW, &sequences, block_size, &case, 4);
    }
}

/// `attention_mma_merge` over 40 splits, as narrow decode blocks leave them (a lane reads two
/// splits' states), some of them empty (max -inf, as splits without keys write them), against
/// the merge computed here in f64; with the int8 and f16 copies of its output.
#[test]
fn mma_merge_combines_more_splits_than_a_warp_has_lanes() {
    let mut rng = Rng::new(86);
    let (n_queries, n_splits, n_heads, head_dim) = (9usize, 40usize, 3usize, 128usize);
    let mut stats = Vec::with_capacity(2 * n_queries * n_splits);
    for query in 0..n_queries {
        for split in 0..n_splits {
            // Split 37 of every query and every third of the first are empty.
            if split == 37 || (query == 0 && split % 3 == 0) {
                stats.extend([f32::NEG_INFINITY, 0.0]);
            } else {
                stats.extend([3.0 * rng.gaussian(), 0.5 + 4.0 * rng.unit()]);
            }
        }
    }
    let parts = gaussian_row(n_queries * n_splits * head_dim, 1.0, &mut rng);
    let mut want = vec![0.0f32; n_queries * head_dim];
    for query in 0..n_queries {
        let states = &stats[2 * query * n_splits..2 * (query + 1) * n_splits];
        let max = states.iter().step_by(2).fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let weights: Vec<f64> = states
            .chunks(2)
            .map(|s| if s[0] == f32::NEG_INFINITY { 0.0 } else { f64::from(s[0] - max).exp() })
            .collect();
        let sum: f64 = weights.iter().zip(states.chunks(2)).map(|(w, s)| w * f64::from(s[1])).sum();
        for d in 0..head_dim {
            let acc: f64 = (0..n_splits)
                .map(|split| weights[split] * f64::from(parts[(query * n_splits + split) * head_dim + d]))
                .sum();
            want[query * head_dim + d] = (acc / sum) as f32;
        }
    }
    let mut stats_buffer = DeviceBuffer::from_floats(&stats);
    let mut parts_buffer = DeviceBuffer::from_floats(&parts);
    let mut out = DeviceBuffer::from_floats(&vec![f32::NAN; want.len()]);
    let mut copy = Q8Copy::zeroed(want.len());
    let mut pointers = [
        &mut stats_buffer,
        &mut parts_buffer,
        &mut out,
        &mut copy.values,
        &mut copy.scales,
        &mut copy.halves,
        &mut copy.half_scales,
    ]
    .map(|buffer| buffer.address());
    let [stats_ptr, parts_ptr, out_ptr, oq_ptr, os_ptr, oh_ptr, ohs_ptr] = &mut pointers;
    merge(n_queries, n_splits, n_heads, [stats_ptr, parts_ptr, out_ptr, oq_ptr, os_ptr, oh_ptr, ohs_ptr]);
    let label = format!("attention_mma_merge of {n_splits} splits");
    check(&label, &out.floats(want.len()), &want, DECODE_TOLERANCE);
    check_q8_copy(&label, &copy, &want, DECODE_TOLERANCE);
    check_f16_copy(&label, &copy, &want, n_heads * head_dim, DECODE_TOLERANCE);
}
