//! Qwen3-Coder: ChatML with XML-style tool declarations and calls; no thinking.

use serde_json::json;

use super::*;

fn template() -> ChatTemplate {
    load("Qwen3-Coder.jinja", SpecialTokens::default())
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
fn tool_call_round_trip_with_default_system_prompt() {
    let tools = [weather_tool()];
    let expected = [
        "<|im_start|>system\n",
        "You are Qwen, a helpful AI assistant that can interact with a computer to solve tasks.",
        "\n\n# Tools\n\nYou have access to the following tools:\n\n<tools>",
        "\n<function>\n<name>get_weather</name>",
        "\n<description>Get the current weather in a city.</description>",
        "\n<parameters>",
        "\n<parameter>\n<name>city</name>\n<type>string</type>\n<description>City name</description>\n</parameter>",
        "\n<parameter>\n<name>unit</name>\n<type>string</type>\n<enum>[\"celsius\", \"fahrenheit\"]</enum>\n</parameter>",
        "\n<required>[\"city\"]</required>",
        "\n</parameters>",
        "\n</function>",
        "\n</tools>",
        "\n\nIf you choose to call a tool ONLY reply in the following format with NO suffix:\n\n",
        "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n",
        "<parameter=example_parameter_2>\nvalue_2\n</parameter>\n</function>\n</tool_call>\n\n",
        "<IMPORTANT>\nReminder:\n",
        "- Function calls MUST follow the specified format: the tool calling block MUST begin with an ",
        "opening <tool_call> tag and end with a closing </tool_call> tag.\n",
        "- Required parameters MUST be specified\n",
        "- You may provide optional reasoning for your function call in natural language BEFORE the ",
        "function call, but NOT after\n",
        "- If there is no function call available, answer the question like normal with your current ",
        "knowledge and do not tell the user about function calls\n</IMPORTANT>",
        "<|im_end|>\n",
        "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n",
        "<|im_start|>assistant",
        "\n<tool_call>\n<function=get_weather>\n",
        "<parameter=city>\nParis\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n",
        "</function>\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\n22 degrees, sunny\n</tool_response>\n<|im_end|>\n",
        "<|im_start|>assistant\n",
    ]
    .concat();
    assert_eq!(render(&template(), &tool_round_trip(None), Some(&tools), true, json!({})).unwrap(), expected);
}

#[test]
fn non_string_arguments_are_written_as_python_would() {
    let mut call = weather_call(Some(Content::from("Checking.")));
    call.tool_calls[0].arguments =
        json!({"days": 3, "verbose": true, "cities": ["Paris", "Lyon"], "extra": null});
    let messages = [Message::text(Role::User, QUESTION), call];
    assert_eq!(
        render(&template(), &messages, None, false, json!({})).unwrap(),
        concat!(
            "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n",
            "<|im_start|>assistant\nChecking.\n",
            "\n<tool_call>\n<function=get_weather>\n",
            "<parameter=days>\n3\n</parameter>\n",
            "<parameter=verbose>\nTrue\n</parameter>\n",
            "<parameter=cities>\n[\"Paris\", \"Lyon\"]\n</parameter>\n",
            "<parameter=extra>\nNone\n</parameter>\n",
            "</function>\n</tool_call><|im_end|>\n"
        )
    );
}

#[test]
fn reasoning_is_not_rendered_by_this_template() {
    let messages = [Message::text(Role::User, "What is 2+2?"), answered("Add 2 and 2.", "4")];
    assert_eq!(
        render(&template(), &messages, None, true, json!({"enable_thinking": false})).unwrap(),
        concat!(
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n",
            "<|im_start|>assistant\n4<|im_end|>\n",
            "<|im_start|>assistant\n"
        )
    );
}
