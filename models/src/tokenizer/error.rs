//! Errors of tokenizer construction, encoding and decoding.

use std::path::PathBuf;

/// Everything that can go wrong building or using a [`super::Tokenizer`].
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A required metadata key is absent.
    #[error("tokenizer metadata: missing key `{0}`")]
    MissingKey(&'static str),
    /// A metadata key has a value of the wrong type or shape.
    #[error("tokenizer metadata: key `{key}`: {reason}")]
    InvalidKey { key: &'static str, reason: String },
    /// `tokenizer.ggml.model` names a tokenizer family this crate does not implement.
    #[error("unsupported tokenizer model `{0}`")]
    UnsupportedModel(String),
    /// A byte-level BPE vocabulary without `tokenizer.ggml.pre`: guessing the split rules would
    /// silently change tokenization, so it is refused.
    #[error("tokenizer model `{model}` needs `tokenizer.ggml.pre` to choose its pre-tokenizer")]
    MissingPreTokenizer { model: String },
    /// `tokenizer.ggml.pre` names a profile this crate does not know.
    #[error("unknown pre-tokenizer `{0}` (tokenizer.ggml.pre)")]
    UnknownPreTokenizer(String),
    /// The vocabulary is empty.
    #[error("tokenizer vocabulary is empty")]
    EmptyVocabulary,
    /// Two vocabulary entries have the same text.
    #[error("duplicate token {text:?} at ids {first} and {second}")]
    DuplicateToken { text: String, first: u32, second: u32 },
    /// A merge rule is not of the form `left right`.
    #[error("malformed merge #{index}: {merge:?}")]
    MalformedMerge { index: usize, merge: String },
    /// A special-token id lies outside the vocabulary.
    #[error("{role} token id {id} is outside the vocabulary of {vocab_size} tokens")]
    SpecialIdOutOfRange { role: &'static str, id: u64, vocab_size: usize },
    /// The metadata asks to add a special token it does not define.
    #[error("{flag} is set but the {role} token id is missing")]
    MissingSpecialToken { flag: &'static str, role: &'static str },
    /// The GGUF file's metadata could not be read as the tokenizer needs it.
    #[error("reading tokenizer metadata from GGUF: {0}")]
    Gguf(#[from] crate::gguf::GgufError),
    /// A `tokenizer.json` file could not be loaded.
    #[error("loading {path}: {message}")]
    TokenizerJson { path: PathBuf, message: String },
    /// The `tokenizers` library rejected the assembled tokenizer or failed at run time.
    #[error("tokenizers: {0}")]
    Library(String),
    /// A token id passed to decoding lies outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    UnknownId { id: u32, vocab_size: usize },
}

impl TokenizerError {
    pub(crate) fn library(error: impl std::fmt::Display) -> Self {
        Self::Library(error.to_string())
    }
}
