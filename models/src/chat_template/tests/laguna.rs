//! poolside/Laguna-XS.2: XML-like turns, thinking off by default, and transformers'
//! `{% generation %}` tag around assistant turns.

use serde_json::json;

use super::*;

const DEFAULT_SYSTEM: &str = "You are a helpful, conversationally-fluent assistant made by Poolside. You are here to be helpful to users through natural language conversations.";

fn template() -> ChatTemplate {
    load("poolside-Laguna-XS.2.jinja", SpecialTokens::default())
}

#[test]
fn system_and_user_with_generation_prompt() {
    assert_eq!(
        render(&template(), &system_and_user(), None, true, json!({})).unwrap(),
        concat!(
            "〈|EOS|〉<system>\n\nYou are a helpful assistant.\n</system>\n",
            "<user>\nHello!\n</user>\n",
            "<assistant>\n</think>"
        )
    );
}

#[test]
fn tool_call_round_trip_with_default_system_prompt() {
    let tools = [weather_tool()];
    let expected = [
        "〈|EOS|〉<system>\n\n",
        DEFAULT_SYSTEM,
        "\n\n### Tools\n\n",
        "You may call functions to assist with the user query.\n",
        "All available function signatures are listed below:\n<available_tools>\n",
        WEATHER_TOOL_JSON,
        "\n</available_tools>\n\n",
        "For each function call, return an unescaped XML-like object with function name and arguments ",
        "within '<tool_call>' and '</tool_call>' tags, like here:\n",
        "<tool_call>function-name\n<arg_key>argument-key</arg_key>\n<arg_value>value-of-argument-key</arg_value>\n",
        "</tool_call>\n</system>\n",
        "<user>\nWhat is the weather in Paris?\n</user>\n",
        "<assistant>\n<think>\nI should look up the weather.\n</think>\n",
        "<tool_call>get_weather\n",
        "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n",
        "<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n",
        "</tool_call>\n</assistant>\n",
        "<tool_response>\n22 degrees, sunny\n</tool_response>\n",
        "<assistant>\n</think>",
    ]
    .concat();
    assert_eq!(render(&template(), &tool_round_trip(None), Some(&tools), true, json!({})).unwrap(), expected);
}

#[test]
fn non_string_arguments_go_through_tojson() {
    let mut call = weather_call(None);
    call.tool_calls[0].arguments = json!({"days": 3, "where": {"city": "Zürich"}});
    let messages = [Message::text(Role::User, QUESTION), call];
    let rendered = render(&template(), &messages, None, false, json!({})).unwrap();
    let assistant = rendered.split("</user>\n").nth(1).unwrap();
    assert_eq!(
        assistant,
        concat!(
            "<assistant>\n<think>\nI should look up the weather.\n</think>\n",
            "<tool_call>get_weather\n",
            "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n",
            "<arg_key>where</arg_key>\n<arg_value>{\"city\": \"Zürich\"}</arg_value>\n",
            "</tool_call>\n</assistant>\n"
        )
    );
}

#[test]
fn thinking_enabled_shows_reasoning_and_opens_think() {
    let history = [
        Message::text(Role::User, "What is 2+2?"),
        answered("Add 2 and 2.", "4"),
        Message::text(Role::User, "And 3+3?"),
    ];
    let expected = [
        "〈|EOS|〉<system>\n\n",
        DEFAULT_SYSTEM,
        "\n</system>\n",
        "<user>\nWhat is 2+2?\n</user>\n",
        "<assistant>\n<think>\nAdd 2 and 2.\n</think>\n4\n</assistant>\n",
        "<user>\nAnd 3+3?\n</user>\n",
        "<assistant>\n<think>",
    ]
    .concat();
    assert_eq!(
        render(&template(), &history, None, true, json!({"enable_thinking": true})).unwrap(),
        expected
    );
}

#[test]
fn reasoning_inline_in_content_is_split_out() {
    let messages =
        [Message::text(Role::User, "Hi"), Message::text(Role::Assistant, "<think>Greet.</think>\n\nHello!")];
    let rendered = render(&template(), &messages, None, false, json!({})).unwrap();
    assert!(
        rendered
            .ends_with("<user>\nHi\n</user>\n<assistant>\n<think>\nGreet.\n</think>\nHello!\n</assistant>\n"),
        "{rendered}"
    );
}
