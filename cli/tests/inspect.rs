//! `canopy inspect` through the real binary.

use std::process::{Command, Output};

const TINY_Q8: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/testdata/models/qwen3-tiny-q8_0.gguf");
const QWEN2_VOCAB: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../models/testdata/vocab/ggml-vocab-qwen2.gguf");

fn canopy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_canopy")).args(args).output().expect("the canopy binary runs")
}

#[test]
fn text_report_names_architecture_metadata_and_tensors() {
    let out = canopy(&["inspect", TINY_Q8]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("architecture: qwen3\n"), "{text}");
    assert!(text.contains("  qwen3.attention.layer_norm_rms_epsilon = 1e-6\n"), "{text}");
    assert!(text.contains("tokenizer.ggml.tokens = [string; 1024] [\"!\", \"\\\"\", \"#\""), "{text}");
    assert!(text.contains("\ntensors (25, "), "{text}");
    let embd = text.lines().find(|l| l.trim_start().starts_with("token_embd.weight")).unwrap();
    assert!(embd.contains("q8_0") && embd.contains("[64, 1024]"), "{embd}");
}

#[test]
fn json_report_is_complete_and_summarises_long_arrays() {
    let out = canopy(&["inspect", "--json", QWEN2_VOCAB]);
    assert!(out.status.success());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["architecture"], "qwen2");
    assert_eq!(report["version"], 3);
    assert_eq!(report["metadata"]["tokenizer.ggml.pre"], "qwen2");
    let tokens = &report["metadata"]["tokenizer.ggml.tokens"];
    assert_eq!(tokens["len"], 151_936);
    assert_eq!(tokens["truncated"], true);
    assert_eq!(tokens["values"].as_array().unwrap().len(), 8);
    assert_eq!(report["tensors"].as_array().unwrap().len(), 0);

    let out = canopy(&["inspect", "--json", TINY_Q8]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tensors = report["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 25);
    let norm = tensors.iter().find(|t| t["name"] == "output_norm.weight").unwrap();
    assert_eq!(norm["type"], "f32");
    assert_eq!(norm["dims"], serde_json::json!([64]));
    assert_eq!(norm["bytes"], 256);
    assert_eq!(report["metadata"]["qwen3.block_count"], 2);
}

#[test]
fn bad_files_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let truncated = dir.path().join("truncated.gguf");
    let bytes = std::fs::read(TINY_Q8).unwrap();
    std::fs::write(&truncated, &bytes[..5000]).unwrap();
    let not_gguf = dir.path().join("text.gguf");
    std::fs::write(&not_gguf, "hello, world").unwrap();
    let missing = dir.path().join("missing.gguf");

    for path in [&truncated, &not_gguf, &missing] {
        let out = canopy(&["inspect", path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", path.display());
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("canopy: error: reading "), "{stderr}");
    }
}
