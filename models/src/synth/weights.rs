//! Random tensor data, generated and encoded in parallel chunks of rows.

use canopy_kernels::quant::{ScaleFit, quantize_row_with};
use rayon::prelude::*;

use super::SynthError;
use super::plan::PlannedTensor;
use super::rng::Rng;

/// Standard deviation of every matrix: Qwen3's `initializer_range`, the N(0, 0.02) that Hugging
/// Face's random initialisation draws (and that the llama.cpp baseline files were made with).
pub const WEIGHT_SIGMA: f32 = 0.02;

/// Range of the RMSNorm weights: around 1 like trained norms, but not exactly 1, so that a norm
/// weight that is skipped or applied to the wrong tensor changes the output.
pub const NORM_RANGE: (f32, f32) = (0.5, 1.5);

/// Elements drawn from one PRNG stream, rounded down to whole rows (at least one row). Fixed, so
/// the data does not depend on the number of threads.
const CHUNK_ELEMENTS: u64 = 1 << 16;

/// A stable per-tensor stream id: FNV-1a of the tensor name, so that a tensor gets the same values
/// whatever the file order or weight type.
fn tensor_key(name: &str) -> u64 {
    name.bytes()
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

/// The encoded data of `tensor` for `seed`: norm weights uniform in [`NORM_RANGE`], everything
/// else N(0, [`WEIGHT_SIGMA`]), each row encoded as the tensor's type with K-format scales fitted
/// by `fit`.
pub(crate) fn tensor_data(tensor: &PlannedTensor, seed: u64, fit: ScaleFit) -> Result<Vec<u8>, SynthError> {
    let row_len = tensor.row_len();
    let ty = tensor.ggml_type;
    let (Some(row_bytes), Some(total_bytes)) = (ty.bytes_for(row_len), tensor.byte_size()) else {
        return Err(SynthError::PartialBlocks { tensor: tensor.name.clone(), ggml_type: ty });
    };
    let rows_per_chunk = (CHUNK_ELEMENTS / row_len).max(1);
    let key = tensor_key(&tensor.name);
    let is_norm = tensor.role.is_norm();

    let mut data = vec![0u8; total_bytes as usize];
    data.par_chunks_mut((rows_per_chunk * row_bytes) as usize).enumerate().try_for_each(
        |(chunk_index, out)| {
            let mut values = vec![0.0f32; out.len() / row_bytes as usize * row_len as usize];
            let mut rng = Rng::for_chunk(seed, key, chunk_index as u64);
            if is_norm {
                rng.fill_uniform(&mut values, NORM_RANGE.0, NORM_RANGE.1);
            } else {
                rng.fill_normal(&mut values, WEIGHT_SIGMA);
            }
            for (row, encoded) in
                values.chunks_exact(row_len as usize).zip(out.chunks_exact_mut(row_bytes as usize))
            {
                quantize_row_with(ty, row, encoded, fit)
                    .map_err(|source| SynthError::Quantize { tensor: tensor.name.clone(), source })?;
            }
            Ok::<(), SynthError>(())
        },
    )?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use canopy_kernels::quant::{GgmlType, dequantize_row};

    use super::*;
    use crate::synth::plan::ModelPlan;
    use crate::synth::recipe::WeightType;
    use crate::synth::shape::Shape;

    fn decoded(tensor: &PlannedTensor, data: &[u8]) -> Vec<f32> {
        let mut values = vec![0.0; tensor.element_count() as usize];
        dequantize_row(tensor.ggml_type, data, &mut values).unwrap();
        values
    }

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(tensor_key(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(tensor_key("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(tensor_key("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn matrices_are_normal_and_norms_near_one() {
        let plan = ModelPlan::new(Shape::Tiny, WeightType::F32);
        let embd = plan.tensor("token_embd.weight").unwrap();
        let values = decoded(embd, &tensor_data(embd, 5, ScaleFit::Search).unwrap());
        let n = values.len() as f64;
        let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let std = (values.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n).sqrt();
        assert!(mean.abs() < 5e-4, "mean {mean}");
        assert!((std / f64::from(WEIGHT_SIGMA) - 1.0).abs() < 0.01, "std {std}");

        let norm = plan.tensor("blk.1.ffn_norm.weight").unwrap();
        let values = decoded(norm, &tensor_data(norm, 5, ScaleFit::Search).unwrap());
        assert!(values.iter().all(|v| (0.5..1.5).contains(v)));
    }

    #[test]
    fn values_do_not_depend_on_the_weight_type() {
        let name = "blk.0.ffn_up.weight";
        let f32_plan = ModelPlan::new(Shape::Tiny, WeightType::F32);
        let bf16_plan = ModelPlan::new(Shape::Tiny, WeightType::Bf16);
        let (exact, rounded) = (f32_plan.tensor(name).unwrap(), bf16_plan.tensor(name).unwrap());
        assert_eq!(rounded.ggml_type, GgmlType::Bf16);
        let exact = decoded(exact, &tensor_data(exact, 11, ScaleFit::Search).unwrap());
        let rounded = decoded(rounded, &tensor_data(rounded, 11, ScaleFit::Search).unwrap());
        for (a, b) in exact.iter().zip(&rounded) {
            // bf16 keeps 8 significant bits.
            assert!((a - b).abs() <= a.abs() / 128.0, "{a} vs {b}");
        }
    }

    #[test]
    fn k_quant_tensors_decode_to_the_drawn_distribution() {
        let plan = ModelPlan::new(Shape::Qwen3_0_6B, WeightType::Q4KM);
        for (name, ty) in [("blk.3.attn_k.weight", GgmlType::Q4K), ("blk.0.attn_v.weight", GgmlType::Q6K)] {
            let tensor = plan.tensor(name).unwrap();
            assert_eq!(tensor.ggml_type, ty);
            // Either fit: 1M samples, and Q4_K's rounding error adds about 1 % of sigma in
            // quadrature.
            for fit in [ScaleFit::Search, ScaleFit::Nominal] {
                let values = decoded(tensor, &tensor_data(tensor, 2, fit).unwrap());
                let n = values.len() as f64;
                let std = (values.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / n).sqrt();
                assert!((std / f64::from(WEIGHT_SIGMA) - 1.0).abs() < 0.01, "{name}, {fit:?}: rms {std}");
            }
        }
    }

    #[test]
    fn chunks_of_large_tensors_differ() {
        // A chunk is 64 rows of 1024 here, so the 1024 rows of this K projection make 16 chunks.
        let plan = ModelPlan::new(Shape::Qwen3_0_6B, WeightType::F32);
        let k = plan.tensor("blk.0.attn_k.weight").unwrap();
        let data = tensor_data(k, 1, ScaleFit::Search).unwrap();
        let chunk_bytes = 64 * 1024 * 4;
        assert_ne!(data[..64], data[chunk_bytes..chunk_bytes + 64]);
    }
}
