//! The operands of [`Backend::attention_inputs`](super::Backend::attention_inputs).

use super::{Backend, BackendError, RopeParams};

/// What a layer's attention inputs are made from: the projections of `n_rows` new tokens
/// (`q_raw` is `[n_rows, q_rope.n_heads, head_dim]`; `k_raw` and `v` are
/// `[n_rows, k_rope.n_heads, head_dim]`) and what turns them into heads.
pub struct AttentionInputs<'a, B: Backend> {
    pub q_raw: &'a B::Tensor,
    pub k_raw: &'a B::Tensor,
    pub v: &'a B::Tensor,
    pub heads: HeadParams<'a, B>,
}

impl<B: Backend> Clone for AttentionInputs<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for AttentionInputs<'_, B> {}

/// How the projections of `n_rows` new tokens become attention heads: the per-head norm weights
/// (`head_dim` each), the RoPE of queries and keys, and per token its position and its KV pool
/// slot.
pub struct HeadParams<'a, B: Backend> {
    pub q_norm: &'a B::Tensor,
    pub k_norm: &'a B::Tensor,
    pub eps: f32,
    pub positions: &'a B::Index,
    pub slots: &'a B::Index,
    pub n_rows: usize,
    pub q_rope: RopeParams,
    pub k_rope: RopeParams,
}

impl<B: Backend> Clone for HeadParams<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for HeadParams<'_, B> {}

/// A layer's q, k and v weights applied to its normalised input `x`, each into its own output.
pub struct AttentionProjections<'a, B: Backend> {
    pub x: &'a B::Tensor,
    pub q: (&'a B::Weight, &'a mut B::Tensor),
    pub k: (&'a B::Weight, &'a mut B::Tensor),
    pub v: (&'a B::Weight, &'a mut B::Tensor),
}

/// Where they go: the normalised, rotated queries and keys (shaped like `q_raw` and `k_raw`),
/// and the KV pools (`[slots, k_rope.n_heads, head_dim]`), whose rows at the tokens' slots take
/// the keys and values.
pub struct AttentionTargets<'a, B: Backend> {
    pub q: &'a mut B::Tensor,
    pub k: &'a mut B::Tensor,
    pub k_pool: &'a mut B::KvPool,
    pub v_pool: &'a mut B::KvPool,
}

/// [`Backend::attention_inputs`](super::Backend::attention_inputs) as its six ops.
pub(crate) fn one_op_at_a_time<B: Backend>(
    backend: &B,
    inputs: &AttentionInputs<'_, B>,
    targets: AttentionTargets<'_, B>,
) -> Result<(), BackendError> {
    let AttentionInputs { q_raw, k_raw, v, heads } = *inputs;
    let HeadParams { q_norm, k_norm, eps, positions, slots, n_rows, q_rope, k_rope } = heads;
    let AttentionTargets { q, k, k_pool, v_pool } = targets;
    backend.rms_norm(q_raw, q_norm, n_rows * q_rope.n_heads, eps, q)?;
    backend.rms_norm(k_raw, k_norm, n_rows * k_rope.n_heads, eps, k)?;
    backend.rope(q, positions, n_rows, &q_rope)?;
    backend.rope(k, positions, n_rows, &k_rope)?;
    backend.write_kv(k_pool, k, slots, n_rows, k_rope.row_len())?;
    backend.write_kv(v_pool, v, slots, n_rows, k_rope.row_len())
}

/// [`Backend::project_attention_inputs`](super::Backend::project_attention_inputs) as the
/// projections' matmuls, then `attention_inputs`.
pub(crate) fn projections_then_inputs<B: Backend>(
    backend: &B,
    projections: AttentionProjections<'_, B>,
    heads: &HeadParams<'_, B>,
    targets: AttentionTargets<'_, B>,
) -> Result<(), BackendError> {
    let AttentionProjections { x, q: (q_weight, q_raw), k: (k_weight, k_raw), v: (v_weight, v) } =
        projections;
    backend.matmuls(
        x,
        heads.n_rows,
        &mut [(q_weight, &mut *q_raw), (k_weight, &mut *k_raw), (v_weight, &mut *v)],
    )?;
    backend.attention_inputs(&AttentionInputs { q_raw, k_raw, v, heads: *heads }, targets)
}
