//! The Prometheus exposition.

use canopy_proto::v1::FinishReason;
use serde_json::json;

use crate::fake_worker::{FakeWorker, always, reply};
use crate::harness::TestRouter;

#[tokio::test]
async fn metrics_expose_requests_latencies_tokens_and_workers() {
    let worker = FakeWorker::start("tiny", always(reply(&["a", "b", "c"], FinishReason::Stop))).await;
    let router = TestRouter::start(&[&worker.address]).await;
    router.wait_ready().await;
    let chat = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(router.post("/v1/chat/completions", &chat).await.status(), 200);
    let mut streaming = chat.clone();
    streaming["stream"] = json!(true);
    router.post("/v1/chat/completions", &streaming).await.text().await.unwrap();
    let mut unknown = chat.clone();
    unknown["model"] = json!("missing");
    assert_eq!(router.post("/v1/chat/completions", &unknown).await.status(), 404);

    let response = router.get("/metrics").await;
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().contains("openmetrics-text"));
    let text = response.text().await.unwrap();
    let worker_label = format!("worker=\"{}\"", worker.address);
    for expected in [
        "canopy_router_http_requests_total{route=\"/v1/chat/completions\",method=\"POST\",status=\"200\"} 2",
        "canopy_router_http_requests_total{route=\"/v1/chat/completions\",method=\"POST\",status=\"404\"} 1",
        "canopy_router_errors_total{code=\"model_not_found\"} 1",
        "canopy_router_time_to_first_token_seconds_count 2",
        "canopy_router_inter_token_latency_seconds_count 4",
        "canopy_router_queue_time_seconds_count 2",
        "canopy_router_prompt_tokens_total 14",
        "canopy_router_completion_tokens_total 6",
        "canopy_router_requests_in_flight 0",
        "canopy_router_client_disconnects_total 0",
        "canopy_router_retries_exhausted_total 0",
        &format!("canopy_router_worker_healthy{{{worker_label}}} 1"),
        &format!("canopy_router_worker_ready{{{worker_label}}} 1"),
        &format!("canopy_router_worker_outstanding_requests{{{worker_label}}} 0"),
        &format!("canopy_router_worker_queued_requests{{{worker_label}}} 0"),
    ] {
        assert!(text.lines().any(|line| line == expected), "missing `{expected}` in:\n{text}");
    }
    assert!(text.contains("# TYPE canopy_router_http_request_duration_seconds histogram"));
}
