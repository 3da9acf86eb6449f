//! GGUF metadata of a synthetic model, with the keys, types and order of llama.cpp's converter.

use indexmap::IndexMap;

use super::plan::ModelPlan;
use super::shape::Arch;
use super::vocab::Vocab;
use crate::gguf::{Array, Value};

/// Qwen3's chat template, as published with Qwen/Qwen3-0.6B (and the other dense Qwen3 models);
/// see NOTICE.md beside this file.
const QWEN3_CHAT_TEMPLATE: &str = include_str!("qwen3-chat-template.jinja");

/// ggml's `GGML_QNT_VERSION`, which the converter and llama-quantize write.
const QUANTIZATION_VERSION: u32 = 2;

/// The metadata of `plan` with `vocab`. For files that llama-quantize makes, the two keys it sets
/// (`general.quantization_version`, `general.file_type`) move to the end, as its GGUF library
/// re-appends a key it sets.
pub(crate) fn build(arch: Arch, plan: &ModelPlan, vocab: &Vocab) -> IndexMap<String, Value> {
    let config = plan.shape.config();
    let prefix = arch.name();
    let mut kv: IndexMap<String, Value> = IndexMap::new();
    let mut put = |key: String, value: Value| {
        kv.insert(key, value);
    };
    put("general.architecture".into(), arch.name().into());
    put("general.type".into(), "model".into());
    put("general.name".into(), config.display_name.into());
    put("general.size_label".into(), size_label(plan.parameter_count()).into());
    put(format!("{prefix}.block_count"), config.layers.into());
    put(format!("{prefix}.context_length"), config.context.into());
    put(format!("{prefix}.embedding_length"), config.hidden.into());
    put(format!("{prefix}.feed_forward_length"), config.ffn.into());
    put(format!("{prefix}.attention.head_count"), config.heads.into());
    put(format!("{prefix}.attention.head_count_kv"), config.kv_heads.into());
    put(format!("{prefix}.rope.freq_base"), config.rope_theta.into());
    put(format!("{prefix}.attention.layer_norm_rms_epsilon"), config.rms_eps.into());
    put(format!("{prefix}.attention.key_length"), config.head_dim.into());
    put(format!("{prefix}.attention.value_length"), config.head_dim.into());
    put("general.file_type".into(), plan.weight_type.file_type().into());
    put("general.quantization_version".into(), QUANTIZATION_VERSION.into());
    put("tokenizer.ggml.model".into(), "gpt2".into());
    put("tokenizer.ggml.pre".into(), "qwen2".into());
    put("tokenizer.ggml.tokens".into(), Value::Array(Array::from_strings(vocab.tokens.iter().cloned())));
    put(
        "tokenizer.ggml.token_type".into(),
        Value::Array(Array::from_i32s(vocab.token_types.iter().copied())),
    );
    put("tokenizer.ggml.merges".into(), Value::Array(Array::from_strings(vocab.merges.iter().cloned())));
    // Qwen3's tokenizer config names eos and pad; the model config adds bos.
    put("tokenizer.ggml.eos_token_id".into(), vocab.eos_token_id.into());
    put("tokenizer.ggml.padding_token_id".into(), vocab.padding_token_id.into());
    put("tokenizer.ggml.bos_token_id".into(), vocab.bos_token_id.into());
    put("tokenizer.ggml.add_bos_token".into(), false.into());
    put("tokenizer.chat_template".into(), QWEN3_CHAT_TEMPLATE.into());

    if plan.weight_type.is_requantized() {
        for key in ["general.quantization_version", "general.file_type"] {
            if let Some(value) = kv.shift_remove(key) {
                kv.insert(key.to_owned(), value);
            }
        }
    }
    kv
}

/// gguf-py's `size_label` for a dense model: the parameter count in K/M/B/T with at least two
/// significant digits ("230K", "596M", "8.2B").
fn size_label(parameters: u64) -> String {
    let count = parameters as f64;
    let (scaled, suffix) = if count > 1e12 {
        (count * 1e-12, "T")
    } else if count > 1e9 {
        (count * 1e-9, "B")
    } else if count > 1e6 {
        (count * 1e-6, "M")
    } else {
        (count * 1e-3, "K")
    };
    // Python: max(2 - len(str(round(scaled)).lstrip('0')), 0) decimals; round() ties to even.
    let rounded = scaled.round_ties_even() as u64;
    let integer_digits = if rounded == 0 { 0 } else { rounded.to_string().len() };
    let decimals = 2usize.saturating_sub(integer_digits);
    format!("{scaled:.decimals$}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::recipe::WeightType;
    use crate::synth::shape::Shape;

    #[test]
    fn size_labels_follow_gguf_py() {
        // Expected strings computed with gguf-py 0.19's size_label(n, n, 0, 0).
        assert_eq!(size_label(229_760), "230K");
        assert_eq!(size_label(596_049_920), "596M");
        assert_eq!(size_label(8_190_735_360), "8.2B");
        assert_eq!(size_label(1_500_000), "1.5M");
        assert_eq!(size_label(400), "0.40K");
    }

    #[test]
    fn requantized_files_end_with_the_quantizer_keys() {
        let keys = |weight_type| {
            let plan = ModelPlan::new(Shape::Tiny, weight_type);
            let vocab = Vocab::for_shape(&plan.shape.config());
            build(Arch::Qwen3, &plan, &vocab).keys().cloned().collect::<Vec<_>>()
        };
        let converted = keys(WeightType::Bf16);
        assert_eq!(converted[14], "general.file_type");
        assert_eq!(converted.last().unwrap(), "tokenizer.chat_template");
        let quantized = keys(WeightType::Q4KM);
        assert_eq!(&quantized[quantized.len() - 2..], ["general.quantization_version", "general.file_type"]);
        assert_eq!(quantized.len(), converted.len());
    }
}
