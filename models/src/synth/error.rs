//! Errors of synthetic model generation.

use canopy_kernels::quant::{GgmlType, QuantError};

use crate::gguf::GgufError;

/// Why a synthetic model could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// The architecture name is not one `synth` knows.
    #[error("unknown architecture {0:?} (known: qwen3)")]
    UnknownArch(String),
    /// The shape name is not one `synth` knows.
    #[error("unknown shape {0:?} (known: tiny, qwen3-0.6b, qwen3-8b)")]
    UnknownShape(String),
    /// The weight type name is not one `synth` knows.
    #[error("unknown weight type {0:?} (known: q4_k_m, q8_0, bf16, f32)")]
    UnknownWeightType(String),
    /// A tensor's rows are not whole blocks of its type.
    #[error("rows of {tensor} are not whole {ggml_type} blocks")]
    PartialBlocks { tensor: String, ggml_type: GgmlType },
    /// The quantizer refused a row.
    #[error("encoding {tensor}: {source}")]
    Quantize { tensor: String, source: QuantError },
    /// Writing the GGUF file failed (including I/O errors).
    #[error(transparent)]
    Gguf(#[from] GgufError),
}
