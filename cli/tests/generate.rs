//! `canopy generate` through the real binary: the reference greedy continuation of the tiny
//! Qwen3, sampling flags, chat templates and bad input.

use std::path::Path;
use std::process::{Command, Output};

use canopy_models::chat_template::{ChatRender, ChatTemplate, Message, Role};
use canopy_models::gguf::GgufFile;
use canopy_models::synth::{Arch, ScaleFit, Shape, SynthOptions, WeightType, write_model};
use canopy_models::tokenizer::Tokenizer;

const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/testdata/models");

fn canopy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_canopy")).args(args).output().expect("the canopy binary runs")
}

fn success(out: Output) -> (String, String) {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8(out.stdout).expect("utf-8 output"), stderr)
}

/// The reference prompt and greedy continuation of the f32 tiny model.
fn reference() -> (String, Vec<u32>, Vec<u32>) {
    let text = std::fs::read_to_string(format!("{MODELS}/qwen3-tiny.json")).expect("the reference file");
    let json: serde_json::Value = serde_json::from_str(&text).expect("the reference is JSON");
    let ids = |value: &serde_json::Value| -> Vec<u32> {
        serde_json::from_value(value.clone()).expect("an array of token ids")
    };
    (
        json["prompt"].as_str().expect("a prompt string").to_owned(),
        ids(&json["prompt_ids"]),
        ids(&json["files"]["f32"]["greedy_continuation_ids"]),
    )
}

fn tiny_f32() -> String {
    format!("{MODELS}/qwen3-tiny-f32.gguf")
}

fn parse_ids(stdout: &str) -> Vec<u32> {
    stdout.split_whitespace().map(|id| id.parse().expect("a token id")).collect()
}

/// The number in "prompt: N tokens" on stderr.
fn prompt_tokens(stderr: &str) -> usize {
    let rest = stderr.split("prompt: ").nth(1).expect("a prompt report");
    rest.split_whitespace().next().and_then(|n| n.parse().ok()).expect("a token count")
}

#[test]
fn greedy_ids_reproduce_the_reference_continuation() {
    let (prompt, prompt_ids, expected) = reference();
    let n = expected.len().to_string();
    let (stdout, stderr) =
        success(canopy(&["generate", &tiny_f32(), "--prompt", &prompt, "-n", &n, "--ids"]));
    assert_eq!(parse_ids(&stdout), expected);
    assert_eq!(prompt_tokens(&stderr), prompt_ids.len());
    assert!(stderr.contains("tok/s") && stderr.contains("finish: length"), "{stderr}");

    // A small prefill chunk and the environment variables give the same tokens.
    let out = Command::new(env!("CARGO_BIN_EXE_canopy"))
        .args(["generate", &tiny_f32(), "--ids"])
        .env("CANOPY_PROMPT", &prompt)
        .env("CANOPY_MAX_TOKENS", &n)
        .env("CANOPY_PREFILL_CHUNK", "5")
        .output()
        .unwrap();
    assert_eq!(parse_ids(&success(out).0), expected);
}

#[test]
fn text_output_is_the_decoded_continuation() {
    let (prompt, _, expected) = reference();
    let tokenizer = Tokenizer::from_gguf(&GgufFile::open(tiny_f32()).unwrap()).unwrap();
    let n = expected.len().to_string();
    let (stdout, _) = success(canopy(&["generate", &tiny_f32(), "--prompt", &prompt, "-n", &n]));
    assert_eq!(stdout, tokenizer.decode(&expected, true).unwrap() + "\n");
}

#[test]
fn a_stop_string_ends_the_text_before_it() {
    let (prompt, _, expected) = reference();
    let tokenizer = Tokenizer::from_gguf(&GgufFile::open(tiny_f32()).unwrap()).unwrap();
    let full = tokenizer.decode(&expected, true).unwrap();
    let stop: String = full.chars().skip(6).take(3).collect();
    let cut = full.find(&stop).unwrap();
    let (stdout, stderr) = success(canopy(&["generate", &tiny_f32(), "--prompt", &prompt, "--stop", &stop]));
    assert_eq!(stdout, format!("{}\n", &full[..cut]));
    assert!(stderr.contains("finish: stop string"), "{stderr}");
}

#[test]
fn seeded_sampling_is_reproducible() {
    let (prompt, _, greedy) = reference();
    let sample = |seed: &str| {
        let args = ["generate", &tiny_f32(), "--prompt", &prompt, "-n", "24", "--ids", "--ignore-eos"];
        let flags =
            ["--temperature", "1.2", "--top-k", "50", "--top-p", "0.95", "--min-p", "0.01", "--seed", seed];
        parse_ids(&success(canopy(&[&args[..], &flags[..]].concat())).0)
    };
    let first = sample("3");
    assert_eq!(first.len(), 24);
    assert_eq!(first, sample("3"));
    assert_ne!(first, sample("4"));
    assert_ne!(first, greedy);
}

fn synth_tiny(dir: &Path) -> String {
    let path = dir.join("tiny.gguf");
    let options = SynthOptions {
        arch: Arch::Qwen3,
        shape: Shape::Tiny,
        weight_type: WeightType::F32,
        seed: 5,
        scale_fit: ScaleFit::Search,
    };
    let out = std::fs::File::create(&path).expect("a writable temporary directory");
    write_model(&options, std::io::BufWriter::new(out)).expect("the tiny model is written");
    path.to_str().expect("a UTF-8 path").to_owned()
}

#[test]
fn chat_prompts_go_through_the_template() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth_tiny(dir.path());
    let file = GgufFile::open(&model).unwrap();
    let tokenizer = Tokenizer::from_gguf(&file).unwrap();
    let template = ChatTemplate::for_model(&file, &tokenizer, None).unwrap();
    let messages = [Message::text(Role::User, "Hello!")];
    let rendered = template
        .render(&ChatRender {
            messages: &messages,
            tools: None,
            add_generation_prompt: true,
            kwargs: &serde_json::Map::new(),
        })
        .unwrap();
    let expected_prompt = tokenizer.encode(&rendered, false).unwrap().len();
    assert!(expected_prompt > tokenizer.encode("Hello!", true).unwrap().len());

    let (stdout, stderr) =
        success(canopy(&["generate", &model, "--prompt", "Hello!", "--chat", "-n", "8", "--ids"]));
    assert_eq!(prompt_tokens(&stderr), expected_prompt);
    assert!((1..=8).contains(&parse_ids(&stdout).len()));

    // An override template replaces the model's.
    let custom = dir.path().join("custom.jinja");
    std::fs::write(&custom, "{% for m in messages %}[{{ m.content }}]{% endfor %}").unwrap();
    let custom = custom.to_str().unwrap();
    let out =
        canopy(&["generate", &model, "--prompt", "Hello!", "--chat", "--chat-template", custom, "-n", "2"]);
    let (_, stderr) = success(out);
    assert_eq!(prompt_tokens(&stderr), tokenizer.encode("[Hello!]", false).unwrap().len());
}

#[test]
fn bad_input_fails_cleanly() {
    let (prompt, _, _) = reference();
    let out = canopy(&["generate", &tiny_f32(), "--prompt", &prompt, "--top-p", "1.5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("top_p"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = canopy(&["generate", &tiny_f32(), "--prompt", &prompt, "--backend", "tpu"]);
    assert_eq!(out.status.code(), Some(2));

    if !cuda_present() {
        let out = canopy(&["generate", &tiny_f32(), "--prompt", &prompt, "--backend", "cuda"]);
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("opening CUDA device 0"));
        let out = canopy(&["generate", &tiny_f32(), "--prompt", &prompt, "-n", "1", "--backend", "auto"]);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).starts_with("canopy: using the CPU backend: "));
    }

    let vocab_only = format!("{MODELS}/../vocab/ggml-vocab-qwen2.gguf");
    let out = canopy(&["generate", &vocab_only, "--prompt", "hi", "--backend", "cpu"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("canopy: error:"));

    let out = canopy(&["generate", &tiny_f32(), "--prompt", &prompt, "--ctx-size", "10"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("prompt"));
}

/// Whether this machine can open a CUDA device (then `--backend cuda` works instead of failing).
fn cuda_present() -> bool {
    canopy_kernels::backend::cuda::CudaBackend::new(0).is_ok()
}
