//! `canopy serve` end to end: it answers as soon as it announces itself, drains on SIGTERM
//! (letting a running request finish, then exiting 0 with its worker gone), and its workers die
//! with it even when it is SIGKILLed.

// Helpers outside #[test] functions unwrap too: a failure there is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use canopy_integration_tests::cluster::{PATIENCE, start_serve};
use canopy_integration_tests::http::{Client, read_until, sse_data};
use canopy_integration_tests::process::{children_of, is_alive};
use canopy_integration_tests::{MODEL_ID, greedy_chat};
use serde_json::Value;

/// Waits until none of `pids` runs.
async fn wait_gone(pids: &[u32]) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while pids.iter().any(|&pid| is_alive(pid)) {
        assert!(tokio::time::Instant::now() < deadline, "processes {pids:?} outlived canopy serve");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn serve_answers_once_announced_and_drains_on_sigterm() {
    let mut serve = start_serve(&[]);
    let http = Client::new(&serve.address);
    // No readiness polling: `listening on` comes after the router sees its worker ready.
    let answer = http.post("/v1/chat/completions", &greedy_chat(4, false)).await;
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["usage"]["completion_tokens"], 4);
    let models: Value = http.get("/v1/models").await.json().await.unwrap();
    assert_eq!(models["data"][0]["id"], MODEL_ID);
    let workers = children_of(serve.pid());
    assert_eq!(workers.len(), 1, "one CPU worker");

    let mut running = http.post("/v1/chat/completions", &greedy_chat(600, true)).await;
    read_until(&mut running, |body| body.contains("\"content\"")).await;
    serve.signal("TERM");
    let rest = read_until(&mut running, |_| false).await;
    assert_eq!(sse_data(&rest).last().map(String::as_str), Some("[DONE]"), "{rest}");
    let status = serve.wait_exit(PATIENCE);
    assert!(status.success(), "{status}; stderr:\n{}", serve.stderr());
    wait_gone(&workers).await;
}

#[tokio::test]
async fn the_workers_of_a_killed_serve_die_with_it() {
    let mut serve = start_serve(&[]);
    let workers = children_of(serve.pid());
    assert_eq!(workers.len(), 1, "one CPU worker");
    serve.signal("KILL");
    serve.wait_exit(PATIENCE);
    wait_gone(&workers).await;
}
