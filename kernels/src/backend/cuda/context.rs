//! The device, its stream, and the kernels compiled for it.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaStream, DriverError, LaunchConfig};
use cudarc::nvrtc::Ptx;

use super::cache;
use super::compile::Nvrtc;
use super::error::CudaError;
use super::launch::{self, Launch};
use super::sources::KERNEL_SOURCES;
use crate::backend::BackendError;

/// One CUDA device with every kernel loaded. All work goes to one stream, so ops run in
/// submission order.
pub(super) struct Device {
    pub stream: Arc<CudaStream>,
    functions: HashMap<&'static str, CudaFunction>,
    /// The architecture the kernels were compiled for, `sm_XY`.
    pub arch: String,
    /// Streaming multiprocessors, for sizing grids that must fill the device.
    pub sm_count: usize,
    /// The most shared memory a block may opt in to (99 KB on sm_86 and sm_89, 227 KB on sm_90).
    pub max_shared_per_block: usize,
    /// Whether kernels launch with programmatic dependent launch (launch.rs).
    pub programmatic_launch: bool,
    /// Name prefixes of the kernels whose launches are dropped (a diagnostic, launch.rs).
    skipped_kernels: Vec<String>,
}

impl Device {
    pub fn open(ordinal: usize) -> Result<Self, CudaError> {
        // SAFETY: only tries to open the library. Without this check, dynamic loading panics.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(CudaError::NoDriver);
        }
        let nvrtc = Nvrtc::load()?;
        let context = CudaContext::new(ordinal)?;
        // SAFETY: the backend uses one stream only, so buffers need no cross-stream events.
        unsafe { context.disable_event_tracking() };
        let (major, minor) = context.compute_capability()?;
        let arch = format!("sm_{major}{minor}");
        let sm_count = context
            .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let max_shared_per_block = context.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )?;
        let mut functions = HashMap::new();
        for source in KERNEL_SOURCES {
            let module = context.load_module(Ptx::from_binary(cache::cubin(&nvrtc, source, &arch)?))?;
            for &name in source.kernels {
                functions.insert(name, module.load_function(name)?);
            }
        }
        // A stream of our own: the legacy default stream cannot be recorded into a graph.
        Ok(Self {
            stream: context.new_stream()?,
            functions,
            arch,
            sm_count: usize::try_from(sm_count).unwrap_or(1).max(1),
            max_shared_per_block: usize::try_from(max_shared_per_block).unwrap_or(0),
            programmatic_launch: launch::programmatic_launch(major),
            skipped_kernels: launch::skipped_kernels(
                std::env::var("CANOPY_CUDA_SKIP_KERNELS").ok().as_deref(),
            ),
        })
    }

    /// A launch of kernel `name` on the device's stream.
    pub fn launch(&self, op: &'static str, name: &'static str) -> Result<Launch<'_>, BackendError> {
        let skipped = self.skipped_kernels.iter().any(|prefix| name.starts_with(prefix.as_str()));
        Ok(Launch::new(self, self.function(op, name)?, skipped))
    }

    /// The kernel-name prefixes whose launches are dropped (`CANOPY_CUDA_SKIP_KERNELS`).
    pub fn skipped_kernels(&self) -> &[String] {
        &self.skipped_kernels
    }

    /// The loaded kernel `name`.
    pub fn function(&self, op: &'static str, name: &'static str) -> Result<&CudaFunction, BackendError> {
        self.functions.get(name).ok_or_else(|| device_error(op, CudaError::MissingKernel(name)))
    }
}

/// A failure of the device itself while running `op`.
pub(super) fn device_error(op: &'static str, error: impl std::fmt::Display) -> BackendError {
    BackendError::Device { op, detail: format!("CUDA: {error}") }
}

/// Maps driver errors of `op`.
pub(super) fn driver(op: &'static str) -> impl Fn(DriverError) -> BackendError {
    move |error| device_error(op, error)
}

/// `value` as a kernel's `u32` argument.
pub(super) fn to_u32(op: &'static str, what: &str, value: usize) -> Result<u32, BackendError> {
    u32::try_from(value).map_err(|_| BackendError::shape(op, format!("{what} = {value} exceeds u32")))
}

/// A switch from the environment, for A/B measurements: on unless `$name` is `0`.
pub(super) fn enabled_from_env(name: &str) -> bool {
    std::env::var(name).map_or(true, |value| value.trim() != "0")
}

/// A switch from the environment for what is not yet measured: on only when `$name` is `1`.
pub(super) fn opted_in_from_env(name: &str) -> bool {
    std::env::var(name).is_ok_and(|value| value.trim() == "1")
}

/// A batch-size threshold from the environment, for tuning: `$name` when it holds a positive
/// number, else `default`.
pub(super) fn rows_from_env(name: &str, default: usize) -> usize {
    positive_rows(std::env::var(name).ok().as_deref()).unwrap_or(default)
}

fn positive_rows(value: Option<&str>) -> Option<usize> {
    value.and_then(|value| value.trim().parse().ok()).filter(|&rows| rows > 0)
}

/// `blocks` blocks of `threads` threads.
pub(super) fn grid(op: &'static str, blocks: usize, threads: u32) -> Result<LaunchConfig, BackendError> {
    Ok(LaunchConfig {
        grid_dim: (to_u32(op, "grid size", blocks)?, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// One thread per element of `total`, in blocks of 256.
pub(super) fn per_element(op: &'static str, total: usize) -> Result<LaunchConfig, BackendError> {
    const THREADS: u32 = 256;
    grid(op, total.div_ceil(THREADS as usize), THREADS)
}

#[cfg(test)]
mod tests {
    use super::positive_rows;

    #[test]
    fn thresholds_are_positive_numbers_or_absent() {
        assert_eq!(positive_rows(Some(" 24 ")), Some(24));
        assert_eq!(positive_rows(Some("0")), None);
        assert_eq!(positive_rows(Some("-3")), None);
        assert_eq!(positive_rows(Some("many")), None);
        assert_eq!(positive_rows(None), None);
    }
}
