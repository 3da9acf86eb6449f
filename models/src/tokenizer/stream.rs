//! Incremental detokenization that only ever emits whole characters.
//!
//! Decoding a token on its own is wrong in general: byte-level and byte-fallback tokens may carry
//! part of a UTF-8 character, and SentencePiece decoders treat the first token of a sequence
//! specially. The decoder therefore keeps the ids of the last emitted chunk as context, decodes
//! context plus pending ids, and emits the text beyond the context's own decoding once it does
//! not end in an incomplete character (which decoders render as U+FFFD).

use super::Tokenizer;
use super::error::TokenizerError;

const REPLACEMENT: char = char::REPLACEMENT_CHARACTER;

/// Turns generated token ids into text chunks; see [`Tokenizer::stream_decoder`].
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    skip_special: bool,
    /// Context ids (already emitted) followed by pending ids.
    ids: Vec<u32>,
    /// How many leading entries of `ids` are context.
    context_len: usize,
    /// The decoding of the context alone.
    context_text: String,
}

impl<'a> StreamDecoder<'a> {
    pub(crate) fn new(tokenizer: &'a Tokenizer, skip_special: bool) -> Self {
        Self { tokenizer, skip_special, ids: Vec::new(), context_len: 0, context_text: String::new() }
    }

    /// Adds one token; returns the text it completes, if any. Text that ends in an incomplete
    /// character (or in U+FFFD produced by the model) is held back until a later token or
    /// [`Self::finish`].
    pub fn step(&mut self, id: u32) -> Result<Option<String>, TokenizerError> {
        self.tokenizer.check_id(id)?;
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids, self.skip_special)?;
        if text.ends_with(REPLACEMENT) {
            return Ok(None);
        }
        let chunk = self.new_text(text)?;
        if chunk.is_empty() {
            return Ok(None);
        }
        self.ids.drain(..self.context_len);
        self.context_len = self.ids.len();
        self.context_text = self.tokenizer.decode(&self.ids, self.skip_special)?;
        Ok(Some(chunk))
    }

    /// Flushes what is still held back, rendering incomplete characters as U+FFFD.
    pub fn finish(self) -> Result<Option<String>, TokenizerError> {
        if self.ids.len() == self.context_len {
            return Ok(None);
        }
        let text = self.tokenizer.decode(&self.ids, self.skip_special)?;
        let chunk = self.new_text(text)?;
        Ok((!chunk.is_empty()).then_some(chunk))
    }

    /// The part of `text` (the decoding of context + pending) that the context did not produce.
    /// Invalid bytes may change how the context itself decodes; the pending ids are then
    /// decoded on their own rather than emitting text twice.
    fn new_text(&self, text: String) -> Result<String, TokenizerError> {
        match text.strip_prefix(self.context_text.as_str()) {
            Some(rest) => Ok(rest.to_owned()),
            None => self.tokenizer.decode(&self.ids[self.context_len..], self.skip_special),
        }
    }
}
