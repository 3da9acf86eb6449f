//! Which element type each tensor gets, per weight type.
//!
//! `f32`, `bf16` and `q8_0` files are what `convert_hf_to_gguf.py --outtype X` writes: 1-D tensors
//! (the norm weights) stay F32, every matrix takes the chosen type. `q4_k_m` is what `llama-quantize
//! X Q4_K_M` makes of such a file, following llama.cpp's `llama_tensor_get_type` (src/llama-quant.cpp)
//! for a dense model without experts:
//! - `output.weight`, and `token_embd.weight` when there is no `output.weight` (tied embeddings):
//!   Q6_K, or Q8_0 when the row length is not a multiple of Q4_K's 256-element block;
//! - `attn_v.weight` and `ffn_down.weight`: Q6_K on the layers where `use_more_bits` holds, else Q4_K;
//! - every other matrix: Q4_K;
//! - then any type whose block does not divide the row length falls back (Q4_K -> Q5_0,
//!   Q5_K -> Q5_1, Q6_K -> Q8_0, and F16 if even that block does not fit).

use std::fmt;
use std::str::FromStr;

use canopy_kernels::quant::GgmlType;

use super::SynthError;
use super::plan::{PlannedTensor, TensorRole};
use super::shape::ShapeConfig;

/// The weight format of a synthetic file (the `--type` of `canopy synth`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightType {
    /// llama.cpp's Q4_K_M mix.
    Q4KM,
    /// Q8_0 matrices.
    Q8_0,
    /// BF16 matrices.
    Bf16,
    /// Everything F32.
    F32,
}

impl WeightType {
    /// Every weight type.
    pub const ALL: [WeightType; 4] = [Self::Q4KM, Self::Q8_0, Self::Bf16, Self::F32];

    /// The name used on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Q4KM => "q4_k_m",
            Self::Q8_0 => "q8_0",
            Self::Bf16 => "bf16",
            Self::F32 => "f32",
        }
    }

    /// The `general.file_type` value (llama.cpp's `llama_ftype`).
    pub const fn file_type(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::Q8_0 => 7,
            Self::Q4KM => 15,
            Self::Bf16 => 32,
        }
    }

    /// Whether real files of this type come out of llama-quantize rather than straight from the
    /// converter (which changes the tensor order and where `general.file_type` sits).
    pub const fn is_requantized(self) -> bool {
        matches!(self, Self::Q4KM)
    }
}

impl FromStr for WeightType {
    type Err = SynthError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wanted = text.to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|t| t.name() == wanted)
            .ok_or_else(|| SynthError::UnknownWeightType(text.to_owned()))
    }
}

impl fmt::Display for WeightType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Sets `ggml_type` of every tensor; `tensors` must be in file order (llama-quantize counts
/// `attn_v` and `ffn_down` tensors in the order it visits them).
pub(crate) fn assign_types(weight_type: WeightType, config: &ShapeConfig, tensors: &mut [PlannedTensor]) {
    let matrix_type = match weight_type {
        WeightType::F32 => GgmlType::F32,
        WeightType::Bf16 => GgmlType::Bf16,
        WeightType::Q8_0 => GgmlType::Q8_0,
        WeightType::Q4KM => return assign_q4_k_m(config, tensors),
    };
    for tensor in tensors {
        tensor.ggml_type = if tensor.dims.len() < 2 { GgmlType::F32 } else { matrix_type };
    }
}

/// llama.cpp's choice of layers that get more bits in the `_M` mixes.
fn use_more_bits(i_layer: i64, n_layers: i64) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

fn assign_q4_k_m(config: &ShapeConfig, tensors: &mut [PlannedTensor]) {
    const DEFAULT: GgmlType = GgmlType::Q4K;
    let has_output = tensors.iter().any(|t| t.role == TensorRole::Output);
    let n_attention_wv = tensors.iter().filter(|t| t.role == TensorRole::AttnV).count() as i64;
    let n_layers = i64::from(config.layers);
    let (mut i_attention_wv, mut i_ffn_down) = (0i64, 0i64);

    for tensor in tensors {
        // Norm weights are 1-D and F32 in the source file; llama-quantize copies them.
        if tensor.dims.len() < 2 || tensor.role.is_norm() {
            tensor.ggml_type = GgmlType::F32;
            continue;
        }
        let chosen = match tensor.role {
            TensorRole::Output => lm_head_type(tensor, DEFAULT),
            TensorRole::TokenEmbd if !has_output => lm_head_type(tensor, DEFAULT),
            TensorRole::AttnV => {
                let more = use_more_bits(i_attention_wv, n_attention_wv);
                i_attention_wv += 1;
                if more { GgmlType::Q6K } else { DEFAULT }
            }
            TensorRole::FfnDown => {
                let more = use_more_bits(i_ffn_down, n_layers);
                i_ffn_down += 1;
                if more { GgmlType::Q6K } else { DEFAULT }
            }
            _ => DEFAULT,
        };
        tensor.ggml_type = fallback(chosen, tensor.row_len());
    }
}

fn lm_head_type(tensor: &PlannedTensor, default: GgmlType) -> GgmlType {
    if !tensor.row_len().is_multiple_of(default.block_size() as u64) { GgmlType::Q8_0 } else { GgmlType::Q6K }
}

/// llama-quantize's replacement for a type whose block does not divide the row length.
fn fallback(wanted: GgmlType, row_len: u64) -> GgmlType {
    let fits = |t: GgmlType| row_len.is_multiple_of(t.block_size() as u64);
    if fits(wanted) {
        return wanted;
    }
    let replacement = match wanted {
        GgmlType::Q4K => GgmlType::Q5_0,
        GgmlType::Q5K => GgmlType::Q5_1,
        GgmlType::Q6K => GgmlType::Q8_0,
        other => other,
    };
    if fits(replacement) { replacement } else { GgmlType::F16 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::plan::ModelPlan;
    use crate::synth::shape::Shape;

    fn type_of(plan: &ModelPlan, name: &str) -> GgmlType {
        plan.tensor(name).unwrap_or_else(|| panic!("no tensor {name}")).ggml_type
    }

    #[test]
    fn weight_types_parse_and_map_to_llama_ftype() {
        assert_eq!("Q4_K_M".parse::<WeightType>().unwrap(), WeightType::Q4KM);
        assert_eq!("bf16".parse::<WeightType>().unwrap().file_type(), 32);
        assert_eq!("q8_0".parse::<WeightType>().unwrap().file_type(), 7);
        assert_eq!("f32".parse::<WeightType>().unwrap().file_type(), 0);
        assert_eq!(WeightType::Q4KM.file_type(), 15);
        assert!(matches!("q4_k_s".parse::<WeightType>(), Err(SynthError::UnknownWeightType(_))));
    }

    #[test]
    fn use_more_bits_for_36_layers() {
        // n/8 = 4, 7n/8 = 31: layers 0-3, 31-35 and every third layer from 6.
        let chosen: Vec<i64> = (0..36).filter(|&i| use_more_bits(i, 36)).collect();
        assert_eq!(chosen, [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34, 35]);
    }

    #[test]
    fn qwen3_8b_q4_k_m_types() {
        let plan = ModelPlan::new(Shape::Qwen3_8B, WeightType::Q4KM);
        let expected = [
            ("output.weight", GgmlType::Q6K),
            ("token_embd.weight", GgmlType::Q4K),
            ("output_norm.weight", GgmlType::F32),
            ("blk.0.attn_v.weight", GgmlType::Q6K),
            ("blk.3.attn_v.weight", GgmlType::Q6K),
            ("blk.4.attn_v.weight", GgmlType::Q4K),
            ("blk.5.attn_v.weight", GgmlType::Q4K),
            ("blk.6.attn_v.weight", GgmlType::Q6K),
            ("blk.6.ffn_down.weight", GgmlType::Q6K),
            ("blk.7.ffn_down.weight", GgmlType::Q4K),
            ("blk.28.ffn_down.weight", GgmlType::Q4K),
            ("blk.30.ffn_down.weight", GgmlType::Q6K),
            ("blk.31.attn_v.weight", GgmlType::Q6K),
            ("blk.35.ffn_down.weight", GgmlType::Q6K),
            ("blk.0.attn_q.weight", GgmlType::Q4K),
            ("blk.0.attn_k.weight", GgmlType::Q4K),
            ("blk.0.attn_output.weight", GgmlType::Q4K),
            ("blk.0.ffn_gate.weight", GgmlType::Q4K),
            ("blk.0.ffn_up.weight", GgmlType::Q4K),
            ("blk.0.attn_q_norm.weight", GgmlType::F32),
            ("blk.0.ffn_norm.weight", GgmlType::F32),
        ];
        for (name, want) in expected {
            assert_eq!(type_of(&plan, name), want, "{name}");
        }
        // output + 18 attn_v + 18 ffn_down; 36 x 7 + 2 matrices in all; 36 x 4 + 1 norms.
        assert_eq!(plan.count_of_type(GgmlType::Q6K), 37);
        assert_eq!(plan.count_of_type(GgmlType::Q4K), 36 * 7 + 2 - 37);
        assert_eq!(plan.count_of_type(GgmlType::F32), 36 * 4 + 1);
    }

    #[test]
    fn qwen3_8b_q4_k_m_size_matches_the_llama_cpp_file() {
        let plan = ModelPlan::new(Shape::Qwen3_8B, WeightType::Q4KM);
        // Bytes per row: Q4_K 144 and Q6_K 210 per 256 elements.
        let q4k = |rows: u64, cols: u64| rows * cols / 256 * 144;
        let q6k = |rows: u64, cols: u64| rows * cols / 256 * 210;
        // Per layer: q, o, k, gate and up in Q4_K, four F32 norms; v and down depend on the layer.
        let layer_base =
            2 * q4k(4096, 4096) + q4k(1024, 4096) + 2 * q4k(12288, 4096) + 4 * (2 * 4096 + 2 * 128);
        let expected = q4k(151_936, 4096)
            + q6k(151_936, 4096)
            + 4 * 4096
            + 18 * (layer_base + q6k(1024, 4096) + q6k(4096, 12288))
            + 18 * (layer_base + q4k(1024, 4096) + q4k(4096, 12288));
        assert_eq!(plan.tensor_bytes(), expected);
        // The llama.cpp baseline file of this shape is 5.03 GB including a real vocabulary (~4 MB).
        assert!((5.015e9..5.03e9).contains(&(expected as f64)), "{expected}");
    }

    #[test]
    fn tied_embeddings_take_the_lm_head_type() {
        let plan = ModelPlan::new(Shape::Qwen3_0_6B, WeightType::Q4KM);
        assert_eq!(type_of(&plan, "token_embd.weight"), GgmlType::Q6K);
        // 28 layers: n/8 = 3, 7n/8 = 24 -> 0, 1, 2, 5, 8, ..., 23, 24-27: 14 layers, twice, + embedding.
        assert_eq!(plan.count_of_type(GgmlType::Q6K), 29);
        assert_eq!(type_of(&plan, "blk.5.attn_v.weight"), GgmlType::Q6K);
        assert_eq!(type_of(&plan, "blk.6.attn_v.weight"), GgmlType::Q4K);
    }

    #[test]
    fn tiny_q4_k_m_falls_back_for_short_rows() {
        // Rows of 64 (and 192 for ffn_down) are not whole Q4_K blocks of 256.
        let plan = ModelPlan::new(Shape::Tiny, WeightType::Q4KM);
        let expected = [
            ("output.weight", GgmlType::Q8_0),
            ("token_embd.weight", GgmlType::Q5_0),
            ("blk.0.attn_v.weight", GgmlType::Q5_0),
            ("blk.1.attn_v.weight", GgmlType::Q8_0),
            ("blk.0.ffn_down.weight", GgmlType::Q5_0),
            ("blk.1.ffn_down.weight", GgmlType::Q8_0),
            ("blk.1.attn_q.weight", GgmlType::Q5_0),
            ("blk.1.attn_norm.weight", GgmlType::F32),
        ];
        for (name, want) in expected {
            assert_eq!(type_of(&plan, name), want, "{name}");
        }
    }

    #[test]
    fn fallback_table() {
        assert_eq!(fallback(GgmlType::Q4K, 64), GgmlType::Q5_0);
        assert_eq!(fallback(GgmlType::Q5K, 64), GgmlType::Q5_1);
        assert_eq!(fallback(GgmlType::Q6K, 192), GgmlType::Q8_0);
        assert_eq!(fallback(GgmlType::Q6K, 512), GgmlType::Q6K);
        assert_eq!(fallback(GgmlType::Q4K, 48), GgmlType::F16);
    }

    #[test]
    fn converter_types_keep_norms_f32() {
        for (weight_type, matrix) in [
            (WeightType::F32, GgmlType::F32),
            (WeightType::Bf16, GgmlType::Bf16),
            (WeightType::Q8_0, GgmlType::Q8_0),
        ] {
            let plan = ModelPlan::new(Shape::Qwen3_8B, weight_type);
            for t in &plan.tensors {
                let want = if t.role.is_norm() { GgmlType::F32 } else { matrix };
                assert_eq!(t.ggml_type, want, "{} {weight_type}", t.name);
            }
        }
    }

    #[test]
    fn every_planned_row_is_whole_blocks() {
        for shape in Shape::ALL {
            for weight_type in WeightType::ALL {
                let plan = ModelPlan::new(shape, weight_type);
                for t in &plan.tensors {
                    assert!(t.byte_size().is_some(), "{shape} {weight_type} {}", t.name);
                }
            }
        }
    }
}
