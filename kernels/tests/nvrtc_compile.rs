//! Compiles every CUDA kernel source for sm_90 with NVRTC; needs no GPU or driver.
//!
//! Skips when NVRTC or the CUDA headers are absent, unless `CANOPY_REQUIRE_NVRTC=1`
//! (scripts/test.sh sets it after installing the NVRTC wheels).

use canopy_kernels::backend::cuda::{CudaError, KERNEL_SOURCES, Nvrtc};

fn nvrtc_or_skip() -> Option<Nvrtc> {
    match Nvrtc::load() {
        Ok(nvrtc) => Some(nvrtc),
        Err(error @ (CudaError::NoNvrtc | CudaError::NoHeaders { .. })) => {
            assert!(
                std::env::var("CANOPY_REQUIRE_NVRTC").as_deref() != Ok("1"),
                "CANOPY_REQUIRE_NVRTC=1 but NVRTC is unusable: {error}"
            );
            println!("skipped: {error}");
            None
        }
        Err(error) => panic!("loading NVRTC failed: {error}"),
    }
}

#[test]
fn every_kernel_source_compiles_for_sm_90() {
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    println!("NVRTC {:?}, include dirs {:?}", nvrtc.version(), nvrtc.include_dirs());
    let mut failures = Vec::new();
    for source in KERNEL_SOURCES {
        match nvrtc.compile_cubin(source, "sm_90") {
            // An ELF image, as CUBINs are.
            Ok(cubin) => {
                assert_eq!(&cubin[..4], b"\x7fELF", "{} did not compile to a CUBIN", source.name);
                // The backend loads each listed kernel by its (unmangled) symbol name.
                for kernel in source.kernels {
                    let symbol = [kernel.as_bytes(), b"\0"].concat();
                    let defined = cubin.windows(symbol.len()).any(|window| window == symbol);
                    assert!(defined, "{} defines no kernel {kernel}", source.name);
                }
            }
            Err(error) => failures.push(error.to_string()),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn a_broken_source_fails_with_the_compiler_log() {
    let Some(nvrtc) = nvrtc_or_skip() else { return };
    let broken = canopy_kernels::backend::cuda::KernelSource {
        name: "broken.cu",
        code: "extern \"C\" __global__ void broken(float *x) { x[0] = undefined_name; }",
        kernels: &["broken"],
    };
    let error = nvrtc.compile_cubin(&broken, "sm_90").expect_err("the source is invalid").to_string();
    assert!(error.contains("broken.cu") && error.contains("undefined_name"), "{error}");
}
