//! [`Backend::project_and_attend`](crate::backend::Backend::project_and_attend): decode rows
//! whose heads the tensor-core attention can make itself take the q/k/v projections and then
//! `attention_mma_decode` (attention_mma.rs), one launch fewer a layer than the projections,
//! `attention_inputs` and the attention; every other batch takes those three.

use super::CudaBackend;
use super::attention::launch_mma;
use super::attention_inputs::{checked_pool_rows, fusable};
use super::attention_mma::Queries;
use super::context::to_u32;
use super::memory::CudaTensor;
use crate::backend::{
    AttentionBatch, AttentionInputs, AttentionParams, AttentionProjections, AttentionTargets, Backend,
    BackendError, HeadParams, attention_inputs, shape,
};

pub(super) fn project_and_attend(
    backend: &CudaBackend,
    projections: AttentionProjections<'_, CudaBackend>,
    heads: &HeadParams<'_, CudaBackend>,
    targets: AttentionTargets<'_, CudaBackend>,
    batch: &AttentionBatch<CudaBackend>,
    params: &AttentionParams,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    let takes =
        backend.mma_attention.as_ref().is_some_and(|mma| mma.decodes_from_projections(heads, batch, params));
    if !takes || !fusable(heads) {
        return attention_inputs::project_then_attend(
            backend,
            projections,
            heads,
            targets,
            batch,
            params,
            out,
        );
    }
    let AttentionProjections { x, q: (q_weight, q_raw), k: (k_weight, k_raw), v: (v_weight, v) } =
        projections;
    backend.matmuls(
        x,
        heads.n_rows,
        &mut [(q_weight, &mut *q_raw), (k_weight, &mut *k_raw), (v_weight, &mut *v)],
    )?;
    let inputs = AttentionInputs { q_raw, k_raw, v, heads: *heads };
    let pool_rows = to_u32("attention_inputs", "pool rows", checked_pool_rows(&inputs, &targets)?)?;
    let AttentionTargets { k_pool, v_pool, .. } = targets;
    shape::attention(q_raw, k_pool, v_pool, batch, params, out)?;
    out.invalidate_quantized();
    launch_mma(backend, Queries::Projected { inputs, k_pool, v_pool, pool_rows }, batch, params, out)
}
