//! Kernel launches through `cuLaunchKernelEx`, with programmatic dependent launch on sm_90 and
//! later: a kernel may be launched while the one before it on the stream drains, so its launch
//! latency hides behind that kernel's tail. A decode step is a chain of hundreds of small
//! dependent kernels, each worth only a few microseconds, so the gap between them is a large part
//! of the step. Every kernel begins with `wait_for_previous_kernel()` (common.cuh), which returns
//! once the previous kernel has finished and its writes are visible, so the order of memory
//! effects is that of plain launches. `CANOPY_CUDA_PDL=0` turns it off.
//!
//! `CANOPY_CUDA_SKIP_KERNELS` (comma-separated kernel-name prefixes) drops the launches of the
//! kernels it names, a diagnostic whose results are wrong: a step's time with and without a kernel
//! family is what that family costs inside the replayed graph, overlap and gaps included, which
//! per-kernel profiles (each launch alone, at base clocks) do not show.

use std::ffi::c_void;
use std::marker::PhantomData;

use cudarc::driver::sys::{self, CUlaunchAttributeID};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, DriverError, LaunchConfig,
};

use super::context::{Device, enabled_from_env};

/// Whether launches allow programmatic overlap: sm_90 or later, unless `CANOPY_CUDA_PDL=0`.
pub(super) fn programmatic_launch(major: i32) -> bool {
    major >= 9 && enabled_from_env("CANOPY_CUDA_PDL")
}

/// The kernel-name prefixes of `CANOPY_CUDA_SKIP_KERNELS`, empty entries left out.
pub(super) fn skipped_kernels(value: Option<&str>) -> Vec<String> {
    value
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|prefix| !prefix.is_empty())
        .map(String::from)
        .collect()
}

/// One kernel launch being put together; arguments in the kernel's parameter order.
pub(super) struct Launch<'a> {
    device: &'a Device,
    function: &'a CudaFunction,
    /// Device addresses of the buffer arguments, pointed at only once the launch is submitted
    /// (the launch moves until then).
    addresses: Vec<sys::CUdeviceptr>,
    args: Vec<Arg>,
    /// The arguments' borrows last as long as the launch.
    borrows: PhantomData<&'a mut ()>,
    /// Dropped on submission (`CANOPY_CUDA_SKIP_KERNELS`).
    skipped: bool,
}

enum Arg {
    /// Index into `addresses`.
    Address(usize),
    /// A plain value, borrowed for the launch's lifetime.
    Value(*mut c_void),
}

/// A kernel argument: a device buffer (its address is passed) or a plain value.
pub(super) trait KernelArg<'a> {
    fn push(self, launch: &mut Launch<'a>);
}

impl<'a> Launch<'a> {
    pub fn new(device: &'a Device, function: &'a CudaFunction, skipped: bool) -> Self {
        Self { device, function, addresses: Vec::new(), args: Vec::new(), borrows: PhantomData, skipped }
    }

    pub fn arg(&mut self, arg: impl KernelArg<'a>) -> &mut Self {
        arg.push(self);
        self
    }

    /// A plain-data argument of a type without a [`KernelArg`] impl (a struct of parameters).
    pub fn value<T: DeviceRepr>(&mut self, value: &'a T) -> &mut Self {
        self.args.push(Arg::Value((value as *const T).cast_mut().cast()));
        self
    }

    fn address(&mut self, address: sys::CUdeviceptr) {
        self.args.push(Arg::Address(self.addresses.len()));
        self.addresses.push(address);
    }

    /// Submits the kernel to the device's stream.
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in number, order and type, and the
    /// kernel must stay within the buffers it is given.
    pub unsafe fn launch(mut self, config: LaunchConfig) -> Result<(), DriverError> {
        if self.skipped {
            return Ok(());
        }
        // SAFETY: a zeroed attribute is valid plain data; the union member set is the one the id
        // names.
        let mut attribute: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attribute.id = CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attribute.value.programmaticStreamSerializationAllowed = 1;
        let launch_config = sys::CUlaunchConfig {
            gridDimX: config.grid_dim.0,
            gridDimY: config.grid_dim.1,
            gridDimZ: config.grid_dim.2,
            blockDimX: config.block_dim.0,
            blockDimY: config.block_dim.1,
            blockDimZ: config.block_dim.2,
            sharedMemBytes: config.shared_mem_bytes,
            hStream: self.device.stream.cu_stream(),
            attrs: &raw mut attribute,
            numAttrs: u32::from(self.device.programmatic_launch),
        };
        let addresses = self.addresses.as_mut_ptr();
        let mut params: Vec<*mut c_void> = self
            .args
            .iter()
            .map(|arg| match *arg {
                // SAFETY: indices were taken from `addresses`, which does not change from here on.
                Arg::Address(index) => unsafe { addresses.add(index) }.cast(),
                Arg::Value(value) => value,
            })
            .collect();
        self.device.stream.context().bind_to_thread()?;
        // SAFETY: `params` points at one live value per kernel parameter (the caller's contract):
        // borrowed values, or the addresses kept in `self` until the call returns.
        unsafe {
            sys::cuLaunchKernelEx(
                &launch_config,
                self.function.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
    }
}

// The backend's context does not track events (Device::open), so the guards these return hold
// nothing and are dropped at once; the borrow of the buffer lasts as long as the launch.
impl<'a, T> KernelArg<'a> for &'a CudaSlice<T> {
    fn push(self, launch: &mut Launch<'a>) {
        let (address, _) = self.device_ptr(&launch.device.stream);
        launch.address(address);
    }
}

impl<'a, T> KernelArg<'a> for &'a mut CudaSlice<T> {
    fn push(self, launch: &mut Launch<'a>) {
        let (address, _) = self.device_ptr_mut(&launch.device.stream);
        launch.address(address);
    }
}

/// An optional buffer: its address, or null when absent (the kernel then skips that output).
impl<'a, T> KernelArg<'a> for Option<&'a mut CudaSlice<T>> {
    fn push(self, launch: &mut Launch<'a>) {
        match self {
            Some(buffer) => buffer.push(launch),
            None => launch.address(0),
        }
    }
}

impl<'a, 'b, T> KernelArg<'a> for &'a mut CudaViewMut<'b, T> {
    fn push(self, launch: &mut Launch<'a>) {
        let (address, _) = self.device_ptr_mut(&launch.device.stream);
        launch.address(address);
    }
}

/// Plain values are passed by address; the kernel copies them.
macro_rules! value_args {
    ($($ty:ty),*) => {$(
        impl<'a> KernelArg<'a> for &'a $ty {
            fn push(self, launch: &mut Launch<'a>) {
                launch.value(self);
            }
        }
    )*};
}

value_args!(u32, u64, f32);

#[cfg(test)]
mod tests {
    use super::skipped_kernels;

    #[test]
    fn skipped_kernels_are_trimmed_nonempty_prefixes() {
        assert_eq!(skipped_kernels(Some(" attention_mma, ,rms_norm,")), ["attention_mma", "rms_norm"]);
        assert!(skipped_kernels(Some(" , ")).is_empty());
        assert!(skipped_kernels(None).is_empty());
    }
}
