//! canopy's CUDA kernels, run on the CPU.
//!
//! build.rs compiles every kernel source of `canopy-kernels` (the same translation units NVRTC
//! compiles) as host C++ against cpp/emulation.h, which supplies the CUDA dialect they use. A
//! launch runs its blocks one after another on the calling thread, in a scrambled order (a kernel
//! may not rely on any), each thread of a block as a fiber that yields only at `__syncthreads` and
//! the warp collectives, so the kernels' own indexing, bit manipulation, shared memory and warp
//! reductions are what is tested, on machines without a GPU. Device memory is host memory: a pointer argument is the address of a host
//! buffer. Inline PTX is compiled only for the device (`__CUDA_ARCH__`); where the kernels use it
//! for tensor cores and asynchronous copies, their fallbacks (warp shuffles, plain copies) run.
//!
//! A launch that writes past the dynamic shared memory it was given fails with an error. Timing
//! and memory-model effects (races between blocks, PDL overlap) are out of scope: blocks never
//! overlap here.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Mutex;

type LaunchFn = unsafe extern "C" fn(*const LaunchShape, *mut *mut c_void, usize) -> c_int;

include!(concat!(env!("OUT_DIR"), "/kernels.rs"));

unsafe extern "C" {
    fn canopy_emulation_last_error() -> *const c_char;
}

/// A launch's grid and block, as `cuLaunchKernel` takes them; same layout as runtime.h's.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchShape {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared_bytes: usize,
}

impl LaunchShape {
    /// `grid` blocks of `block` threads along x, without dynamic shared memory.
    pub fn linear(grid: u32, block: u32) -> Self {
        Self { grid: [grid, 1, 1], block: [block, 1, 1], dynamic_shared_bytes: 0 }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EmulationError {
    #[error("no kernel named {0:?} in the kernel sources")]
    UnknownKernel(String),
    #[error("kernel {kernel}: {message}")]
    Failed { kernel: String, message: String },
}

/// The emulated kernels share the host-side state of shared memory and the fiber scheduler.
static LAUNCHES: Mutex<()> = Mutex::new(());

/// Runs `kernel` over `shape` with `args`, one pointer to each argument value in the kernel's
/// parameter order (a device pointer argument is a pointer to a host pointer). A wrong number of
/// arguments is an error; their types cannot be checked.
///
/// # Safety
/// `args` must match the kernel's parameters in number, order and type, and every pointer the
/// kernel dereferences must be valid for what the kernel reads and writes.
pub unsafe fn launch(
    kernel: &str,
    shape: LaunchShape,
    args: &mut [*mut c_void],
) -> Result<(), EmulationError> {
    let Some((_, entry)) = KERNELS.iter().find(|(name, _)| *name == kernel) else {
        return Err(EmulationError::UnknownKernel(kernel.to_owned()));
    };
    let _exclusive = LAUNCHES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // SAFETY: the caller vouches for the arguments; the shape is checked by the runtime.
    let status = unsafe { entry(&shape, args.as_mut_ptr(), args.len()) };
    if status == 0 {
        return Ok(());
    }
    // SAFETY: the runtime keeps a NUL-terminated message until the next launch, which the lock
    // held here excludes.
    let message = unsafe { CStr::from_ptr(canopy_emulation_last_error()) }.to_string_lossy().into_owned();
    Err(EmulationError::Failed { kernel: kernel.to_owned(), message })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_kernels_and_bad_shapes_are_errors() {
        // SAFETY: neither launch runs a kernel.
        let unknown = unsafe { launch("no_such_kernel", LaunchShape::linear(1, 32), &mut []) };
        assert_eq!(unknown, Err(EmulationError::UnknownKernel("no_such_kernel".into())));
        let (mut x, mut n) = (0u64, 0u32);
        for block in [0, 2048] {
            // SAFETY: the shape is refused before the kernel runs.
            let refused = unsafe {
                launch("add", LaunchShape::linear(1, block), &mut [ptr(&mut x), ptr(&mut x), ptr(&mut n)])
            };
            let Err(EmulationError::Failed { message, .. }) = refused else {
                panic!("{block} threads: {refused:?}")
            };
            assert!(message.contains("invalid launch shape"), "{message}");
        }
        // SAFETY: the argument count is checked before the kernel runs.
        let short = unsafe { launch("add", LaunchShape::linear(1, 32), &mut [ptr(&mut x)]) };
        let Err(EmulationError::Failed { message, .. }) = short else { panic!("{short:?}") };
        assert!(message.contains("takes 3 arguments, got 1"), "{message}");
    }

    fn ptr<T>(value: &mut T) -> *mut c_void {
        (value as *mut T).cast()
    }
}
