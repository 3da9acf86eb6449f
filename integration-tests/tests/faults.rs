//! Faults end to end, with real processes: a client that leaves mid-stream, a worker SIGKILLed
//! while a request waits on it, and SIGTERM drains of a worker and of the router. Every wait is
//! on a signal (the worker's State stream, the response stream, process exit), never a sleep.

// Helpers outside #[test] functions unwrap too: a failure there is a failed test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use canopy_integration_tests::cluster::{Cluster, FAST_HEALTH, PATIENCE};
use canopy_integration_tests::greedy_chat;
use canopy_integration_tests::http::{read_until, sse_data, sse_events};
use canopy_integration_tests::worker_state::StateWatch;
use serde_json::Value;

/// Longer than the tiny model can generate in any test's lifetime: its whole context.
const ENDLESS: u32 = 4000;

/// Opens a stream and reads it until its first text; returns it and the worker serving it.
async fn open_stream(cluster: &Cluster, max_tokens: u32) -> (reqwest::Response, String) {
    let mut response = cluster.http.post("/v1/chat/completions", &greedy_chat(max_tokens, true)).await;
    assert_eq!(response.status(), 200);
    let worker =
        response.headers()["x-canopy-worker"].to_str().unwrap().trim_start_matches("grpc://").to_owned();
    read_until(&mut response, |body| body.contains("\"content\"")).await;
    (response, worker)
}

fn retries(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|line| line.starts_with("canopy_router_retries_total{"))
        .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn a_client_leaving_mid_stream_stops_the_generation_on_the_worker() {
    let cluster = Cluster::start(2, &[], &[]).await;
    let (response, worker) = open_stream(&cluster, ENDLESS).await;
    let mut state = StateWatch::connect(&worker).await;
    state.wait_for("the request to run", |state| state.running == 1).await;

    drop(response);
    let stopped = state
        .wait_for("the request to be cancelled", |state| state.requests_cancelled == 1 && state.running == 0)
        .await;
    assert!(stopped.tokens_generated < u64::from(ENDLESS), "it stopped early: {stopped:?}");
    let http = &cluster.http;
    http.wait_until("the router to see the disconnect", || async {
        http.metric("canopy_router_client_disconnects_total").await == Some(1.0)
            && http.metric("canopy_router_requests_in_flight").await == Some(0.0)
    })
    .await;
}

#[tokio::test]
async fn a_request_waiting_on_a_worker_that_is_killed_is_answered_by_the_other() {
    // One sequence per worker, so that a third request has to wait in a queue.
    let mut cluster = Cluster::start(2, &["--max-running", "1"], &[]).await;
    let (first, first_worker) = open_stream(&cluster, ENDLESS).await;
    let (second, second_worker) = open_stream(&cluster, ENDLESS).await;
    assert_ne!(first_worker, second_worker, "the idle worker takes the second stream");
    let mut first_state = StateWatch::connect(&first_worker).await;
    let mut second_state = StateWatch::connect(&second_worker).await;

    let client = cluster.http.inner.clone();
    let url = cluster.http.url("/v1/chat/completions");
    let waiting =
        tokio::spawn(async move { client.post(url).json(&greedy_chat(8, false)).send().await.unwrap() });
    let queued = |state: &canopy_proto::v1::WorkerState| state.queued == 1;
    let (victim, mut victims_stream, survivor, survivors_stream) = tokio::select! {
        _ = first_state.wait_for("a queued request", queued) => (first_worker, first, second_worker, second),
        _ = second_state.wait_for("a queued request", queued) => (second_worker, second, first_worker, first),
    };

    cluster.worker_at(&victim).signal("KILL");
    // The victim's stream had sent text, so it cannot move: it ends with an error, without [DONE].
    let cut = read_until(&mut victims_stream, |_| false).await;
    let last = sse_data(&cut).pop().unwrap();
    assert!(last.contains("\"error\""), "{cut}");
    // Leaving the survivor's stream frees its one sequence for the moved request.
    drop(survivors_stream);

    let answer = tokio::time::timeout(PATIENCE, waiting).await.unwrap().unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["x-canopy-worker"].to_str().unwrap(), format!("grpc://{survivor}"));
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["completion_tokens"], 8);
    assert!(retries(&cluster.http.metrics().await) >= 1.0);
}

#[tokio::test]
async fn sigterm_drains_a_worker_then_the_router_letting_requests_finish() {
    let mut cluster = Cluster::start(2, &[], FAST_HEALTH).await;
    let (mut running, draining_worker) = open_stream(&cluster, 600).await;
    let mut state = StateWatch::connect(&draining_worker).await;

    let worker = cluster.worker_at(&draining_worker);
    worker.signal("TERM");
    state
        .wait_for("a drain with the request still running", |state| state.draining && state.running == 1)
        .await;
    // New requests go to the other worker meanwhile.
    let other = cluster.http.post("/v1/chat/completions", &greedy_chat(4, false)).await;
    assert_eq!(other.status(), 200);
    assert_ne!(other.headers()["x-canopy-worker"].to_str().unwrap(), format!("grpc://{draining_worker}"));
    // The running request finishes whole.
    let rest = read_until(&mut running, |_| false).await;
    let finish = sse_events(&rest)
        .into_iter()
        .filter_map(|event| event["choices"][0]["finish_reason"].as_str().map(str::to_owned))
        .collect::<Vec<_>>();
    assert_eq!(finish, ["length"]);
    let status = cluster.worker_at(&draining_worker).wait_exit(PATIENCE);
    assert!(status.success(), "{status}");

    let (mut running, _) = open_stream(&cluster, 600).await;
    cluster.router.signal("TERM");
    let rest = read_until(&mut running, |_| false).await;
    assert_eq!(sse_data(&rest).last().map(String::as_str), Some("[DONE]"), "{rest}");
    let status = cluster.router.wait_exit(PATIENCE);
    assert!(status.success(), "{status}");
    assert!(
        tokio::time::timeout(
            Duration::from_secs(5),
            cluster.http.inner.get(cluster.http.url("/health")).send()
        )
        .await
        .is_ok_and(|response| response.is_err()),
        "the router no longer answers"
    );
}
