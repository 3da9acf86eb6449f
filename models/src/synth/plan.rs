//! The tensor table of a synthetic model: names, dims, order and element types, as llama.cpp's
//! converter (and, for K-quant mixes, llama-quantize) would write them for the real checkpoint.

use canopy_kernels::quant::GgmlType;

use super::recipe::{self, WeightType};
use super::shape::{Shape, ShapeConfig};

/// What a tensor is in the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorRole {
    /// `token_embd.weight`.
    TokenEmbd,
    /// `output.weight` (the LM head; absent with tied embeddings).
    Output,
    /// `output_norm.weight`.
    OutputNorm,
    /// `blk.N.attn_norm.weight`.
    AttnNorm,
    /// `blk.N.attn_q.weight`.
    AttnQ,
    /// `blk.N.attn_k.weight`.
    AttnK,
    /// `blk.N.attn_v.weight`.
    AttnV,
    /// `blk.N.attn_output.weight`.
    AttnOutput,
    /// `blk.N.attn_q_norm.weight`.
    AttnQNorm,
    /// `blk.N.attn_k_norm.weight`.
    AttnKNorm,
    /// `blk.N.ffn_norm.weight`.
    FfnNorm,
    /// `blk.N.ffn_gate.weight`.
    FfnGate,
    /// `blk.N.ffn_up.weight`.
    FfnUp,
    /// `blk.N.ffn_down.weight`.
    FfnDown,
}

const LAYER_ROLES: [TensorRole; 11] = [
    TensorRole::AttnNorm,
    TensorRole::AttnQ,
    TensorRole::AttnK,
    TensorRole::AttnV,
    TensorRole::AttnOutput,
    TensorRole::AttnQNorm,
    TensorRole::AttnKNorm,
    TensorRole::FfnNorm,
    TensorRole::FfnGate,
    TensorRole::FfnUp,
    TensorRole::FfnDown,
];

impl TensorRole {
    /// The GGUF name without the `blk.N.` prefix.
    const fn gguf_name(self) -> &'static str {
        match self {
            Self::TokenEmbd => "token_embd.weight",
            Self::Output => "output.weight",
            Self::OutputNorm => "output_norm.weight",
            Self::AttnNorm => "attn_norm.weight",
            Self::AttnQ => "attn_q.weight",
            Self::AttnK => "attn_k.weight",
            Self::AttnV => "attn_v.weight",
            Self::AttnOutput => "attn_output.weight",
            Self::AttnQNorm => "attn_q_norm.weight",
            Self::AttnKNorm => "attn_k_norm.weight",
            Self::FfnNorm => "ffn_norm.weight",
            Self::FfnGate => "ffn_gate.weight",
            Self::FfnUp => "ffn_up.weight",
            Self::FfnDown => "ffn_down.weight",
        }
    }

    /// The Hugging Face checkpoint name without the `model.layers.N.` prefix; the converter visits
    /// tensors in the sorted order of these names.
    const fn hf_name(self) -> &'static str {
        match self {
            Self::TokenEmbd => "model.embed_tokens.weight",
            Self::Output => "lm_head.weight",
            Self::OutputNorm => "model.norm.weight",
            Self::AttnNorm => "input_layernorm.weight",
            Self::AttnQ => "self_attn.q_proj.weight",
            Self::AttnK => "self_attn.k_proj.weight",
            Self::AttnV => "self_attn.v_proj.weight",
            Self::AttnOutput => "self_attn.o_proj.weight",
            Self::AttnQNorm => "self_attn.q_norm.weight",
            Self::AttnKNorm => "self_attn.k_norm.weight",
            Self::FfnNorm => "post_attention_layernorm.weight",
            Self::FfnGate => "mlp.gate_proj.weight",
            Self::FfnUp => "mlp.up_proj.weight",
            Self::FfnDown => "mlp.down_proj.weight",
        }
    }

    /// Whether this is an RMSNorm weight vector.
    pub const fn is_norm(self) -> bool {
        matches!(self, Self::OutputNorm | Self::AttnNorm | Self::AttnQNorm | Self::AttnKNorm | Self::FfnNorm)
    }

    /// GGUF dims (`dims[0]` is the row length).
    fn dims(self, c: &ShapeConfig) -> Vec<u64> {
        let [hidden, head_dim, ffn, vocab] = [c.hidden, c.head_dim, c.ffn, c.vocab].map(u64::from);
        let q_width = u64::from(c.heads) * head_dim;
        let kv_width = u64::from(c.kv_heads) * head_dim;
        match self {
            Self::TokenEmbd | Self::Output => vec![hidden, vocab],
            Self::OutputNorm | Self::AttnNorm | Self::FfnNorm => vec![hidden],
            Self::AttnQNorm | Self::AttnKNorm => vec![head_dim],
            Self::AttnQ => vec![hidden, q_width],
            Self::AttnK | Self::AttnV => vec![hidden, kv_width],
            Self::AttnOutput => vec![q_width, hidden],
            Self::FfnGate | Self::FfnUp => vec![hidden, ffn],
            Self::FfnDown => vec![ffn, hidden],
        }
    }
}

/// One tensor of the file.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedTensor {
    /// GGUF tensor name.
    pub name: String,
    /// GGUF dims, `dims[0]` = row length.
    pub dims: Vec<u64>,
    /// Element type in the file.
    pub ggml_type: GgmlType,
    /// What the tensor is.
    pub role: TensorRole,
    /// Block index for per-layer tensors.
    pub layer: Option<u32>,
    hf_name: String,
}

impl PlannedTensor {
    fn new(config: &ShapeConfig, role: TensorRole, layer: Option<u32>) -> Self {
        let (name, hf_name) = match layer {
            Some(i) => {
                (format!("blk.{i}.{}", role.gguf_name()), format!("model.layers.{i}.{}", role.hf_name()))
            }
            None => (role.gguf_name().to_owned(), role.hf_name().to_owned()),
        };
        // The type is decided by the recipe once the whole table is known.
        Self { name, dims: role.dims(config), ggml_type: GgmlType::F32, role, layer, hf_name }
    }

    /// Number of elements.
    pub fn element_count(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Row length (elements of `dims[0]`).
    pub fn row_len(&self) -> u64 {
        self.dims[0]
    }

    /// Number of rows.
    pub fn row_count(&self) -> u64 {
        self.dims[1..].iter().product()
    }

    /// Bytes of the tensor data, or `None` when rows are not whole blocks of the type.
    pub fn byte_size(&self) -> Option<u64> {
        let row_bytes = self.ggml_type.bytes_for(self.row_len())?;
        row_bytes.checked_mul(self.row_count())
    }
}

/// The full tensor table of a synthetic model, in file order.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelPlan {
    /// The model shape.
    pub shape: Shape,
    /// The weight type mix.
    pub weight_type: WeightType,
    /// Tensors in the order they appear in the file.
    pub tensors: Vec<PlannedTensor>,
}

impl ModelPlan {
    /// The tensor table for `shape` stored as `weight_type`.
    pub fn new(shape: Shape, weight_type: WeightType) -> Self {
        let config = shape.config();
        let mut tensors = Vec::new();
        if !config.tied_embeddings {
            tensors.push(PlannedTensor::new(&config, TensorRole::Output, None));
        }
        tensors.push(PlannedTensor::new(&config, TensorRole::TokenEmbd, None));
        tensors.push(PlannedTensor::new(&config, TensorRole::OutputNorm, None));
        for layer in 0..config.layers {
            tensors.extend(LAYER_ROLES.iter().map(|&role| PlannedTensor::new(&config, role, Some(layer))));
        }
        if weight_type.is_requantized() {
            // llama-quantize walks (and writes) tensors ordered by block index, then by name, with
            // the non-block tensors first.
            tensors.sort_by(|a, b| (a.layer, &a.name).cmp(&(b.layer, &b.name)));
        } else {
            // convert_hf_to_gguf writes tensors in the order of the checkpoint's (sorted) names.
            tensors.sort_by(|a, b| a.hf_name.cmp(&b.hf_name));
        }
        recipe::assign_types(weight_type, &config, &mut tensors);
        Self { shape, weight_type, tensors }
    }

    /// Total number of weights (what the converter counts for `general.size_label`).
    pub fn parameter_count(&self) -> u64 {
        self.tensors.iter().map(PlannedTensor::element_count).sum()
    }

    /// Total bytes of tensor data, without alignment padding.
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().filter_map(PlannedTensor::byte_size).sum()
    }

    /// Number of tensors stored as `ggml_type`.
    pub fn count_of_type(&self, ggml_type: GgmlType) -> usize {
        self.tensors.iter().filter(|t| t.ggml_type == ggml_type).count()
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&PlannedTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(plan: &ModelPlan) -> Vec<&str> {
        plan.tensors.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn converter_order_sorts_by_checkpoint_name() {
        let plan = ModelPlan::new(Shape::Qwen3_8B, WeightType::Bf16);
        let names = names(&plan);
        assert_eq!(names.len(), 2 + 1 + 36 * 11);
        assert_eq!(
            &names[..4],
            ["output.weight", "token_embd.weight", "blk.0.attn_norm.weight", "blk.0.ffn_down.weight"]
        );
        // "model.layers.1." < "model.layers.10." < "model.layers.2." as strings.
        let block_order: Vec<&str> =
            names.iter().filter(|n| n.ends_with(".attn_q.weight")).copied().collect();
        assert_eq!(
            &block_order[..4],
            ["blk.0.attn_q.weight", "blk.1.attn_q.weight", "blk.10.attn_q.weight", "blk.11.attn_q.weight"]
        );
        assert_eq!(names.last(), Some(&"output_norm.weight"));
    }

    #[test]
    fn quantizer_order_sorts_by_block_then_name() {
        let plan = ModelPlan::new(Shape::Qwen3_8B, WeightType::Q4KM);
        let names = names(&plan);
        assert_eq!(
            &names[..4],
            ["output.weight", "output_norm.weight", "token_embd.weight", "blk.0.attn_k.weight"]
        );
        assert_eq!(names[14], "blk.1.attn_k.weight");
        assert_eq!(names.last(), Some(&"blk.35.ffn_up.weight"));
    }

    #[test]
    fn tied_shapes_have_no_lm_head() {
        let plan = ModelPlan::new(Shape::Qwen3_0_6B, WeightType::Bf16);
        assert!(plan.tensor("output.weight").is_none());
        assert_eq!(plan.tensors.len(), 2 + 28 * 11);
        assert_eq!(plan.tensor("blk.3.attn_q.weight").unwrap().dims, [1024, 2048]);
        assert_eq!(plan.tensor("blk.3.attn_output.weight").unwrap().dims, [2048, 1024]);
        assert_eq!(plan.tensor("blk.3.attn_k.weight").unwrap().dims, [1024, 1024]);
        assert_eq!(plan.tensor("blk.3.attn_k_norm.weight").unwrap().dims, [128]);
    }

    #[test]
    fn parameter_counts_match_the_published_sizes() {
        // Model cards: Qwen3-8B 8.2B parameters, 6.95B without embeddings; Qwen3-0.6B 0.6B, 0.44B.
        let non_embedding = |plan: &ModelPlan| {
            let embeddings =
                plan.tensors.iter().filter(|t| matches!(t.role, TensorRole::TokenEmbd | TensorRole::Output));
            plan.parameter_count() - embeddings.map(PlannedTensor::element_count).sum::<u64>()
        };
        let big = ModelPlan::new(Shape::Qwen3_8B, WeightType::F32);
        assert!((8_150_000_000..8_250_000_000).contains(&big.parameter_count()));
        assert!((6_945_000_000..6_955_000_000).contains(&non_embedding(&big)));
        let small = ModelPlan::new(Shape::Qwen3_0_6B, WeightType::F32);
        assert!((550_000_000..650_000_000).contains(&small.parameter_count()));
        assert!((435_000_000..445_000_000).contains(&non_embedding(&small)));
    }
}
