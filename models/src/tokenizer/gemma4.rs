//! Gemma 4 (`tokenizer.ggml.model = gemma4`): SentencePiece-style BPE.
//!
//! Unlike the GPT-2 family the merges work on raw UTF-8 with spaces written as `▁`, there is no
//! word-level split except at newline runs, and characters missing from the vocabulary fall back
//! to `<0xNN>` byte tokens. No space is prepended. llama.cpp also routes the `gemma4` pre-tokenizer
//! name of other BPE files here.

use super::bpe::{BpeOptions, bpe_model, parse_merges, vocab_map};
use super::error::TokenizerError;
use super::metadata::TokenizerMetadata;
use super::pretokenizer::{self, PreProfile};
use super::spm;

/// Builds a Gemma 4 style tokenizer with the newline-run splits of `profile`.
pub(crate) fn build(
    meta: &TokenizerMetadata,
    profile: &PreProfile,
) -> Result<tokenizers::Tokenizer, TokenizerError> {
    if meta.merges.is_empty() {
        return Err(TokenizerError::MissingKey("tokenizer.ggml.merges"));
    }
    let vocab = vocab_map(&meta.tokens)?;
    let merges = parse_merges(&meta.merges, &vocab)?;
    let options = BpeOptions { ignore_merges: false, byte_fallback: true };
    let mut tokenizer = tokenizers::Tokenizer::new(bpe_model(vocab, merges, options, None)?);
    tokenizer.with_normalizer(Some(spm::normalizer(false)?)).map_err(TokenizerError::library)?;
    tokenizer.with_pre_tokenizer(Some(pretokenizer::build(profile)?));
    tokenizer.with_decoder(Some(spm::decoder(false)?));
    Ok(tokenizer)
}
