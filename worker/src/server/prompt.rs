//! From a request's input (chat, text or token ids) to the prompt's token ids.

use std::sync::Arc;

use canopy_models::chat_template::ChatTemplate;
use canopy_models::tokenizer::Tokenizer;
use canopy_proto::v1;

use super::chat::Conversation;
use super::error::RequestError;
use crate::scheduler::ModelLimits;

/// Renders and tokenizes inputs for one model.
pub struct Prompter {
    tokenizer: Arc<Tokenizer>,
    template: Option<ChatTemplate>,
    limits: ModelLimits,
}

impl Prompter {
    /// A prompter with the model's tokenizer, its compiled chat template (if it has one) and
    /// its limits.
    pub fn new(tokenizer: Arc<Tokenizer>, template: Option<ChatTemplate>, limits: ModelLimits) -> Self {
        Self { tokenizer, template, limits }
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Arc<Tokenizer> {
        &self.tokenizer
    }

    /// The token ids of a conversation rendered through the chat template.
    pub fn chat(&self, input: &v1::ChatInput) -> Result<Vec<u32>, RequestError> {
        let template = self.template.as_ref().ok_or(RequestError::NoChatTemplate)?;
        let text = Conversation::from_proto(input)?.render(template)?;
        // Templates write BOS themselves when the model wants it.
        Ok(self.tokenizer.encode(&text, false)?)
    }

    /// The token ids of raw text, with BOS when the model asks for it.
    pub fn text(&self, text: &str) -> Result<Vec<u32>, RequestError> {
        Ok(self.tokenizer.encode(text, true)?)
    }

    /// The prompt of a `GenerateRequest`, checked against the model's limits.
    pub fn generate_input(
        &self,
        input: Option<&v1::generate_request::Input>,
    ) -> Result<Vec<u32>, RequestError> {
        use v1::generate_request::Input;
        let ids = match input {
            None => return Err(RequestError::invalid("no input: set one of chat, prompt, token_ids")),
            Some(Input::Chat(chat)) => self.chat(chat)?,
            Some(Input::Prompt(text)) => self.text(text)?,
            Some(Input::TokenIds(ids)) => self.token_ids(&ids.ids)?,
        };
        if ids.is_empty() {
            return Err(RequestError::EmptyPrompt);
        }
        if ids.len() > self.limits.max_sequence_len {
            return Err(RequestError::PromptTooLong { prompt: ids.len(), max: self.limits.max_sequence_len });
        }
        Ok(ids)
    }

    /// The number of tokens of a `CountTokensRequest`'s input.
    pub fn count_input(
        &self,
        input: Option<&v1::count_tokens_request::Input>,
    ) -> Result<usize, RequestError> {
        use v1::count_tokens_request::Input;
        match input {
            None => Err(RequestError::invalid("no input: set one of chat, prompt")),
            Some(Input::Chat(chat)) => Ok(self.chat(chat)?.len()),
            Some(Input::Prompt(text)) => Ok(self.text(text)?.len()),
        }
    }

    fn token_ids(&self, ids: &[u32]) -> Result<Vec<u32>, RequestError> {
        let vocab_size = self.limits.vocab_size;
        match ids.iter().find(|&&id| id as usize >= vocab_size) {
            Some(&id) => Err(RequestError::TokenOutOfRange { id, vocab_size }),
            None => Ok(ids.to_vec()),
        }
    }
}
