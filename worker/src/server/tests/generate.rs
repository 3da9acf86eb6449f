//! Generate, CountTokens and Info on good input.

use std::ops::ControlFlow;

use canopy_models::chat_template::{ChatRender, ChatTemplate, Message, Role};
use canopy_proto::v1::{self, generate_event::Event};

use super::{MODEL_ID, TestWorker, collect, finished, output, prompt_request};
use crate::engine::{GenerateRequest, StopConditions, generate};
use crate::sampling::SamplingParams;
use crate::test_model::{TEST_SEQUENCE_LEN, tiny_file, tiny_model, tiny_tokenizer};

const PROMPT: &str = "def quicksort(arr):";

#[tokio::test]
async fn generate_streams_started_text_usage_finished_in_order() {
    let mut worker = TestWorker::start(2, 4).await;
    let stream = worker.client.generate(prompt_request(PROMPT, 8)).await.unwrap().into_inner();
    let events = collect(stream).await;

    let tokenizer = tiny_tokenizer();
    let prompt = tokenizer.encode(PROMPT, true).unwrap();
    let request = GenerateRequest {
        prompt: prompt.clone(),
        sampling: SamplingParams::greedy(),
        stop: StopConditions { ignore_eos: true, ..StopConditions::max_tokens(8) },
        top_logprobs: None,
    };
    let alone =
        generate(&mut tiny_model(1, 64), &tokenizer, &request, 64, |_| ControlFlow::Continue(())).unwrap();

    assert!(
        matches!(events[0], Event::Started(v1::Started { prompt_tokens, .. }) if prompt_tokens as usize == prompt.len())
    );
    assert!(events[1..9].iter().all(|event| matches!(event, Event::Text(_))), "{events:?}");
    assert_eq!(output(&events), (alone.tokens, alone.text));
    assert_eq!(
        events[9],
        Event::Usage(v1::Usage { prompt_tokens: prompt.len() as u32, completion_tokens: 8 })
    );
    assert_eq!(finished(&events).reason(), v1::FinishReason::Length);
    assert_eq!(events.len(), 11);
}

#[tokio::test]
async fn token_ids_stop_strings_and_logprobs() {
    let mut worker = TestWorker::start(2, 4).await;
    let tokenizer = tiny_tokenizer();
    let ids = tokenizer.encode(PROMPT, true).unwrap();
    let request = v1::GenerateRequest {
        input: Some(v1::generate_request::Input::TokenIds(v1::TokenIds { ids: ids.clone() })),
        top_logprobs: Some(3),
        ..prompt_request("", 6)
    };
    let events = collect(worker.client.generate(request).await.unwrap().into_inner()).await;
    let (tokens, text) = output(&events);
    assert_eq!(tokens.len(), 6);
    for event in &events {
        if let Event::Text(delta) = event {
            let [logprob] = &delta.logprobs[..] else { panic!("one logprob per token: {delta:?}") };
            assert_eq!(logprob.token_id, delta.token_ids[0]);
            assert_eq!(logprob.top.len(), 3);
            assert!(logprob.top[0].logprob >= logprob.logprob && logprob.logprob <= 0.0);
        }
    }

    // The same generation with a stop string from its own text ends before it.
    let stop: String = text.chars().skip(3).take(2).collect();
    let request = v1::GenerateRequest { stop: vec![stop.clone()], ..prompt_request(PROMPT, 6) };
    let events = collect(worker.client.generate(request).await.unwrap().into_inner()).await;
    assert_eq!(output(&events).1, text[..text.find(&stop).unwrap()]);
    let end = finished(&events);
    assert_eq!((end.reason(), end.matched_stop.as_str()), (v1::FinishReason::StopString, stop.as_str()));
}

fn chat_input() -> v1::ChatInput {
    let message = |role: &str, text: &str| v1::ChatMessage {
        role: role.into(),
        content: Some(v1::chat_message::Content::Text(text.into())),
        ..v1::ChatMessage::default()
    };
    v1::ChatInput {
        messages: vec![message("system", "Be brief."), message("user", "Sort [3, 1, 2].")],
        template_kwargs_json: r#"{"enable_thinking": false}"#.into(),
        ..v1::ChatInput::default()
    }
}

#[tokio::test]
async fn chat_input_goes_through_the_template_for_count_and_generate() {
    let mut worker = TestWorker::start(2, 4).await;
    let tokenizer = tiny_tokenizer();
    let template = ChatTemplate::for_model(&tiny_file(), &tokenizer, None).unwrap();
    let messages = [Message::text(Role::System, "Be brief."), Message::text(Role::User, "Sort [3, 1, 2].")];
    let mut kwargs = serde_json::Map::new();
    kwargs.insert("enable_thinking".into(), false.into());
    let rendered = template
        .render(&ChatRender {
            messages: &messages,
            tools: None,
            add_generation_prompt: true,
            kwargs: &kwargs,
        })
        .unwrap();
    assert!(rendered.ends_with("<think>\n\n</think>\n\n"), "{rendered}");
    let expected = tokenizer.encode(&rendered, false).unwrap().len() as u32;

    let count = v1::CountTokensRequest {
        model: MODEL_ID.into(),
        input: Some(v1::count_tokens_request::Input::Chat(chat_input())),
    };
    assert_eq!(worker.client.count_tokens(count).await.unwrap().into_inner().tokens, expected);
    let request = v1::GenerateRequest {
        input: Some(v1::generate_request::Input::Chat(chat_input())),
        ..prompt_request("", 3)
    };
    let events = collect(worker.client.generate(request).await.unwrap().into_inner()).await;
    assert!(
        matches!(events[0], Event::Started(v1::Started { prompt_tokens, .. }) if prompt_tokens == expected)
    );

    let prompt = v1::CountTokensRequest {
        model: String::new(),
        input: Some(v1::count_tokens_request::Input::Prompt(PROMPT.into())),
    };
    let tokens = worker.client.count_tokens(prompt).await.unwrap().into_inner().tokens;
    assert_eq!(tokens as usize, tokenizer.encode(PROMPT, true).unwrap().len());
}

#[tokio::test]
async fn info_describes_the_served_model() {
    let mut worker = TestWorker::start(3, 7).await;
    let info = worker.client.info(v1::InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.model_id, MODEL_ID);
    assert_eq!(info.architecture, "qwen3");
    assert_eq!(info.context_length as usize, TEST_SEQUENCE_LEN);
    assert_eq!((info.vocab_size, info.max_running, info.max_queued), (1024, 3, 7));
    assert_eq!(info.draft_residency(), v1::DraftResidency::None);
    assert!(info.chat && info.draft_model_id.is_empty());
    assert_eq!((info.backend.as_str(), info.version.as_str()), ("cpu", env!("CARGO_PKG_VERSION")));
}
