//! `canopy synth` through the real binary.

use std::process::{Command, Output};

fn canopy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_canopy")).args(args).output().expect("the canopy binary runs")
}

#[test]
fn synth_writes_a_deterministic_model_that_inspect_and_tokenize_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    for (name, seed) in [("a.gguf", "7"), ("b.gguf", "7"), ("c.gguf", "8")] {
        let out =
            canopy(&["synth", "--shape", "tiny", "--type", "q8_0", "--seed", seed, "--out", &path(name)]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let report = String::from_utf8(out.stdout).unwrap();
        assert!(report.contains("qwen3 tiny q8_0, 25 tensors"), "{report}");
    }
    let a = std::fs::read(path("a.gguf")).unwrap();
    assert_eq!(a, std::fs::read(path("b.gguf")).unwrap(), "same seed, same bytes");
    assert_ne!(a, std::fs::read(path("c.gguf")).unwrap(), "another seed, other weights");
    assert!(!dir.path().join("a.gguf.partial").exists());

    let out = canopy(&["inspect", "--json", &path("a.gguf")]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["architecture"], "qwen3");
    assert_eq!(report["metadata"]["general.file_type"], 7);

    let out = canopy(&["tokenize", &path("a.gguf"), "--text", "<|im_start|>user\nhello<|im_end|>"]);
    let ids: Vec<u32> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(ids.len() >= 4, "{ids:?}");
}

#[test]
fn bad_flags_and_unwritable_paths_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let out = canopy(&["synth", "--shape", "qwen3-70b", "--type", "q8_0", "--out", "x.gguf"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown shape"));

    let target = dir.path().join("missing-dir").join("m.gguf");
    let out = canopy(&["synth", "--shape", "tiny", "--type", "f32", "--out", target.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!target.exists());
}

/// `--fast-fit` only changes how K-quant scales are fitted: the tiny shape's Q4_K_M recipe falls
/// back to Q5_0 and Q8_0 (rows of 64 and 192 columns are no whole K-quant super-blocks), so its
/// file does not change.
#[test]
fn fast_fit_leaves_formats_without_a_scale_search_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    for (name, fast_fit) in [("searched.gguf", false), ("nominal.gguf", true)] {
        let mut args = vec!["synth", "--shape", "tiny", "--type", "q4_k_m", "--seed", "3"];
        if fast_fit {
            args.push("--fast-fit");
        }
        let out_path = path(name);
        args.extend(["--out", &out_path]);
        let out = canopy(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("13 q5_0"));
    }
    assert_eq!(std::fs::read(path("searched.gguf")).unwrap(), std::fs::read(path("nominal.gguf")).unwrap());
}
