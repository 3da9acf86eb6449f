//! `project_and_attend` against the CPU's projections, attention inputs and attention: decode
//! rows and verify batches, which the CUDA backend attends straight from their projections
//! (`attention_mma_decode`, `attention_mma_projected`), after long, short and empty contexts, the
//! decode rows also replayed from a recording as the context grows. The kernels are opt-in until
//! measured on a device: run with `CANOPY_CUDA_ATTENTION_FROM_PROJECTIONS=1` (check.sh does) to
//! test them; without, these tests check the three launches they replace.

use super::*;

/// Qwen3-8B's heads, with a narrower input.
const N_HEADS: usize = 32;
const N_KV_HEADS: usize = 8;
const HEAD_DIM: usize = 128;
const COLS: usize = 1024;
const BLOCK_SIZE: usize = 16;

/// The int8 activations of the projections bound the error, as for `project_attention_inputs`.
const TOLERANCE: f32 = 2e-2;

#[test]
fn decode_rows_attend_from_their_projections_as_the_cpu_does() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(21);
    let layer = Layer::new(gpu, &cpu, &mut rng);
    // Three decode rows (one after an empty context, one mid-tile), then verify chains of 5 rows
    // after 300 keys and of 23 (two tiles of new keys) with no context.
    for (label, specs) in [("decode", vec![(700, 1), (37, 1), (0, 1)]), ("verify", vec![(300, 5), (0, 23)])] {
        let tables = tables(&specs);
        let layout = layout(&specs, &tables);
        let x = gaussian_row(layout.n_rows() * COLS, 1.0, &mut rng);
        let pools = [(); 2].map(|_| kv_row(pool_len(&tables), 1.0, &mut rng));
        let on_cpu = layer.run(&cpu, &layer.cpu_weights, &layout, &x, &pools);
        let on_gpu = layer.run(gpu, &layer.gpu_weights, &layout, &x, &pools);
        for (name, (got, want)) in ["out", "k_pool", "v_pool"].iter().zip(on_gpu.iter().zip(&on_cpu)) {
            check(&format!("project_and_attend {label}: {name}"), got, want, TOLERANCE);
        }
    }
}

/// A recorded decode step (projections, then attention from them) replayed after 700, 701 and
/// 2999 keys: the new key lands in the right tile at every length, and the pools keep it.
#[test]
fn recorded_decode_from_projections_replays_at_every_context_length() {
    let Some(gpu) = cuda() else { return };
    let cpu = CpuBackend::new();
    let mut rng = Rng::new(22);
    let layer = Layer::new(gpu, &cpu, &mut rng);
    let specs_at = |n_past| vec![(n_past, 1)];
    let tables = tables(&specs_at(3000));
    let pools = [(); 2].map(|_| kv_row(pool_len(&tables), 1.0, &mut rng));
    let mut x = gaussian_row(COLS, 1.0, &mut rng);
    let mut gpu_step = Step::new(gpu, &layout(&specs_at(700), &tables), &x, &pools, tables[0].len());
    // Run once before recording, as recorded steps are: the first call allocates the output's
    // copies, which a recording cannot.
    gpu_step.submit(gpu, &layer.gpu_weights, &layer.gpu_norms).unwrap();
    let graph = gpu.record(|| gpu_step.submit(gpu, &layer.gpu_weights, &layer.gpu_norms)).unwrap().unwrap();
    let mut cpu_pools = pools.clone();
    for n_past in [700, 701, 2999] {
        let layout = layout(&specs_at(n_past), &tables);
        let delta = gaussian_row(COLS, 0.5, &mut rng);
        x.iter_mut().zip(&delta).for_each(|(x, d)| *x += d);
        gpu_step.update(gpu, &layout, &delta);
        gpu.replay(&graph).unwrap();
        let on_cpu = layer.run(&cpu, &layer.cpu_weights, &layout, &x, &cpu_pools);
        let on_gpu = gpu_step.fetch(gpu);
        for (name, (got, want)) in ["out", "k_pool", "v_pool"].iter().zip(on_gpu.iter().zip(&on_cpu)) {
            check(&format!("replayed project_and_attend after {n_past} keys: {name}"), got, want, TOLERANCE);
        }
        // Both sides go on from the device's pools, as a server's next step would.
        cpu_pools = [on_gpu[1].clone(), on_gpu[2].clone()];
    }
}

/// A pool block table per sequence of (n_past, n_new), blocks handed out backwards.
fn tables(specs: &[(usize, usize)]) -> Vec<Vec<u32>> {
    let mut next = specs.iter().map(|&(p, n)| (p + n).div_ceil(BLOCK_SIZE)).sum::<usize>() as u32;
    specs
        .iter()
        .map(|&(n_past, n_new)| {
            (0..(n_past + n_new).div_ceil(BLOCK_SIZE))
                .map(|_| {
                    next -= 1;
                    next
                })
                .collect()
        })
        .collect()
}

fn pool_len(tables: &[Vec<u32>]) -> usize {
    tables.iter().map(Vec::len).sum::<usize>() * BLOCK_SIZE * N_KV_HEADS * HEAD_DIM
}

fn layout(specs: &[(usize, usize)], tables: &[Vec<u32>]) -> AttentionLayout {
    let specs: Vec<_> = specs
        .iter()
        .zip(tables)
        .map(|(&(n_past, n_new), table)| SequenceSpec {
            n_past,
            n_new,
            block_table: table,
            mask: Mask::Causal,
        })
        .collect();
    AttentionLayout::new(BLOCK_SIZE, &specs).unwrap()
}

fn rope(n_heads: usize) -> RopeParams {
    RopeParams {
        n_heads,
        head_dim: HEAD_DIM,
        rotary_dim: HEAD_DIM,
        theta: 1_000_000.0,
        style: RopeStyle::Neox,
    }
}

fn params() -> AttentionParams {
    AttentionParams {
        n_heads: N_HEADS,
        n_kv_heads: N_KV_HEADS,
        head_dim: HEAD_DIM,
        scale: 1.0 / (HEAD_DIM as f32).sqrt(),
    }
}

/// One layer's attention weights, Q4_K_M's types (q and k Q4_K, v Q6_K), on both backends.
struct Layer {
    cpu_weights: Vec<<CpuBackend as Backend>::Weight>,
    gpu_weights: Vec<<CudaBackend as Backend>::Weight>,
    norms: [Vec<f32>; 2],
    gpu_norms: [<CudaBackend as Backend>::Tensor; 2],
}

impl Layer {
    fn new(gpu: &CudaBackend, cpu: &CpuBackend, rng: &mut Rng) -> Self {
        let shapes = [
            (GgmlType::Q4K, N_HEADS * HEAD_DIM),
            (GgmlType::Q4K, N_KV_HEADS * HEAD_DIM),
            (GgmlType::Q6K, N_KV_HEADS * HEAD_DIM),
        ];
        let bytes = shapes.map(|(ty, rows)| random_weight(ty, rows, COLS, rng));
        let (mut cpu_weights, mut gpu_weights) = (vec![], vec![]);
        for (&(ty, rows), b) in shapes.iter().zip(&bytes) {
            cpu_weights.push(cpu.upload_weight(ty, rows, COLS, b).unwrap());
            gpu_weights.push(gpu.upload_weight(ty, rows, COLS, b).unwrap());
        }
        let norms =
            [(); 2].map(|_| gaussian_row(HEAD_DIM, 0.5, rng).iter().map(|w| w + 1.0).collect::<Vec<_>>());
        let gpu_norms = norms.each_ref().map(|n| gpu.upload(n).unwrap());
        Self { cpu_weights, gpu_weights, norms, gpu_norms }
    }

    /// The attention output and both pools after `project_and_attend` on `backend` of input `x`
    /// over pools starting as `pools`.
    fn run<B: Backend>(
        &self,
        backend: &B,
        weights: &[B::Weight],
        layout: &AttentionLayout,
        x: &[f32],
        pools: &[Vec<f32>; 2],
    ) -> [Vec<f32>; 3] {
        let table_entries = layout.max_kv_len().div_ceil(BLOCK_SIZE) * layout.n_sequences();
        let mut step = Step::new(backend, layout, x, pools, table_entries);
        let norms = self.norms.each_ref().map(|n| backend.upload(n).unwrap());
        step.submit(backend, weights, &norms).unwrap();
        step.fetch(backend)
    }
}

/// A step's buffers on one backend.
struct Step<B: Backend> {
    x: B::Tensor,
    raw: [B::Tensor; 3],
    heads: [B::Tensor; 2],
    pools: [B::KvPool; 2],
    positions: B::Index,
    slots: B::Index,
    batch: AttentionBatch<B>,
    out: B::Tensor,
    n_rows: usize,
}

impl<B: Backend> Step<B> {
    fn new(
        backend: &B,
        layout: &AttentionLayout,
        x: &[f32],
        pools: &[Vec<f32>; 2],
        table_entries: usize,
    ) -> Self {
        let n_rows = layout.n_rows();
        let q_len = n_rows * N_HEADS * HEAD_DIM;
        let kv_len = n_rows * N_KV_HEADS * HEAD_DIM;
        let mut batch =
            AttentionBatch::with_capacity(backend, layout.n_sequences(), n_rows, table_entries).unwrap();
        batch.update(backend, layout).unwrap();
        Self {
            x: backend.upload(x).unwrap(),
            raw: [q_len, kv_len, kv_len].map(|len| backend.zeros(len).unwrap()),
            heads: [q_len, kv_len].map(|len| backend.zeros(len).unwrap()),
            pools: pools.each_ref().map(|p| backend.upload_kv_pool(p).unwrap()),
            positions: backend.upload_index(layout.positions()).unwrap(),
            slots: backend.upload_index(layout.slots()).unwrap(),
            batch,
            out: backend.zeros(q_len).unwrap(),
            n_rows,
        }
    }

    /// Points the step at `layout` (same shape) and adds `delta` to its input.
    fn update(&mut self, backend: &B, layout: &AttentionLayout, delta: &[f32]) {
        self.batch.update(backend, layout).unwrap();
        backend.write_index(&mut self.positions, layout.positions()).unwrap();
        backend.write_index(&mut self.slots, layout.slots()).unwrap();
        backend.add(&mut self.x, &backend.upload(delta).unwrap(), delta.len()).unwrap();
    }

    fn submit(
        &mut self,
        backend: &B,
        weights: &[B::Weight],
        norms: &[B::Tensor; 2],
    ) -> Result<(), BackendError> {
        let [q_raw, k_raw, v] = &mut self.raw;
        let [q, k] = &mut self.heads;
        let [k_pool, v_pool] = &mut self.pools;
        let heads = HeadParams {
            q_norm: &norms[0],
            k_norm: &norms[1],
            eps: 1e-6,
            positions: &self.positions,
            slots: &self.slots,
            n_rows: self.n_rows,
            q_rope: rope(N_HEADS),
            k_rope: rope(N_KV_HEADS),
        };
        let projections = AttentionProjections {
            x: &self.x,
            q: (&weights[0], q_raw),
            k: (&weights[1], k_raw),
            v: (&weights[2], v),
        };
        let targets = AttentionTargets { q, k, k_pool, v_pool };
        backend.project_and_attend(projections, &heads, targets, &self.batch, &params(), &mut self.out)
    }

    /// The output and both pools.
    fn fetch(&self, backend: &B) -> [Vec<f32>; 3] {
        let [k_pool, v_pool] = self.pools.each_ref().map(|p| fetch_pool(backend, p, p.len()));
        [fetch(backend, &self.out, self.out.len()), k_pool, v_pool]
    }
}
