//! Conversation messages in the shape Hugging Face chat templates expect.

use std::borrow::Cow;

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value as Json;

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions that frame the conversation.
    System,
    /// OpenAI's newer name for system instructions; some templates accept it.
    Developer,
    /// The human side.
    User,
    /// The model's turns, possibly with reasoning and tool calls.
    Assistant,
    /// The result of a tool call, answering an assistant's `tool_calls`.
    Tool,
}

/// The content of a message: plain text, or a list of typed parts.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Parts such as `{"type": "text", "text": ..}` or `{"type": "image", ..}`, passed to the
    /// template unchanged.
    Parts(Vec<Json>),
}

impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

impl From<String> for Content {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

/// One message of a conversation.
///
/// Serializes as the dict a template sees: `role` and `content` always (absent content is
/// `null`, as an OpenAI request carries it), the other fields only when present, so that
/// templates testing `'tool_calls' in message` or `message.name is defined` see what they
/// would see in transformers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// What is said; `None` for an assistant turn that only calls tools.
    pub content: Option<Content>,
    /// The reasoning ("thinking") that preceded an assistant's answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls made by an assistant turn.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the id of the call it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a tool result: the name of the tool that produced it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Message {
    /// A message with the given role and text content and no other fields.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Self::with_content(role, Some(Content::Text(text.into())))
    }

    /// A message with the given role and content and no other fields.
    pub fn with_content(role: Role, content: Option<Content>) -> Self {
        Self {
            role,
            content,
            reasoning_content: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
        }
    }
}

/// A function call made by an assistant turn.
///
/// Serializes as `{"id", "type": "function", "function": {"name", "arguments"}}` (without
/// `id` when there is none). Templates follow the transformers convention that `arguments`
/// is a mapping (`arguments|tojson`, `arguments.items()`), while the OpenAI API carries it
/// as a JSON string: a string that holds a JSON object is therefore handed to the template
/// as that object; any other value is handed over as it is.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The call's id, which a later tool message refers to.
    pub id: Option<String>,
    /// The name of the function called.
    pub name: String,
    /// The arguments, as a JSON object or as a string holding one.
    pub arguments: Json,
}

impl ToolCall {
    /// The arguments as templates see them.
    fn template_arguments(&self) -> Cow<'_, Json> {
        if let Json::String(text) = &self.arguments
            && let Ok(parsed @ Json::Object(_)) = serde_json::from_str::<Json>(text)
        {
            return Cow::Owned(parsed);
        }
        Cow::Borrowed(&self.arguments)
    }
}

#[derive(Serialize)]
struct FunctionCall<'a> {
    name: &'a str,
    arguments: Cow<'a, Json>,
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        if let Some(id) = &self.id {
            map.serialize_entry("id", id)?;
        }
        map.serialize_entry("type", "function")?;
        map.serialize_entry(
            "function",
            &FunctionCall { name: &self.name, arguments: self.template_arguments() },
        )?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn plain_message_has_role_and_content_only() {
        let message = Message::text(Role::User, "hi");
        assert_eq!(serde_json::to_string(&message).unwrap(), r#"{"role":"user","content":"hi"}"#);
    }

    #[test]
    fn tool_call_turn_keeps_null_content_and_nests_function() {
        let mut message = Message::with_content(Role::Assistant, None);
        message.tool_calls.push(ToolCall {
            id: Some("call_1".into()),
            name: "get_weather".into(),
            arguments: json!("{\"city\": \"Paris\", \"days\": 2}"),
        });
        assert_eq!(
            serde_json::to_value(&message).unwrap(),
            json!({
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}
                }]
            })
        );
    }

    #[test]
    fn arguments_that_are_not_a_json_object_stay_as_given() {
        for arguments in [json!("not json"), json!("[1, 2]"), json!(7)] {
            let call = ToolCall { id: None, name: "f".into(), arguments: arguments.clone() };
            assert_eq!(
                serde_json::to_value(&call).unwrap(),
                json!({"type": "function", "function": {"name": "f", "arguments": arguments}})
            );
        }
    }

    #[test]
    fn tool_result_and_parts_serialize_as_given() {
        let mut message = Message::with_content(
            Role::Tool,
            Some(Content::Parts(vec![json!({"type": "text", "text": "22 C"})])),
        );
        message.tool_call_id = Some("call_1".into());
        message.name = Some("get_weather".into());
        assert_eq!(
            serde_json::to_string(&message).unwrap(),
            r#"{"role":"tool","content":[{"type":"text","text":"22 C"}],"tool_call_id":"call_1","name":"get_weather"}"#
        );
    }
}
