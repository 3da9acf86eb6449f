//! The CUDA backend: kernels compiled at run time by NVRTC for the device's exact architecture.
//!
//! [`CudaBackend::new`] checks for the driver and NVRTC before touching either (cudarc's dynamic
//! loading panics on a missing library) and returns a [`CudaError`] instead, so callers can fall
//! back to the CPU backend. Kernel sources are the `.cu` files of `kernels/cuda/`, embedded in the
//! binary and compiled to CUBIN on first use, cached on disk (see [`cache_dir`]).
//!
//! Weights keep their GGUF blocks on the device, rearranged for the kernels' loads (layout.rs):
//! Q8_0 and Q6_K rows with their scales moved to the row's end, Q4_K rows interleaved in tiles
//! of 16. Matmuls of fewer than 16 input rows (decode and small
//! tree verifies) run matrix-vector kernels that read each weight byte once, with the activations
//! rounded to int8 for the block-quantized formats. Verify-sized batches of 5 to 64 rows of
//! block-quantized weights run tensor-core kernels that also read each weight byte once (mmq.rs;
//! sm_80 and later): on an f16 copy of the activations for Q4_K and Q6_K up to 32 rows, else on
//! the int8 one. Other batches from 16 rows run through
//! cuBLAS on the tensor cores (f16 operands) when the library is present.
//! `CANOPY_CUDA_MMQ_MIN_ROWS` and `CANOPY_CUDA_GEMM_MIN_ROWS` move those thresholds, for tuning;
//! `CANOPY_CUDA_DECODE_LINES=1` selects decode kernels whose lanes read whole lines of the Q4_K and
//! Q6_K tiles, until they are measured against the default ones.
//! Embedding and matmul support F32, F16, BF16, Q8_0, Q4_K, Q5_K and Q6_K; other types are
//! [`BackendError::Unsupported`] at upload.
//!
//! Index arrays live on the device, so out-of-range ids, slots or rows are not reported as
//! [`BackendError::Index`]: the kernels skip them and never read or write out of bounds.
//! Failures of the device itself are reported as [`BackendError::Device`].

mod attention;
mod attention_inputs;
mod attention_mma;
mod cache;
mod compile;
mod context;
mod divisor;
mod elementwise;
mod error;
mod gemm;
mod graph;
mod launch;
pub mod layout;
mod matmul;
mod memory;
mod mmq;
mod norm;
mod probe;
mod rope;
mod rows;
mod sampling;
mod sources;
mod transfer;

pub use attention::MAX_HEAD_DIM;
pub use cache::cache_dir;
pub use compile::Nvrtc;
pub use divisor::FastDivisor;
pub use error::CudaError;
pub use graph::CudaGraphExec;
pub use memory::{CudaIndex, CudaKvPool, CudaTensor, CudaWeight, is_weight_supported};
pub use sampling::MAX_TOP_K;
pub use sources::{KERNEL_SOURCES, KernelSource};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::{
    AttentionBatch, AttentionInputs, AttentionParams, AttentionTargets, Backend, BackendError, RopeParams,
    shape,
};
use crate::quant::GgmlType;
use attention::SplitAttention;
use attention_mma::MmaAttention;
use context::Device;
use gemm::Gemm;
use memory::ScratchBuffer;
use mmq::Mmq;

/// One CUDA device. Ops go to one stream in submission order; host-side results are complete
/// when the call returns.
pub struct CudaBackend {
    device: Device,
    /// Tensor-core GEMM for prefill-sized matmuls; absent without cuBLAS.
    gemm: Option<Gemm>,
    /// The smallest batch that takes the GEMM.
    gemm_min_rows: usize,
    /// Tensor-core int8 kernels for verify-sized batches of block-quantized weights; absent
    /// before sm_80.
    mmq: Option<Mmq>,
    /// The split decode attention's states and completion counters (see attention.rs).
    split_attention: SplitAttention,
    /// The device side of `argmax_rows`' ids, kept since greedy decoding calls it every step.
    argmax_ids: Mutex<ScratchBuffer<u32>>,
    /// Tensor-core attention for verify and prefill batches; absent before sm_80.
    mma_attention: Option<MmaAttention>,
    /// Bumped whenever device data may have changed without the ops below seeing it (a graph
    /// recorded or replayed), which makes every tensor's int8 copy stale (see matmul.rs).
    epoch: AtomicU64,
    name: String,
}

impl CudaBackend {
    /// Opens device `ordinal` and loads every kernel, compiling those not in the cache.
    pub fn new(ordinal: usize) -> Result<Self, CudaError> {
        let device = Device::open(ordinal)?;
        let gemm = Gemm::open(&device);
        let mmq = Mmq::new(&device);
        let split_attention = SplitAttention::new(&device)?;
        let mma_attention = MmaAttention::new(&device)?;
        // Whoever reads the logs sees that the results of such a backend are wrong.
        let name = match device.skipped_kernels() {
            [] => format!("cuda:{ordinal}"),
            skipped => format!("cuda:{ordinal}, dropping the launches of {}*", skipped.join("*, ")),
        };
        Ok(Self {
            device,
            gemm,
            gemm_min_rows: gemm::min_gemm_rows(),
            mmq,
            split_attention,
            argmax_ids: Mutex::default(),
            mma_attention,
            epoch: AtomicU64::new(0),
            name,
        })
    }

    /// The architecture the kernels were compiled for, `sm_XY`.
    pub fn arch(&self) -> &str {
        &self.device.arch
    }

    /// The device's read bandwidth in bytes per second, measured by streaming 2 GiB through a
    /// kernel (the median of ten runs; takes well under a second on a current GPU).
    pub fn read_bandwidth(&self) -> Result<f64, BackendError> {
        probe::read_bandwidth(&self.device)
    }

    /// Whether ops writing a matmul input of `n_rows` rows also write its f16 copy, which the f16
    /// mmq kernels read: saves a conversion launch per input of a verify step.
    fn writes_halves(&self, n_rows: usize) -> bool {
        self.mmq.as_ref().is_some_and(|mmq| mmq.reads_halves(n_rows))
    }
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend").field("name", &self.name).field("arch", &self.device.arch).finish()
    }
}

impl Backend for CudaBackend {
    type Tensor = CudaTensor;
    type KvPool = CudaKvPool;
    const KV_ELEMENT_BYTES: usize = size_of::<u16>();
    type Weight = CudaWeight;
    type Index = CudaIndex;
    type Graph = CudaGraphExec;

    fn name(&self) -> &str {
        &self.name
    }

    fn zeros(&self, len: usize) -> Result<CudaTensor, BackendError> {
        transfer::zeros(&self.device, len)
    }

    fn upload(&self, data: &[f32]) -> Result<CudaTensor, BackendError> {
        transfer::upload(&self.device, data)
    }

    fn download(&self, src: &CudaTensor, out: &mut [f32]) -> Result<(), BackendError> {
        transfer::download(&self.device, src, out)
    }

    fn kv_pool(&self, len: usize) -> Result<CudaKvPool, BackendError> {
        transfer::kv_pool(&self.device, len)
    }

    fn upload_kv_pool(&self, data: &[f32]) -> Result<CudaKvPool, BackendError> {
        transfer::upload_kv_pool(&self.device, data)
    }

    fn download_kv_pool(&self, pool: &CudaKvPool, out: &mut [f32]) -> Result<(), BackendError> {
        transfer::download_kv_pool(&self.device, pool, out)
    }

    fn upload_index(&self, data: &[u32]) -> Result<CudaIndex, BackendError> {
        transfer::upload_index(&self.device, data)
    }

    fn write_index(&self, dst: &mut CudaIndex, data: &[u32]) -> Result<(), BackendError> {
        transfer::write_index(&self.device, dst, data)
    }

    fn upload_weight(
        &self,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<CudaWeight, BackendError> {
        transfer::upload_weight(&self.device, ty, rows, cols, bytes)
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        self.device.stream.synchronize().map_err(context::driver("synchronize"))
    }

    fn record<E: From<BackendError>>(
        &self,
        ops: impl FnOnce() -> Result<(), E>,
    ) -> Result<Option<CudaGraphExec>, E> {
        // Copies made before the capture hold data the replays will not see, and those made
        // during it are only recorded, not computed.
        self.epoch.fetch_add(1, Ordering::Relaxed);
        let graph = graph::record(&self.device, ops);
        self.epoch.fetch_add(1, Ordering::Relaxed);
        graph.map(Some)
    }

    fn replay(&self, graph: &CudaGraphExec) -> Result<(), BackendError> {
        self.epoch.fetch_add(1, Ordering::Relaxed);
        graph::replay(graph)
    }

    fn attention_context_class(&self, max_kv_len: usize) -> usize {
        self.mma_attention.as_ref().map_or(0, |_| MmaAttention::context_class(max_kv_len))
    }

    fn embed(
        &self,
        table: &CudaWeight,
        ids: &CudaIndex,
        n_rows: usize,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        out.invalidate_quantized();
        rows::embed(&self.device, table, ids, n_rows, out)
    }

    fn rms_norm(
        &self,
        x: &CudaTensor,
        weight: &CudaTensor,
        n_rows: usize,
        eps: f32,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        out.invalidate_quantized();
        norm::rms_norm(self, x, weight, n_rows, eps, out)
    }

    fn add_rms_norm(
        &self,
        residual: &mut CudaTensor,
        delta: &CudaTensor,
        weight: &CudaTensor,
        n_rows: usize,
        eps: f32,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        residual.invalidate_quantized();
        out.invalidate_quantized();
        norm::add_rms_norm(self, residual, delta, weight, n_rows, eps, out)
    }

    fn matmul(
        &self,
        x: &CudaTensor,
        weight: &CudaWeight,
        n_rows: usize,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        self.matmuls(x, n_rows, &mut [(weight, out)])
    }

    fn matmuls(
        &self,
        x: &CudaTensor,
        n_rows: usize,
        projections: &mut [(&CudaWeight, &mut CudaTensor)],
    ) -> Result<(), BackendError> {
        for (_, out) in projections.iter_mut() {
            out.invalidate_quantized();
        }
        let epoch = self.epoch.load(Ordering::Relaxed);
        let mmq = self.mmq.as_ref().filter(|mmq| mmq.covers(n_rows));
        match &self.gemm {
            Some(gemm) if n_rows >= self.gemm_min_rows => {
                // The weights mmq takes stay together, so that runs of one type share a launch.
                let (mut int8, rest): (Vec<_>, Vec<_>) = projections
                    .iter_mut()
                    .map(|(weight, out)| (*weight, &mut **out))
                    .partition(|(weight, _)| mmq.is_some() && mmq::supports(weight.ty, weight.cols));
                matmul::matmuls(&self.device, epoch, x, n_rows, &mut int8, mmq)?;
                rest.into_iter().try_for_each(|(weight, out)| {
                    if Gemm::supports(weight.ty) {
                        shape::matmul(x, weight, n_rows, &*out)?;
                        gemm.matmul(&self.device, x, weight, n_rows, out)
                    } else {
                        matmul::matmuls(&self.device, epoch, x, n_rows, &mut [(weight, out)], mmq)
                    }
                })
            }
            _ => matmul::matmuls(&self.device, epoch, x, n_rows, projections, mmq),
        }
    }

    fn rope(
        &self,
        x: &mut CudaTensor,
        positions: &CudaIndex,
        n_rows: usize,
        params: &RopeParams,
    ) -> Result<(), BackendError> {
        x.invalidate_quantized();
        rope::rope(&self.device, x, positions, n_rows, params)
    }

    fn attention_inputs(
        &self,
        inputs: &AttentionInputs<'_, Self>,
        targets: AttentionTargets<'_, Self>,
    ) -> Result<(), BackendError> {
        attention_inputs::attention_inputs(self, inputs, targets)
    }

    fn write_kv(
        &self,
        pool: &mut CudaKvPool,
        new: &CudaTensor,
        slots: &CudaIndex,
        n_rows: usize,
        row_len: usize,
    ) -> Result<(), BackendError> {
        rows::write_kv(&self.device, pool, new, slots, n_rows, row_len)
    }

    fn copy_kv(
        &self,
        pool: &mut CudaKvPool,
        src_slots: &CudaIndex,
        dst_slots: &CudaIndex,
        n_rows: usize,
        row_len: usize,
    ) -> Result<(), BackendError> {
        rows::copy_kv(&self.device, pool, src_slots, dst_slots, n_rows, row_len)
    }

    fn gather_rows(
        &self,
        src: &CudaTensor,
        rows: &CudaIndex,
        n_rows: usize,
        row_len: usize,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        out.invalidate_quantized();
        rows::gather_rows(&self.device, src, rows, n_rows, row_len, out)
    }

    fn attention(
        &self,
        q: &CudaTensor,
        k_pool: &CudaKvPool,
        v_pool: &CudaKvPool,
        batch: &AttentionBatch<Self>,
        params: &AttentionParams,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        out.invalidate_quantized();
        attention::attention(self, q, k_pool, v_pool, batch, params, out)
    }

    fn swiglu(
        &self,
        gate: &CudaTensor,
        up: &CudaTensor,
        len: usize,
        out: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        out.invalidate_quantized();
        elementwise::swiglu(self, gate, up, len, None, out)
    }

    fn swiglu_matmuls(
        &self,
        x: &CudaTensor,
        n_rows: usize,
        (gate_weight, gate): (&CudaWeight, &mut CudaTensor),
        (up_weight, up): (&CudaWeight, &mut CudaTensor),
        act: &mut CudaTensor,
    ) -> Result<(), BackendError> {
        let len = shape::swiglu_matmuls(x, n_rows, (gate_weight, &*gate), (up_weight, &*up), &*act)?;
        self.matmuls(x, n_rows, &mut [(gate_weight, &mut *gate), (up_weight, &mut *up)])?;
        act.invalidate_quantized();
        // The down projection reads `act` next, with the same rows.
        elementwise::swiglu(self, gate, up, len, Some(n_rows), act)
    }

    fn add(&self, acc: &mut CudaTensor, x: &CudaTensor, len: usize) -> Result<(), BackendError> {
        acc.invalidate_quantized();
        elementwise::add(&self.device, acc, x, len)
    }

    fn softmax_rows(&self, x: &mut CudaTensor, n_rows: usize, row_len: usize) -> Result<(), BackendError> {
        x.invalidate_quantized();
        sampling::softmax_rows(&self.device, x, n_rows, row_len)
    }

    fn argmax_rows(
        &self,
        x: &CudaTensor,
        n_rows: usize,
        row_len: usize,
        out: &mut [u32],
    ) -> Result<(), BackendError> {
        let mut ids = self.argmax_ids.lock().unwrap_or_else(PoisonError::into_inner);
        sampling::argmax_rows(&self.device, x, n_rows, row_len, &mut ids, out)
    }

    fn top_k_rows(
        &self,
        logits: &CudaTensor,
        n_rows: usize,
        row_len: usize,
        k: usize,
        ids: &mut [u32],
        log_probs: &mut [f32],
    ) -> Result<(), BackendError> {
        sampling::top_k_rows(&self.device, logits, n_rows, row_len, k, ids, log_probs)
    }
}
