//! [`Backend::project_and_attend`](crate::backend::Backend::project_and_attend): decode and
//! verify batches whose heads the tensor-core attention can make itself take the q/k/v
//! projections and then `attention_mma_decode` or `attention_mma_projected` (attention_mma.rs),
//! one launch fewer a layer than the projections, `attention_inputs` and the attention; every
//! other batch takes those three.

use super::CudaBackend;
use super::attention::launch_mma;
use super::attention_inputs::{checked_pool_rows, fusable};
use super::attention_mma::Queries;
use super::context::to_u32;
use super::memory::CudaTensor;
use crate::backend::{
    AttentionBatch, AttentionInputs, AttentionParams, AttentionProjections, AttentionTargets, BackendError,
    HeadParams, attention_inputs, shape,
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
        backend.mma_attention.as_ref().is_some_and(|mma| mma.attends_from_projections(heads, batch, params));
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
    let [q_raw, k_raw, v] = attention_inputs::project(backend, projections, heads.n_rows)?;
    let inputs = AttentionInputs { q_raw, k_raw, v, heads: *heads };
    let pool_rows = to_u32("attention_inputs", "pool rows", checked_pool_rows(&inputs, &targets)?)?;
    let AttentionTargets { k_pool, v_pool, .. } = targets;
    shape::attention(q_raw, k_pool, v_pool, batch, params, out)?;
    out.invalidate_quantized();
    launch_mma(backend, Queries::Projected { inputs, k_pool, v_pool, pool_rows }, batch, params, out)
}
