//! The reference backend: host memory, rayon over rows and heads, weights decoded on the fly.
//!
//! Every op accumulates in f32. Index arrays live in host memory, so their contents are checked
//! too: an out-of-range id, slot or row is a [`BackendError::Index`] and nothing is written.
//!
//! Results are batch-invariant: every op computes a row (a token, a token's head) with the same
//! arithmetic in the same order whatever else is in the call. A sequence gets the same bits alone
//! or batched, and verifying a draft tree reproduces one-token decoding of the accepted path
//! exactly, so greedy speculative decoding can be checked token for token against plain decoding.

mod attention;
mod elementwise;
mod lanes;
mod matmul;
mod memory;
mod norm;
mod rope;
mod rows;
mod sampling;
mod scratch;

pub use memory::{CpuIndex, CpuTensor, CpuWeight};

use super::attention::SequenceView;
use super::{AttentionBatch, AttentionParams, Backend, BackendError, RopeParams};
use crate::quant::GgmlType;
use scratch::Scratch;

/// The CPU backend. Ops run on rayon's global thread pool and are complete when they return.
#[derive(Debug, Default)]
pub struct CpuBackend {
    /// Temporary space of the ops that need it (multi-token matmul, KV compaction).
    scratch: Scratch,
    /// The decoded sequences of an attention call.
    attention_sequences: Scratch<SequenceView>,
}

impl CpuBackend {
    /// A backend with empty scratch buffers.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type KvPool = CpuTensor;
    const KV_ELEMENT_BYTES: usize = size_of::<f32>();
    type Weight = CpuWeight;
    type Index = CpuIndex;
    type Graph = std::convert::Infallible;

    fn name(&self) -> &str {
        "cpu"
    }

    fn zeros(&self, len: usize) -> Result<CpuTensor, BackendError> {
        Ok(CpuTensor(vec![0.0; len]))
    }

    fn upload(&self, data: &[f32]) -> Result<CpuTensor, BackendError> {
        Ok(CpuTensor(data.to_vec()))
    }

    fn download(&self, src: &CpuTensor, out: &mut [f32]) -> Result<(), BackendError> {
        memory::download(src, out)
    }

    fn kv_pool(&self, len: usize) -> Result<CpuTensor, BackendError> {
        self.zeros(len)
    }

    fn upload_kv_pool(&self, data: &[f32]) -> Result<CpuTensor, BackendError> {
        self.upload(data)
    }

    fn download_kv_pool(&self, pool: &CpuTensor, out: &mut [f32]) -> Result<(), BackendError> {
        self.download(pool, out)
    }

    fn upload_index(&self, data: &[u32]) -> Result<CpuIndex, BackendError> {
        Ok(CpuIndex(data.to_vec()))
    }

    fn write_index(&self, dst: &mut CpuIndex, data: &[u32]) -> Result<(), BackendError> {
        memory::write_index(dst, data)
    }

    fn upload_weight(
        &self,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<CpuWeight, BackendError> {
        CpuWeight::new(ty, rows, cols, bytes)
    }

    fn synchronize(&self) -> Result<(), BackendError> {
        Ok(())
    }

    /// The CPU backend has nothing to gain from recording: it runs the ops at once.
    fn record<E: From<BackendError>>(
        &self,
        ops: impl FnOnce() -> Result<(), E>,
    ) -> Result<Option<Self::Graph>, E> {
        ops()?;
        Ok(None)
    }

    fn replay(&self, graph: &Self::Graph) -> Result<(), BackendError> {
        match *graph {}
    }

    fn embed(
        &self,
        table: &CpuWeight,
        ids: &CpuIndex,
        n_rows: usize,
        out: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        rows::embed(table, ids, n_rows, out)
    }

    fn rms_norm(
        &self,
        x: &CpuTensor,
        weight: &CpuTensor,
        n_rows: usize,
        eps: f32,
        out: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        norm::rms_norm(x, weight, n_rows, eps, out)
    }

    fn add_rms_norm(
        &self,
        residual: &mut CpuTensor,
        delta: &CpuTensor,
        weight: &CpuTensor,
        n_rows: usize,
        eps: f32,
        out: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        norm::add_rms_norm(residual, delta, weight, n_rows, eps, out)
    }

    fn matmul(
        &self,
        x: &CpuTensor,
        weight: &CpuWeight,
        n_rows: usize,
        out: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        matmul::matmul(x, weight, n_rows, out, &self.scratch)
    }

    fn rope(
        &self,
        x: &mut CpuTensor,
        positions: &CpuIndex,
        n_rows: usize,
        params: &RopeParams,
    ) -> Result<(), BackendError> {
        rope::rope(x, positions, n_rows, params)
    }

    fn write_kv(
        &self,
        pool: &mut CpuTensor,
        new: &CpuTensor,
        slots: &CpuIndex,
        n_rows: usize,
        row_len: usize,
    ) -> Result<(), BackendError> {
        rows::write_kv(pool, new, slots, n_rows, row_len)
    }

    fn copy_kv(
        &self,
        pool: &mut CpuTensor,
        src_slots: &CpuIndex,
        dst_slots: &CpuIndex,
        n_rows: usize,
        row_len: usize,
    ) -> Result<(), BackendError> {
        rows::copy_kv(pool, src_slots, dst_slots, n_rows, row_len, &self.scratch)
    }

    fn gather_rows(
        &self,
        src: &CpuTensor,
        rows: &CpuIndex,
        n_rows: usize,
        row_len: usize,
        out: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        rows::gather_rows(src, rows, n_rows, row_len, out)
    }

    fn attention(
        &self,
        q: &CpuTensor,
        k_pool: &CpuTensor,
        v_pool: &CpuTensor,
        batch: &AttentionBatch<Self>,
        params: &AttentionParams,
        out: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        attention::attention(q, k_pool, v_pool, batch, params, out, &self.attention_sequences)
    }

    fn swiglu(
        &self,
        gate: &CpuTensor,
        up: &CpuTensor,
        len: usize,
        out: &mut CpuTensor,
    ) -> Result<(), BackendError> {
        elementwise::swiglu(gate, up, len, out)
    }

    fn add(&self, acc: &mut CpuTensor, x: &CpuTensor, len: usize) -> Result<(), BackendError> {
        elementwise::add(acc, x, len)
    }

    fn softmax_rows(&self, x: &mut CpuTensor, n_rows: usize, row_len: usize) -> Result<(), BackendError> {
        sampling::softmax_rows(x, n_rows, row_len)
    }

    fn argmax_rows(
        &self,
        x: &CpuTensor,
        n_rows: usize,
        row_len: usize,
        out: &mut [u32],
    ) -> Result<(), BackendError> {
        sampling::argmax_rows(x, n_rows, row_len, out)
    }

    fn top_k_rows(
        &self,
        logits: &CpuTensor,
        n_rows: usize,
        row_len: usize,
        k: usize,
        ids: &mut [u32],
        log_probs: &mut [f32],
    ) -> Result<(), BackendError> {
        sampling::top_k_rows(logits, n_rows, row_len, k, ids, log_probs)
    }
}
