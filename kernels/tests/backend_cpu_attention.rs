//! Paged attention on the CPU backend against a naive f64 loop written here, for causal,
//! bidirectional and tree masks, GQA, scattered block tables and batches of several sequences;
//! plus the attention layout's bookkeeping and errors.

// The helpers unwrap like the tests calling them: an error there is a test failure.
#![allow(clippy::unwrap_used)]

mod common;

use canopy_kernels::backend::cpu::{CpuBackend, CpuTensor};
use canopy_kernels::backend::{
    AttentionBatch, AttentionLayout, AttentionParams, Backend, BackendError, Mask, SequenceSpec, TREE_ROOT,
};
use common::{Rng, gaussian_row};

/// What one sequence's new tokens see among themselves, owning the tree's parents.
#[derive(Clone, Debug)]
enum TestMask {
    Causal,
    Bidirectional,
    Tree(Vec<u32>),
}

/// One sequence's logical keys, values and queries, and the pool blocks it owns.
struct TestSequence {
    n_past: usize,
    n_new: usize,
    mask: TestMask,
    keys: Vec<f32>,
    values: Vec<f32>,
    queries: Vec<f32>,
    table: Vec<u32>,
}

impl TestSequence {
    fn spec(&self) -> SequenceSpec<'_> {
        let mask = match &self.mask {
            TestMask::Causal => Mask::Causal,
            TestMask::Bidirectional => Mask::Bidirectional,
            TestMask::Tree(parents) => Mask::Tree(parents),
        };
        SequenceSpec { n_past: self.n_past, n_new: self.n_new, block_table: &self.table, mask }
    }

    /// Logical positions new token `i` may see, by the mask's definition.
    fn visible(&self, i: usize) -> Vec<usize> {
        let mut visible: Vec<usize> = (0..self.n_past).collect();
        match &self.mask {
            TestMask::Causal => visible.extend((0..=i).map(|j| self.n_past + j)),
            TestMask::Bidirectional => visible.extend((0..self.n_new).map(|j| self.n_past + j)),
            TestMask::Tree(parents) => {
                let mut node = i as u32;
                while node != TREE_ROOT {
                    visible.push(self.n_past + node as usize);
                    node = parents[node as usize];
                }
            }
        }
        visible
    }
}

/// A KV pool of `n_blocks` blocks handed out in a scrambled order, so tables are not contiguous.
struct Pool {
    block_size: usize,
    free: Vec<u32>,
    k: CpuTensor,
    v: CpuTensor,
}

impl Pool {
    fn new(
        backend: &CpuBackend,
        params: &AttentionParams,
        block_size: usize,
        n_blocks: usize,
        rng: &mut Rng,
    ) -> Self {
        let mut free: Vec<u32> = (0..n_blocks as u32).collect();
        for i in (1..free.len()).rev() {
            free.swap(i, rng.next_u64() as usize % (i + 1));
        }
        let len = n_blocks * block_size * params.kv_row_len();
        // Garbage in unused slots: attention must not read them.
        let k = backend.upload_kv_pool(&gaussian_row(len, 100.0, rng)).unwrap();
        let v = backend.upload_kv_pool(&gaussian_row(len, 100.0, rng)).unwrap();
        Self { block_size, free, k, v }
    }

    /// A sequence with random contents; its context is written to the pool now, its new tokens by
    /// `write_new` through the layout's slots.
    fn sequence(
        &mut self,
        backend: &CpuBackend,
        params: &AttentionParams,
        (n_past, n_new, mask): (usize, usize, TestMask),
        rng: &mut Rng,
    ) -> TestSequence {
        let kv_row = params.kv_row_len();
        let n_blocks = (n_past + n_new).div_ceil(self.block_size);
        let table = self.free.split_off(self.free.len() - n_blocks);
        let keys = gaussian_row((n_past + n_new) * kv_row, 1.0, rng);
        let values = gaussian_row((n_past + n_new) * kv_row, 1.0, rng);
        let queries = gaussian_row(n_new * params.q_row_len(), 1.0, rng);
        let seq = TestSequence { n_past, n_new, mask, keys, values, queries, table };
        let slots: Vec<u32> = (0..n_past).map(|p| self.slot(&seq.table, p)).collect();
        self.write(backend, &seq, 0, &slots, kv_row);
        seq
    }

    fn slot(&self, table: &[u32], position: usize) -> u32 {
        (table[position / self.block_size] as usize * self.block_size + position % self.block_size) as u32
    }

    /// Writes the keys and values of positions `first..first + slots.len()` of `seq`.
    fn write(
        &mut self,
        backend: &CpuBackend,
        seq: &TestSequence,
        first: usize,
        slots: &[u32],
        kv_row: usize,
    ) {
        let rows = first * kv_row..(first + slots.len()) * kv_row;
        let slots_index = backend.upload_index(slots).unwrap();
        let keys = backend.upload(&seq.keys[rows.clone()]).unwrap();
        let values = backend.upload(&seq.values[rows]).unwrap();
        backend.write_kv(&mut self.k, &keys, &slots_index, slots.len(), kv_row).unwrap();
        backend.write_kv(&mut self.v, &values, &slots_index, slots.len(), kv_row).unwrap();
    }

    /// Writes the new tokens' keys and values through the layout's slots, after checking that
    /// they are where the block tables say.
    fn write_new(
        &mut self,
        backend: &CpuBackend,
        seqs: &[&TestSequence],
        layout: &AttentionLayout,
        kv_row: usize,
    ) {
        let mut row = 0;
        for seq in seqs {
            let slots = &layout.slots()[row..row + seq.n_new];
            let expected: Vec<u32> = (0..seq.n_new).map(|i| self.slot(&seq.table, seq.n_past + i)).collect();
            assert_eq!(slots, expected, "layout slots");
            self.write(backend, seq, seq.n_past, slots, kv_row);
            row += seq.n_new;
        }
    }
}

/// Runs one attention call over `seqs` (whose new K/V are already in the pool).
fn run(backend: &CpuBackend, pool: &Pool, seqs: &[&TestSequence], params: &AttentionParams) -> Vec<f32> {
    let specs: Vec<SequenceSpec<'_>> = seqs.iter().map(|s| s.spec()).collect();
    let layout = AttentionLayout::new(pool.block_size, &specs).unwrap();
    let batch = AttentionBatch::upload(backend, &layout).unwrap();
    let queries: Vec<f32> = seqs.iter().flat_map(|s| s.queries.iter().copied()).collect();
    let q = backend.upload(&queries).unwrap();
    let mut out = backend.zeros(queries.len()).unwrap();
    backend.attention(&q, &pool.k, &pool.v, &batch, params, &mut out).unwrap();
    let mut result = vec![0.0; queries.len()];
    backend.download(&out, &mut result).unwrap();
    result
}

/// Attention of every new token of `seq` in f64, by the definition.
fn naive_attention(seq: &TestSequence, params: &AttentionParams) -> Vec<f64> {
    let (hd, kv_row) = (params.head_dim, params.kv_row_len());
    let mut out = Vec::new();
    for i in 0..seq.n_new {
        let visible = seq.visible(i);
        for h in 0..params.n_heads {
            let q = &seq.queries[i * params.q_row_len() + h * hd..][..hd];
            let kv_head = h / (params.n_heads / params.n_kv_heads);
            let head_of = |data: &[f32], p: usize| data[p * kv_row + kv_head * hd..][..hd].to_vec();
            let scores: Vec<f64> = visible
                .iter()
                .map(|&p| {
                    let k = head_of(&seq.keys, p);
                    q.iter().zip(&k).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum::<f64>()
                        * f64::from(params.scale)
                })
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let mut head_out = vec![0f64; hd];
            for (&p, w) in visible.iter().zip(&weights) {
                for (o, &v) in head_out.iter_mut().zip(&head_of(&seq.values, p)) {
                    *o += w / total * f64::from(v);
                }
            }
            out.extend(head_out);
        }
    }
    out
}

fn assert_matches_naive(got: &[f32], seq: &TestSequence, params: &AttentionParams, what: &str) {
    let expected = naive_attention(seq, params);
    assert_eq!(got.len(), expected.len(), "{what}: lengths");
    for (i, (&g, &e)) in got.iter().zip(&expected).enumerate() {
        assert!((f64::from(g) - e).abs() <= 2e-6 * (1.0 + e.abs()), "{what}[{i}]: {g} vs {e}");
    }
}

fn params(n_heads: usize, n_kv_heads: usize, head_dim: usize) -> AttentionParams {
    AttentionParams { n_heads, n_kv_heads, head_dim, scale: 1.0 / (head_dim as f32).sqrt() }
}

/// A random tree of `n` nodes in which parents precede children; node 0 hangs off the context.
fn random_tree(n: usize, rng: &mut Rng) -> Vec<u32> {
    (0..n).map(|i| if i == 0 { TREE_ROOT } else { (rng.next_u64() % i as u64) as u32 }).collect()
}

#[test]
fn causal_attention_matches_a_naive_loop_with_gqa_and_scattered_blocks() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0xca5);
    // Contexts longer than the kernel's key chunk, partial last blocks, head_dim with a tail.
    for (p, block_size, n_past, n_new) in
        [(params(4, 2, 16), 4, 45, 7), (params(4, 1, 20), 16, 70, 1), (params(3, 3, 8), 5, 0, 9)]
    {
        let mut pool = Pool::new(&backend, &p, block_size, 40, &mut rng);
        let seq = pool.sequence(&backend, &p, (n_past, n_new, TestMask::Causal), &mut rng);
        let layout = AttentionLayout::new(block_size, &[seq.spec()]).unwrap();
        pool.write_new(&backend, &[&seq], &layout, p.kv_row_len());
        assert_matches_naive(&run(&backend, &pool, &[&seq], &p), &seq, &p, "causal");
    }
}

#[test]
fn a_batch_gives_each_sequence_what_it_gets_alone() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0xba7c);
    let p = params(6, 2, 16);
    let block_size = 8;
    let mut pool = Pool::new(&backend, &p, block_size, 64, &mut rng);
    let shapes = [
        (13, 5, TestMask::Causal),
        (40, 9, TestMask::Tree(random_tree(9, &mut rng))),
        (10, 0, TestMask::Causal),
        (21, 6, TestMask::Bidirectional),
        (70, 1, TestMask::Causal),
    ];
    let seqs: Vec<TestSequence> =
        shapes.into_iter().map(|s| pool.sequence(&backend, &p, s, &mut rng)).collect();
    let refs: Vec<&TestSequence> = seqs.iter().collect();
    let specs: Vec<SequenceSpec<'_>> = seqs.iter().map(|s| s.spec()).collect();
    let layout = AttentionLayout::new(block_size, &specs).unwrap();
    pool.write_new(&backend, &refs, &layout, p.kv_row_len());

    let batched = run(&backend, &pool, &refs, &p);
    let mut offset = 0;
    for (index, seq) in seqs.iter().enumerate() {
        let alone = run(&backend, &pool, &[seq], &p);
        let rows = &batched[offset..offset + alone.len()];
        assert_eq!(rows, alone, "sequence {index} batched vs alone");
        assert_matches_naive(rows, seq, &p, &format!("sequence {index} ({:?})", seq.mask));
        offset += alone.len();
    }
    assert_eq!(offset, batched.len());
}

#[test]
fn each_tree_node_attends_exactly_like_its_root_to_node_path() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0x7ee);
    let p = params(4, 2, 12);
    let block_size = 4;
    let mut pool = Pool::new(&backend, &p, block_size, 200, &mut rng);
    let n_nodes = 23;
    let parents = random_tree(n_nodes, &mut rng);
    let tree = pool.sequence(&backend, &p, (37, n_nodes, TestMask::Tree(parents.clone())), &mut rng);
    let layout = AttentionLayout::new(block_size, &[tree.spec()]).unwrap();
    pool.write_new(&backend, &[&tree], &layout, p.kv_row_len());
    let tree_out = run(&backend, &pool, &[&tree], &p);
    assert_matches_naive(&tree_out, &tree, &p, "tree");

    let (q_row, kv_row) = (p.q_row_len(), p.kv_row_len());
    for node in 0..n_nodes {
        let mut path = vec![node];
        while parents[*path.last().unwrap()] != TREE_ROOT {
            path.push(parents[*path.last().unwrap()] as usize);
        }
        path.reverse();
        assert_eq!(
            layout.positions()[node] as usize,
            tree.n_past + path.len() - 1,
            "node {node}: RoPE position"
        );
        // The path as an ordinary causal sequence in fresh blocks: the context, then the path's
        // nodes at consecutive positions.
        let positions: Vec<usize> = (0..tree.n_past).chain(path.iter().map(|&n| tree.n_past + n)).collect();
        let gather =
            |data: &[f32]| positions.iter().flat_map(|&p| data[p * kv_row..][..kv_row].to_vec()).collect();
        let blocks = (tree.n_past + path.len()).div_ceil(block_size);
        let mut chain = TestSequence {
            n_past: tree.n_past,
            n_new: path.len(),
            mask: TestMask::Causal,
            keys: gather(&tree.keys),
            values: gather(&tree.values),
            queries: path.iter().flat_map(|&n| tree.queries[n * q_row..][..q_row].to_vec()).collect(),
            table: pool.free.split_off(pool.free.len() - blocks),
        };
        let slots: Vec<u32> = (0..positions.len()).map(|p| pool.slot(&chain.table, p)).collect();
        pool.write(&backend, &chain, 0, &slots, kv_row);
        let chain_out = run(&backend, &pool, &[&chain], &p);
        // Bit for bit: tree verification must reproduce decoding the path one token at a time.
        let (tree_row, chain_row) =
            (&tree_out[node * q_row..][..q_row], &chain_out[(path.len() - 1) * q_row..]);
        assert_eq!(tree_row, chain_row, "node {node} (path {path:?})");
        // The same again with the path's last token as the only new one, the rest committed.
        let last = TestSequence {
            n_past: positions.len() - 1,
            n_new: 1,
            queries: chain.queries[(path.len() - 1) * q_row..].to_vec(),
            ..chain
        };
        assert_eq!(tree_row, run(&backend, &pool, &[&last], &p), "node {node} decoded alone");
        chain = last;
        pool.free.append(&mut chain.table);
    }
}

#[test]
fn layout_places_tokens_and_rejects_bad_descriptions() {
    let parents = [TREE_ROOT, 0, 0, 1];
    let tables: [&[u32]; 3] = [&[7, 2], &[5, 1, 9], &[3]];
    let specs = [
        SequenceSpec { n_past: 3, n_new: 2, block_table: tables[0], mask: Mask::Causal },
        SequenceSpec { n_past: 6, n_new: 4, block_table: tables[1], mask: Mask::Tree(&parents) },
        SequenceSpec { n_past: 0, n_new: 2, block_table: tables[2], mask: Mask::Bidirectional },
    ];
    let layout = AttentionLayout::new(4, &specs).unwrap();
    assert_eq!((layout.n_sequences(), layout.n_rows(), layout.block_size()), (3, 8, 4));
    assert_eq!(layout.positions(), [3, 4, 6, 7, 7, 8, 0, 1]);
    // Seq 0: positions 3, 4 -> block 7 slot 3, block 2 slot 0; seq 1: positions 6..10 -> block 1
    // slots 2, 3, block 9 slots 0, 1; seq 2: block 3 slots 0, 1.
    assert_eq!(layout.slots(), [31, 8, 6, 7, 36, 37, 12, 13]);
    assert_eq!(layout.max_kv_len(), 10);
    assert_eq!(layout.slots_needed(), 40);

    let shape_error = |specs: &[SequenceSpec<'_>], block_size| match AttentionLayout::new(block_size, specs) {
        Err(BackendError::Shape { op: "attention layout", .. }) => {}
        other => panic!("expected a layout error, got {other:?}"),
    };
    let with = |n_new, block_table, mask| [SequenceSpec { n_past: 5, n_new, block_table, mask }];
    shape_error(&with(4, &[0, 1], Mask::Causal), 4);
    shape_error(&with(4, &[0, 1, 2], Mask::Causal), 0);
    shape_error(&with(4, &[0, 1, 2], Mask::Tree(&[TREE_ROOT, 0, 2, 1])), 4);
    shape_error(&with(4, &[0, 1, 2], Mask::Tree(&[TREE_ROOT, 0, 1])), 4);
    shape_error(&with(1, &[u32::MAX, 0], Mask::Causal), 1 << 40);
    let empty = AttentionLayout::new(4, &[]).unwrap();
    assert_eq!((empty.n_rows(), empty.slots_needed(), empty.max_kv_len()), (0, 0, 0));
}

#[test]
fn a_layout_cleared_and_refilled_equals_a_new_one() {
    let parents = [TREE_ROOT, 0, 0, 1];
    let tables: [&[u32]; 2] = [&[7, 2, 4], &[5, 1, 9]];
    let specs = [
        SequenceSpec { n_past: 9, n_new: 1, block_table: tables[0], mask: Mask::Causal },
        SequenceSpec { n_past: 6, n_new: 4, block_table: tables[1], mask: Mask::Tree(&parents) },
    ];
    let mut reused = AttentionLayout::new(8, &specs[1..]).unwrap();
    // A refused sequence leaves the layout unusable until it is cleared.
    let too_long = SequenceSpec { n_past: 40, n_new: 1, block_table: tables[0], mask: Mask::Causal };
    assert!(reused.push(&too_long).is_err());
    reused.clear(4).unwrap();
    assert_eq!((reused.n_sequences(), reused.n_rows(), reused.slots_needed()), (0, 0, 0));
    for spec in &specs {
        reused.push(spec).unwrap();
    }
    assert_eq!(reused, AttentionLayout::new(4, &specs).unwrap());
    assert!(reused.clear(0).is_err());

    let mut never_cleared = AttentionLayout::default();
    match never_cleared.push(&specs[0]) {
        Err(BackendError::Shape { op: "attention layout", .. }) => {}
        other => panic!("expected a layout error, got {other:?}"),
    }
}

#[test]
fn attention_refuses_pools_and_buffers_that_do_not_fit() {
    let backend = CpuBackend::new();
    let p = params(4, 2, 8);
    let kv_row = p.kv_row_len();
    let specs = [SequenceSpec { n_past: 5, n_new: 2, block_table: &[0, 3], mask: Mask::Causal }];
    let batch = AttentionBatch::upload(&backend, &AttentionLayout::new(4, &specs).unwrap()).unwrap();
    let q = backend.zeros(2 * p.q_row_len()).unwrap();
    let mut out = backend.zeros(2 * p.q_row_len()).unwrap();
    let fits = backend.kv_pool(16 * kv_row).unwrap();
    backend.attention(&q, &fits, &fits, &batch, &p, &mut out).unwrap();

    let expect_error = |result: Result<(), BackendError>| match result {
        Err(BackendError::Shape { op: "attention", .. }) => {}
        other => panic!("expected an attention shape error, got {other:?}"),
    };
    let small = backend.kv_pool(15 * kv_row).unwrap();
    let ragged = backend.kv_pool(16 * kv_row + 1).unwrap();
    expect_error(backend.attention(&q, &small, &fits, &batch, &p, &mut out));
    expect_error(backend.attention(&q, &fits, &small, &batch, &p, &mut out));
    expect_error(backend.attention(&q, &ragged, &fits, &batch, &p, &mut out));
    expect_error(backend.attention(&backend.zeros(63).unwrap(), &fits, &fits, &batch, &p, &mut out));
    expect_error(backend.attention(&q, &fits, &fits, &batch, &p, &mut backend.zeros(63).unwrap()));
    for bad in [params(4, 3, 8), params(0, 1, 8), AttentionParams { scale: f32::INFINITY, ..p }] {
        expect_error(backend.attention(&q, &fits, &fits, &batch, &bad, &mut out));
    }
}

#[test]
fn a_batch_rewritten_in_place_matches_a_fresh_upload() {
    let backend = CpuBackend::new();
    let mut rng = Rng::new(0x5ab1e);
    let p = params(2, 1, 8);
    let block_size = 4;
    let mut pool = Pool::new(&backend, &p, block_size, 32, &mut rng);
    let big = pool.sequence(&backend, &p, (20, 8, TestMask::Tree(random_tree(8, &mut rng))), &mut rng);
    let small = pool.sequence(&backend, &p, (9, 3, TestMask::Causal), &mut rng);
    let big_layout = AttentionLayout::new(block_size, &[big.spec(), small.spec()]).unwrap();
    pool.write_new(&backend, &[&big, &small], &big_layout, p.kv_row_len());
    let small_layout = AttentionLayout::new(block_size, &[small.spec()]).unwrap();

    let mut batch = AttentionBatch::upload(&backend, &big_layout).unwrap();
    let attend = |batch: &AttentionBatch<CpuBackend>| {
        let q = backend.upload(&small.queries).unwrap();
        let mut out = backend.zeros(small.queries.len()).unwrap();
        backend.attention(&q, &pool.k, &pool.v, batch, &p, &mut out).unwrap();
        let mut result = vec![0.0; small.queries.len()];
        backend.download(&out, &mut result).unwrap();
        result
    };
    batch.update(&backend, &small_layout).unwrap();
    assert_eq!((batch.n_sequences(), batch.n_rows(), batch.max_kv_len()), (1, 3, 12));
    let fresh = AttentionBatch::upload(&backend, &small_layout).unwrap();
    assert_eq!(attend(&batch), attend(&fresh));
    assert_matches_naive(&attend(&batch), &small, &p, "updated batch");

    let mut reserved = AttentionBatch::with_capacity(&backend, 2, 11, 10).unwrap();
    assert_eq!((reserved.n_sequences(), reserved.n_rows()), (0, 0));
    reserved.update(&backend, &small_layout).unwrap();
    assert_eq!(attend(&reserved), attend(&fresh), "a batch reserved ahead of time");
    // Exactly the capacity of the big layout (8 + 3 rows, 7 + 3 blocks); one less of anything fails.
    reserved.update(&backend, &big_layout).unwrap();
    assert!(
        AttentionBatch::with_capacity(&backend, 2, 10, 10).unwrap().update(&backend, &big_layout).is_err()
    );
    assert!(
        AttentionBatch::with_capacity(&backend, 2, 11, 9).unwrap().update(&backend, &big_layout).is_err()
    );
    assert!(
        AttentionBatch::with_capacity(&backend, 1, 11, 10).unwrap().update(&backend, &big_layout).is_err()
    );

    let mut small_batch = AttentionBatch::upload(&backend, &small_layout).unwrap();
    match small_batch.update(&backend, &big_layout) {
        Err(BackendError::Shape { op: "attention batch update", .. }) => {}
        other => panic!("expected a capacity error, got {other:?}"),
    }
    assert_eq!((small_batch.n_rows(), small_batch.slots_needed()), (3, small_layout.slots_needed()));
    assert_eq!(attend(&small_batch), attend(&fresh), "a refused update leaves the batch as it was");
}
