//! Qwen3.5-4B: ChatML with thinking on by default, XML-style tool calls and vision parts.

use serde_json::json;

use super::*;

fn template() -> ChatTemplate {
    load("Qwen3.5-4B.jinja", SpecialTokens::default())
}

#[test]
fn system_and_user_with_generation_prompt_opens_thinking() {
    let rendered = render(&template(), &system_and_user(), None, true, json!({})).unwrap();
    assert_eq!(
        rendered,
        concat!(
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n",
            "<|im_start|>user\nHello!<|im_end|>\n",
            "<|im_start|>assistant\n<think>\n"
        )
    );
}

#[test]
fn tool_call_round_trip() {
    let mut messages = vec![Message::text(Role::System, SYSTEM)];
    messages.extend(tool_round_trip(None));
    let tools = [weather_tool()];
    let expected = [
        "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n",
        WEATHER_TOOL_JSON,
        "\n</tools>",
        "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n",
        "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n",
        "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n",
        "</parameter>\n</function>\n</tool_call>\n\n",
        "<IMPORTANT>\nReminder:\n",
        "- Function calls MUST follow the specified format: an inner <function=...></function> block must be ",
        "nested within <tool_call></tool_call> XML tags\n",
        "- Required parameters MUST be specified\n",
        "- You may provide optional reasoning for your function call in natural language BEFORE the ",
        "function call, but NOT after\n",
        "- If there is no function call available, answer the question like normal with your current ",
        "knowledge and do not tell the user about function calls\n</IMPORTANT>",
        "\n\nYou are a helpful assistant.<|im_end|>\n",
        "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n",
        "<|im_start|>assistant\n<think>\nI should look up the weather.\n</think>\n\n",
        "<tool_call>\n<function=get_weather>\n",
        "<parameter=city>\nParis\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n",
        "</function>\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\n22 degrees, sunny\n</tool_response><|im_end|>\n",
        "<|im_start|>assistant\n<think>\n",
    ]
    .concat();
    assert_eq!(render(&template(), &messages, Some(&tools), true, json!({})).unwrap(), expected);
}

#[test]
fn thinking_turn_is_trimmed_and_shown() {
    let messages = [Message::text(Role::User, "What is 2+2?"), answered("\n Add 2 and 2. \n", "4")];
    assert_eq!(
        render(&template(), &messages, None, false, json!({})).unwrap(),
        concat!(
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
            "<|im_start|>assistant\n<think>\nAdd 2 and 2.\n</think>\n\n4<|im_end|>\n"
        )
    );
}

#[test]
fn thinking_disabled_closes_the_think_block() {
    let history = [
        Message::text(Role::User, "What is 2+2?"),
        answered("Add 2 and 2.", "4"),
        Message::text(Role::User, "And 3+3?"),
    ];
    assert_eq!(
        render(&template(), &history, None, true, json!({"enable_thinking": false})).unwrap(),
        concat!(
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
            "<|im_start|>assistant\n4<|im_end|>\n",
            "<|im_start|>user\nAnd 3+3?<|im_end|>\n",
            "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        )
    );
}

#[test]
fn content_parts_with_an_image() {
    let messages = [Message::with_content(
        Role::User,
        Some(Content::Parts(vec![
            json!({"type": "text", "text": "What is in this picture?"}),
            json!({"type": "image", "image": "file.png"}),
        ])),
    )];
    assert_eq!(
        render(&template(), &messages, None, true, json!({"add_vision_id": true})).unwrap(),
        concat!(
            "<|im_start|>user\nWhat is in this picture?Picture 1: <|vision_start|><|image_pad|><|vision_end|><|im_end|>\n",
            "<|im_start|>assistant\n<think>\n"
        )
    );
}

#[test]
fn template_errors_surface_as_raised_exceptions() {
    let messages = [Message::text(Role::Assistant, "Hi")];
    match render(&template(), &messages, None, true, json!({})) {
        Err(ChatTemplateError::Raised { message }) => {
            assert_eq!(message, "No user query found in messages.");
        }
        other => panic!("expected a raised exception, got {other:?}"),
    }
}
