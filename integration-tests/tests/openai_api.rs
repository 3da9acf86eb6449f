//! The OpenAI API end to end: the real router in front of two real CPU workers serving the
//! bundled model, over HTTP. Greedy decoding is deterministic, so the same request must give the
//! same text whichever worker serves it and whether it streams or not.

// Helpers outside #[test] functions unwrap too: a failure there is a failed test.
#![allow(clippy::unwrap_used)]

use canopy_integration_tests::cluster::Cluster;
use canopy_integration_tests::http::{expect_error, sse_events};
use canopy_integration_tests::{MODEL_ID, greedy_chat};
use serde_json::{Value, json};

#[tokio::test]
async fn chat_answers_are_the_same_greedy_text_on_either_worker() {
    let cluster = Cluster::start(2, &[], &[]).await;
    let worker_addresses: Vec<String> =
        cluster.workers.iter().map(|worker| format!("grpc://{}", worker.address)).collect();
    let mut answers = Vec::new();
    let mut served_by = Vec::new();
    // Sequential and idle in between: round-robin sends them to both workers.
    for _ in 0..4 {
        let response = cluster.http.post("/v1/chat/completions", &greedy_chat(8, false)).await;
        assert_eq!(response.status(), 200);
        assert!(response.headers().contains_key("x-request-id"));
        let worker = response.headers()["x-canopy-worker"].to_str().unwrap().to_owned();
        assert!(worker_addresses.contains(&worker), "{worker} in {worker_addresses:?}");
        served_by.push(worker);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["object"], "chat.completion");
        assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"), "{body}");
        assert_eq!(body["model"], MODEL_ID);
        let choice = &body["choices"][0];
        assert_eq!(choice["message"]["role"], "assistant");
        assert_eq!(choice["finish_reason"], "length");
        let usage = &body["usage"];
        assert_eq!(usage["completion_tokens"], 8);
        let prompt_tokens = usage["prompt_tokens"].as_u64().unwrap();
        assert!(prompt_tokens > 5, "the chat template wraps the message: {usage}");
        assert_eq!(usage["total_tokens"].as_u64(), Some(prompt_tokens + 8));
        answers.push(choice["message"]["content"].as_str().unwrap().to_owned());
    }
    served_by.sort();
    served_by.dedup();
    assert_eq!(served_by.len(), 2, "both workers served");
    assert!(!answers[0].is_empty());
    assert!(answers.iter().all(|answer| *answer == answers[0]), "{answers:?}");
}

#[tokio::test]
async fn a_chat_stream_carries_the_same_text_as_the_whole_answer() {
    let cluster = Cluster::start(2, &[], &[]).await;
    let whole: Value =
        cluster.http.post("/v1/chat/completions", &greedy_chat(12, false)).await.json().await.unwrap();

    let response = cluster.http.post("/v1/chat/completions", &greedy_chat(12, true)).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let events = sse_events(&response.text().await.unwrap());
    assert!(events.iter().all(|event| event["object"] == "chat.completion.chunk"));
    assert!(events.iter().all(|event| event["id"] == events[0]["id"]), "one id for the whole stream");
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String =
        events.iter().filter_map(|event| event["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, whole["choices"][0]["message"]["content"].as_str().unwrap());
    let finishes: Vec<&Value> = events
        .iter()
        .map(|event| &event["choices"][0]["finish_reason"])
        .filter(|reason| !reason.is_null())
        .collect();
    assert_eq!(finishes, [&json!("length")]);
    let usage = events.last().unwrap();
    assert_eq!(usage["choices"], json!([]), "the usage chunk comes last, without choices");
    assert_eq!(usage["usage"], whole["usage"]);
}

#[tokio::test]
async fn completions_continue_a_prompt_streamed_or_not() {
    let cluster = Cluster::start(2, &[], &[]).await;
    let request = |stream: bool| {
        json!({"model": MODEL_ID, "prompt": "Once upon a time", "max_tokens": 6, "temperature": 0,
               "ignore_eos": true, "stream": stream})
    };
    let response = cluster.http.post("/v1/completions", &request(false)).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["model"], MODEL_ID);
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert_eq!(body["usage"]["completion_tokens"], 6);
    let text = body["choices"][0]["text"].as_str().unwrap();
    assert!(!text.is_empty());

    let streamed = cluster.http.post("/v1/completions", &request(true)).await.text().await.unwrap();
    let events = sse_events(&streamed);
    let streamed_text: String =
        events.iter().filter_map(|event| event["choices"][0]["text"].as_str()).collect();
    assert_eq!(streamed_text, text);
}

#[tokio::test]
async fn models_lists_the_served_model_with_its_context_length() {
    let cluster = Cluster::start(2, &["--max-seq-len", "512"], &[]).await;
    let body: Value = cluster.http.get("/v1/models").await.json().await.unwrap();
    assert_eq!(body["object"], "list");
    let models = body["data"].as_array().unwrap();
    assert_eq!(models.len(), 1, "two workers, one model: {body}");
    assert_eq!(models[0]["id"], MODEL_ID);
    assert_eq!(models[0]["object"], "model");
    assert_eq!(models[0]["context_length"], 512);
    assert_eq!(models[0]["ready"], true);
    let model: Value = cluster.http.get(&format!("/v1/models/{MODEL_ID}")).await.json().await.unwrap();
    assert_eq!(model["id"], MODEL_ID);
    expect_error(cluster.http.get("/v1/models/gpt-4o").await, 404, "model_not_found").await;
}

#[tokio::test]
async fn errors_come_in_the_openai_shape_with_their_status() {
    let cluster = Cluster::start(2, &["--max-seq-len", "128"], &[]).await;
    let http = &cluster.http;
    expect_error(http.post_raw("/v1/chat/completions", "{\"model\": ").await, 400, "invalid_json").await;

    let mut unknown_model = greedy_chat(4, false);
    unknown_model["model"] = json!("gpt-4o");
    let error =
        expect_error(http.post("/v1/chat/completions", &unknown_model).await, 404, "model_not_found").await;
    assert_eq!(error["param"], "model");

    let mut hot = greedy_chat(4, false);
    hot["temperature"] = json!(-1);
    let error = expect_error(http.post("/v1/chat/completions", &hot).await, 400, "invalid_value").await;
    assert_eq!(error["param"], "temperature");

    let mut several = greedy_chat(4, false);
    several["n"] = json!(2);
    expect_error(http.post("/v1/chat/completions", &several).await, 400, "unsupported_value").await;

    // The worker holds 128 positions; this prompt alone is longer.
    let long_prompt = "tree ".repeat(400);
    let too_long = json!({"model": MODEL_ID, "prompt": long_prompt, "max_tokens": 4});
    expect_error(http.post("/v1/completions", &too_long).await, 400, "context_length_exceeded").await;

    expect_error(http.get("/v1/nothing-here").await, 404, "unknown_url").await;
    expect_error(http.get("/v1/chat/completions").await, 405, "method_not_allowed").await;

    // The workers are no worse for it.
    assert_eq!(http.post("/v1/chat/completions", &greedy_chat(2, false)).await.status(), 200);
}
