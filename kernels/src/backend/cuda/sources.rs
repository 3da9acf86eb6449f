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
        kernels: &["add", "swiglu", "swiglu_q8"],
    },
    KernelSource {
        name: "norm.cu",
        code: include_str!("../../../cuda/norm.cu"),
        kernels: &[
            "rms_norm",
            "add_rms_norm",
            "rms_norm_warp",
            "add_rms_norm_warp",
            "rms_norm_block",
            "add_rms_norm_block",
            "rms_norm_q8_warp",
            "add_rms_norm_q8_warp",
            "rms_norm_q8_block",
            "add_rms_norm_q8_block",
        ],
    },
    KernelSource { name: "rope.cu", code: include_str!("../../../cuda/rope.cu"), kernels: &["rope"] },
    KernelSource {
        name: "attention_inputs.cu",
        code: include_str!("../../../cuda/attention_inputs.cu"),
        kernels: &["attention_inputs"],
    },
    KernelSource {
        name: "rows.cu",
        code: include_str!("../../../cuda/rows.cu"),
        kernels: &[
            "embed_f32",
            "embed_f16",
            "embed_bf16",
            "embed_q8_0",
            "embed_q4_k",
            "embed_q5_k",
            "embed_q6_k",
            "gather_rows",
            "write_kv_rows",
            "gather_kv_rows",
            "scatter_kv_rows",
        ],
    },
    KernelSource {
        name: "matvec_float.cu",
        code: include_str!("../../../cuda/matvec_float.cu"),
        kernels: &[
            "matvec_decode_f32",
            "matvec_batch_f32",
            "matvec_any_f32",
            "matvec_decode_f16",
            "matvec_batch_f16",
            "matvec_any_f16",
            "matvec_decode_bf16",
            "matvec_batch_bf16",
            "matvec_any_bf16",
        ],
    },
    KernelSource {
        name: "matvec_quant.cu",
        code: include_str!("../../../cuda/matvec_quant.cu"),
        kernels: &[
            "quantize_q8",
            "matvec_q8_decode_q8_0",
            "matvec_q8_pair_q8_0",
            "matvec_q8_quad_q8_0",
            "matvec_q8_batch_q8_0",
            "matvec_q8_decode_q4_k",
            "matvec_q8_pair_q4_k",
            "matvec_q8_quad_q4_k",
            "matvec_q8_batch_q4_k",
            "matvec_q8_decode_q5_k",
            "matvec_q8_pair_q5_k",
            "matvec_q8_quad_q5_k",
            "matvec_q8_batch_q5_k",
            "matvec_q8_decode_q6_k",
            "matvec_q8_pair_q6_k",
            "matvec_q8_quad_q6_k",
            "matvec_q8_batch_q6_k",
            "matvec_q8_decode_q4_k_q6_k",
            "matvec_q8_lines_q4_k",
            "matvec_q8_lines_q6_k",
            "matvec_q8_lines_q4_k_q6_k",
        ],
    },
    // mmq_f16.cu reuses mmq.cu's tiles and lanes: one translation unit.
    KernelSource {
        name: "mmq.cu",
        code: concat!(include_str!("../../../cuda/mmq.cu"), include_str!("../../../cuda/mmq_f16.cu")),
        kernels: &[
            "mmq_q8_0_8",
            "mmq_q8_0_16",
            "mmq_q8_0_24",
            "mmq_q8_0_32",
            "mmq_q8_0_48",
            "mmq_q8_0_64",
            "mmq_q4_k_8",
            "mmq_q4_k_16",
            "mmq_q4_k_24",
            "mmq_q4_k_32",
            "mmq_q4_k_48",
            "mmq_q4_k_64",
            "mmq_q5_k_8",
            "mmq_q5_k_16",
            "mmq_q5_k_24",
            "mmq_q5_k_32",
            "mmq_q5_k_48",
            "mmq_q5_k_64",
            "mmq_q6_k_8",
            "mmq_q6_k_16",
            "mmq_q6_k_24",
            "mmq_q6_k_32",
            "mmq_q6_k_48",
            "mmq_q6_k_64",
            "mmq_f16_q4_k_8",
            "mmq_f16_q4_k_16",
            "mmq_f16_q4_k_24",
            "mmq_f16_q4_k_32",
            "mmq_f16_q6_k_8",
            "mmq_f16_q6_k_16",
            "mmq_f16_q6_k_24",
            "mmq_f16_q6_k_32",
            "mmq_f16_q4_k_q6_k_8",
            "mmq_f16_q4_k_q6_k_16",
            "mmq_f16_q4_k_q6_k_24",
            "mmq_f16_q4_k_q6_k_32",
        ],
    },
    KernelSource {
        name: "convert.cu",
        code: include_str!("../../../cuda/convert.cu"),
        kernels: &[
            "dequantize_f16_q8_0",
            "dequantize_f16_q4_k",
            "dequantize_f16_q5_k",
            "dequantize_f16_q6_k",
            "round_f16",
            "round_f16_rows",
            "round_bf16",
        ],
    },
    // attention_mma.cu reuses attention.cu's key ranges: one translation unit.
    KernelSource {
        name: "attention.cu",
        code: concat!(
            include_str!("../../../cuda/attention.cu"),
            include_str!("../../../cuda/attention_mma.cu")
        ),
        kernels: &[
            "attention_dim128",
            "attention_dim512",
            "attention_rows_dim128",
            "attention_rows_dim512",
            "attention_mma",
            "attention_mma_long",
            "attention_mma_narrow",
            "attention_mma_merge",
        ],
    },
    KernelSource { name: "probe.cu", code: include_str!("../../../cuda/probe.cu"), kernels: &["read_probe"] },
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
