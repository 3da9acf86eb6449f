//! Run-time kernel compilation with NVRTC, to CUBIN for the device's exact architecture.
//!
//! CUDA 13's NVRTC ships without the toolkit headers (`cuda_fp16.h`, CCCL's `nv/target`), so
//! they are looked up on disk and passed with `-I`: from `CUDA_HOME`, `CUDA_PATH`,
//! `/usr/local/cuda`, and the `include` dir beside any `LD_LIBRARY_PATH` entry, which finds the
//! pip wheels (`site-packages/nvidia/cu13/{lib,include}`).

use std::ffi::{CString, c_char, c_int};
use std::path::{Path, PathBuf};

use cudarc::nvrtc::{result, sys};

use super::error::CudaError;
use super::sources::KernelSource;

/// A loaded NVRTC library together with the include dirs its compilations need.
#[derive(Clone, Debug)]
pub struct Nvrtc {
    version: (i32, i32),
    include_dirs: Vec<PathBuf>,
}

impl Nvrtc {
    /// Loads `libnvrtc` and finds the CUDA headers; fails, without panicking, when either is
    /// missing.
    pub fn load() -> Result<Self, CudaError> {
        // SAFETY: only tries to open the library, which has no initialisation side effects.
        if !unsafe { sys::is_culib_present() } {
            return Err(CudaError::NoNvrtc);
        }
        let (mut major, mut minor): (c_int, c_int) = (0, 0);
        // SAFETY: both pointers are valid for writes; the library is present (checked above).
        unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
            .result()
            .map_err(|e| CudaError::Compile { source_name: "nvrtcVersion", detail: e.to_string() })?;
        Ok(Self { version: (major, minor), include_dirs: find_include_dirs()? })
    }

    /// The NVRTC version, `(major, minor)`.
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The include dirs passed to every compilation.
    pub fn include_dirs(&self) -> &[PathBuf] {
        &self.include_dirs
    }

    /// The compiler options for `arch` (`"sm_90"`), which also key the kernel cache.
    pub fn options(&self, arch: &str) -> Vec<String> {
        let mut options = vec![format!("--gpu-architecture={arch}"), "--std=c++17".to_owned()];
        options.extend(self.include_dirs.iter().map(|dir| format!("-I{}", dir.display())));
        options
    }

    /// Compiles `source` to a CUBIN for `arch` (`"sm_90"`); compiler errors carry NVRTC's log.
    pub fn compile_cubin(&self, source: &KernelSource, arch: &str) -> Result<Vec<u8>, CudaError> {
        let failed = |detail: String| CudaError::Compile { source_name: source.name, detail };
        let code =
            CString::new(source.translation_unit()).map_err(|_| failed("source holds a NUL byte".into()))?;
        let name = CString::new(source.name).map_err(|_| failed("name holds a NUL byte".into()))?;
        let program = result::create_program(&code, Some(&name)).map_err(|e| failed(e.to_string()))?;
        let compiled = compile_and_fetch(program, &self.options(arch)).map_err(failed);
        // SAFETY: `program` came from create_program and is destroyed once, here.
        let destroyed = unsafe { result::destroy_program(program) };
        let cubin = compiled?;
        destroyed.map_err(|e| failed(e.to_string()))?;
        Ok(cubin)
    }
}

/// Compiles `program` and returns its CUBIN, or the status and log of a failed compilation.
fn compile_and_fetch(program: sys::nvrtcProgram, options: &[String]) -> Result<Vec<u8>, String> {
    // SAFETY: `program` is a live program from create_program.
    if let Err(status) = unsafe { result::compile_program(program, options) } {
        // SAFETY: as above; the log exists once compilation has run.
        let log = unsafe { result::get_program_log(program) }.map(|log| c_chars_to_string(&log));
        return Err(format!("{status}\n{}", log.unwrap_or_default()));
    }
    let mut size = 0usize;
    // SAFETY: `program` compiled successfully; `size` is valid for writes.
    unsafe { sys::nvrtcGetCUBINSize(program, &mut size) }.result().map_err(|e| e.to_string())?;
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has exactly the size NVRTC reported.
    unsafe { sys::nvrtcGetCUBIN(program, cubin.as_mut_ptr().cast::<c_char>()) }
        .result()
        .map_err(|e| e.to_string())?;
    Ok(cubin)
}

fn c_chars_to_string(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The include dir holding `cuda_fp16.h`, plus CCCL's root when it is a separate dir; the first
/// candidate that has both wins.
fn find_include_dirs() -> Result<Vec<PathBuf>, CudaError> {
    let candidates = candidate_include_dirs();
    for dir in &candidates {
        if !dir.join("cuda_fp16.h").is_file() {
            continue;
        }
        if dir.join("nv/target").is_file() {
            return Ok(vec![dir.clone()]);
        }
        let cccl = dir.join("cccl");
        if cccl.join("nv/target").is_file() {
            return Ok(vec![dir.clone(), cccl]);
        }
    }
    Err(CudaError::NoHeaders { searched: candidates })
}

fn candidate_include_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|root| Path::new(&root).join("include"))
        .collect();
    dirs.push(PathBuf::from("/usr/local/cuda/include"));
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        for lib in std::env::split_paths(&paths) {
            if let Some(parent) = lib.parent() {
                dirs.push(parent.join("include"));
            }
        }
    }
    dirs.dedup();
    dirs
}
