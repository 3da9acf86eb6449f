//! Random-weight GGUF models at real shapes, for tests and benchmarks (`canopy synth`).
//!
//! [`write_model`] writes a file whose tensor names, dims, order and element types and whose
//! metadata keys are what llama.cpp's `convert_hf_to_gguf.py` (and, for `q4_k_m`, `llama-quantize`)
//! produce for the real checkpoint, so that loaders, kernels and memory planning see exactly what a
//! real model gives them. Weights are N(0, [`WEIGHT_SIGMA`]) (norm weights uniform in
//! [`NORM_RANGE`]) from a PRNG keyed by (seed, tensor name, chunk): the file is bit-identical for a
//! seed, and generation runs in parallel. The vocabulary is a small synthetic byte-level BPE in the
//! layout of Qwen3's (real special-token ids for the real shapes), padded to the real vocabulary size.
//!
//! Tensors are generated, encoded and written one at a time, so memory holds at most one tensor's
//! encoded bytes (the largest, qwen3-8b's embedding, takes 1.2 GB in bf16 and 2.5 GB in f32).

mod bpe_train;
mod error;
mod metadata;
mod plan;
mod recipe;
mod rng;
mod shape;
mod vocab;
mod weights;

use std::io::{self, Write};

use canopy_kernels::quant::GgmlType;

pub use canopy_kernels::quant::ScaleFit;
pub use error::SynthError;
pub use plan::{ModelPlan, PlannedTensor, TensorRole};
pub use recipe::WeightType;
pub use shape::{Arch, Shape, ShapeConfig};
pub use weights::{NORM_RANGE, WEIGHT_SIGMA};

use crate::gguf::{GgufWriter, TensorSpec};

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SynthOptions {
    /// The architecture.
    pub arch: Arch,
    /// The model shape.
    pub shape: Shape,
    /// The weight format.
    pub weight_type: WeightType,
    /// PRNG seed; the same options give a bit-identical file.
    pub seed: u64,
    /// How the K formats' scales are fitted: [`ScaleFit::Nominal`] writes a Q4_K_M model several
    /// times faster, for benchmarks, at a slightly larger rounding error.
    pub scale_fit: ScaleFit,
}

/// What [`write_model`] wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct SynthSummary {
    /// Number of tensors.
    pub tensor_count: usize,
    /// Number of weights.
    pub parameter_count: u64,
    /// Bytes written, the whole file.
    pub file_bytes: u64,
    /// `general.file_type`.
    pub file_type: u32,
    /// Number of tensors of each element type, in order of first appearance.
    pub type_counts: Vec<(GgmlType, usize)>,
}

/// Writes the synthetic model described by `options` to `out` (wrap files in a `BufWriter`).
pub fn write_model(options: &SynthOptions, out: impl Write) -> Result<SynthSummary, SynthError> {
    let plan = ModelPlan::new(options.shape, options.weight_type);
    let vocab = vocab::Vocab::for_shape(&options.shape.config());
    let metadata = metadata::build(options.arch, &plan, &vocab);
    let specs = plan
        .tensors
        .iter()
        .map(|t| TensorSpec { name: t.name.clone(), dims: t.dims.clone(), ggml_type: t.ggml_type })
        .collect();

    let mut writer = GgufWriter::new(CountingWriter { inner: out, written: 0 }, &metadata, specs)?;
    for tensor in &plan.tensors {
        let data = weights::tensor_data(tensor, options.seed, options.scale_fit)?;
        writer.write_tensor(&tensor.name, &data)?;
    }
    let counted = writer.finish()?;

    let mut type_counts: Vec<(GgmlType, usize)> = Vec::new();
    for tensor in &plan.tensors {
        match type_counts.iter_mut().find(|(ty, _)| *ty == tensor.ggml_type) {
            Some((_, count)) => *count += 1,
            None => type_counts.push((tensor.ggml_type, 1)),
        }
    }
    Ok(SynthSummary {
        tensor_count: plan.tensors.len(),
        parameter_count: plan.parameter_count(),
        file_bytes: counted.written,
        file_type: options.weight_type.file_type(),
        type_counts,
    })
}

/// Counts the bytes passed through to `inner`.
struct CountingWriter<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
