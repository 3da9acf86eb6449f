//! Why a request is refused before it starts, and the gRPC status each reason maps to.

use canopy_models::chat_template::ChatTemplateError;
use canopy_models::tokenizer::TokenizerError;
use thiserror::Error;
use tonic::Status;

use crate::sampling::SamplingError;
use crate::scheduler::Rejection;

/// A request the worker will not run.
#[derive(Debug, Error)]
pub enum RequestError {
    /// A field is missing or out of its domain.
    #[error("{0}")]
    InvalidField(String),
    /// A sampling parameter is out of its domain.
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    /// A field that carries JSON does not hold what it should.
    #[error("{field}: {detail}")]
    Json {
        /// The field, e.g. `messages[2].parts_json`.
        field: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The chat template rejected the conversation.
    #[error("chat template: {0}")]
    Template(#[from] ChatTemplateError),
    /// The text could not be tokenized.
    #[error("tokenizing the prompt: {0}")]
    Tokenizer(#[from] TokenizerError),
    /// The input has no tokens.
    #[error("the prompt is empty")]
    EmptyPrompt,
    /// A token id the model cannot embed.
    #[error("token id {id} is outside the vocabulary of {vocab_size}")]
    TokenOutOfRange {
        /// The offending id.
        id: u32,
        /// The model's vocabulary size.
        vocab_size: usize,
    },
    /// The prompt does not fit the context window.
    #[error("the prompt has {prompt} tokens; the context window holds {max}")]
    PromptTooLong {
        /// Prompt tokens.
        prompt: usize,
        /// Positions one sequence may hold.
        max: usize,
    },
    /// The request names a model this worker does not serve.
    #[error("this worker serves model {served:?}, the request asks for {asked:?}")]
    WrongModel {
        /// The model asked for.
        asked: String,
        /// The model served.
        served: String,
    },
    /// Chat input for a model without a chat template.
    #[error("the model has no chat template; send a prompt or token ids, or start the worker with one")]
    NoChatTemplate,
    /// The deadline passed before the request was taken.
    #[error("the request's deadline has already passed")]
    DeadlineExceeded,
    /// The scheduler refused or dropped the request before it started.
    #[error(transparent)]
    Rejected(#[from] Rejection),
}

impl RequestError {
    /// An invalid field, described by `message`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidField(message.into())
    }

    /// The gRPC status code of this refusal.
    pub fn code(&self) -> tonic::Code {
        use tonic::Code;
        match self {
            Self::InvalidField(_)
            | Self::Sampling(_)
            | Self::Json { .. }
            | Self::Template(_)
            | Self::Tokenizer(_)
            | Self::EmptyPrompt
            | Self::TokenOutOfRange { .. } => Code::InvalidArgument,
            Self::PromptTooLong { .. } => Code::OutOfRange,
            Self::WrongModel { .. } | Self::NoChatTemplate => Code::FailedPrecondition,
            Self::DeadlineExceeded => Code::DeadlineExceeded,
            Self::Rejected(rejection) => match rejection {
                Rejection::QueueFull { .. } => Code::ResourceExhausted,
                Rejection::Draining | Rejection::Aborted => Code::Unavailable,
                Rejection::DeadlineExceeded => Code::DeadlineExceeded,
                Rejection::Invalid(_) => Code::InvalidArgument,
            },
        }
    }
}

impl From<RequestError> for Status {
    fn from(error: RequestError) -> Self {
        Status::new(error.code(), error.to_string())
    }
}
