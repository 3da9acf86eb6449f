//! Every GGUF in `models/testdata` opens, and agrees with what gguf-py 0.19.0's `GGUFReader` reports
//! for it (the literals below were printed by that package).

use canopy_models::gguf::{GgmlType, GgufError, GgufFile, Value, ValueType};

use super::raw::small_file;
use super::testdata;

/// Expected facts about one tensor: name, type, GGML dims, offset in the data section, byte size, and
/// its first eight data bytes in hex.
struct ExpectedTensor {
    name: &'static str,
    ggml_type: GgmlType,
    dims: &'static [u64],
    offset: u64,
    n_bytes: u64,
    head: &'static str,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn check_tensor(file: &GgufFile, expected: &ExpectedTensor) {
    let info = file.tensor(expected.name).unwrap_or_else(|| panic!("no tensor {}", expected.name));
    assert_eq!(info.ggml_type, expected.ggml_type, "{}", expected.name);
    assert_eq!(info.dims, expected.dims, "{}", expected.name);
    assert_eq!(info.offset, expected.offset, "{}", expected.name);
    assert_eq!(info.n_bytes(), expected.n_bytes, "{}", expected.name);
    let data = file.tensor_data(info);
    assert_eq!(data.len() as u64, expected.n_bytes);
    assert_eq!(hex(&data[..8]), expected.head, "{}", expected.name);
}

struct ExpectedModel {
    file: &'static str,
    architecture: &'static str,
    data_offset: u64,
    metadata_entries: usize,
    tensor_count: usize,
    file_type: u64,
    tensors: &'static [ExpectedTensor],
}

fn check_model(expected: &ExpectedModel) {
    let file = GgufFile::open(testdata(expected.file)).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 32);
    assert_eq!(file.data_offset(), expected.data_offset);
    assert_eq!(file.metadata().len(), expected.metadata_entries);
    assert_eq!(file.tensors().len(), expected.tensor_count);
    assert_eq!(file.architecture().unwrap(), expected.architecture);
    assert_eq!(file.get_u64("general.file_type").unwrap(), expected.file_type);
    assert_eq!(file.get_u64("general.quantization_version").unwrap(), 2);
    assert_eq!(file.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(file.get_str("tokenizer.ggml.pre").unwrap(), "qwen2");
    assert_eq!(file.get_u64("tokenizer.ggml.eos_token_id").unwrap(), 1016);
    let tokens = file.get_string_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 1024);
    assert_eq!(&tokens[..3], ["!", "\"", "#"]);
    let merges = file.get_string_array("tokenizer.ggml.merges").unwrap();
    assert_eq!(merges.len(), 760);
    assert_eq!(&merges[..2], ["Ġ Ġ", "ĠĠ ĠĠ"]);
    let eps = file.get_f64(&format!("{}.attention.layer_norm_rms_epsilon", expected.architecture)).unwrap();
    assert_eq!(eps as f32, 1e-6f32);
    assert_eq!(file.tensors().last().unwrap().name, "output_norm.weight");
    for tensor in expected.tensors {
        check_tensor(&file, tensor);
    }
}

macro_rules! tensor {
    ($name:literal, $ty:ident, $dims:expr, $offset:literal, $n_bytes:literal, $head:literal) => {
        ExpectedTensor {
            name: $name,
            ggml_type: GgmlType::$ty,
            dims: &$dims,
            offset: $offset,
            n_bytes: $n_bytes,
            head: $head,
        }
    };
}

#[test]
fn qwen3_tiny_q8_0_matches_gguf_py() {
    check_model(&ExpectedModel {
        file: "models/qwen3-tiny-q8_0.gguf",
        architecture: "qwen3",
        data_offset: 28384,
        metadata_entries: 23,
        tensor_count: 25,
        file_type: 7,
        tensors: &[
            tensor!("output.weight", Q8_0, [64, 1024], 0, 69632, "4c20f3dbe6ef0401"),
            tensor!("token_embd.weight", Q8_0, [64, 1024], 69632, 69632, "cd1daf11cc2228f2"),
            tensor!("blk.1.attn_q.weight", Q8_0, [64, 64], 238464, 4352, "3a20062b459d0201"),
            tensor!("output_norm.weight", F32, [64], 244992, 256, "0000803f0000803f"),
        ],
    });
}

#[test]
fn qwen3_tiny_f32_matches_gguf_py() {
    check_model(&ExpectedModel {
        file: "models/qwen3-tiny-f32.gguf",
        architecture: "qwen3",
        data_offset: 28384,
        metadata_entries: 23,
        tensor_count: 25,
        file_type: 0,
        tensors: &[
            tensor!("output.weight", F32, [64, 1024], 0, 262144, "0d67d9bd3fc89fbe"),
            tensor!("blk.1.ffn_up.weight", F32, [64, 192], 820096, 49152, "7c05103dfa19a7be"),
            tensor!("output_norm.weight", F32, [64], 918784, 256, "0000803f0000803f"),
        ],
    });
}

#[test]
fn qwen3_tiny_bf16_matches_gguf_py() {
    check_model(&ExpectedModel {
        file: "models/qwen3-tiny-bf16.gguf",
        architecture: "qwen3",
        data_offset: 28384,
        metadata_entries: 23,
        tensor_count: 25,
        file_type: 32,
        tensors: &[
            tensor!("token_embd.weight", Bf16, [64, 1024], 131072, 131072, "eabec53d97be433e"),
            tensor!("blk.0.attn_norm.weight", F32, [64], 262144, 256, "0000803f0000803f"),
            tensor!("blk.1.attn_q.weight", Bf16, [64, 64], 447744, 8192, "403db53e113f52bf"),
        ],
    });
}

#[test]
fn dflash_drafter_matches_gguf_py() {
    check_model(&ExpectedModel {
        file: "models/qwen3-tiny-dflash-f32.gguf",
        architecture: "dflash",
        data_offset: 28512,
        metadata_entries: 26,
        tensor_count: 25,
        file_type: 0,
        tensors: &[
            tensor!("fc.weight", F32, [128, 64], 0, 32768, "720529be0c47f6bd"),
            tensor!("enc.output_norm.weight", F32, [64], 32768, 256, "926cb33f5e2ba13f"),
            tensor!("blk.1.attn_q.weight", F32, [64, 64], 402944, 16384, "dbe1143dc31ce83e"),
        ],
    });
    let file = GgufFile::open(testdata("models/qwen3-tiny-dflash-f32.gguf")).unwrap();
    let layers = file.get_array("dflash.target_layers").unwrap();
    assert_eq!(layers.element_type(), ValueType::I32);
    assert_eq!(layers.values(), [Value::I32(1), Value::I32(2)]);
    assert_eq!(file.get_u64("dflash.block_size").unwrap(), 8);
    assert_eq!(file.get_u64("tokenizer.ggml.mask_token_id").unwrap(), 1023);
}

#[test]
fn qwen35_tiny_matches_gguf_py() {
    check_model(&ExpectedModel {
        file: "models/qwen35-tiny-f32.gguf",
        architecture: "qwen35",
        data_offset: 30592,
        metadata_entries: 32,
        tensor_count: 56,
        file_type: 0,
        tensors: &[
            tensor!("blk.0.ssm_a", F32, [4], 1049088, 16, "a9940ec01f1e71c1"),
            tensor!("blk.0.ssm_conv1d.weight", F32, [4, 256], 1049120, 4096, "206148bcd43212bd"),
            tensor!("blk.3.attn_q.weight", F32, [128, 256], 3535680, 131072, "45a831bdaa2b69bc"),
            tensor!("output_norm.weight", F32, [128], 3699520, 512, "0000803f0000803f"),
        ],
    });
    let file = GgufFile::open(testdata("models/qwen35-tiny-f32.gguf")).unwrap();
    let sections = file.get_array("qwen35.rope.dimension_sections").unwrap();
    assert_eq!(sections.values(), [Value::I32(2), Value::I32(1), Value::I32(1), Value::I32(0)]);
    let recurrent = file.get_array("qwen35.attention.recurrent_layers").unwrap();
    let recurrent: Vec<bool> = recurrent.values().iter().map(|v| v.as_bool().unwrap()).collect();
    assert_eq!(recurrent, [true, true, true, false]);
    assert_eq!(file.get_f64("qwen35.rope.freq_base").unwrap(), 1e7);
}

struct ExpectedVocab {
    file: &'static str,
    architecture: &'static str,
    model: &'static str,
    pre: Option<&'static str>,
    data_offset: u64,
    metadata_entries: usize,
    /// Token count and the tokens at index 0, 1000 and the last index.
    tokens: (usize, [&'static str; 3]),
    merges: Option<usize>,
    has_scores: bool,
}

fn check_vocab(expected: &ExpectedVocab) {
    let file = GgufFile::open(testdata(expected.file)).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.data_offset(), expected.data_offset);
    assert!(file.tensors().is_empty());
    assert_eq!(file.metadata().len(), expected.metadata_entries);
    assert_eq!(file.architecture().unwrap(), expected.architecture);
    assert_eq!(file.get_str("tokenizer.ggml.model").unwrap(), expected.model);
    match expected.pre {
        Some(pre) => assert_eq!(file.get_str("tokenizer.ggml.pre").unwrap(), pre),
        None => assert!(matches!(file.get_str("tokenizer.ggml.pre"), Err(GgufError::MissingKey { .. }))),
    }
    let tokens = file.get_string_array("tokenizer.ggml.tokens").unwrap();
    let (count, [first, thousandth, last]) = expected.tokens;
    assert_eq!(tokens.len(), count);
    assert_eq!([tokens[0], tokens[1000], tokens[count - 1]], [first, thousandth, last]);
    let token_types = file.get_array("tokenizer.ggml.token_type").unwrap();
    assert_eq!((token_types.element_type(), token_types.len()), (ValueType::I32, count));
    match expected.merges {
        Some(n) => assert_eq!(file.get_string_array("tokenizer.ggml.merges").unwrap().len(), n),
        None => assert!(file.get("tokenizer.ggml.merges").is_none()),
    }
    let scores = file.get_array("tokenizer.ggml.scores");
    assert_eq!(scores.is_ok(), expected.has_scores);
    if let Ok(scores) = scores {
        assert_eq!((scores.element_type(), scores.len()), (ValueType::F32, count));
    }
}

#[test]
fn qwen2_vocab_matches_gguf_py() {
    check_vocab(&ExpectedVocab {
        file: "vocab/ggml-vocab-qwen2.gguf",
        architecture: "qwen2",
        model: "gpt2",
        pre: Some("qwen2"),
        data_offset: 5928704,
        metadata_entries: 20,
        tokens: (151936, ["!", "atus", "[PAD151935]"]),
        merges: Some(151387),
        has_scores: false,
    });
}

#[test]
fn qwen35_vocab_matches_gguf_py() {
    check_vocab(&ExpectedVocab {
        file: "vocab/ggml-vocab-qwen35.gguf",
        architecture: "qwen2",
        model: "gpt2",
        pre: Some("qwen35"),
        data_offset: 5928704,
        metadata_entries: 20,
        tokens: (151936, ["!", "atus", "[PAD151935]"]),
        merges: Some(151387),
        has_scores: false,
    });
}

#[test]
fn llama_bpe_vocab_matches_gguf_py() {
    check_vocab(&ExpectedVocab {
        file: "vocab/ggml-vocab-llama-bpe.gguf",
        architecture: "llama",
        model: "gpt2",
        pre: Some("llama-bpe"),
        data_offset: 7818144,
        metadata_entries: 20,
        tokens: (128256, ["!", "indow", "<|reserved_special_token_250|>"]),
        merges: Some(280147),
        has_scores: false,
    });
}

#[test]
fn llama_spm_vocab_matches_gguf_py() {
    check_vocab(&ExpectedVocab {
        file: "vocab/ggml-vocab-llama-spm.gguf",
        architecture: "llama",
        model: "llama",
        pre: Some("default"),
        data_offset: 723872,
        metadata_entries: 22,
        tokens: (32000, ["<unk>", "ied", "给"]),
        merges: None,
        has_scores: true,
    });
    let file = GgufFile::open(testdata("vocab/ggml-vocab-llama-spm.gguf")).unwrap();
    assert!(file.get_bool("tokenizer.ggml.add_bos_token").unwrap());
    assert!(!file.get_bool("tokenizer.ggml.add_eos_token").unwrap());
}

#[test]
fn gemma4_vocab_matches_gguf_py() {
    check_vocab(&ExpectedVocab {
        file: "vocab/ggml-vocab-gemma-4.gguf",
        architecture: "gemma4",
        model: "gemma4",
        pre: None,
        data_offset: 15776480,
        metadata_entries: 42,
        tokens: (262144, ["<pad>", "put", "<unused6226>"]),
        merges: Some(514906),
        has_scores: true,
    });
    let file = GgufFile::open(testdata("vocab/ggml-vocab-gemma-4.gguf")).unwrap();
    let kv_heads = file.get_array("gemma4.attention.head_count_kv").unwrap();
    let kv_heads: Vec<i64> = kv_heads.values().iter().map(|v| v.as_i64().unwrap()).collect();
    assert_eq!((kv_heads.len(), &kv_heads[..6]), (30, &[8, 8, 8, 8, 8, 2][..]));
    assert_eq!(file.get_f64("gemma4.final_logit_softcapping").unwrap(), 30.0);
    assert_eq!(file.get_str("tokenizer.chat_template").unwrap().len(), 12045);
    assert!(!file.get_bool("tokenizer.ggml.add_space_prefix").unwrap());
}

#[test]
fn typed_getters_report_missing_keys_and_wrong_types() {
    let file = GgufFile::open(testdata("models/qwen3-tiny-q8_0.gguf")).unwrap();
    let err = file.get_str("no.such.key").unwrap_err();
    assert!(matches!(err, GgufError::MissingKey { ref key } if key == "no.such.key"), "{err}");
    let err = file.get_str("qwen3.block_count").unwrap_err();
    assert!(matches!(err, GgufError::WrongType { found: ValueType::U32, .. }), "{err}");
    let err = file.get_u64("general.name").unwrap_err();
    assert!(matches!(err, GgufError::WrongType { found: ValueType::String, .. }), "{err}");
    let err = file.get_string_array("tokenizer.ggml.token_type").unwrap_err();
    assert!(matches!(err, GgufError::WrongType { found: ValueType::I32, .. }), "{err}");
    let err = file.get_bool("qwen3.rope.freq_base").unwrap_err();
    assert!(matches!(err, GgufError::WrongType { found: ValueType::F32, .. }), "{err}");
    assert!(matches!(file.get_array("general.name"), Err(GgufError::WrongType { .. })));
    assert_eq!(file.get_str("general.name").unwrap(), "Qwen3 Tiny");
    assert_eq!(file.get_f64("qwen3.context_length").unwrap(), 4096.0);
}

#[test]
fn metadata_keeps_file_order() {
    let file = GgufFile::open(testdata("models/qwen3-tiny-f32.gguf")).unwrap();
    let keys: Vec<&str> = file.metadata().keys().take(4).map(String::as_str).collect();
    assert_eq!(keys, ["general.architecture", "general.type", "general.name", "general.size_label"]);
    let last = file.metadata().keys().last().unwrap();
    assert_eq!(last, "tokenizer.ggml.padding_token_id");
}

#[test]
fn synthetic_file_reads_back_as_built() {
    let file = GgufFile::from_bytes(small_file()).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.architecture().unwrap(), "tiny");
    assert_eq!(file.get_u64("tiny.block_count").unwrap(), 1);
    let b = file.tensor("b").unwrap();
    assert_eq!((b.dims.as_slice(), b.ggml_type, b.offset), (&[3u64, 2][..], GgmlType::F32, 32));
    let values: Vec<f32> =
        file.tensor_data(b).chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(values, [0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
}
