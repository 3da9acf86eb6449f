//! A corrupted qwen3 file gives a typed error naming the key or tensor, never a panic; the files
//! are the tiny fixture rewritten with `GgufWriter`.

#![allow(clippy::unwrap_used)]

mod qwen3_common;

use canopy_kernels::backend::cpu::CpuBackend;
use canopy_models::arch::ArchError;
use canopy_models::arch::qwen3::{Qwen3, Qwen3Config, Qwen3Options};
use canopy_models::gguf::{GgufError, GgufFile, GgufWriter, TensorSpec, Value};
use indexmap::IndexMap;
use qwen3_common::{Harness, prompt_ids, testdata};

fn fixture() -> GgufFile {
    GgufFile::open(testdata("qwen3-tiny-f32.gguf")).unwrap()
}

/// The fixture with its metadata edited by `edit_metadata` and its tensors by `edit_tensors`
/// (which may drop, rename or reshape specs; data of a kept tensor is the original's, so reshapes
/// must keep the byte size, and a renamed tensor takes the data of `data_from`'s name).
fn rewritten(
    edit_metadata: impl FnOnce(&mut IndexMap<String, Value>),
    edit_tensors: impl FnOnce(&mut Vec<TensorSpec>),
    data_from: impl Fn(&str) -> String,
) -> GgufFile {
    let source = fixture();
    let mut metadata = source.metadata().clone();
    edit_metadata(&mut metadata);
    let mut specs: Vec<TensorSpec> = source.tensors().iter().map(TensorSpec::from).collect();
    edit_tensors(&mut specs);
    let mut writer = GgufWriter::new(Vec::new(), &metadata, specs.clone()).unwrap();
    for spec in &specs {
        let info = source.tensor(&data_from(&spec.name)).unwrap();
        writer.write_tensor(&spec.name, source.tensor_data(info)).unwrap();
    }
    GgufFile::from_bytes(writer.finish().unwrap()).unwrap()
}

fn with_metadata(edit: impl FnOnce(&mut IndexMap<String, Value>)) -> GgufFile {
    rewritten(edit, |_| {}, str::to_owned)
}

fn with_tensors(edit: impl FnOnce(&mut Vec<TensorSpec>)) -> GgufFile {
    rewritten(|_| {}, edit, str::to_owned)
}

fn load(file: &GgufFile) -> Result<Qwen3<CpuBackend>, ArchError> {
    let options = Qwen3Options { max_batch_tokens: 8, max_logit_rows: 8, capture_layers: vec![] };
    Qwen3::load(&CpuBackend::new(), file, options)
}

fn invalid_key(err: ArchError) -> String {
    match err {
        ArchError::InvalidConfig { key, .. } => key,
        other => panic!("expected InvalidConfig, got {other}"),
    }
}

#[test]
fn the_fixture_config_is_read_from_its_metadata() {
    let config = Qwen3Config::from_gguf(&fixture()).unwrap();
    let expected = Qwen3Config {
        n_layers: 2,
        hidden: 64,
        ffn: 192,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 16,
        rope_theta: 1e6,
        rms_eps: 1e-6,
        context_length: 4096,
        vocab_size: 1024,
    };
    assert_eq!(config, expected);
}

#[test]
fn a_missing_key_is_named() {
    let file = with_metadata(|m| {
        m.shift_remove("qwen3.attention.head_count");
    });
    match load(&file).err().unwrap() {
        ArchError::Metadata(GgufError::MissingKey { key }) => assert_eq!(key, "qwen3.attention.head_count"),
        other => panic!("unexpected error {other}"),
    }
}

#[test]
fn inconsistent_head_counts_are_typed_errors() {
    // Without key_length the head dimension is embedding_length / head_count; 6 heads (a multiple
    // of the 2 KV heads) do not divide 64.
    let file = with_metadata(|m| {
        m.shift_remove("qwen3.attention.key_length");
        m.insert("qwen3.attention.head_count".into(), Value::U32(6));
    });
    assert_eq!(invalid_key(load(&file).err().unwrap()), "qwen3.attention.head_count");

    let file = with_metadata(|m| {
        m.insert("qwen3.attention.head_count_kv".into(), Value::U32(3));
    });
    assert_eq!(invalid_key(load(&file).err().unwrap()), "qwen3.attention.head_count_kv");

    let file = with_metadata(|m| {
        m.insert("qwen3.attention.value_length".into(), Value::U32(8));
    });
    assert_eq!(invalid_key(load(&file).err().unwrap()), "qwen3.attention.value_length");

    let file = with_metadata(|m| {
        m.insert("qwen3.block_count".into(), Value::U32(0));
    });
    assert_eq!(invalid_key(load(&file).err().unwrap()), "qwen3.block_count");

    let file = with_metadata(|m| {
        m.insert("qwen3.rope.freq_base".into(), Value::F32(f32::NAN));
    });
    assert_eq!(invalid_key(load(&file).err().unwrap()), "qwen3.rope.freq_base");
}

#[test]
fn a_wrong_value_type_or_architecture_is_a_typed_error() {
    let file = with_metadata(|m| {
        m.insert("qwen3.embedding_length".into(), Value::String("64".into()));
    });
    assert!(matches!(load(&file).err().unwrap(), ArchError::Metadata(GgufError::WrongType { .. })));
    let file = with_metadata(|m| {
        m.insert("general.architecture".into(), Value::String("llama".into()));
    });
    assert!(matches!(load(&file).err().unwrap(), ArchError::WrongArchitecture { .. }));
}

#[test]
fn a_missing_tensor_is_named() {
    let file = with_tensors(|specs| specs.retain(|s| s.name != "blk.1.ffn_up.weight"));
    match load(&file).err().unwrap() {
        ArchError::MissingTensor { name } => assert_eq!(name, "blk.1.ffn_up.weight"),
        other => panic!("unexpected error {other}"),
    }
}

#[test]
fn a_wrongly_shaped_tensor_is_named() {
    // Same byte size, transposed: only the shape check can tell.
    let file = with_tensors(|specs| {
        let spec = specs.iter_mut().find(|s| s.name == "blk.0.attn_k.weight").unwrap();
        spec.dims = vec![32, 64];
    });
    match load(&file).err().unwrap() {
        ArchError::TensorShape { name, expected, found } => {
            assert_eq!(name, "blk.0.attn_k.weight");
            assert_eq!((expected, found), (vec![64, 32], vec![32, 64]));
        }
        other => panic!("unexpected error {other}"),
    }
    // A vocabulary that disagrees between the embedding and the LM head.
    let file = with_tensors(|specs| {
        let spec = specs.iter_mut().find(|s| s.name == "output.weight").unwrap();
        spec.dims = vec![128, 512];
    });
    assert!(
        matches!(load(&file).err().unwrap(), ArchError::TensorShape { name, .. } if name == "output.weight")
    );
}

#[test]
fn an_absent_output_tensor_ties_the_lm_head_to_the_embedding() {
    let prompt = prompt_ids();
    let tied = with_tensors(|specs| specs.retain(|s| s.name != "output.weight"));
    // The same model spelled out: output.weight holds a copy of token_embd.weight.
    let explicit = rewritten(
        |_| {},
        |_| {},
        |name| if name == "output.weight" { "token_embd.weight".to_owned() } else { name.to_owned() },
    );
    let mut logits = Vec::new();
    for file in [&tied, &explicit] {
        let mut harness = Harness::from_file(file);
        let seq = harness.cache.create_sequence();
        logits.push(harness.causal(seq, &prompt[..8]));
    }
    assert!(logits[0] == logits[1], "a tied LM head must read the embedding table");
    let mut untied = Harness::from_file(&fixture());
    let seq = untied.cache.create_sequence();
    assert!(
        untied.causal(seq, &prompt[..8]) != logits[0],
        "the fixture's own head differs from the embedding"
    );
}
