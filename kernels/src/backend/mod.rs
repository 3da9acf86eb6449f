//! The compute seam between model code and devices.
//!
//! [`Backend`] is a small set of fused ops over device buffers: dense f32 tensors, weight matrices
//! in their GGUF block format, KV pools in the backend's cache format, and `u32` index arrays. Model code is written once against it; the
//! CPU backend ([`cpu::CpuBackend`]) is the reference every other backend is tested against.
//!
//! Conventions every backend follows:
//! - Every op takes its shapes explicitly. Buffers may be larger than an op needs, so a decode
//!   step can reuse buffers sized for the largest batch; an op reads and writes only the leading
//!   elements its shapes describe. A buffer too small for them is a [`BackendError::Shape`], never
//!   a panic or an out-of-bounds access.
//! - A "row" is one token unless an op says otherwise; tensors are row-major.
//! - Ops stay on the device: only `download`, `argmax_rows` and `top_k_rows` return data to the
//!   host. Everything an op reads per token (ids, positions, KV slots, block tables, tree parents)
//!   is an [`Backend::Index`] on the device, which `write_index` rewrites in place, so a step's
//!   buffers can stay put for a captured device graph.
//! - Ops run in submission order. Host-side results are complete when the call returns.
//! - A sequence of ops can be recorded once ([`Backend::record`]) and replayed
//!   ([`Backend::replay`]): a replay launches the same ops with the same shapes over the same
//!   buffers, reading whatever those buffers hold at the time, so per-step inputs written with
//!   `write_index` before a replay take effect.

mod attention;
mod attention_inputs;
pub mod cpu;
pub mod cuda;
mod error;
mod rope;
mod shape;

pub use attention::{AttentionBatch, AttentionLayout, AttentionParams, Mask, SequenceSpec, TREE_ROOT};
pub use attention_inputs::{AttentionInputs, AttentionProjections, AttentionTargets, HeadParams};
pub use error::BackendError;
pub use rope::{RopeParams, RopeStyle};

use crate::quant::GgmlType;

/// What [`Backend::argmax_rows`] gives a row with no value above -inf (all NaN or -inf): such
/// logits name no token, and a sampler must report that rather than pick one.
pub const ARGMAX_NONE: u32 = u32::MAX;

/// A one-dimensional device array that knows its length in elements.
pub trait DeviceArray: Send + Sync {
    /// Elements in the array.
    fn len(&self) -> usize;

    /// Whether the array holds no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A weight matrix of `rows` output features by `cols` input features, stored row by row in the
/// block format of its GGUF type.
pub trait WeightMatrix: Send + Sync {
    /// Element type of the stored blocks.
    fn ty(&self) -> GgmlType;
    /// Output features.
    fn rows(&self) -> usize;
    /// Input features: the length of each row.
    fn cols(&self) -> usize;
}

/// A compute device and its fused ops. See the [module docs](self) for the conventions.
pub trait Backend: Send + Sync + Sized + 'static {
    /// A dense f32 array: activations, norm weights.
    type Tensor: DeviceArray;
    /// A layer's keys or values for every KV slot, in the backend's cache format: elements
    /// `[slots, n_kv_heads, head_dim]`, written by [`Self::write_kv`] and the attention inputs and
    /// read by [`Self::attention`].
    type KvPool: DeviceArray;
    /// Bytes one element of a [`Self::KvPool`] occupies.
    const KV_ELEMENT_BYTES: usize;
    /// A weight matrix, uploaded once.
    type Weight: WeightMatrix;
    /// A `u32` array: token ids, positions, KV slots, block tables, tree parents.
    type Index: DeviceArray;
    /// A recorded sequence of ops (a CUDA graph), replayed by [`Backend::replay`].
    type Graph: Send + Sync;

    /// A short name for logs ("cpu", "cuda:0").
    fn name(&self) -> &str;

    /// A tensor of `len` zeros.
    fn zeros(&self, len: usize) -> Result<Self::Tensor, BackendError>;

    /// A KV pool of `len` elements, all zero.
    fn kv_pool(&self, len: usize) -> Result<Self::KvPool, BackendError>;

    /// A KV pool holding `data`, in the pool's format.
    fn upload_kv_pool(&self, data: &[f32]) -> Result<Self::KvPool, BackendError>;

    /// Copies the first `out.len()` elements of `pool` to the host, as f32.
    fn download_kv_pool(&self, pool: &Self::KvPool, out: &mut [f32]) -> Result<(), BackendError>;

    /// A tensor holding `data`.
    fn upload(&self, data: &[f32]) -> Result<Self::Tensor, BackendError>;

    /// Copies the first `out.len()` elements of `src` to the host, after every submitted op.
    fn download(&self, src: &Self::Tensor, out: &mut [f32]) -> Result<(), BackendError>;

    /// An index array holding `data`.
    fn upload_index(&self, data: &[u32]) -> Result<Self::Index, BackendError>;

    /// Overwrites the first `data.len()` elements of `dst` in place; the buffer keeps its address
    /// and length.
    fn write_index(&self, dst: &mut Self::Index, data: &[u32]) -> Result<(), BackendError>;

    /// Uploads a `rows x cols` weight of type `ty` from its GGUF bytes (rows stored one after the
    /// other, each `cols` elements in whole blocks).
    fn upload_weight(
        &self,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<Self::Weight, BackendError>;

    /// Waits for every submitted op to finish.
    fn synchronize(&self) -> Result<(), BackendError>;

    /// Records the ops that `ops` submits, without running them, into a graph for
    /// [`Backend::replay`]. `ops` may only submit ops that stay on the device (no `download`,
    /// `write_index`, `upload*`, `zeros`, `argmax_rows`, `top_k_rows` or `synchronize`). A backend
    /// that cannot record runs the ops at once and returns `None`; a failed `ops` leaves nothing
    /// recorded and its error is returned.
    fn record<E: From<BackendError>>(
        &self,
        ops: impl FnOnce() -> Result<(), E>,
    ) -> Result<Option<Self::Graph>, E>;

    /// Runs a recorded graph's ops, after every op submitted before it.
    fn replay(&self, graph: &Self::Graph) -> Result<(), BackendError>;

    /// Which class of context lengths a batch whose longest sequence reads `max_kv_len` keys
    /// falls in, for its recordings: a recorded step replays the launches it was recorded with at
    /// every length, so a backend whose [`Self::attention`] picks its launches by the context
    /// length (a kernel that suits long contexts) returns here the class of those it would pick,
    /// and a step is recorded once per class (two classes that pick the same launches cost one
    /// recording more, nothing else). One class by default.
    fn attention_context_class(&self, max_kv_len: usize) -> usize {
        let _ = max_kv_len;
        0
    }

    /// `out[i] = table[ids[i]]` for `i < n_rows`: `out` is `[n_rows, table.cols()]`.
    fn embed(
        &self,
        table: &Self::Weight,
        ids: &Self::Index,
        n_rows: usize,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError>;

    /// RMS normalisation of `n_rows` consecutive chunks of `weight.len()` elements of `x`, each
    /// then scaled elementwise by `weight`: `x / sqrt(mean(x²) + eps) * weight`. A per-head norm
    /// is the same op with `n_rows = tokens * heads`.
    fn rms_norm(
        &self,
        x: &Self::Tensor,
        weight: &Self::Tensor,
        n_rows: usize,
        eps: f32,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError>;

    /// `residual += delta`, then `out = rms_norm(residual)`, over `n_rows` rows of `weight.len()`.
    fn add_rms_norm(
        &self,
        residual: &mut Self::Tensor,
        delta: &Self::Tensor,
        weight: &Self::Tensor,
        n_rows: usize,
        eps: f32,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError>;

    /// `out = x · weightᵀ`: `x` is `[n_rows, weight.cols()]`, `out` is `[n_rows, weight.rows()]`,
    /// accumulated in f32 whatever the weight's type.
    fn matmul(
        &self,
        x: &Self::Tensor,
        weight: &Self::Weight,
        n_rows: usize,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError>;

    /// [`Self::matmul`] of one input by several weights (a layer's q, k and v projections, or
    /// its gate and up), each into its own output. A backend may run them as one launch; the
    /// results are those of the separate matmuls.
    fn matmuls(
        &self,
        x: &Self::Tensor,
        n_rows: usize,
        projections: &mut [(&Self::Weight, &mut Self::Tensor)],
    ) -> Result<(), BackendError> {
        projections.iter_mut().try_for_each(|(weight, out)| self.matmul(x, weight, n_rows, out))
    }

    /// A feed-forward network's gated input: `gate = x · gate_weightᵀ`, `up = x · up_weightᵀ` (both
    /// weights of one shape) and `act = silu(gate) * up`, over `n_rows` rows. The same as
    /// [`Self::matmuls`] then [`Self::swiglu`], which is what this default does; a backend may run
    /// them as one.
    fn swiglu_matmuls(
        &self,
        x: &Self::Tensor,
        n_rows: usize,
        (gate_weight, gate): (&Self::Weight, &mut Self::Tensor),
        (up_weight, up): (&Self::Weight, &mut Self::Tensor),
        act: &mut Self::Tensor,
    ) -> Result<(), BackendError> {
        let len = shape::swiglu_matmuls(x, n_rows, (gate_weight, &*gate), (up_weight, &*up), &*act)?;
        self.matmuls(x, n_rows, &mut [(gate_weight, &mut *gate), (up_weight, &mut *up)])?;
        self.swiglu(gate, up, len, act)
    }

    /// Rotates `x`, `[n_rows, n_heads, head_dim]`, in place; row `i` at position `positions[i]`.
    fn rope(
        &self,
        x: &mut Self::Tensor,
        positions: &Self::Index,
        n_rows: usize,
        params: &RopeParams,
    ) -> Result<(), BackendError>;

    /// Stores row `i` of `new` (`[n_rows, row_len]`) at row `slots[i]` of `pool`, which is whole
    /// rows of `row_len`. Slots must be distinct.
    fn write_kv(
        &self,
        pool: &mut Self::KvPool,
        new: &Self::Tensor,
        slots: &Self::Index,
        n_rows: usize,
        row_len: usize,
    ) -> Result<(), BackendError>;

    /// Copies pool row `src_slots[i]` to row `dst_slots[i]` for `i < n_rows`, as if every source
    /// row were read before any destination is written, so sources and destinations may overlap
    /// (compacting the accepted nodes of a draft tree). Destination slots must be distinct.
    fn copy_kv(
        &self,
        pool: &mut Self::KvPool,
        src_slots: &Self::Index,
        dst_slots: &Self::Index,
        n_rows: usize,
        row_len: usize,
    ) -> Result<(), BackendError>;

    /// `out[i] = src[rows[i]]` for rows of `row_len` elements: picks the rows that need logits or
    /// the hidden states of accepted tree nodes.
    fn gather_rows(
        &self,
        src: &Self::Tensor,
        rows: &Self::Index,
        n_rows: usize,
        row_len: usize,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError>;

    /// Paged multi-sequence attention. `q` and `out` are `[batch.n_rows(), n_heads, head_dim]`;
    /// the pools are `[slots, n_kv_heads, head_dim]` and already hold every key and value the
    /// batch reads, new tokens' included. Softmax in f32 with max subtraction.
    fn attention(
        &self,
        q: &Self::Tensor,
        k_pool: &Self::KvPool,
        v_pool: &Self::KvPool,
        batch: &AttentionBatch<Self>,
        params: &AttentionParams,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError>;

    /// A layer's attention inputs for its new tokens: the per-head RMS norms of the projected
    /// queries and keys, each then rotated (RoPE), into `targets.q` and `targets.k`, and the keys
    /// and values stored at the tokens' slots of the KV pools. The same as those six ops one
    /// after the other, which is what this default does; a backend may run them as one.
    fn attention_inputs(
        &self,
        inputs: &AttentionInputs<'_, Self>,
        targets: AttentionTargets<'_, Self>,
    ) -> Result<(), BackendError> {
        attention_inputs::one_op_at_a_time(self, inputs, targets)
    }

    /// A layer's attention inputs from its normalised input: the q, k and v projections of
    /// `projections.x`, each into its own output, then [`Self::attention_inputs`] of those. The
    /// same as [`Self::matmuls`] then [`Self::attention_inputs`], which is what this default does;
    /// a backend may run them as one.
    fn project_attention_inputs(
        &self,
        projections: AttentionProjections<'_, Self>,
        heads: &HeadParams<'_, Self>,
        targets: AttentionTargets<'_, Self>,
    ) -> Result<(), BackendError> {
        attention_inputs::projections_then_inputs(self, projections, heads, targets)
    }

    /// `out = silu(gate) * up` over the first `len` elements.
    fn swiglu(
        &self,
        gate: &Self::Tensor,
        up: &Self::Tensor,
        len: usize,
        out: &mut Self::Tensor,
    ) -> Result<(), BackendError>;

    /// `acc += x` over the first `len` elements.
    fn add(&self, acc: &mut Self::Tensor, x: &Self::Tensor, len: usize) -> Result<(), BackendError>;

    /// Replaces each of `n_rows` rows of `row_len` by its softmax, in place.
    fn softmax_rows(&self, x: &mut Self::Tensor, n_rows: usize, row_len: usize) -> Result<(), BackendError>;

    /// Index of the largest value of each of `n_rows` rows into `out`: the first on ties, NaN
    /// counts as -inf, and a row with no value above -inf gives [`ARGMAX_NONE`].
    fn argmax_rows(
        &self,
        x: &Self::Tensor,
        n_rows: usize,
        row_len: usize,
        out: &mut [u32],
    ) -> Result<(), BackendError>;

    /// The `k` largest logits of each of `n_rows` rows, best first (lower id first on ties), as
    /// ids and log-softmax values over the whole row: row `r` fills `ids[r*k..(r+1)*k]` and
    /// `log_probs[r*k..(r+1)*k]`. `k` must not exceed `row_len`.
    fn top_k_rows(
        &self,
        logits: &Self::Tensor,
        n_rows: usize,
        row_len: usize,
        k: usize,
        ids: &mut [u32],
        log_probs: &mut [f32],
    ) -> Result<(), BackendError>;
}
