//! Finding a model's template: the GGUF key, an override file, or a clear error.

use super::*;
use crate::gguf::GgufFile;
use crate::synth::{self, Arch, ScaleFit, Shape, SynthOptions, WeightType};
use crate::tokenizer::Tokenizer;

fn testdata(path: &str) -> String {
    format!("{}/testdata/{path}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_gguf_template_renders_with_the_tokenizer_special_tokens() {
    let options = SynthOptions {
        arch: Arch::Qwen3,
        shape: Shape::Tiny,
        weight_type: WeightType::F32,
        seed: 1,
        scale_fit: ScaleFit::Search,
    };
    let mut bytes = Vec::new();
    synth::write_model(&options, &mut bytes).unwrap();
    let file = GgufFile::from_bytes(bytes).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let template = ChatTemplate::for_model(&file, &tokenizer, None).unwrap();
    let prompt = render(&template, &system_and_user(), None, true, json!({})).unwrap();
    assert_eq!(
        prompt,
        format!(
            "<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"
        )
    );
}

#[test]
fn an_override_file_wins_and_sees_bos_token() {
    let file = GgufFile::open(testdata("vocab/ggml-vocab-llama-bpe.gguf")).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let path = testdata("templates/meta-llama-Llama-3.1-8B-Instruct.jinja");
    let template = ChatTemplate::for_model(&file, &tokenizer, Some(std::path::Path::new(&path))).unwrap();
    let prompt = render(&template, &system_and_user(), None, true, json!({})).unwrap();
    assert!(prompt.starts_with("<|begin_of_text|><|start_header_id|>system<|end_header_id|>"), "{prompt}");
}

#[test]
fn missing_template_or_file_is_a_clear_error() {
    let file = GgufFile::open(testdata("models/qwen3-tiny-f32.gguf")).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let error = ChatTemplate::for_model(&file, &tokenizer, None).unwrap_err();
    assert!(matches!(error, ChatTemplateError::Missing), "{error}");
    let missing = std::path::Path::new("/nonexistent/template.jinja");
    let error = ChatTemplate::for_model(&file, &tokenizer, Some(missing)).unwrap_err();
    assert!(matches!(error, ChatTemplateError::Read { .. }), "{error}");
}
