//! Rotary position embeddings, one thread per rotated pair.

use super::context::{Device, driver, per_element, to_u32};
use super::memory::{CudaIndex, CudaTensor};
use crate::backend::{BackendError, RopeParams, RopeStyle, shape};

pub(super) fn rope(
    device: &Device,
    x: &mut CudaTensor,
    positions: &CudaIndex,
    n_rows: usize,
    params: &RopeParams,
) -> Result<(), BackendError> {
    const OP: &str = "rope";
    shape::rope(x, positions, n_rows, params)?;
    let tasks = shape::elements(OP, n_rows, params.n_heads * (params.rotary_dim / 2))?;
    if tasks == 0 {
        return Ok(());
    }
    let n_rows = to_u32(OP, "n_rows", n_rows)?;
    let n_heads = to_u32(OP, "n_heads", params.n_heads)?;
    let head_dim = to_u32(OP, "head_dim", params.head_dim)?;
    let rotary_dim = to_u32(OP, "rotary_dim", params.rotary_dim)?;
    let neox = u32::from(params.style == RopeStyle::Neox);
    let mut launch = device.launch(OP, "rope")?;
    launch
        .arg(&mut x.buf)
        .arg(&positions.buf)
        .arg(&n_rows)
        .arg(&n_heads)
        .arg(&head_dim)
        .arg(&rotary_dim)
        .arg(&params.theta)
        .arg(&neox);
    // SAFETY: the shape check guarantees `n_rows` rows in `x` and `n_rows` positions.
    unsafe { launch.launch(per_element(OP, tasks)?) }.map_err(driver(OP))?;
    Ok(())
}
