//! Why the CUDA backend could not start or compile its kernels.

use std::path::PathBuf;

use cudarc::driver::DriverError;

/// A failure to bring up the CUDA backend. Callers fall back to the CPU backend on any of these.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// `libcuda` could not be loaded: no NVIDIA driver on this machine.
    #[error("no CUDA driver found (libcuda could not be loaded)")]
    NoDriver,
    /// `libnvrtc` could not be loaded, so kernels cannot be compiled.
    #[error(
        "no NVRTC found (libnvrtc.so.13 could not be loaded; install the CUDA toolkit or the nvidia-cuda-nvrtc wheel and add its lib dir to LD_LIBRARY_PATH)"
    )]
    NoNvrtc,
    /// The CUDA headers NVRTC needs (`cuda_fp16.h` and the CCCL headers) were not found.
    #[error("CUDA headers (cuda_fp16.h with CCCL's nv/target) not found; looked in: {}", format_dirs(.searched))]
    NoHeaders {
        /// The include dirs that were tried, in order.
        searched: Vec<PathBuf>,
    },
    /// A driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] DriverError),
    /// NVRTC refused a kernel source.
    #[error("NVRTC failed on {source_name}: {detail}")]
    Compile {
        /// The `.cu` file.
        source_name: &'static str,
        /// The NVRTC status and its compiler log.
        detail: String,
    },
    /// A compiled module lacks a kernel the backend launches.
    #[error("kernel {0} is missing from the compiled modules")]
    MissingKernel(&'static str),
}

fn format_dirs(dirs: &[PathBuf]) -> String {
    if dirs.is_empty() {
        return "nowhere (set CUDA_HOME)".to_owned();
    }
    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
}
