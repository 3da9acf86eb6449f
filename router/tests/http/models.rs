//! `/v1/models`, `/health` and `/ready`.

use serde_json::{Value, json};

use crate::fake_worker::{FakeWorker, always};
use crate::harness::{TestRouter, expect_error, unreachable_address};

#[tokio::test]
async fn models_lists_every_served_model_while_a_worker_is_down() {
    let first = FakeWorker::start("tiny", always(vec![])).await;
    let second = FakeWorker::start("org/model-b", always(vec![])).await;
    let same_model = FakeWorker::start("tiny", always(vec![])).await;
    let down = unreachable_address().await;
    let router = TestRouter::start(&[&first.address, &down, &second.address, &same_model.address]).await;
    router
        .wait_until("both models", || async {
            let body: Value = router.get("/v1/models").await.json().await.unwrap();
            body["data"].as_array().is_some_and(|models| models.len() == 2)
        })
        .await;

    let response = router.get("/v1/models").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "list");
    let ids: Vec<&str> =
        body["data"].as_array().unwrap().iter().map(|model| model["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["org/model-b", "tiny"]);
    for model in body["data"].as_array().unwrap() {
        assert_eq!(model["object"], "model");
        assert_eq!(model["owned_by"], "canopy");
        assert_eq!(model["context_length"], 4096);
    }

    let model: Value = router.get("/v1/models/org/model-b").await.json().await.unwrap();
    assert_eq!(model["id"], "org/model-b");
    let error = expect_error(router.get("/v1/models/nope").await, 404, "model_not_found").await;
    assert_eq!(error["param"], "model");
}

#[tokio::test]
async fn health_is_always_up_and_ready_follows_the_workers() {
    let worker = FakeWorker::start("tiny", always(vec![])).await;
    worker.set_serving(false).await;
    let router = TestRouter::start(&[&worker.address]).await;

    assert_eq!(router.get("/health").await.status(), 200);
    let response = router.get("/ready").await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "not_ready");
    assert!(body["reason"].as_str().is_some_and(|reason| !reason.is_empty()), "{body}");
    assert_eq!(body["workers"][0]["address"], worker.address.as_str());

    worker.set_serving(true).await;
    router.wait_ready().await;
    let body: Value = router.get("/ready").await.json().await.unwrap();
    assert_eq!(body, json!({"status": "ready", "ready_workers": 1, "workers": 1}));

    worker.set_serving(false).await;
    router.wait_until("ready to turn 503", || async { router.get("/ready").await.status() == 503 }).await;
    assert_eq!(router.get("/health").await.status(), 200);
}

#[tokio::test]
async fn a_router_whose_workers_are_all_down_starts_and_answers_503() {
    let router = TestRouter::start(&[&unreachable_address().await]).await;
    assert_eq!(router.get("/health").await.status(), 200);
    assert_eq!(router.get("/ready").await.status(), 503);
    let body: Value = router.get("/v1/models").await.json().await.unwrap();
    assert_eq!(body["data"], json!([]));
    let chat = json!({"model": "tiny", "messages": [{"role": "user", "content": "hi"}]});
    let response = router.post("/v1/chat/completions", &chat).await;
    assert_eq!(response.headers()["retry-after"], "1");
    expect_error(response, 503, "no_worker_available").await;
    router.stop().await.expect("a clean shutdown");
}

#[tokio::test]
async fn a_bound_router_counts_its_ready_workers_before_it_serves() {
    let up = FakeWorker::start("tiny", always(vec![])).await;
    let down = unreachable_address().await;
    let router = canopy_router::bind(crate::harness::fast_config(&[&up.address, &down])).await.unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while router.ready_workers() < 1 {
        assert!(tokio::time::Instant::now() < deadline, "the worker that is up never became ready");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    up.set_serving(false).await;
    while router.ready_workers() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "a worker that stopped serving stayed ready");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
