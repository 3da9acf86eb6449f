//! Compiles every kernel source of canopy-kernels as host C++ against the emulation headers in
//! cpp/, one translation unit per `.cu` file (its helpers in a namespace of their own), with an
//! `extern "C"` entry point per kernel, and writes the Rust table of those entry points.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use canopy_kernels::backend::cuda::{KERNEL_SOURCES, KernelSource};

fn main() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cpp = Path::new("cpp");
    for file in ["emulation.h", "runtime.h", "runtime.cpp", "cuda_fp16.h"] {
        println!("cargo:rerun-if-changed=cpp/{file}");
    }
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++20")
        .include(cpp)
        .opt_level(2)
        // The kernels read memory through pointers of other types (bytes as uint4), as CUDA allows.
        .flag("-fno-strict-aliasing")
        .flag_if_supported("-Wno-unknown-pragmas")
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-unused-variable")
        .flag_if_supported("-Wno-unused-function")
        .flag_if_supported("-Wno-sign-compare")
        .file(cpp.join("runtime.cpp"));
    let mut table = String::new();
    for source in KERNEL_SOURCES {
        let unit = out_dir.join(format!("{}.cpp", stem(source)));
        std::fs::write(&unit, emulated_unit(source)).expect("write an emulated translation unit");
        build.file(unit);
        for kernel in source.kernels {
            writeln!(table, "    (\"{kernel}\", canopy_launch_{kernel}),").expect("write to a String");
        }
    }
    build.compile("canopy_kernel_emulation");

    let mut rust = String::from("unsafe extern \"C\" {\n");
    for kernel in KERNEL_SOURCES.iter().flat_map(|source| source.kernels) {
        writeln!(
            rust,
            "    fn canopy_launch_{kernel}(shape: *const LaunchShape, args: *mut *mut c_void, n_args: usize) -> c_int;"
        )
        .expect("write to a String");
    }
    rust.push_str(
        "}\n\n/// Every kernel's entry point, by name.\nstatic KERNELS: &[(&str, LaunchFn)] = &[\n",
    );
    rust.push_str(&table);
    rust.push_str("];\n");
    std::fs::write(out_dir.join("kernels.rs"), rust).expect("write the kernel table");
}

fn stem(source: &KernelSource) -> &str {
    source.name.strip_suffix(".cu").unwrap_or(source.name)
}

/// The file's translation unit inside a namespace, then one launcher per kernel.
fn emulated_unit(source: &KernelSource) -> String {
    let namespace = format!("canopy_emulated_{}", stem(source));
    let mut unit = format!(
        "#include \"runtime.h\"\nnamespace {namespace} {{\n{}\n}}\n",
        with_dynamic_shared_pointers(&source.translation_unit())
    );
    for kernel in source.kernels {
        writeln!(
            unit,
            "extern \"C\" int canopy_launch_{kernel}(const canopy_emulation::LaunchShape *shape, void **args, \
             size_t n_args) {{\n    return canopy_emulation::launch(\"{kernel}\", shape, &{namespace}::{kernel}, args, \
             n_args);\n}}"
        )
        .expect("write to a String");
    }
    unit
}

/// `extern __shared__ T name[];` (the launch's dynamic shared memory) as a pointer to the
/// emulator's buffer: host C++ has no unsized static arrays.
fn with_dynamic_shared_pointers(code: &str) -> String {
    const DECLARATION: &str = "extern __shared__ ";
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find(DECLARATION) {
        out.push_str(&rest[..at]);
        let after = &rest[at + DECLARATION.len()..];
        let end = after.find(';').expect("a dynamic shared declaration ends with ';'");
        let declaration = after[..end].trim().trim_end_matches("[]");
        let (ty, name) = declaration.rsplit_once(' ').expect("a dynamic shared declaration names a type");
        write!(out, "{ty} *const {name} = ({ty} *)canopy_emulation::dynamic_shared()")
            .expect("write to a String");
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}
