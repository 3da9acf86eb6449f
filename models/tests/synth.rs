//! `synth` output against the converted tiny fixtures, determinism, and gguf-py as an independent
//! reader of the files.

// Test helpers outside `#[test]` functions fail loudly on purpose.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

use canopy_models::gguf::GgufFile;
use canopy_models::synth::{Arch, ScaleFit, Shape, SynthOptions, WEIGHT_SIGMA, WeightType, write_model};

fn fixture(name: &str) -> GgufFile {
    let path = format!("{}/testdata/models/{name}", env!("CARGO_MANIFEST_DIR"));
    GgufFile::open(path).unwrap()
}

fn synth(shape: Shape, weight_type: WeightType, seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let options = SynthOptions { arch: Arch::Qwen3, shape, weight_type, seed, scale_fit: ScaleFit::Search };
    let summary = write_model(&options, &mut out).unwrap();
    assert_eq!(summary.file_bytes, out.len() as u64);
    assert_eq!(summary.file_type, weight_type.file_type());
    out
}

/// Keys a real Qwen3 conversion has that the fixture's hand-made tokenizer lacks: Qwen3's
/// `config.json` names a BOS id, its tokenizer config `add_bos_token: false` and a chat template.
const KEYS_BEYOND_FIXTURE: [&str; 3] =
    ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.chat_template"];

fn assert_matches_fixture(weight_type: WeightType, fixture_name: &str) {
    let real = fixture(fixture_name);
    let ours = GgufFile::from_bytes(synth(Shape::Tiny, weight_type, 1)).unwrap();

    let table = |f: &GgufFile| {
        f.tensors().iter().map(|t| (t.name.clone(), t.dims.clone(), t.ggml_type)).collect::<Vec<_>>()
    };
    assert_eq!(table(&ours), table(&real), "{weight_type}: tensor table");

    let our_keys: Vec<&str> = ours.metadata().keys().map(String::as_str).collect();
    let shared: Vec<&str> = our_keys.iter().copied().filter(|k| !KEYS_BEYOND_FIXTURE.contains(k)).collect();
    let real_keys: Vec<&str> = real.metadata().keys().map(String::as_str).collect();
    assert_eq!(shared, real_keys, "{weight_type}: metadata keys and their order");
    assert_eq!(&our_keys[our_keys.len() - 3..], KEYS_BEYOND_FIXTURE);

    for key in real_keys {
        let (a, b) = (&ours.metadata()[key], &real.metadata()[key]);
        assert_eq!(a.value_type(), b.value_type(), "{weight_type}: type of {key}");
        let is_vocabulary = key.starts_with("tokenizer.ggml.")
            && !matches!(key, "tokenizer.ggml.model" | "tokenizer.ggml.pre");
        if is_vocabulary {
            // A different vocabulary, the same size and layout.
            if let (Some(x), Some(y)) = (a.as_array(), b.as_array()) {
                assert_eq!(x.element_type(), y.element_type(), "{key}");
                if key != "tokenizer.ggml.merges" {
                    assert_eq!(x.len(), y.len(), "{key}");
                }
            }
        } else {
            assert_eq!(a, b, "{weight_type}: value of {key}");
        }
    }
}

#[test]
fn tiny_f32_matches_the_converted_fixture() {
    assert_matches_fixture(WeightType::F32, "qwen3-tiny-f32.gguf");
}

#[test]
fn tiny_q8_0_matches_the_converted_fixture() {
    assert_matches_fixture(WeightType::Q8_0, "qwen3-tiny-q8_0.gguf");
}

#[test]
fn tiny_bf16_matches_the_converted_fixture() {
    assert_matches_fixture(WeightType::Bf16, "qwen3-tiny-bf16.gguf");
}

#[test]
fn same_seed_same_bytes_other_seed_other_weights() {
    for weight_type in WeightType::ALL {
        let first = synth(Shape::Tiny, weight_type, 42);
        assert_eq!(first, synth(Shape::Tiny, weight_type, 42), "{weight_type}");

        let (a, b) = (
            GgufFile::from_bytes(first).unwrap(),
            GgufFile::from_bytes(synth(Shape::Tiny, weight_type, 43)).unwrap(),
        );
        assert_eq!(a.metadata(), b.metadata());
        for (x, y) in a.tensors().iter().zip(b.tensors()) {
            assert_eq!(x, y);
            assert_ne!(
                a.tensor_data(x),
                b.tensor_data(y),
                "{weight_type}: {} did not change with the seed",
                x.name
            );
        }
    }
}

/// Removes the file when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn with_bytes(name: &str, bytes: &[u8]) -> Self {
        let path = std::env::temp_dir().join(format!("canopy-synth-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        Self(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The Python with gguf-py, or `None` (test skipped) when it is missing and not required.
fn oracle_python() -> Option<String> {
    let python = std::env::var("CANOPY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let has_gguf =
        Command::new(&python).args(["-c", "import gguf, numpy"]).output().is_ok_and(|o| o.status.success());
    if has_gguf {
        return Some(python);
    }
    assert!(
        std::env::var("CANOPY_REQUIRE_ORACLE").as_deref() != Ok("1"),
        "{python} cannot import gguf and numpy"
    );
    println!("skipped: {python} cannot import gguf and numpy");
    None
}

/// Reads the file with gguf-py: tensor types, statistics of dequantized tensors, and the vocabulary's
/// consistency (lengths, uniqueness, merges made of tokens).
const ORACLE: &str = r#"
import json, sys
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

reader = GGUFReader(sys.argv[1])
fields = reader.fields
tokens = fields["tokenizer.ggml.tokens"].contents()
token_types = fields["tokenizer.ggml.token_type"].contents()
merges = fields["tokenizer.ggml.merges"].contents()
vocabulary = set(tokens)
bad_merges = [m for m in merges
              if len(m.split(" ")) != 2 or any(p not in vocabulary for p in m.split(" "))
              or m.replace(" ", "") not in vocabulary]
stats = {}
for tensor in reader.tensors:
    values = dequantize(tensor.data, tensor.tensor_type).astype(np.float64)
    stats[tensor.name] = {"std": float(values.std()), "mean": float(values.mean()),
                          "min": float(values.min()), "max": float(values.max())}
print(json.dumps({
    "types": [[t.name, t.tensor_type.name] for t in reader.tensors],
    "file_type": int(fields["general.file_type"].contents()),
    "n_tokens": len(tokens), "n_token_types": len(token_types), "n_unique": len(vocabulary),
    "n_merges": len(merges), "bad_merges": bad_merges[:5],
    "token_type_values": sorted(set(int(t) for t in token_types)),
    "eos": tokens[int(fields["tokenizer.ggml.eos_token_id"].contents())],
    "bos": tokens[int(fields["tokenizer.ggml.bos_token_id"].contents())],
    "add_bos": bool(fields["tokenizer.ggml.add_bos_token"].contents()),
    "template_start": fields["tokenizer.chat_template"].contents()[:15],
    "stats": stats,
}))
"#;

fn run_oracle(python: &str, file: &TempFile) -> serde_json::Value {
    let output = Command::new(python).arg("-c").arg(ORACLE).arg(&file.0).output().unwrap();
    assert!(output.status.success(), "gguf-py failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn gguf_py_reads_tiny_q4_k_m_with_the_recipe_types() {
    let Some(python) = oracle_python() else { return };
    let file = TempFile::with_bytes("tiny-q4_k_m.gguf", &synth(Shape::Tiny, WeightType::Q4KM, 7));
    let report = run_oracle(&python, &file);

    // llama-quantize Q4_K_M on 64-wide rows: Q4_K falls back to Q5_0, Q6_K (the LM head, and
    // attn_v/ffn_down of the last of two layers, where use_more_bits holds) to Q8_0. Tensors in
    // llama-quantize's order: non-block tensors, then blocks, each sorted by name.
    let mut expected: Vec<(String, &str)> = vec![
        ("output.weight".into(), "Q8_0"),
        ("output_norm.weight".into(), "F32"),
        ("token_embd.weight".into(), "Q5_0"),
    ];
    for (layer, more_bits) in [(0, "Q5_0"), (1, "Q8_0")] {
        for (tensor, ty) in [
            ("attn_k", "Q5_0"),
            ("attn_k_norm", "F32"),
            ("attn_norm", "F32"),
            ("attn_output", "Q5_0"),
            ("attn_q", "Q5_0"),
            ("attn_q_norm", "F32"),
            ("attn_v", more_bits),
            ("ffn_down", more_bits),
            ("ffn_gate", "Q5_0"),
            ("ffn_norm", "F32"),
            ("ffn_up", "Q5_0"),
        ] {
            expected.push((format!("blk.{layer}.{tensor}.weight"), ty));
        }
    }
    let types: Vec<(String, String)> = serde_json::from_value(report["types"].clone()).unwrap();
    let types: Vec<(String, &str)> = types.iter().map(|(n, t)| (n.clone(), t.as_str())).collect();
    assert_eq!(types, expected);
    assert_eq!(report["file_type"], 15);

    for (name, stats) in report["stats"].as_object().unwrap() {
        let (std, mean) = (stats["std"].as_f64().unwrap(), stats["mean"].as_f64().unwrap());
        if name.ends_with("norm.weight") {
            assert!(stats["min"].as_f64().unwrap() >= 0.5 && stats["max"].as_f64().unwrap() < 1.5, "{name}");
            assert!((mean - 1.0).abs() < 0.15, "{name}: mean {mean}");
        } else {
            // Smallest matrix: 64 x 32 = 2048 samples, so the std is known to about 1.6 %; Q5_0
            // adds about 3 % of sigma in quadrature.
            let sigma = f64::from(WEIGHT_SIGMA);
            assert!((std / sigma - 1.0).abs() < 0.06, "{name}: std {std}");
            assert!(mean.abs() < 0.1 * sigma, "{name}: mean {mean}");
        }
    }
}

#[test]
fn gguf_py_sees_a_consistent_vocabulary() {
    let Some(python) = oracle_python() else { return };
    let file = TempFile::with_bytes("tiny-bf16.gguf", &synth(Shape::Tiny, WeightType::Bf16, 3));
    let report = run_oracle(&python, &file);
    assert_eq!(report["n_tokens"], 1024);
    assert_eq!(report["n_token_types"], 1024);
    assert_eq!(report["n_unique"], 1024);
    assert!(report["n_merges"].as_u64().unwrap() >= 300, "{}", report["n_merges"]);
    assert_eq!(report["bad_merges"], serde_json::json!([]));
    // NORMAL, CONTROL, USER_DEFINED and UNUSED, as in Qwen3's vocabulary.
    assert_eq!(report["token_type_values"], serde_json::json!([1, 3, 4, 5]));
    assert_eq!(report["eos"], "<|im_end|>");
    assert_eq!(report["bos"], "<|endoftext|>");
    assert_eq!(report["add_bos"], false);
    assert_eq!(report["template_start"], "{%- if tools %}");
}
