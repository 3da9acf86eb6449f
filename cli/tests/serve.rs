//! `canopy serve` through the real binary, for what fails before it serves: a missing model, a
//! worker that cannot start, a flag that belongs to `canopy router`. Serving itself is tested end
//! to end in integration-tests/tests/serve.rs.

use std::process::{Command, Output};

fn serve(args: &[&str], current_dir: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_canopy"))
        .arg("serve")
        .args(["--listen", "127.0.0.1:0", "--backend", "cpu"])
        .args(args)
        .current_dir(current_dir)
        .env_remove("CANOPY_MODEL")
        .env_remove("CANOPY_ROUTER_WORKERS")
        .output()
        .expect("the canopy binary runs")
}

#[test]
fn without_the_bundled_model_in_reach_serve_says_where_it_looked() {
    let elsewhere = tempfile::tempdir().unwrap();
    let out = serve(&[], elsewhere.path());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no model file at models/tiny/qwen3-tiny.gguf"), "{stderr}");
    assert!(stderr.contains("CANOPY_MODEL"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_worker_that_cannot_start_fails_serve_before_it_listens() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_model = dir.path().join("broken.gguf");
    std::fs::write(&not_a_model, b"not a GGUF file").unwrap();
    let out = serve(&["--model", not_a_model.to_str().unwrap()], dir.path());
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("the cpu worker exited (exit status: 2) before it served"), "{stderr}");
    assert!(out.stdout.is_empty(), "nothing is announced: {}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn serve_starts_its_own_workers_and_refuses_the_routers_list() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_canopy"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .current_dir(dir.path())
        .env("CANOPY_ROUTER_WORKERS", "grpc://127.0.0.1:1")
        .output()
        .expect("the canopy binary runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("canopy serve starts its own workers"));
}

#[test]
fn serve_flags_are_also_environment_variables() {
    let out = Command::new(env!("CARGO_BIN_EXE_canopy")).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for variable in [
        "CANOPY_MODEL",
        "CANOPY_ROUTER_LISTEN",
        "CANOPY_ROUTER_REQUEST_TIMEOUT",
        "CANOPY_BACKEND",
        "CANOPY_MAX_RUNNING",
        "CANOPY_DRAIN_GRACE",
    ] {
        assert!(help.contains(variable), "{variable} in:\n{help}");
    }
    assert!(!help.contains("--workers"), "serve's workers are its own:\n{help}");
}
