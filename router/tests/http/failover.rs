//! Balancing, retries before the first token, draining workers, and cancellation when the client
//! goes away.

use std::time::Duration;

use canopy_proto::v1::FinishReason;
use serde_json::{Value, json};
use tonic::Status;

use crate::fake_worker::{FakeWorker, Step, always, queued, refuse, reply, started, text};
use crate::harness::{TestRouter, sse_json, unreachable_address};

fn chat(stream: bool) -> Value {
    json!({"model": "tiny", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

/// Sends `count` non-streaming chats and returns the worker that served each.
async fn served_by(router: &TestRouter, count: usize) -> Vec<String> {
    let mut workers = Vec::new();
    for _ in 0..count {
        let response = router.post("/v1/chat/completions", &chat(false)).await;
        assert_eq!(response.status(), 200);
        workers.push(response.headers()["x-canopy-worker"].to_str().unwrap().to_string());
    }
    workers
}

#[tokio::test]
async fn idle_workers_share_requests() {
    let first = FakeWorker::start("tiny", always(reply(&["1"], FinishReason::Stop))).await;
    let second = FakeWorker::start("tiny", always(reply(&["2"], FinishReason::Stop))).await;
    let router = TestRouter::start(&[&first.address, &second.address]).await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", second.address)).await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", first.address)).await;
    served_by(&router, 6).await;
    assert!(
        first.generate_calls() >= 2 && second.generate_calls() >= 2,
        "{} / {}",
        first.generate_calls(),
        second.generate_calls()
    );
}

/// Hangs after the first text for prompts that say "hang", answers at once otherwise.
fn hang_on_request() -> crate::fake_worker::Script {
    std::sync::Arc::new(|request: &canopy_proto::v1::GenerateRequest| {
        if format!("{:?}", request.input).contains("hang") {
            Ok(vec![started(1), text("waiting", 1), Step::Hang])
        } else {
            Ok(reply(&["quick"], FinishReason::Stop))
        }
    })
}

#[tokio::test]
async fn a_busy_worker_gets_no_requests_while_another_is_idle() {
    let first = FakeWorker::start("tiny", hang_on_request()).await;
    let second = FakeWorker::start("tiny", hang_on_request()).await;
    let router = TestRouter::start(&[&first.address, &second.address]).await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", first.address)).await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", second.address)).await;

    let hanging = json!({"model": "tiny", "stream": true, "messages": [{"role": "user", "content": "hang"}]});
    let mut open_stream = router.post("/v1/chat/completions", &hanging).await;
    let busy = open_stream.headers()["x-canopy-worker"].to_str().unwrap().to_string();
    open_stream.chunk().await.unwrap().expect("the stream started");
    router
        .wait_for_metric(&format!("canopy_router_worker_outstanding_requests{{worker=\"{busy}\"}} 1"))
        .await;

    let workers = served_by(&router, 4).await;
    assert!(workers.iter().all(|worker| *worker != busy), "{busy} is busy: {workers:?}");
    drop(open_stream);
}

#[tokio::test]
async fn a_worker_that_fails_before_starting_is_retried_on_another() {
    let failing = FakeWorker::start("tiny", refuse(Status::unavailable("shutting down"))).await;
    let healthy = FakeWorker::start("tiny", always(reply(&["ok"], FinishReason::Stop))).await;
    let router = TestRouter::start(&[&failing.address, &healthy.address]).await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", failing.address)).await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", healthy.address)).await;

    let workers = served_by(&router, 4).await;
    assert!(workers.iter().all(|worker| *worker == healthy.address), "{workers:?}");
    assert!(failing.generate_calls() >= 1, "the failing worker was tried");
    assert!(router.metrics().await.contains("canopy_router_retries_total{code=\"no_worker_available\"}"));
}

#[tokio::test]
async fn a_worker_that_fails_after_starting_but_before_text_is_retried() {
    let steps = vec![started(3), Step::Fail(Status::unavailable("connection reset"))];
    let failing = FakeWorker::start("tiny", always(steps)).await;
    let healthy = FakeWorker::start("tiny", always(reply(&["fine"], FinishReason::Stop))).await;
    let router = TestRouter::start(&[&failing.address, &healthy.address]).await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", failing.address)).await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", healthy.address)).await;

    for _ in 0..4 {
        let text = router.post("/v1/chat/completions", &chat(true)).await.text().await.unwrap();
        let events = sse_json(&text);
        assert_eq!(events[1]["choices"][0]["delta"]["content"], "fine", "{text}");
        assert!(events.iter().all(|event| event.get("error").is_none()), "{text}");
    }
    assert!(failing.generate_calls() >= 1);
}

#[tokio::test]
async fn no_retry_once_text_was_sent() {
    let steps = vec![started(3), text("half", 1), Step::Fail(Status::unavailable("worker died"))];
    let failing = FakeWorker::start("tiny", always(steps)).await;
    let healthy = FakeWorker::start("tiny", always(reply(&["whole"], FinishReason::Stop))).await;
    let router = TestRouter::start(&[&failing.address, &healthy.address]).await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", failing.address)).await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", healthy.address)).await;

    // Send until a stream lands on the failing worker; the healthy one must not be called for it.
    for _ in 0..10 {
        let healthy_calls = healthy.generate_calls();
        let response = router.post("/v1/chat/completions", &chat(true)).await;
        if response.headers()["x-canopy-worker"] != failing.address.as_str() {
            continue;
        }
        let text = response.text().await.unwrap();
        let events = sse_json(&text);
        assert_eq!(events[1]["choices"][0]["delta"]["content"], "half", "{text}");
        assert_eq!(events.last().unwrap()["error"]["code"], "no_worker_available", "{text}");
        assert_eq!(healthy.generate_calls(), healthy_calls, "no retry after text");
        return;
    }
    panic!("no request landed on the failing worker");
}

#[tokio::test]
async fn a_whole_answer_moves_to_another_worker_even_after_some_text() {
    let steps = vec![started(3), text("half", 1), Step::Fail(Status::unavailable("worker died"))];
    let failing = FakeWorker::start("tiny", always(steps)).await;
    let healthy = FakeWorker::start("tiny", always(reply(&["whole"], FinishReason::Stop))).await;
    let router = TestRouter::start(&[&failing.address, &healthy.address]).await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", failing.address)).await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", healthy.address)).await;

    for _ in 0..4 {
        let response = router.post("/v1/chat/completions", &chat(false)).await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["choices"][0]["message"]["content"], "whole", "{body}");
        assert_eq!(body["usage"]["completion_tokens"], 1);
    }
    assert!(failing.generate_calls() >= 1, "the failing worker was tried");
}

#[tokio::test]
async fn a_draining_worker_gets_no_new_requests() {
    let draining = FakeWorker::start("tiny", always(reply(&["d"], FinishReason::Stop))).await;
    let serving = FakeWorker::start("tiny", always(reply(&["s"], FinishReason::Stop))).await;
    draining.set_draining(true);
    let router = TestRouter::start(&[&draining.address, &serving.address]).await;
    router
        .wait_for_metric(&format!("canopy_router_worker_draining{{worker=\"{}\"}} 1", draining.address))
        .await;
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", serving.address)).await;

    let workers = served_by(&router, 4).await;
    assert!(workers.iter().all(|worker| *worker == serving.address), "{workers:?}");
    assert_eq!(draining.generate_calls(), 0);

    draining.set_draining(false);
    router.wait_for_metric(&format!("canopy_router_worker_ready{{worker=\"{}\"}} 1", draining.address)).await;
    served_by(&router, 4).await;
    assert!(draining.generate_calls() >= 1, "back in rotation after draining ends");
}

#[tokio::test]
async fn an_unreachable_worker_does_not_stop_the_others() {
    let down = unreachable_address().await;
    let worker = FakeWorker::start("tiny", always(reply(&["up"], FinishReason::Stop))).await;
    let router = TestRouter::start(&[&down, &worker.address]).await;
    router.wait_ready().await;
    let workers = served_by(&router, 3).await;
    assert!(workers.iter().all(|served| *served == worker.address));
    router.wait_for_metric(&format!("canopy_router_worker_healthy{{worker=\"{down}\"}} 0")).await;
}

#[tokio::test]
async fn a_client_leaving_a_stream_cancels_the_worker_request() {
    let worker = FakeWorker::start("tiny", always(vec![started(3), text("first", 1), Step::Hang])).await;
    let router = TestRouter::start(&[&worker.address]).await;
    router.wait_ready().await;

    let mut response = router.post("/v1/chat/completions", &chat(true)).await;
    assert_eq!(response.status(), 200);
    let mut received = String::new();
    while !received.contains("first") {
        let chunk = response.chunk().await.unwrap().expect("the stream goes on");
        received.push_str(&String::from_utf8_lossy(&chunk));
    }
    drop(response);
    worker.wait_for_cancellations(1).await;
    router.wait_for_metric("canopy_router_client_disconnects_total 1").await;
    router.wait_for_metric("canopy_router_requests_in_flight 0").await;
}

#[tokio::test]
async fn a_client_leaving_a_waiting_request_cancels_the_worker_request() {
    let worker = FakeWorker::start("tiny", always(vec![queued(3), Step::Hang])).await;
    let mut config = crate::harness::fast_config(&[&worker.address]);
    // No keep-alive writes: the router must notice the closed connection by itself.
    config.sse_keep_alive = Duration::from_secs(600);
    let router = TestRouter::start_with(config).await;
    router.wait_ready().await;

    for (stream, calls) in [(false, 1), (true, 2)] {
        let client = router.client.clone();
        let url = router.url("/v1/chat/completions");
        let request = tokio::spawn(async move { client.post(url).json(&chat(stream)).send().await });
        worker.wait_for_requests(calls).await;
        request.abort();
        worker.wait_for_cancellations(calls).await;
    }
}
