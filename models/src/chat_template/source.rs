//! Where a model's chat template comes from: an override file, or the GGUF's own.

use std::path::Path;

use super::{ChatTemplate, ChatTemplateError, SpecialTokens};
use crate::gguf::{GgufError, GgufFile};
use crate::tokenizer::Tokenizer;

/// The GGUF metadata key holding the chat template.
pub const CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

impl ChatTemplate {
    /// Compiles the template of a model: the file at `override_path` when given, else the GGUF's
    /// `tokenizer.chat_template`. `bos_token` / `eos_token` are the tokenizer's.
    pub fn for_model(
        file: &GgufFile,
        tokenizer: &Tokenizer,
        override_path: Option<&Path>,
    ) -> Result<Self, ChatTemplateError> {
        let special = SpecialTokens {
            bos: tokenizer.special().bos.as_ref().map(|token| token.text.clone()),
            eos: tokenizer.special().eos.as_ref().map(|token| token.text.clone()),
        };
        let source = match override_path {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|source| ChatTemplateError::Read { path: path.to_owned(), source })?,
            None => match file.get_str(CHAT_TEMPLATE_KEY) {
                Ok(source) => source.to_owned(),
                Err(GgufError::MissingKey { .. }) => return Err(ChatTemplateError::Missing),
                Err(error) => return Err(ChatTemplateError::Metadata(error)),
            },
        };
        Self::new(source, special)
    }
}
