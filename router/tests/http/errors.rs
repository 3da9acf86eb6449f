//! Every error status and body the API answers.

use std::time::Duration;

use canopy_proto::v1::FinishReason;
use canopy_proto::v1::generate_event::Event;
use serde_json::{Value, json};
use tonic::Status;

use crate::fake_worker::{FakeWorker, Step, always, refuse, reply, started, text};
use crate::harness::{TestRouter, expect_error, fast_config, sse_data, sse_json};

fn chat() -> Value {
    json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
}

async fn ready_router(worker: &FakeWorker) -> TestRouter {
    let router = TestRouter::start(&[&worker.address]).await;
    router.wait_ready().await;
    router
}

#[tokio::test]
async fn malformed_and_invalid_bodies_get_400_naming_the_field() {
    let worker = FakeWorker::start("tiny", always(reply(&["x"], FinishReason::Stop))).await;
    let router = ready_router(&worker).await;
    let post_raw = |body: &'static str| {
        router
            .client
            .post(router.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };

    let response = post_raw("{\"model\": \"tiny\", ").await.unwrap();
    assert!(response.headers().contains_key("x-request-id"));
    expect_error(response, 400, "invalid_json").await;
    expect_error(post_raw("").await.unwrap(), 400, "invalid_json").await;

    for (body, param) in [
        (json!({"messages": [{"role": "user", "content": "hi"}]}), "model"),
        (json!({"model": "tiny"}), "messages"),
        (
            json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}),
            "temperature",
        ),
        (json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "top_p": 1.5}), "top_p"),
        (json!({"model": "tiny", "messages": [{"content": "hi"}]}), "messages[0].role"),
        (json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stop": 3}), "stop"),
    ] {
        let error =
            expect_error(router.post("/v1/chat/completions", &body).await, 400, "invalid_value").await;
        assert_eq!(error["param"], param, "{body}");
        assert_eq!(error["type"], "invalid_request_error");
    }

    let mut two_choices = chat();
    two_choices["n"] = json!(2);
    let error =
        expect_error(router.post("/v1/chat/completions", &two_choices).await, 400, "unsupported_value").await;
    assert_eq!(error["param"], "n");
    assert_eq!(worker.generate_calls(), 0, "invalid requests never reach a worker");
}

#[tokio::test]
async fn an_unknown_model_is_404() {
    let worker = FakeWorker::start("tiny", always(reply(&["x"], FinishReason::Stop))).await;
    let router = ready_router(&worker).await;
    let mut body = chat();
    body["model"] = json!("gpt-17");
    let error = expect_error(router.post("/v1/chat/completions", &body).await, 404, "model_not_found").await;
    assert!(error["message"].as_str().unwrap().contains("gpt-17"));
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let worker = FakeWorker::start("tiny", always(reply(&["x"], FinishReason::Stop))).await;
    let mut config = fast_config(&[&worker.address]);
    config.max_body_bytes = 1024;
    let router = TestRouter::start_with(config).await;
    router.wait_ready().await;
    let mut body = chat();
    body["messages"][0]["content"] = json!("x".repeat(2048));
    expect_error(router.post("/v1/chat/completions", &body).await, 413, "request_too_large").await;
    body["messages"][0]["content"] = json!("x".repeat(100));
    assert_eq!(router.post("/v1/chat/completions", &body).await.status(), 200);
}

#[tokio::test]
async fn worker_refusals_map_to_statuses() {
    let cases = [
        (Status::out_of_range("prompt is 5000 tokens, context is 4096"), 400, "context_length_exceeded"),
        (Status::invalid_argument("token id 999999 is out of the vocabulary"), 400, "invalid_request"),
        (Status::resource_exhausted("queue full"), 429, "queue_full"),
        (Status::deadline_exceeded("waited too long"), 504, "deadline_exceeded"),
        (Status::unavailable("draining"), 503, "no_worker_available"),
    ];
    for (status, http_status, code) in cases {
        let message = status.message().to_string();
        let worker = FakeWorker::start("tiny", refuse(status)).await;
        let router = ready_router(&worker).await;
        let response = router.post("/v1/chat/completions", &chat()).await;
        if http_status == 429 {
            assert_eq!(response.headers()["retry-after"], "1");
        }
        let error = expect_error(response, http_status, code).await;
        assert!(error["message"].as_str().unwrap().contains(&message), "{error}");
        if code == "context_length_exceeded" {
            assert_eq!(error["param"], "messages");
        }
    }
}

#[tokio::test]
async fn an_error_mid_stream_ends_the_stream_with_an_error_event() {
    let failure = Event::Error(canopy_proto::v1::Error { code: 1, message: "device lost".into() });
    let steps = vec![started(2), text("partial", 1), Step::Send(failure)];
    let worker = FakeWorker::start("tiny", always(steps)).await;
    let router = ready_router(&worker).await;

    let mut body = chat();
    body["stream"] = json!(true);
    let response = router.post("/v1/chat/completions", &body).await;
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert!(!sse_data(&body).contains(&"[DONE]".to_string()), "{body}");
    let events = sse_json(&body);
    assert_eq!(events[1]["choices"][0]["delta"]["content"], "partial");
    let last = events.last().unwrap();
    assert_eq!(last["error"]["code"], "worker_error", "{body}");
    assert!(last["error"]["message"].as_str().unwrap().contains("device lost"));

    let steps = vec![started(2), text("partial", 1), Step::Fail(Status::internal("crashed"))];
    let worker = FakeWorker::start("tiny", always(steps)).await;
    let router = ready_router(&worker).await;
    expect_error(router.post("/v1/chat/completions", &chat()).await, 502, "worker_error").await;
}

#[tokio::test]
async fn the_request_timeout_bounds_a_silent_worker() {
    let worker = FakeWorker::start("tiny", always(vec![started(2), Step::Hang])).await;
    let mut config = fast_config(&[&worker.address]);
    config.request_timeout = Some(Duration::from_millis(200));
    let router = TestRouter::start_with(config).await;
    router.wait_ready().await;

    expect_error(router.post("/v1/chat/completions", &chat()).await, 504, "deadline_exceeded").await;
    let request = worker.last_request();
    assert!(request.deadline.is_some(), "the deadline is passed to the worker");
    worker.wait_for_cancellations(1).await;
}

#[tokio::test]
async fn unknown_paths_and_methods_answer_in_the_openai_shape() {
    let router = TestRouter::start(&[]).await;
    expect_error(router.get("/v1/nothing").await, 404, "unknown_url").await;
    let response = router.client.delete(router.url("/v1/chat/completions")).send().await.unwrap();
    expect_error(response, 405, "method_not_allowed").await;
}
