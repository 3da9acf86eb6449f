//! `POST /v1/completions`.

use canopy_proto::v1::FinishReason;
use canopy_proto::v1::generate_request::Input;
use serde_json::{Value, json};

use crate::fake_worker::{FakeWorker, always, reply};
use crate::harness::{TestRouter, expect_error, sse_data, sse_json};

#[tokio::test]
async fn a_text_prompt_gets_a_text_completion() {
    let worker = FakeWorker::start("tiny", always(reply(&["4", "2"], FinishReason::Length))).await;
    let router = TestRouter::start(&[&worker.address]).await;
    router.wait_ready().await;

    let response = router.post("/v1/completions", &json!({"model": "tiny", "prompt": "6*7="})).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert!(body["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["choices"][0]["text"], "42");
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["total_tokens"], 9);

    let request = worker.last_request();
    assert_eq!(request.input, Some(Input::Prompt("6*7=".into())));
    assert_eq!(request.max_tokens, Some(16), "OpenAI's default for this API");
}

#[tokio::test]
async fn a_token_id_prompt_streams() {
    let worker = FakeWorker::start("tiny", always(reply(&["a", "b"], FinishReason::Stop))).await;
    let router = TestRouter::start(&[&worker.address]).await;
    router.wait_ready().await;

    let body = json!({"model": "tiny", "prompt": [1, 2, 3], "stream": true, "max_tokens": 2,
                      "stream_options": {"include_usage": true}});
    let text = router.post("/v1/completions", &body).await.text().await.unwrap();
    assert_eq!(sse_data(&text).last().map(String::as_str), Some("[DONE]"));
    let chunks = sse_json(&text);
    let texts: Vec<&str> =
        chunks[..2].iter().map(|chunk| chunk["choices"][0]["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["a", "b"]);
    assert_eq!(chunks[2]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[3]["usage"]["completion_tokens"], 2);
    assert!(chunks.iter().all(|chunk| chunk["object"] == "text_completion"));

    let Some(Input::TokenIds(ids)) = worker.last_request().input else { panic!("token ids") };
    assert_eq!(ids.ids, [1, 2, 3]);
}

#[tokio::test]
async fn echo_and_batches_are_refused() {
    let worker = FakeWorker::start("tiny", always(reply(&["a"], FinishReason::Stop))).await;
    let router = TestRouter::start(&[&worker.address]).await;
    let response =
        router.post("/v1/completions", &json!({"model": "tiny", "prompt": "x", "echo": true})).await;
    assert_eq!(expect_error(response, 400, "unsupported_value").await["param"], "echo");
    let response = router.post("/v1/completions", &json!({"model": "tiny", "prompt": ["x", "y"]})).await;
    assert_eq!(expect_error(response, 400, "unsupported_value").await["param"], "prompt");
    assert_eq!(worker.generate_calls(), 0);
}
