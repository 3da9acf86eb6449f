//! The kernel sources, embedded at build time and compiled at run time by NVRTC.

/// One `.cu` file of `kernels/cuda/` and the kernels it defines.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    /// File name, for logs and compiler errors.
    pub name: &'static str,
    /// The file's text, without the shared headers.
    pub code: &'static str,
    /// The `extern "C"` kernels the backend loads from it.
    pub kernels: &'static [&'static str],
}

/// Prepended to every source: types, half conversions, reductions.
pub(super) const COMMON_HEADER: &str = include_str!("../../../cuda/common.cuh");
/// Prepended to every source: block-format decoding.
pub(super) const QUANT_HEADER: &str = include_str!("../../../cuda/quant.cuh");

/// Every kernel file of the backend.
pub const KERNEL_SOURCES: &[KernelSource] = &[
    KernelSource {
        name: "elementwise.cu",
        code: include_str!("../../../cuda/elementwise.cu"),
        kernels: &["add", "swiglu"],
    },
    KernelSource {
        name: "norm.cu",
        code: include_str!("../../../cuda/norm.cu"),
        kernels: &["rms_norm", "add_rms_norm"],
    },
    KernelSource { name: "rope.cu", code: include_str!("../../../cuda/rope.cu"), kernels: &["rope"] },
    KernelSource {
        name: "rows.cu",
        code: include_str!("../../../cuda/rows.cu"),
        kernels: &[
            "embed_f32",
            "embed_f16",
            "embed_bf16",
            "embed_q8_0",
            "embed_q4_k",
            "embed_q6_k",
            "gather_rows",
            "scatter_rows",
        ],
    },
    KernelSource {
        name: "matmul.cu",
        code: include_str!("../../../cuda/matmul.cu"),
        kernels: &["matvec_f32", "matvec_f16", "matvec_bf16", "matvec_q8_0", "matvec_q4_k", "matvec_q6_k"],
    },
    KernelSource {
        name: "attention.cu",
        code: include_str!("../../../cuda/attention.cu"),
        kernels: &["attention"],
    },
    KernelSource {
        name: "sampling.cu",
        code: include_str!("../../../cuda/sampling.cu"),
        kernels: &["softmax_rows", "argmax_rows", "top_k_rows"],
    },
];

impl KernelSource {
    /// The full translation unit NVRTC compiles: the shared headers, then the file.
    pub fn translation_unit(&self) -> String {
        format!("{COMMON_HEADER}\n{QUANT_HEADER}\n#line 1 \"{}\"\n{}", self.name, self.code)
    }
}
