//! A `ChatInput` checked and turned into what the chat template renders: messages, tool
//! schemas and extra template variables.

use canopy_models::chat_template::{ChatRender, ChatTemplate, Content, Message, Role, ToolCall};
use canopy_proto::v1;
use serde_json::{Map, Value as Json, json};

use super::error::RequestError;

/// A conversation ready for the template.
#[derive(Debug)]
pub struct Conversation {
    messages: Vec<Message>,
    tools: Option<Vec<Json>>,
    add_generation_prompt: bool,
    kwargs: Map<String, Json>,
}

impl Conversation {
    /// Checks every message, tool and JSON field of `input`.
    pub fn from_proto(input: &v1::ChatInput) -> Result<Self, RequestError> {
        if input.messages.is_empty() {
            return Err(RequestError::invalid("chat.messages is empty"));
        }
        let messages = input
            .messages
            .iter()
            .enumerate()
            .map(|(index, message)| message_from_proto(index, message))
            .collect::<Result<_, _>>()?;
        let tools = if input.tools.is_empty() {
            None
        } else {
            Some(
                input
                    .tools
                    .iter()
                    .enumerate()
                    .map(|(index, tool)| tool_schema(index, tool))
                    .collect::<Result<_, _>>()?,
            )
        };
        let kwargs = if input.template_kwargs_json.trim().is_empty() {
            Map::new()
        } else {
            match parse_json("chat.template_kwargs_json", &input.template_kwargs_json)? {
                Json::Object(map) => map,
                _ => return Err(json_error("chat.template_kwargs_json", "must be a JSON object")),
            }
        };
        Ok(Self {
            messages,
            tools,
            add_generation_prompt: input.add_generation_prompt.unwrap_or(true),
            kwargs,
        })
    }

    /// Renders the conversation into prompt text.
    pub fn render(&self, template: &ChatTemplate) -> Result<String, RequestError> {
        Ok(template.render(&ChatRender {
            messages: &self.messages,
            tools: self.tools.as_deref(),
            add_generation_prompt: self.add_generation_prompt,
            kwargs: &self.kwargs,
        })?)
    }
}

fn message_from_proto(index: usize, message: &v1::ChatMessage) -> Result<Message, RequestError> {
    let role = match message.role.as_str() {
        "system" => Role::System,
        "developer" => Role::Developer,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => {
            return Err(RequestError::invalid(format!(
                "messages[{index}].role {other:?} is not one of system, developer, user, assistant, tool"
            )));
        }
    };
    let content = match &message.content {
        None => None,
        Some(v1::chat_message::Content::Text(text)) => Some(Content::Text(text.clone())),
        Some(v1::chat_message::Content::PartsJson(parts)) => {
            let field = format!("messages[{index}].parts_json");
            match parse_json(&field, parts)? {
                Json::Array(parts) => Some(Content::Parts(parts)),
                _ => return Err(json_error(&field, "must be a JSON array of content parts")),
            }
        }
    };
    let tool_calls = message
        .tool_calls
        .iter()
        .enumerate()
        .map(|(call_index, call)| {
            let field = format!("messages[{index}].tool_calls[{call_index}].arguments_json");
            parse_json(&field, &call.arguments_json)?;
            Ok(ToolCall {
                id: (!call.id.is_empty()).then(|| call.id.clone()),
                name: call.name.clone(),
                // Handed over as the text the API carried; the template layer parses objects.
                arguments: Json::String(call.arguments_json.clone()),
            })
        })
        .collect::<Result<_, RequestError>>()?;
    Ok(Message {
        role,
        content,
        reasoning_content: message.reasoning_content.clone(),
        tool_calls,
        tool_call_id: message.tool_call_id.clone(),
        name: message.name.clone(),
    })
}

/// A tool in the OpenAI shape chat templates expect.
fn tool_schema(index: usize, tool: &v1::Tool) -> Result<Json, RequestError> {
    if tool.name.is_empty() {
        return Err(RequestError::invalid(format!("tools[{index}].name is empty")));
    }
    let parameters = if tool.parameters_json.trim().is_empty() {
        json!({"type": "object", "properties": {}})
    } else {
        let field = format!("tools[{index}].parameters_json");
        match parse_json(&field, &tool.parameters_json)? {
            schema @ Json::Object(_) => schema,
            _ => return Err(json_error(&field, "must be a JSON schema object")),
        }
    };
    Ok(json!({
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": parameters},
    }))
}

fn parse_json(field: &str, text: &str) -> Result<Json, RequestError> {
    serde_json::from_str(text).map_err(|error| json_error(field, &format!("not valid JSON: {error}")))
}

fn json_error(field: &str, detail: &str) -> RequestError {
    RequestError::Json { field: field.to_owned(), detail: detail.to_owned() }
}
