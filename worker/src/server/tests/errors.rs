//! Requests the worker refuses, each with its status code and a message that names the problem.

use std::time::{Duration, SystemTime};

use canopy_proto::v1::{self, generate_event::Event};
use tonic::Code;

use super::{TestWorker, prompt_request};
use crate::test_model::TEST_SEQUENCE_LEN;

/// The status a refused request ends with.
async fn refusal(worker: &mut TestWorker, request: v1::GenerateRequest) -> (Code, String) {
    match worker.client.generate(request).await {
        Ok(_) => panic!("the request was accepted"),
        Err(status) => (status.code(), status.message().to_owned()),
    }
}

fn with_input(input: v1::generate_request::Input) -> v1::GenerateRequest {
    v1::GenerateRequest { input: Some(input), ..prompt_request("", 4) }
}

fn chat(messages: Vec<v1::ChatMessage>) -> v1::GenerateRequest {
    with_input(v1::generate_request::Input::Chat(v1::ChatInput { messages, ..v1::ChatInput::default() }))
}

fn user(text: &str) -> v1::ChatMessage {
    v1::ChatMessage {
        role: "user".into(),
        content: Some(v1::chat_message::Content::Text(text.into())),
        ..v1::ChatMessage::default()
    }
}

#[tokio::test]
async fn bad_inputs_get_clear_statuses() {
    let mut worker = TestWorker::start(1, 4).await;
    let sampling = |params: v1::SamplingParams| v1::GenerateRequest {
        sampling: Some(params),
        ..prompt_request("hi", 4)
    };
    let cases: Vec<(v1::GenerateRequest, Code, &str)> = vec![
        (v1::GenerateRequest::default(), Code::InvalidArgument, "no input"),
        (
            sampling(v1::SamplingParams { temperature: Some(-1.0), ..Default::default() }),
            Code::InvalidArgument,
            "temperature",
        ),
        (
            sampling(v1::SamplingParams { top_p: Some(0.0), ..Default::default() }),
            Code::InvalidArgument,
            "top_p",
        ),
        (
            v1::GenerateRequest { max_tokens: Some(0), ..prompt_request("hi", 1) },
            Code::InvalidArgument,
            "max_tokens",
        ),
        (
            v1::GenerateRequest { stop: vec![String::new()], ..prompt_request("hi", 4) },
            Code::InvalidArgument,
            "stop[0]",
        ),
        (
            v1::GenerateRequest { stop: vec!["x".into(); 17], ..prompt_request("hi", 4) },
            Code::InvalidArgument,
            "stop",
        ),
        (
            v1::GenerateRequest { top_logprobs: Some(21), ..prompt_request("hi", 4) },
            Code::InvalidArgument,
            "top_logprobs",
        ),
        (
            v1::GenerateRequest { request_id: "r".repeat(129), ..prompt_request("hi", 4) },
            Code::InvalidArgument,
            "request_id",
        ),
        (
            v1::GenerateRequest { model: "llama".into(), ..prompt_request("hi", 4) },
            Code::FailedPrecondition,
            "llama",
        ),
        (
            with_input(v1::generate_request::Input::TokenIds(v1::TokenIds { ids: vec![1, 5000] })),
            Code::InvalidArgument,
            "5000",
        ),
        (
            with_input(v1::generate_request::Input::TokenIds(v1::TokenIds { ids: vec![] })),
            Code::InvalidArgument,
            "empty",
        ),
        (
            with_input(v1::generate_request::Input::TokenIds(v1::TokenIds {
                ids: vec![7; TEST_SEQUENCE_LEN + 1],
            })),
            Code::OutOfRange,
            "context window",
        ),
        (
            chat(vec![v1::ChatMessage { role: "wizard".into(), ..user("hi") }]),
            Code::InvalidArgument,
            "wizard",
        ),
        (chat(vec![]), Code::InvalidArgument, "messages is empty"),
        (
            chat(vec![v1::ChatMessage {
                content: Some(v1::chat_message::Content::PartsJson("[{".into())),
                ..user("")
            }]),
            Code::InvalidArgument,
            "messages[0].parts_json",
        ),
        (
            chat(vec![
                user("hi"),
                v1::ChatMessage {
                    role: "assistant".into(),
                    content: None,
                    tool_calls: vec![v1::ToolCall {
                        id: "c1".into(),
                        name: "f".into(),
                        arguments_json: "{oops".into(),
                    }],
                    ..v1::ChatMessage::default()
                },
            ]),
            Code::InvalidArgument,
            "messages[1].tool_calls[0].arguments_json",
        ),
        (
            with_input(v1::generate_request::Input::Chat(v1::ChatInput {
                messages: vec![user("hi")],
                template_kwargs_json: "[1]".into(),
                ..v1::ChatInput::default()
            })),
            Code::InvalidArgument,
            "template_kwargs_json",
        ),
        (
            with_input(v1::generate_request::Input::Chat(v1::ChatInput {
                messages: vec![user("hi")],
                tools: vec![v1::Tool {
                    name: "f".into(),
                    description: String::new(),
                    parameters_json: "7".into(),
                }],
                ..v1::ChatInput::default()
            })),
            Code::InvalidArgument,
            "tools[0].parameters_json",
        ),
        (
            v1::GenerateRequest {
                deadline: Some((SystemTime::now() - Duration::from_secs(1)).into()),
                ..prompt_request("hi", 4)
            },
            Code::DeadlineExceeded,
            "deadline",
        ),
    ];
    for (request, code, needle) in cases {
        let (got, message) = refusal(&mut worker, request).await;
        assert_eq!(got, code, "{message}");
        assert!(message.contains(needle), "{needle:?} not in {message:?}");
    }
    // The worker still serves after every refusal.
    assert!(worker.client.generate(prompt_request("hi", 1)).await.is_ok());
}

#[tokio::test]
async fn count_tokens_refuses_bad_input_too() {
    let mut worker = TestWorker::start(1, 4).await;
    let count = |model: &str, input| v1::CountTokensRequest { model: model.into(), input };
    let wrong_model = count("llama", Some(v1::count_tokens_request::Input::Prompt("hi".into())));
    assert_eq!(worker.client.count_tokens(wrong_model).await.unwrap_err().code(), Code::FailedPrecondition);
    assert_eq!(worker.client.count_tokens(count("", None)).await.unwrap_err().code(), Code::InvalidArgument);
}

#[tokio::test]
async fn a_full_queue_is_resource_exhausted() {
    let mut worker = TestWorker::start(1, 0).await;
    let mut running = worker.client.generate(prompt_request("hello", 200)).await.unwrap().into_inner();
    assert!(matches!(running.message().await.unwrap().unwrap().event, Some(Event::Started(_))));
    let (code, message) = refusal(&mut worker, prompt_request("hi", 2)).await;
    assert_eq!(code, Code::ResourceExhausted, "{message}");
    assert!(message.contains("queue is full"), "{message}");
}
