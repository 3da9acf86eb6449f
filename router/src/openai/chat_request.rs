//! The body of `POST /v1/chat/completions` and its translation into a worker `GenerateRequest`.

use canopy_proto::v1::{self, ChatInput, GenerateRequest, generate_request::Input};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::error::ApiError;
use super::params::{self, SamplingFields, Stop, StreamOptions};

/// A chat completion request as OpenAI defines it, plus the extensions vLLM and SGLang made
/// common (`top_k`, `min_p`, `repetition_penalty`, `chat_template_kwargs`, `ignore_eos`,
/// `priority`). Unknown fields (`user`, `store`, `metadata`, ...) are accepted and ignored.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatCompletionRequest {
    model: String,
    messages: Vec<Message>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    n: Option<u32>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    stop: Option<Stop>,
    seed: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    min_p: Option<f64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    repetition_penalty: Option<f64>,
    logprobs: Option<bool>,
    top_logprobs: Option<u32>,
    logit_bias: Option<Map<String, Value>>,
    tools: Option<Vec<ToolSpec>>,
    tool_choice: Option<Value>,
    response_format: Option<ResponseFormat>,
    chat_template_kwargs: Option<Map<String, Value>>,
    ignore_eos: Option<bool>,
    priority: Option<i32>,
    functions: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    content: Option<Content>,
    name: Option<String>,
    tool_calls: Option<Vec<ToolCallSpec>>,
    tool_call_id: Option<String>,
    reasoning_content: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged, expecting = "a string or an array of content parts")]
enum Content {
    Text(String),
    Parts(Vec<Map<String, Value>>),
}

#[derive(Debug, Deserialize)]
struct ToolCallSpec {
    #[serde(default)]
    id: String,
    function: FunctionCall,
}

#[derive(Debug, Deserialize)]
struct FunctionCall {
    name: String,
    /// A JSON text per the API; some clients send the object itself, which is accepted too.
    arguments: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ToolSpec {
    #[serde(rename = "type")]
    kind: String,
    function: FunctionSpec,
}

#[derive(Debug, Deserialize)]
struct FunctionSpec {
    name: String,
    description: Option<String>,
    parameters: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct ResponseFormat {
    #[serde(rename = "type")]
    kind: String,
}

/// A validated chat request: what to ask the worker and how to answer the client.
#[derive(Debug)]
pub(crate) struct ChatJob {
    pub(crate) request: GenerateRequest,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    pub(crate) logprobs: bool,
}

const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

impl ChatCompletionRequest {
    /// Checks every field and builds the worker request (without request id and deadline).
    pub(crate) fn into_job(self) -> Result<ChatJob, ApiError> {
        if self.model.trim().is_empty() {
            return Err(ApiError::invalid_field("model", "`model` must name a model (see GET /v1/models)"));
        }
        if self.messages.is_empty() {
            return Err(ApiError::invalid_field("messages", "`messages` must hold at least one message"));
        }
        params::single_choice("n", self.n)?;
        params::no_logit_bias(self.logit_bias.as_ref())?;
        if self.functions.as_ref().is_some_and(|functions| !functions.is_null()) {
            return Err(ApiError::unsupported(
                "functions",
                "`functions` is deprecated and not supported; use `tools`",
            ));
        }
        if let Some(format) = &self.response_format
            && format.kind != "text"
        {
            return Err(ApiError::unsupported(
                "response_format",
                format!("`response_format` of type `{}` is not supported yet", format.kind),
            ));
        }
        let top_logprobs = match (self.logprobs.unwrap_or(false), self.top_logprobs) {
            (true, count) => Some(params::top_logprobs("top_logprobs", count.unwrap_or(0))?),
            (false, None | Some(0)) => None,
            (false, Some(_)) => {
                return Err(ApiError::invalid_field("top_logprobs", "`top_logprobs` needs `logprobs: true`"));
            }
        };
        let sampling = SamplingFields {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            min_p: self.min_p,
            seed: self.seed,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            repetition_penalty: self.repetition_penalty,
        }
        .into_params()?;
        let max_tokens = params::max_new_tokens(&[
            ("max_tokens", self.max_tokens),
            ("max_completion_tokens", self.max_completion_tokens),
        ])?;
        let tools = tools_for_worker(self.tools.unwrap_or_default(), self.tool_choice.as_ref())?;
        let messages = self
            .messages
            .into_iter()
            .enumerate()
            .map(|(index, message)| message_for_worker(index, message))
            .collect::<Result<Vec<_>, _>>()?;
        let template_kwargs_json = self.chat_template_kwargs.map(|kwargs| Value::Object(kwargs).to_string());
        let stream = self.stream.unwrap_or(false);
        Ok(ChatJob {
            request: GenerateRequest {
                model: self.model,
                input: Some(Input::Chat(ChatInput {
                    messages,
                    tools,
                    add_generation_prompt: None,
                    template_kwargs_json: template_kwargs_json.unwrap_or_default(),
                })),
                sampling: Some(sampling),
                stop: params::stop_sequences(self.stop)?,
                max_tokens,
                ignore_eos: self.ignore_eos.unwrap_or(false),
                top_logprobs,
                priority: self.priority.unwrap_or(0),
                ..GenerateRequest::default()
            },
            stream,
            include_usage: stream && self.stream_options.is_some_and(|options| options.include_usage),
            logprobs: top_logprobs.is_some(),
        })
    }
}

fn message_for_worker(index: usize, message: Message) -> Result<v1::ChatMessage, ApiError> {
    let field = |name: &str| format!("messages[{index}].{name}");
    if message.role == "function" {
        return Err(ApiError::unsupported(
            field("role"),
            "role `function` is deprecated and not supported; use `tool`",
        ));
    }
    if !ROLES.contains(&message.role.as_str()) {
        return Err(ApiError::invalid_field(
            field("role"),
            format!("unknown role `{}`; expected one of {}", message.role, ROLES.join(", ")),
        ));
    }
    let content = match message.content {
        Some(Content::Text(text)) => Some(v1::chat_message::Content::Text(text)),
        Some(Content::Parts(parts)) => {
            if let Some(part) = parts.iter().position(|part| !part.get("type").is_some_and(Value::is_string))
            {
                return Err(ApiError::invalid_field(
                    format!("messages[{index}].content[{part}].type"),
                    "every content part needs a `type`",
                ));
            }
            let parts = Value::Array(parts.into_iter().map(Value::Object).collect());
            Some(v1::chat_message::Content::PartsJson(parts.to_string()))
        }
        None if message.role == "assistant" => None,
        None => {
            return Err(ApiError::invalid_field(
                field("content"),
                format!("`content` is required for a `{}` message", message.role),
            ));
        }
    };
    let tool_calls = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|call| v1::ToolCall {
            id: call.id,
            name: call.function.name,
            arguments_json: match call.function.arguments {
                None | Some(Value::Null) => "{}".to_string(),
                Some(Value::String(text)) => text,
                Some(other) => other.to_string(),
            },
        })
        .collect();
    Ok(v1::ChatMessage {
        role: message.role,
        content,
        reasoning_content: message.reasoning_content,
        tool_calls,
        tool_call_id: message.tool_call_id,
        name: message.name,
    })
}

/// The tools the model may call. `tool_choice` "none" hides them; forcing a call ("required" or a
/// named function) needs constrained decoding, which workers do not offer yet.
fn tools_for_worker(tools: Vec<ToolSpec>, tool_choice: Option<&Value>) -> Result<Vec<v1::Tool>, ApiError> {
    match tool_choice {
        None | Some(Value::Null) => {}
        Some(Value::String(choice)) if choice == "auto" => {}
        Some(Value::String(choice)) if choice == "none" => return Ok(Vec::new()),
        Some(other) => {
            return Err(ApiError::unsupported(
                "tool_choice",
                format!("`tool_choice` {other} is not supported yet; use \"auto\" or \"none\""),
            ));
        }
    }
    tools
        .into_iter()
        .enumerate()
        .map(|(index, tool)| {
            if tool.kind != "function" {
                return Err(ApiError::unsupported(
                    format!("tools[{index}].type"),
                    format!("tool type `{}` is not supported; use `function`", tool.kind),
                ));
            }
            Ok(v1::Tool {
                name: tool.function.name,
                description: tool.function.description.unwrap_or_default(),
                parameters_json: tool
                    .function
                    .parameters
                    .unwrap_or_else(|| Value::Object(Map::new()))
                    .to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::json::parse;

    fn job(body: &str) -> Result<ChatJob, ApiError> {
        parse::<ChatCompletionRequest>(body.as_bytes())?.into_job()
    }

    fn param(error: &ApiError) -> Value {
        error.to_json()["error"]["param"].clone()
    }

    #[test]
    fn a_full_request_maps_every_field() {
        let job = job(r#"{
            "model": "qwen3", "stream": true, "stream_options": {"include_usage": true},
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "42"}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "max_tokens": 50, "max_completion_tokens": 20, "stop": "END", "seed": 7,
            "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
            "presence_penalty": 0.1, "frequency_penalty": 0.2, "logprobs": true, "top_logprobs": 3,
            "chat_template_kwargs": {"enable_thinking": false}, "user": "someone"}"#)
        .unwrap();
        assert!(job.stream && job.include_usage && job.logprobs);
        let request = job.request;
        assert_eq!(request.model, "qwen3");
        assert_eq!(request.max_tokens, Some(20));
        assert_eq!(request.stop, vec!["END"]);
        assert_eq!(request.top_logprobs, Some(3));
        let sampling = request.sampling.unwrap();
        assert_eq!((sampling.seed, sampling.top_k, sampling.temperature), (Some(7), Some(40), Some(0.5)));
        let Some(Input::Chat(chat)) = request.input else { panic!("chat input") };
        assert_eq!(chat.template_kwargs_json, r#"{"enable_thinking":false}"#);
        assert_eq!(chat.tools[0].parameters_json, r#"{"type":"object"}"#);
        assert_eq!(chat.messages.len(), 4);
        assert_eq!(
            chat.messages[1].content,
            Some(v1::chat_message::Content::PartsJson(r#"[{"type":"text","text":"hi"}]"#.into()))
        );
        assert_eq!(chat.messages[2].content, None);
        assert_eq!(chat.messages[2].tool_calls[0].arguments_json, r#"{"x":1}"#);
        assert_eq!(chat.messages[3].tool_call_id.as_deref(), Some("call_1"));
    }

    #[test]
    fn unsupported_values_are_refused_by_name() {
        let base = r#""model": "m", "messages": [{"role": "user", "content": "hi"}]"#;
        for (extra, expected) in [
            (r#""n": 2"#, "n"),
            (r#""logit_bias": {"1": 5}"#, "logit_bias"),
            (r#""tool_choice": "required""#, "tool_choice"),
            (r#""response_format": {"type": "json_object"}"#, "response_format"),
            (r#""top_logprobs": 2"#, "top_logprobs"),
            (r#""logprobs": true, "top_logprobs": 21"#, "top_logprobs"),
            (r#""max_tokens": 0"#, "max_tokens"),
        ] {
            let error = job(&format!("{{{base}, {extra}}}")).unwrap_err();
            assert_eq!(param(&error), expected, "{extra}");
        }
    }

    #[test]
    fn messages_are_checked() {
        let error = job(r#"{"model": "m", "messages": []}"#).unwrap_err();
        assert_eq!(param(&error), "messages");
        let error = job(r#"{"model": "m", "messages": [{"role": "wizard", "content": "x"}]}"#).unwrap_err();
        assert_eq!(param(&error), "messages[0].role");
        let error = job(r#"{"model": "m", "messages": [{"role": "user"}]}"#).unwrap_err();
        assert_eq!(param(&error), "messages[0].content");
        let error = job(r#"{"model": "m", "messages": [{"role": "user", "content": 5}]}"#).unwrap_err();
        assert_eq!(param(&error), "messages[0].content");
    }

    #[test]
    fn tool_choice_none_hides_the_tools() {
        let job =
            job(r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}], "tool_choice": "none",
                          "tools": [{"type": "function", "function": {"name": "f"}}]}"#)
            .unwrap();
        let Some(Input::Chat(chat)) = job.request.input else { panic!("chat input") };
        assert!(chat.tools.is_empty());
    }
}
