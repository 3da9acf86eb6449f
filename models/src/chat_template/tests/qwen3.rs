//! Qwen/Qwen3-0.6B: ChatML with `<think>` blocks and JSON tool calls.

use serde_json::json;

use super::*;

fn template() -> ChatTemplate {
    load("Qwen-Qwen3-0.6B.jinja", SpecialTokens::default())
}

#[test]
fn system_and_user_with_generation_prompt() {
    assert_eq!(
        render(&template(), &system_and_user(), None, true, json!({})).unwrap(),
        concat!(
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n",
            "<|im_start|>user\nHello!<|im_end|>\n",
            "<|im_start|>assistant\n"
        )
    );
}

#[test]
fn tool_call_round_trip() {
    // The template tests `'</think>' in message.content`, so a tool-call turn needs text.
    let mut messages = vec![Message::text(Role::System, SYSTEM)];
    messages.extend(tool_round_trip(Some(Content::from(""))));
    let tools = [weather_tool()];
    let expected = [
        "<|im_start|>system\nYou are a helpful assistant.\n\n",
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n",
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n",
        WEATHER_TOOL_JSON,
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments ",
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n",
        "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n",
        "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n",
        "<|im_start|>assistant\n<think>\nI should look up the weather.\n</think>\n\n",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>",
        "<|im_end|>\n",
        "<|im_start|>user\n<tool_response>\n22 degrees, sunny\n</tool_response><|im_end|>\n",
        "<|im_start|>assistant\n",
    ]
    .concat();
    assert_eq!(render(&template(), &messages, Some(&tools), true, json!({})).unwrap(), expected);
}

#[test]
fn thinking_is_shown_for_the_last_turn_only() {
    let last_turn = [Message::text(Role::User, "What is 2+2?"), answered("Add 2 and 2.", "4")];
    assert_eq!(
        render(&template(), &last_turn, None, false, json!({})).unwrap(),
        concat!(
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
            "<|im_start|>assistant\n<think>\nAdd 2 and 2.\n</think>\n\n4<|im_end|>\n"
        )
    );
}

#[test]
fn earlier_thinking_is_dropped_and_thinking_can_be_disabled() {
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
fn thinking_inline_in_content_is_split_out() {
    let messages = [
        Message::text(Role::User, "Hi"),
        Message::text(Role::Assistant, "<think>\nGreet back.\n</think>\n\nHello!"),
    ];
    assert_eq!(
        render(&template(), &messages, None, false, json!({})).unwrap(),
        concat!(
            "<|im_start|>user\nHi<|im_end|>\n",
            "<|im_start|>assistant\n<think>\nGreet back.\n</think>\n\nHello!<|im_end|>\n"
        )
    );
}

#[test]
fn tool_call_turn_with_null_content_fails_as_in_transformers() {
    // Jinja2 raises a TypeError on `'</think>' in None`; the engine refuses the same test.
    let tools = [weather_tool()];
    assert!(matches!(
        render(&template(), &tool_round_trip(None), Some(&tools), true, json!({})),
        Err(ChatTemplateError::Render { .. })
    ));
}
