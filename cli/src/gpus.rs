//! The GPUs this process can see, each as the `CUDA_VISIBLE_DEVICES` value that shows a child
//! process that GPU alone (as its device 0).

use cudarc::driver::CudaContext;

/// The environment variable through which CUDA restricts (and orders) the devices a process sees.
pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// One `CUDA_VISIBLE_DEVICES` value per visible GPU, in device order, or why there are none
/// (no driver, no device).
pub fn visible_gpus() -> Result<Vec<String>, String> {
    // SAFETY: only tries to open the driver library. Without this check, cudarc's dynamic loading
    // panics when the library is missing.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no CUDA driver found (libcuda could not be loaded)".to_owned());
    }
    let count = CudaContext::device_count().map_err(|error| format!("CUDA: {error}"))?;
    let count = usize::try_from(count).unwrap_or(0);
    if count == 0 {
        return Err("the CUDA driver reports no device".to_owned());
    }
    Ok(device_selectors(count, std::env::var(CUDA_VISIBLE_DEVICES).ok().as_deref()))
}

/// The selector of each of the `count` devices the driver reports. With `CUDA_VISIBLE_DEVICES`
/// set, device i is its i-th entry (an index or a `GPU-...` UUID, passed on as written); without
/// it, device i is `i`.
fn device_selectors(count: usize, visible: Option<&str>) -> Vec<String> {
    match visible.map(str::trim).filter(|visible| !visible.is_empty()) {
        Some(visible) => visible.split(',').map(|entry| entry.trim().to_owned()).take(count).collect(),
        None => (0..count).map(|index| index.to_string()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_restriction_devices_are_numbered() {
        assert_eq!(device_selectors(3, None), ["0", "1", "2"]);
        assert_eq!(device_selectors(2, Some(" ")), ["0", "1"]);
    }

    #[test]
    fn a_restriction_is_passed_on_entry_by_entry() {
        assert_eq!(device_selectors(2, Some("3, 1")), ["3", "1"]);
        assert_eq!(device_selectors(1, Some("GPU-8f2c,GPU-91aa")), ["GPU-8f2c"]);
    }
}
