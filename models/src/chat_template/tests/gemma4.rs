//! google/gemma-4-31B-it: `<|turn>` blocks, its own declaration syntax for tools, and a
//! thought channel.

use serde_json::json;

use super::*;

fn template() -> ChatTemplate {
    load(
        "google-gemma-4-31B-it.jinja",
        SpecialTokens { bos: Some("<bos>".to_owned()), eos: Some("<eos>".to_owned()) },
    )
}

#[test]
fn system_and_user_with_generation_prompt() {
    assert_eq!(
        render(&template(), &system_and_user(), None, true, json!({})).unwrap(),
        concat!(
            "<bos><|turn>system\nYou are a helpful assistant.<turn|>\n",
            "<|turn>user\nHello!<turn|>\n",
            "<|turn>model\n<|channel>thought\n<channel|>"
        )
    );
}

#[test]
fn tool_call_round_trip() {
    let tools = [weather_tool()];
    let expected = [
        "<bos><|turn>system\n",
        "<|tool>declaration:get_weather{description:<|\"|>Get the current weather in a city.<|\"|>",
        ",parameters:{properties:{",
        "city:{description:<|\"|>City name<|\"|>,type:<|\"|>STRING<|\"|>},",
        "unit:{enum:[<|\"|>celsius<|\"|>,<|\"|>fahrenheit<|\"|>],type:<|\"|>STRING<|\"|>}",
        "},required:[<|\"|>city<|\"|>],type:<|\"|>OBJECT<|\"|>}}<tool|>",
        "<turn|>\n",
        "<|turn>user\nWhat is the weather in Paris?<turn|>\n",
        "<|turn>model\n<|channel>thought\nI should look up the weather.\n<channel|>",
        "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,unit:<|\"|>celsius<|\"|>}<tool_call|>",
        "<|tool_response>response:get_weather{value:<|\"|>22 degrees, sunny<|\"|>}<tool_response|>",
    ]
    .concat();
    assert_eq!(render(&template(), &tool_round_trip(None), Some(&tools), true, json!({})).unwrap(), expected);
}

#[test]
fn enable_thinking_adds_the_think_token() {
    let messages = [Message::text(Role::User, "What is 2+2?")];
    assert_eq!(
        render(&template(), &messages, None, true, json!({"enable_thinking": true})).unwrap(),
        concat!(
            "<bos><|turn>system\n<|think|>\n<turn|>\n",
            "<|turn>user\nWhat is 2+2?<turn|>\n",
            "<|turn>model\n"
        )
    );
}

#[test]
fn earlier_thoughts_are_stripped_from_history() {
    let messages = [
        Message::text(Role::User, "What is 2+2?"),
        answered("Add 2 and 2.", "<|channel>thought\nAdd them.<channel|>4"),
        Message::text(Role::User, "And 3+3?"),
    ];
    assert_eq!(
        render(&template(), &messages, None, true, json!({})).unwrap(),
        concat!(
            "<bos><|turn>user\nWhat is 2+2?<turn|>\n",
            "<|turn>model\n4<turn|>\n",
            "<|turn>user\nAnd 3+3?<turn|>\n",
            "<|turn>model\n<|channel>thought\n<channel|>"
        )
    );
}

#[test]
fn content_parts_with_an_image() {
    let messages = [Message::with_content(
        Role::User,
        Some(Content::Parts(vec![
            json!({"type": "image", "url": "file.png"}),
            json!({"type": "text", "text": " Describe this. "}),
        ])),
    )];
    assert_eq!(
        render(&template(), &messages, None, true, json!({"enable_thinking": true})).unwrap(),
        concat!(
            "<bos><|turn>system\n<|think|>\n<turn|>\n",
            "<|turn>user\n<|image|>Describe this.<turn|>\n",
            "<|turn>model\n"
        )
    );
}

#[test]
fn developer_message_opens_the_system_turn() {
    let messages = [Message::text(Role::Developer, "Answer briefly."), Message::text(Role::User, "Hello!")];
    assert_eq!(
        render(&template(), &messages, None, false, json!({})).unwrap(),
        "<bos><|turn>system\nAnswer briefly.<turn|>\n<|turn>user\nHello!<turn|>\n"
    );
}
