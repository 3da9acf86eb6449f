//! GGUF version 2 files, made from the version 3 fixtures.
//!
//! Version 1 stored counts and lengths as `u32`; version 2 widened every count, length and
//! dimension to `u64`, which is the layout version 3 kept. Version 3 only added big-endian files,
//! told apart by the byte order of the version field itself. A little-endian version 3 file with
//! its version field set to 2 is therefore exactly the version 2 file a version 2 writer produces
//! for the same content, and everything read from it must equal what the original gives.

use canopy_models::gguf::{GgufError, GgufFile};
use canopy_models::tokenizer::Tokenizer;

use super::testdata;

/// Byte range of the version field, after the four-byte magic.
const VERSION_FIELD: std::ops::Range<usize> = 4..8;

/// The fixture's bytes and the same bytes declared as version 2.
fn as_version_2(relative: &str) -> (Vec<u8>, Vec<u8>) {
    let original = std::fs::read(testdata(relative)).unwrap();
    assert_eq!(original[VERSION_FIELD], 3u32.to_le_bytes(), "{relative} is a version 3 file");
    let mut rewritten = original.clone();
    rewritten[VERSION_FIELD].copy_from_slice(&2u32.to_le_bytes());
    (original, rewritten)
}

#[test]
fn version_2_model_parses_to_the_same_metadata_tensors_and_data() {
    let (v3_bytes, v2_bytes) = as_version_2("models/qwen3-tiny-f32.gguf");
    let v3 = GgufFile::from_bytes(v3_bytes).unwrap();
    let v2 = GgufFile::from_bytes(v2_bytes).unwrap();

    assert_eq!(v2.version(), 2);
    assert_eq!(v3.version(), 3);
    assert_eq!(v2.alignment(), v3.alignment());
    assert_eq!(v2.data_offset(), 28384, "the offset gguf-py reports for the v3 original");
    assert_eq!(v2.metadata(), v3.metadata());
    assert_eq!(v2.metadata().len(), 23);
    assert_eq!(v2.architecture().unwrap(), "qwen3");
    assert_eq!(v2.get_string_array("tokenizer.ggml.tokens").unwrap().len(), 1024);
    assert_eq!(v2.get_string_array("tokenizer.ggml.merges").unwrap()[..2], ["Ġ Ġ", "ĠĠ ĠĠ"]);

    assert_eq!(v2.tensors(), v3.tensors());
    assert_eq!(v2.tensors().len(), 25);
    for (info_v2, info_v3) in v2.tensors().iter().zip(v3.tensors()) {
        let data = v2.tensor_data(info_v2);
        assert_eq!(data.len() as u64, info_v2.n_bytes(), "{}", info_v2.name);
        assert_eq!(data, v3.tensor_data(info_v3), "{}", info_v2.name);
    }
    let norm = v2.tensor("output_norm.weight").unwrap();
    assert_eq!(v2.tensor_data(norm)[..8], [0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x3f], "two f32 ones");
}

#[test]
fn version_2_vocabulary_tokenizes_like_version_3() {
    let (v3_bytes, v2_bytes) = as_version_2("vocab/ggml-vocab-llama-spm.gguf");
    let v3 = Tokenizer::from_gguf(&GgufFile::from_bytes(v3_bytes).unwrap()).unwrap();
    let v2_file = GgufFile::from_bytes(v2_bytes).unwrap();
    assert_eq!(v2_file.version(), 2);
    let v2 = Tokenizer::from_gguf(&v2_file).unwrap();

    assert_eq!(v2.vocab_size(), v3.vocab_size());
    let text = "Hello world! 3333 tokens, ünïcödé and\n\ttabs";
    let ids = v2.encode(text, true).unwrap();
    assert_eq!(ids, v3.encode(text, true).unwrap());
    assert_eq!(ids.first(), Some(&1), "SentencePiece vocabularies start with BOS");
    assert_eq!(v2.decode(&ids, true).unwrap(), text);
}

#[test]
fn truncating_a_version_2_file_is_still_an_error() {
    let (_, mut v2_bytes) = as_version_2("models/qwen3-tiny-q8_0.gguf");
    v2_bytes.truncate(v2_bytes.len() - 1);
    let err = GgufFile::from_bytes(v2_bytes).unwrap_err();
    assert!(matches!(err, GgufError::TensorOutOfBounds { .. }), "{err}");
}
