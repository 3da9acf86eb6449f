//! The tiny Qwen3 model's vocabulary, as GGUF metadata and as `tokenizer.json`, against the
//! Hugging Face tokenizations recorded in `qwen3-tiny.json`; and hostile variations of its
//! metadata.

use std::path::PathBuf;

use canopy_models::gguf::{Array, GgufFile, GgufWriter, Value};
use canopy_models::tokenizer::{Tokenizer, TokenizerError};
use indexmap::IndexMap;

fn testdata(relative: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/models")).join(relative)
}

fn tiny_gguf() -> GgufFile {
    GgufFile::open(testdata("qwen3-tiny-f32.gguf")).expect("test data")
}

/// (text, ids) pairs: the tokenizer cases and the model prompt.
fn reference_cases() -> Vec<(String, Vec<u32>)> {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(testdata("qwen3-tiny.json")).expect("test data"))
            .expect("test data");
    let ids = |value: &serde_json::Value| -> Vec<u32> {
        value.as_array().expect("test data").iter().map(|id| id.as_u64().expect("test data") as u32).collect()
    };
    let mut cases: Vec<_> = json["tokenizer_cases"]
        .as_array()
        .expect("test data")
        .iter()
        .map(|case| (case["text"].as_str().expect("test data").to_owned(), ids(&case["ids"])))
        .collect();
    cases.push((json["prompt"].as_str().expect("test data").to_owned(), ids(&json["prompt_ids"])));
    assert!(cases.len() >= 7);
    cases
}

fn check_cases(what: &str, tokenizer: &Tokenizer) {
    for (text, expected) in reference_cases() {
        assert_eq!(tokenizer.encode(&text, false).expect("encode"), expected, "{what}: {text:?}");
        assert_eq!(tokenizer.decode(&expected, false).expect("decode"), text, "{what}: decode {text:?}");
    }
}

#[test]
fn tokenizer_json_matches_hugging_face() {
    let tokenizer = Tokenizer::from_tokenizer_json(&testdata("qwen3-tiny.tokenizer.json"), None).unwrap();
    check_cases("tokenizer.json", &tokenizer);
    assert_eq!(tokenizer.special().eos, None);
    assert_eq!(tokenizer.special().eot.as_ref().map(|t| t.id), Some(1016));
}

#[test]
fn gguf_vocabulary_matches_hugging_face() {
    for file in
        ["qwen3-tiny-f32.gguf", "qwen3-tiny-bf16.gguf", "qwen3-tiny-q8_0.gguf", "qwen35-tiny-f32.gguf"]
    {
        let tokenizer = Tokenizer::from_gguf(&GgufFile::open(testdata(file)).unwrap()).unwrap();
        check_cases(file, &tokenizer);
        assert_eq!(tokenizer.vocab_size(), 1024, "{file}");
    }
}

#[test]
fn tokenizer_json_takes_special_tokens_from_gguf() {
    let gguf = tiny_gguf();
    let tokenizer =
        Tokenizer::from_tokenizer_json(&testdata("qwen3-tiny.tokenizer.json"), Some(&gguf)).unwrap();
    let from_gguf = Tokenizer::from_gguf(&gguf).unwrap();
    assert_eq!(tokenizer.special(), from_gguf.special());
    let special = tokenizer.special();
    assert_eq!(special.eos.as_ref().map(|t| (t.id, t.text.as_str())), Some((1016, "<|im_end|>")));
    assert_eq!(special.pad.as_ref().map(|t| t.id), Some(1017));
    assert!(special.is_end_of_generation(1016));
    check_cases("tokenizer.json + GGUF", &tokenizer);
}

#[test]
fn missing_tokenizer_json_is_an_error_naming_the_path() {
    let err = Tokenizer::from_tokenizer_json(&testdata("no-such-tokenizer.json"), None).err().unwrap();
    assert!(err.to_string().contains("no-such-tokenizer.json"), "{err}");
}

/// The tiny model's metadata (no tensors) after `edit`, as a GGUF file in memory.
fn edited(edit: impl FnOnce(&mut IndexMap<String, Value>)) -> GgufFile {
    let mut metadata = tiny_gguf().metadata().clone();
    edit(&mut metadata);
    let writer = GgufWriter::new(Vec::new(), &metadata, Vec::new()).expect("write metadata");
    GgufFile::from_bytes(writer.finish().expect("finish")).expect("read back")
}

fn build_error(edit: impl FnOnce(&mut IndexMap<String, Value>)) -> TokenizerError {
    match Tokenizer::from_gguf(&edited(edit)) {
        Ok(_) => panic!("the edited metadata was accepted"),
        Err(err) => err,
    }
}

fn set(metadata: &mut IndexMap<String, Value>, key: &str, value: Value) {
    metadata.insert(key.to_owned(), value);
}

#[test]
fn unedited_metadata_round_trips_through_the_writer() {
    check_cases("rewritten GGUF", &Tokenizer::from_gguf(&edited(|_| {})).unwrap());
}

#[test]
fn special_ids_outside_the_vocabulary_are_errors() {
    let err = build_error(|m| set(m, "tokenizer.ggml.eos_token_id", Value::U32(1024)));
    assert!(matches!(err, TokenizerError::SpecialIdOutOfRange { role: "EOS", id: 1024, vocab_size: 1024 }));
    let err = build_error(|m| set(m, "tokenizer.ggml.bos_token_id", Value::U64(u64::MAX)));
    assert!(matches!(err, TokenizerError::SpecialIdOutOfRange { role: "BOS", .. }));
    let err = build_error(|m| set(m, "tokenizer.ggml.padding_token_id", Value::I32(-1)));
    assert!(matches!(err, TokenizerError::Gguf(_)), "{err}");
}

#[test]
fn pre_tokenizer_must_be_named_and_known() {
    let err = build_error(|m| {
        m.shift_remove("tokenizer.ggml.pre");
    });
    assert!(matches!(err, TokenizerError::MissingPreTokenizer { .. }), "{err}");
    let err = build_error(|m| set(m, "tokenizer.ggml.pre", Value::String("qwen-next".into())));
    assert!(matches!(&err, TokenizerError::UnknownPreTokenizer(name) if name == "qwen-next"));
    assert!(err.to_string().contains("qwen-next"));
}

#[test]
fn malformed_vocabularies_are_errors() {
    let err = build_error(|m| set(m, "tokenizer.ggml.model", Value::String("bert".into())));
    assert!(matches!(err, TokenizerError::UnsupportedModel(_)), "{err}");
    let err = build_error(|m| {
        m.shift_remove("tokenizer.ggml.merges");
    });
    assert!(matches!(err, TokenizerError::MissingKey("tokenizer.ggml.merges")), "{err}");
    let err = build_error(|m| set(m, "tokenizer.ggml.merges", Value::Array(Array::from_strings(["Ġ zzz"]))));
    assert!(matches!(err, TokenizerError::MalformedMerge { index: 0, .. }), "{err}");
    let err = build_error(|m| set(m, "tokenizer.ggml.token_type", Value::Array(Array::from_i32s([1, 1]))));
    assert!(matches!(err, TokenizerError::InvalidKey { key: "tokenizer.ggml.token_type", .. }), "{err}");
    let err = build_error(|m| set(m, "tokenizer.ggml.tokens", Value::Array(Array::from_i32s([1, 2]))));
    assert!(matches!(err, TokenizerError::Gguf(_)), "{err}");
    let err =
        build_error(|m| set(m, "tokenizer.ggml.tokens", Value::Array(Array::from_strings(["a", "b", "a"]))));
    assert!(matches!(err, TokenizerError::DuplicateToken { first: 0, second: 2, .. }), "{err}");
    let err = build_error(|m| {
        set(m, "tokenizer.ggml.tokens", Value::Array(Array::from_strings(Vec::<String>::new())))
    });
    assert!(matches!(err, TokenizerError::EmptyVocabulary), "{err}");
}
