//! `add` and `swiglu`, one thread per element.

use super::context::{Device, driver, per_element};
use super::memory::CudaTensor;
use crate::backend::{BackendError, shape};

pub(super) fn add(
    device: &Device,
    acc: &mut CudaTensor,
    x: &CudaTensor,
    len: usize,
) -> Result<(), BackendError> {
    const OP: &str = "add";
    shape::elementwise(OP, &[("acc", acc.len), ("x", x.len)], len)?;
    if len == 0 {
        return Ok(());
    }
    let n = len as u64;
    let mut launch = device.launch(OP, "add")?;
    launch.arg(&mut acc.buf).arg(&x.buf).arg(&n);
    // SAFETY: the shape check guarantees both buffers hold `len` elements.
    unsafe { launch.launch(per_element(OP, len)?) }.map_err(driver(OP))?;
    Ok(())
}

pub(super) fn swiglu(
    device: &Device,
    gate: &CudaTensor,
    up: &CudaTensor,
    len: usize,
    out: &mut CudaTensor,
) -> Result<(), BackendError> {
    const OP: &str = "swiglu";
    shape::elementwise(OP, &[("gate", gate.len), ("up", up.len), ("out", out.len)], len)?;
    if len == 0 {
        return Ok(());
    }
    let n = len as u64;
    let mut launch = device.launch(OP, "swiglu")?;
    launch.arg(&gate.buf).arg(&up.buf).arg(&n).arg(&mut out.buf);
    // SAFETY: the shape check guarantees every buffer holds `len` elements.
    unsafe { launch.launch(per_element(OP, len)?) }.map_err(driver(OP))?;
    Ok(())
}
