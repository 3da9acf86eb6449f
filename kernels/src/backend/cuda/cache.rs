//! The on-disk cache of compiled kernels, so a worker compiles each source once per machine.
//!
//! Entries are keyed by a hash of everything that determines the CUBIN: the translation unit,
//! the compiler options, the NVRTC version and the architecture. The cache is an optimisation
//! only: a missing dir, an unreadable entry or a failed write means compiling again, never an error.

use std::path::PathBuf;

use super::compile::Nvrtc;
use super::error::CudaError;
use super::sources::KernelSource;

/// Where compiled kernels are kept: `$CANOPY_KERNEL_CACHE`, else `$XDG_CACHE_HOME/canopy/kernels`,
/// else `~/.cache/canopy/kernels`; `None` when none of those is set.
pub fn cache_dir() -> Option<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("CANOPY_KERNEL_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|dir| dir.join("canopy/kernels")))
        .or_else(|| var("HOME").map(|home| home.join(".cache/canopy/kernels")))
}

/// Returns the CUBIN of `source` for `arch`, from the cache when it holds one, else compiled
/// and stored.
pub(super) fn cubin(nvrtc: &Nvrtc, source: &KernelSource, arch: &str) -> Result<Vec<u8>, CudaError> {
    let Some(dir) = cache_dir() else {
        return nvrtc.compile_cubin(source, arch);
    };
    let (major, minor) = nvrtc.version();
    let key = fnv1a(&[
        source.translation_unit().as_bytes(),
        nvrtc.options(arch).join("\0").as_bytes(),
        format!("nvrtc {major}.{minor}").as_bytes(),
        arch.as_bytes(),
    ]);
    let stem = source.name.trim_end_matches(".cu");
    let path = dir.join(format!("{stem}-{arch}-{key:016x}.cubin"));
    if let Ok(cached) = std::fs::read(&path)
        && !cached.is_empty()
    {
        return Ok(cached);
    }
    let compiled = nvrtc.compile_cubin(source, arch)?;
    // Written under a temporary name and renamed, so a concurrent reader never sees half a file.
    let temporary = dir.join(format!("{stem}-{key:016x}.{}.tmp", std::process::id()));
    let stored = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&temporary, &compiled))
        .and_then(|()| std::fs::rename(&temporary, &path));
    if stored.is_err() {
        // Best effort: a read-only or full disk only costs a recompilation next time.
        let _ = std::fs::remove_file(&temporary);
    }
    Ok(compiled)
}

/// 64-bit FNV-1a over the parts, each followed by a separator byte.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for part in parts {
        for &byte in part.iter().chain(&[0xff]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_separates_parts() {
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"a", b"bc"]));
        assert_eq!(fnv1a(&[b"x"]), fnv1a(&[b"x"]));
    }

    #[test]
    fn fnv1a_of_nothing_is_the_offset_basis() {
        assert_eq!(fnv1a(&[]), 0xcbf2_9ce4_8422_2325);
    }
}
