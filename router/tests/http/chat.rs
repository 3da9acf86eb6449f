//! `POST /v1/chat/completions`, streaming and not.

use canopy_proto::v1::generate_event::Event;
use canopy_proto::v1::generate_request::Input;
use canopy_proto::v1::{FinishReason, TextDelta, TokenLogprob, TopLogprob};
use serde_json::{Value, json};

use crate::fake_worker::{FakeWorker, Step, always, finished, reply, started, text, usage};
use crate::harness::{TestRouter, sse_data, sse_json};

fn hello() -> Value {
    json!({"model": "tiny", "messages": [{"role": "user", "content": "Say hello"}]})
}

#[tokio::test]
async fn a_chat_answer_carries_the_workers_text_usage_and_request_id() {
    let worker = FakeWorker::start("tiny", always(reply(&["Hello", " world"], FinishReason::Stop))).await;
    let router = TestRouter::start(&[&worker.address]).await;
    router.wait_ready().await;

    let response = router
        .client
        .post(router.url("/v1/chat/completions"))
        .header("x-request-id", "trace-42")
        .json(&hello())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-request-id"], "trace-42");
    assert_eq!(response.headers()["x-canopy-worker"], worker.address.as_str());
    let body: Value = response.json().await.unwrap();
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"), "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "tiny");
    assert!(body["created"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(body["choices"][0]["message"], json!({"role": "assistant", "content": "Hello world"}));
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"], json!({"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}));

    let request = worker.last_request();
    assert_eq!(request.request_id, "trace-42");
    assert_eq!(request.model, "tiny");
    let Some(Input::Chat(chat)) = request.input else { panic!("a chat input") };
    assert_eq!(chat.messages[0].role, "user");
}

#[tokio::test]
async fn request_fields_reach_the_worker() {
    let worker = FakeWorker::start("tiny", always(reply(&["ok"], FinishReason::Stop))).await;
    let router = TestRouter::start(&[&worker.address]).await;
    router.wait_ready().await;
    let body = json!({
        "model": "tiny",
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
        "tools": [{"type": "function", "function": {"name": "weather", "description": "forecast",
                   "parameters": {"type": "object"}}}],
        "max_tokens": 64, "max_completion_tokens": 32, "stop": ["</s>", "END"], "seed": 11,
        "temperature": 0.7, "top_p": 0.95, "top_k": 20, "min_p": 0.1, "repetition_penalty": 1.05,
        "presence_penalty": 0.5, "frequency_penalty": -0.5, "logprobs": true, "top_logprobs": 2,
        "chat_template_kwargs": {"enable_thinking": false}, "user": "u-1",
    });
    let response = router.post("/v1/chat/completions", &body).await;
    assert_eq!(response.status(), 200);

    let request = worker.last_request();
    assert_eq!(request.max_tokens, Some(32));
    assert_eq!(request.stop, vec!["</s>", "END"]);
    assert_eq!(request.top_logprobs, Some(2));
    let sampling = request.sampling.unwrap();
    assert_eq!(sampling.seed, Some(11));
    assert_eq!(sampling.top_k, Some(20));
    assert_eq!(sampling.temperature, Some(0.7));
    assert_eq!(sampling.frequency_penalty, Some(-0.5));
    let Some(Input::Chat(chat)) = request.input else { panic!("a chat input") };
    assert_eq!(chat.template_kwargs_json, r#"{"enable_thinking":false}"#);
    assert_eq!(chat.tools[0].name, "weather");
    assert_eq!(chat.messages[1].tool_calls[0].arguments_json, r#"{"city":"Oslo"}"#);
    assert_eq!(chat.messages[2].tool_call_id.as_deref(), Some("c1"));
}

#[tokio::test]
async fn a_chat_stream_sends_role_text_finish_usage_and_done() {
    let worker = FakeWorker::start("tiny", always(reply(&["Hel", "lo"], FinishReason::Length))).await;
    let router = TestRouter::start(&[&worker.address]).await;
    router.wait_ready().await;

    let mut body = hello();
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let response = router.post("/v1/chat/completions", &body).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let text = response.text().await.unwrap();

    assert_eq!(sse_data(&text).last().map(String::as_str), Some("[DONE]"));
    let chunks = sse_json(&text);
    assert_eq!(chunks.len(), 5, "role, two texts, finish, usage: {text}");
    let id = chunks[0]["id"].as_str().unwrap();
    assert!(id.starts_with("chatcmpl-"));
    for chunk in &chunks {
        assert_eq!(chunk["id"], id);
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["model"], "tiny");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
    assert_eq!(chunks[1]["choices"][0]["delta"]["content"], "Hel");
    assert_eq!(chunks[2]["choices"][0]["delta"]["content"], "lo");
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "length");
    for chunk in &chunks[..4] {
        assert_eq!(chunk["usage"], Value::Null);
    }
    assert_eq!(chunks[4]["choices"], json!([]));
    assert_eq!(chunks[4]["usage"], json!({"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}));
}

#[tokio::test]
async fn a_stream_without_include_usage_has_no_usage_field() {
    let worker = FakeWorker::start("tiny", always(reply(&["a"], FinishReason::StopString))).await;
    let router = TestRouter::start(&[&worker.address]).await;
    router.wait_ready().await;
    let mut body = hello();
    body["stream"] = json!(true);
    let text = router.post("/v1/chat/completions", &body).await.text().await.unwrap();
    let chunks = sse_json(&text);
    assert_eq!(chunks.len(), 3, "{text}");
    assert!(chunks.iter().all(|chunk| chunk.get("usage").is_none()), "{text}");
    assert_eq!(chunks[2]["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn logprobs_are_rendered_in_the_chat_form() {
    let delta = TextDelta {
        text: "Hi".into(),
        token_ids: vec![5],
        logprobs: vec![TokenLogprob {
            token_id: 5,
            token: "Hi".into(),
            logprob: -0.25,
            top: vec![TopLogprob { token_id: 5, token: "Hi".into(), logprob: -0.25 }],
        }],
    };
    let steps = vec![started(3), Step::Send(Event::Text(delta)), usage(3, 1), finished(FinishReason::Stop)];
    let worker = FakeWorker::start("tiny", always(steps)).await;
    let router = TestRouter::start(&[&worker.address]).await;
    router.wait_ready().await;
    let mut body = hello();
    body["logprobs"] = json!(true);
    body["top_logprobs"] = json!(1);

    let answer: Value = router.post("/v1/chat/completions", &body).await.json().await.unwrap();
    let content = &answer["choices"][0]["logprobs"]["content"];
    assert_eq!(content[0]["token"], "Hi");
    assert_eq!(content[0]["logprob"], -0.25);
    assert_eq!(content[0]["bytes"], json!([72, 105]));
    assert_eq!(content[0]["top_logprobs"][0]["token"], "Hi");

    body["stream"] = json!(true);
    let text = router.post("/v1/chat/completions", &body).await.text().await.unwrap();
    let chunks = sse_json(&text);
    assert_eq!(chunks[1]["choices"][0]["logprobs"]["content"][0]["logprob"], -0.25, "{text}");
}

#[tokio::test]
async fn a_request_without_id_gets_one_that_reaches_the_worker() {
    let worker = FakeWorker::start("tiny", always(reply(&["x"], FinishReason::Stop))).await;
    let router = TestRouter::start(&[&worker.address]).await;
    router.wait_ready().await;
    let response = router.post("/v1/chat/completions", &hello()).await;
    let id = response.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(id.starts_with("req-"), "{id}");
    assert_eq!(worker.last_request().request_id, id);
}

#[tokio::test]
async fn a_silent_stream_gets_keep_alive_comments() {
    let steps = vec![
        started(3),
        Step::Sleep(std::time::Duration::from_millis(350)),
        text("late", 1),
        usage(3, 1),
        finished(FinishReason::Stop),
    ];
    let worker = FakeWorker::start("tiny", always(steps)).await;
    let router = TestRouter::start(&[&worker.address]).await;
    router.wait_ready().await;
    let mut body = hello();
    body["stream"] = json!(true);
    let text = router.post("/v1/chat/completions", &body).await.text().await.unwrap();
    assert!(text.lines().any(|line| line.starts_with(':')), "a comment while the worker is silent: {text}");
    let chunks = sse_json(&text);
    assert_eq!(chunks[1]["choices"][0]["delta"]["content"], "late");
}
