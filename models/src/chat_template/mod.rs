//! Chat templates: render a conversation into a prompt the way Hugging Face transformers'
//! `apply_chat_template` does.
//!
//! The template comes from the GGUF key `tokenizer.chat_template` or from a file the
//! caller names. It is compiled once into a [`ChatTemplate`] and rendered for every
//! request; rendering takes `&self`, so one template serves all threads.

mod environment;
mod error;
mod generation_tag;
mod message;
mod source;
mod tojson;

#[cfg(test)]
mod tests;

use minijinja::{Environment, Value};
use serde_json::{Map, Value as Json};

pub use error::ChatTemplateError;
pub use message::{Content, Message, Role, ToolCall};
pub use source::CHAT_TEMPLATE_KEY;

const TEMPLATE_NAME: &str = "chat_template";

/// Variables the renderer sets itself; template kwargs may not shadow them.
const RESERVED_NAMES: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

/// The special tokens transformers exposes to templates.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Text of the beginning-of-sequence token, exposed as `bos_token`.
    pub bos: Option<String>,
    /// Text of the end-of-sequence token, exposed as `eos_token`.
    pub eos: Option<String>,
}

/// One rendering request.
#[derive(Debug, Clone, Copy)]
pub struct ChatRender<'a> {
    /// The conversation so far.
    pub messages: &'a [Message],
    /// Tool (function) schemas offered to the model; `None` when tools are off.
    pub tools: Option<&'a [Json]>,
    /// Whether to end with the header of a new assistant turn.
    pub add_generation_prompt: bool,
    /// Extra template variables such as `enable_thinking` or `reasoning_effort`.
    pub kwargs: &'a Map<String, Json>,
}

/// A compiled chat template, ready to render conversations.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    special: SpecialTokens,
}

impl ChatTemplate {
    /// Compiles `source`; syntax errors come back as [`ChatTemplateError::Syntax`].
    pub fn new(source: impl Into<String>, special: SpecialTokens) -> Result<Self, ChatTemplateError> {
        let source: String = source.into();
        let source = generation_tag::rewrite_generation_tags(&source).into_owned();
        let mut env =
            environment::hf_environment().map_err(|error| ChatTemplateError::from_compile(&error))?;
        env.add_template_owned(TEMPLATE_NAME, source)
            .map_err(|error| ChatTemplateError::from_compile(&error))?;
        Ok(Self { env, special })
    }

    /// Renders a conversation into prompt text.
    ///
    /// Variables are set as transformers sets them: the special tokens first, then the
    /// kwargs (which may override them), then `messages`, `tools` (`None` without tools),
    /// `documents` (always `None`) and `add_generation_prompt`.
    pub fn render(&self, request: &ChatRender<'_>) -> Result<String, ChatTemplateError> {
        if let Some(name) = RESERVED_NAMES.iter().find(|name| request.kwargs.contains_key(**name)) {
            return Err(ChatTemplateError::ReservedKwarg((*name).to_owned()));
        }
        let messages = serde_json::to_value(request.messages).map_err(|error| ChatTemplateError::Render {
            line: None,
            detail: format!("cannot convert messages: {error}"),
        })?;
        let special = [("bos_token", &self.special.bos), ("eos_token", &self.special.eos)];
        let mut variables: Vec<(String, Value)> = special
            .into_iter()
            .filter_map(|(name, token)| Some((name.to_owned(), Value::from(token.as_deref()?))))
            .collect();
        variables.extend(request.kwargs.iter().map(|(name, value)| (name.clone(), json_to_value(value))));
        variables.push(("messages".to_owned(), json_to_value(&messages)));
        let tools = request.tools.map(|tools| Value::from_iter(tools.iter().map(json_to_value)));
        variables.push(("tools".to_owned(), Value::from(tools)));
        variables.push(("documents".to_owned(), Value::from(())));
        variables.push(("add_generation_prompt".to_owned(), Value::from(request.add_generation_prompt)));
        let template =
            self.env.get_template(TEMPLATE_NAME).map_err(|error| ChatTemplateError::from_render(&error))?;
        template.render(Value::from_pairs(variables)).map_err(|error| ChatTemplateError::from_render(&error))
    }
}

/// Converts JSON into template values, keeping the key order of objects.
fn json_to_value(json: &Json) -> Value {
    match json {
        Json::Null => Value::from(()),
        Json::Bool(flag) => Value::from(*flag),
        Json::Number(number) => {
            if let Some(int) = number.as_i64() {
                Value::from(int)
            } else if let Some(int) = number.as_u64() {
                Value::from(int)
            } else {
                Value::from(number.as_f64().unwrap_or(f64::NAN))
            }
        }
        Json::String(text) => Value::from(text.as_str()),
        Json::Array(items) => Value::from_iter(items.iter().map(json_to_value)),
        Json::Object(map) => {
            Value::from_pairs(map.iter().map(|(key, value)| (key.as_str(), json_to_value(value))))
        }
    }
}
