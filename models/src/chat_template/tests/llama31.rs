//! meta-llama/Llama-3.1-8B-Instruct: header blocks, tools in the first user message, JSON
//! tool calls answered by `ipython` turns.

use serde_json::json;

use super::*;

fn template() -> ChatTemplate {
    load(
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        SpecialTokens { bos: Some("<|begin_of_text|>".to_owned()), eos: Some("<|eot_id|>".to_owned()) },
    )
}

#[test]
fn system_and_user_with_generation_prompt() {
    assert_eq!(
        render(&template(), &system_and_user(), None, true, json!({})).unwrap(),
        concat!(
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n",
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n",
            "You are a helpful assistant.<|eot_id|>",
            "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>",
            "<|start_header_id|>assistant<|end_header_id|>\n\n"
        )
    );
}

#[test]
fn date_string_kwarg_replaces_the_default_date() {
    let rendered =
        render(&template(), &system_and_user(), None, false, json!({"date_string": "02 Jan 2026"})).unwrap();
    assert_eq!(
        rendered,
        concat!(
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n",
            "Cutting Knowledge Date: December 2023\nToday Date: 02 Jan 2026\n\n",
            "You are a helpful assistant.<|eot_id|>",
            "<|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|>"
        )
    );
}

#[test]
fn tool_call_round_trip() {
    let mut messages = vec![Message::text(Role::System, SYSTEM)];
    messages.extend(tool_round_trip(None));
    let tools = [weather_tool()];
    let tool_json_indented = concat!(
        "{\n",
        "    \"type\": \"function\",\n",
        "    \"function\": {\n",
        "        \"name\": \"get_weather\",\n",
        "        \"description\": \"Get the current weather in a city.\",\n",
        "        \"parameters\": {\n",
        "            \"type\": \"object\",\n",
        "            \"properties\": {\n",
        "                \"city\": {\n",
        "                    \"type\": \"string\",\n",
        "                    \"description\": \"City name\"\n",
        "                },\n",
        "                \"unit\": {\n",
        "                    \"type\": \"string\",\n",
        "                    \"enum\": [\n",
        "                        \"celsius\",\n",
        "                        \"fahrenheit\"\n",
        "                    ]\n",
        "                }\n",
        "            },\n",
        "            \"required\": [\n",
        "                \"city\"\n",
        "            ]\n",
        "        }\n",
        "    }\n",
        "}"
    );
    let expected = [
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n",
        "Environment: ipython\n",
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n",
        "You are a helpful assistant.<|eot_id|>",
        "<|start_header_id|>user<|end_header_id|>\n\n",
        "Given the following functions, please respond with a JSON for a function call ",
        "with its proper arguments that best answers the given prompt.\n\n",
        "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.",
        "Do not use variables.\n\n",
        tool_json_indented,
        "\n\n",
        "What is the weather in Paris?<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}<|eot_id|>",
        "<|start_header_id|>ipython<|end_header_id|>\n\n\"22 degrees, sunny\"<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ]
    .concat();
    assert_eq!(render(&template(), &messages, Some(&tools), true, json!({})).unwrap(), expected);
}

#[test]
fn reasoning_is_not_rendered_by_this_template() {
    let messages = [Message::text(Role::User, "What is 2+2?"), answered("Add 2 and 2.", "4")];
    assert_eq!(
        render(&template(), &messages, None, false, json!({"enable_thinking": true})).unwrap(),
        concat!(
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n",
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>",
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>",
            "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>"
        )
    );
}

#[test]
fn parallel_tool_calls_are_rejected_by_the_template() {
    let mut call = weather_call(None);
    call.tool_calls.push(call.tool_calls[0].clone());
    let messages = [Message::text(Role::User, QUESTION), call];
    match render(&template(), &messages, None, false, json!({})) {
        Err(ChatTemplateError::Raised { message }) => {
            assert_eq!(message, "This model only supports single tool-calls at once!");
        }
        other => panic!("expected a raised exception, got {other:?}"),
    }
}
