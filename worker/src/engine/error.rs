//! Engine errors.

use canopy_models::tokenizer::TokenizerError;
use thiserror::Error;

use crate::sampling::SamplingError;

/// Why a generation could not run to its end.
#[derive(Debug, Error)]
pub enum EngineError {
    /// The prompt has no tokens, so there is nothing to continue.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// The prompt does not fit the sequence length the model allows.
    #[error("the prompt has {prompt} tokens, the model allows {max} per sequence")]
    PromptTooLong {
        /// Prompt tokens.
        prompt: usize,
        /// The model's limit.
        max: usize,
    },
    /// A generation must be allowed at least one token.
    #[error("max_tokens must be at least 1")]
    ZeroMaxTokens,
    /// Prefill chunks must hold at least one token.
    #[error("the prefill chunk size must be at least 1")]
    ZeroPrefillChunk,
    /// A token id the model cannot embed.
    #[error("token id {id} is outside the vocabulary of {vocab_size}")]
    TokenOutOfRange {
        /// The offending id.
        id: u32,
        /// The model's vocabulary size.
        vocab_size: usize,
    },
    /// Invalid sampling parameters or unusable logits.
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    /// Detokenization failed.
    #[error("detokenizing: {0}")]
    Tokenizer(#[from] TokenizerError),
    /// The model's forward pass failed.
    #[error("forward pass: {0}")]
    Model(#[source] Box<dyn std::error::Error + Send + Sync>),
}
