//! Rendering tests. This module holds the shared conversation fixtures and the tests of
//! the environment's own features; each real template has a module of its own, whose
//! expected prompts were written by reading that template.

mod gemma4;
mod laguna;
mod llama31;
mod model_source;
mod qwen3;
mod qwen35;
mod qwen3_coder;

use serde_json::json;

use super::*;

const SYSTEM: &str = "You are a helpful assistant.";
const QUESTION: &str = "What is the weather in Paris?";
const REASONING: &str = "I should look up the weather.";
const TOOL_RESULT: &str = "22 degrees, sunny";

fn load(file: &str, special: SpecialTokens) -> ChatTemplate {
    let path = format!("{}/testdata/templates/{file}", env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(&path).unwrap();
    ChatTemplate::new(source, special).unwrap()
}

fn render(
    template: &ChatTemplate,
    messages: &[Message],
    tools: Option<&[Json]>,
    add_generation_prompt: bool,
    kwargs: Json,
) -> Result<String, ChatTemplateError> {
    let Json::Object(kwargs) = kwargs else {
        panic!("kwargs must be a JSON object");
    };
    template.render(&ChatRender { messages, tools, add_generation_prompt, kwargs: &kwargs })
}

fn system_and_user() -> Vec<Message> {
    vec![Message::text(Role::System, SYSTEM), Message::text(Role::User, "Hello!")]
}

fn weather_tool() -> Json {
    json!({
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
                },
                "required": ["city"]
            }
        }
    })
}

/// The assistant turn that calls the weather tool, with its arguments as the OpenAI API
/// sends them (a JSON string) and some reasoning before the call.
fn weather_call(content: Option<Content>) -> Message {
    let mut message = Message::with_content(Role::Assistant, content);
    message.reasoning_content = Some(REASONING.to_owned());
    message.tool_calls.push(ToolCall {
        id: Some("call_1".to_owned()),
        name: "get_weather".to_owned(),
        arguments: json!("{\"city\": \"Paris\", \"unit\": \"celsius\"}"),
    });
    message
}

fn weather_result() -> Message {
    let mut message = Message::text(Role::Tool, TOOL_RESULT);
    message.tool_call_id = Some("call_1".to_owned());
    message.name = Some("get_weather".to_owned());
    message
}

/// user question, assistant tool call, tool result.
fn tool_round_trip(tool_call_content: Option<Content>) -> Vec<Message> {
    vec![Message::text(Role::User, QUESTION), weather_call(tool_call_content), weather_result()]
}

fn answered(reasoning: &str, answer: &str) -> Message {
    let mut message = Message::text(Role::Assistant, answer);
    message.reasoning_content = Some(reasoning.to_owned());
    message
}

/// `{"type": "function", "function": ...}` of [`weather_tool`] as `json.dumps` writes it.
const WEATHER_TOOL_JSON: &str = concat!(
    r#"{"type": "function", "function": {"name": "get_weather", "#,
    r#""description": "Get the current weather in a city.", "parameters": {"type": "object", "#,
    r#""properties": {"city": {"type": "string", "description": "City name"}, "#,
    r#""unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}}"#
);

fn inline(source: &str) -> ChatTemplate {
    ChatTemplate::new(source, SpecialTokens::default()).unwrap()
}

fn render_inline(source: &str, kwargs: Json) -> Result<String, ChatTemplateError> {
    render(&inline(source), &[], None, false, kwargs)
}

#[test]
fn chat_template_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ChatTemplate>();
}

#[test]
fn raise_exception_is_a_typed_error_with_the_message() {
    let template =
        inline("{% if messages|length == 0 %}{{ raise_exception('No messages provided.') }}{% endif %}");
    match render(&template, &[], None, false, json!({})) {
        Err(ChatTemplateError::Raised { message }) => assert_eq!(message, "No messages provided."),
        other => panic!("expected a raised exception, got {other:?}"),
    }
}

#[test]
fn raise_exception_inside_a_macro_is_still_typed() {
    let source = "{% macro check(x) %}{% if not x %}{{ raise_exception('bad: ' ~ x) }}{% endif %}{% endmacro %}{{ check(0) }}";
    match render_inline(source, json!({})) {
        Err(ChatTemplateError::Raised { message }) => assert_eq!(message, "bad: 0"),
        other => panic!("expected a raised exception, got {other:?}"),
    }
}

#[test]
fn malformed_template_is_a_compile_error_with_its_line() {
    let source = "{% for message in messages %}\n{{ message.content }}\n{% if %}\n{% endfor %}";
    match ChatTemplate::new(source, SpecialTokens::default()) {
        Err(ChatTemplateError::Syntax { line, detail }) => {
            assert_eq!(line, Some(3));
            assert!(!detail.is_empty());
        }
        other => panic!("expected a syntax error, got {other:?}"),
    }
    for source in ["{% if x %}", "{{ x", "{% endfor %}", "{{ 'unterminated }}"] {
        assert!(matches!(
            ChatTemplate::new(source, SpecialTokens::default()),
            Err(ChatTemplateError::Syntax { .. })
        ));
    }
}

#[test]
fn engine_failures_are_render_errors_with_a_line() {
    match render_inline("ok\n{{ 1 + 'a' }}", json!({})) {
        Err(ChatTemplateError::Render { line, .. }) => assert_eq!(line, Some(2)),
        other => panic!("expected a render error, got {other:?}"),
    }
}

#[test]
fn tojson_writes_like_python_json_dumps() {
    let kwargs = json!({
        "value": {"zeta": 1, "alpha": [true, null, 2.5, "naïve ✓ \"q\" \\ <b>&"], "nested": {"b": {}, "a": []}}
    });
    assert_eq!(
        render_inline("{{ value|tojson }}", kwargs.clone()).unwrap(),
        r#"{"zeta": 1, "alpha": [true, null, 2.5, "naïve ✓ \"q\" \\ <b>&"], "nested": {"b": {}, "a": []}}"#
    );
    assert_eq!(
        render_inline("{{ value|tojson(indent=2) }}", kwargs.clone()).unwrap(),
        "{\n  \"zeta\": 1,\n  \"alpha\": [\n    true,\n    null,\n    2.5,\n    \"naïve ✓ \\\"q\\\" \\\\ <b>&\"\n  ],\n  \"nested\": {\n    \"b\": {},\n    \"a\": []\n  }\n}"
    );
    assert_eq!(
        render_inline("{{ value.nested|tojson(sort_keys=true, separators=(',', ':')) }}", kwargs.clone())
            .unwrap(),
        r#"{"a":[],"b":{}}"#
    );
    assert_eq!(
        render_inline("{{ value.alpha[3]|tojson(ensure_ascii=true) }}", kwargs).unwrap(),
        r#""na\u00efve \u2713 \"q\" \\ <b>&""#
    );
    assert_eq!(
        render_inline("{{ text|tojson(ensure_ascii=true) }}|{{ '\t\x01'|tojson }}", json!({"text": "😀"}))
            .unwrap(),
        r#""\ud83d\ude00"|"\t\u0001""#
    );
    assert_eq!(
        render_inline("{{ {'k': 1e16, 2: 0.00001}|tojson }}", json!({})).unwrap(),
        r#"{"k": 1e+16, "2": 1e-05}"#
    );
}

#[test]
fn tojson_rejects_what_python_cannot_serialize() {
    assert!(matches!(
        render_inline("{{ missing|tojson }}", json!({})),
        Err(ChatTemplateError::Render { .. })
    ));
    assert!(matches!(
        render_inline("{{ 1|tojson(indent=[1]) }}", json!({})),
        Err(ChatTemplateError::Render { .. })
    ));
    assert!(matches!(
        render_inline("{{ 1|tojson(colour=1) }}", json!({})),
        Err(ChatTemplateError::Render { .. })
    ));
}

#[test]
fn strftime_now_formats_the_local_date() {
    use chrono::Datelike;
    const MONTHS: [&str; 12] =
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let expected = |date: chrono::DateTime<chrono::Local>| {
        let month = MONTHS[date.month0() as usize];
        format!("{:02} {month} {} / {}-{:02}", date.day(), date.year(), date.year(), date.month())
    };
    let before = expected(chrono::Local::now());
    let rendered =
        render_inline("{{ strftime_now('%d %b %Y') }} / {{ strftime_now('%Y-%m') }}", json!({})).unwrap();
    let after = expected(chrono::Local::now());
    assert!(rendered == before || rendered == after, "{rendered} is neither {before} nor {after}");
}

#[test]
fn strftime_now_with_a_bad_format_is_an_error_not_a_panic() {
    assert!(matches!(
        render_inline("{{ strftime_now('%Q %') }}", json!({})),
        Err(ChatTemplateError::Render { .. })
    ));
}

#[test]
fn variables_are_set_like_transformers() {
    let template = ChatTemplate::new(
        "{{ bos_token }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}|{{ reasoning_effort }}|{{ messages|length }}",
        SpecialTokens {
            bos: Some("<s>".into()),
            eos: Some("</s>".into()),
        },
    )
    .unwrap();
    let messages = [Message::text(Role::User, "hi")];
    assert_eq!(
        render(&template, &messages, None, true, json!({"reasoning_effort": "high", "eos_token": "<eos>"}))
            .unwrap(),
        "<s>|<eos>|True|True|True|high|1"
    );
    let no_tokens = inline("[{{ bos_token }}]{{ bos_token is defined }}");
    assert_eq!(render(&no_tokens, &messages, None, false, json!({})).unwrap(), "[]False");
}

#[test]
fn kwargs_may_not_shadow_the_renderer_variables() {
    for name in ["messages", "tools", "documents", "add_generation_prompt"] {
        match render_inline("x", json!({ name: 1 })) {
            Err(ChatTemplateError::ReservedKwarg(reserved)) => assert_eq!(reserved, name),
            other => panic!("expected a reserved kwarg error, got {other:?}"),
        }
    }
}

#[test]
fn messages_reach_the_template_in_transformers_shape() {
    let template = inline(concat!(
        "{% for m in messages %}{{ m.role }}:{{ m.keys()|list|join(',') }}",
        "{% if m.tool_calls %}:{{ m.tool_calls[0].function.arguments.city }}{% endif %};{% endfor %}"
    ));
    let messages = tool_round_trip(None);
    assert_eq!(
        render(&template, &messages, None, false, json!({})).unwrap(),
        concat!(
            "user:role,content;",
            "assistant:role,content,reasoning_content,tool_calls:Paris;",
            "tool:role,content,tool_call_id,name;"
        )
    );
}

#[test]
fn content_parts_pass_through_to_the_template() {
    let template = inline(
        "{% for part in messages[0].content %}[{{ part.type }}:{{ part.text or part.image_url.url }}]{% endfor %}",
    );
    let messages = [Message::with_content(
        Role::User,
        Some(Content::Parts(vec![
            json!({"type": "text", "text": "Describe"}),
            json!({"type": "image_url", "image_url": {"url": "file.png"}}),
        ])),
    )];
    assert_eq!(
        render(&template, &messages, None, false, json!({})).unwrap(),
        "[text:Describe][image_url:file.png]"
    );
}
