//! Errors of compiling and rendering chat templates.

use std::error::Error as StdError;

use thiserror::Error;

/// What went wrong while compiling or rendering a chat template.
#[derive(Debug, Error)]
pub enum ChatTemplateError {
    /// The template source is not valid Jinja.
    #[error("chat template does not compile (line {}): {detail}", display_line(*.line))]
    Syntax {
        /// 1-based line of the offending construct, when known.
        line: Option<usize>,
        /// What the parser objected to.
        detail: String,
    },
    /// The template called `raise_exception(message)`, typically to reject a conversation
    /// shape it does not support.
    #[error("chat template raised an exception: {message}")]
    Raised {
        /// The message the template passed to `raise_exception`.
        message: String,
    },
    /// Rendering failed for another reason (type errors, unknown filters, bad arguments).
    #[error("chat template failed to render (line {}): {detail}", display_line(*.line))]
    Render {
        /// 1-based line where rendering failed, when known.
        line: Option<usize>,
        /// What went wrong.
        detail: String,
    },
    /// The model has no `tokenizer.chat_template` and no override file was given.
    #[error("the model has no chat template (tokenizer.chat_template); give one with an override file")]
    Missing,
    /// The model's `tokenizer.chat_template` is not a string.
    #[error("cannot read the model's chat template")]
    Metadata(#[source] crate::gguf::GgufError),
    /// The override file could not be read.
    #[error("cannot read chat template file {}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A template kwarg would shadow a variable the renderer sets itself.
    #[error("template kwarg `{0}` is reserved for the renderer")]
    ReservedKwarg(String),
}

/// Carried as the source of the engine error that `raise_exception` produces, so that the
/// renderer can tell a deliberate exception from an engine failure.
#[derive(Debug, Error)]
#[error("{0}")]
pub(super) struct RaisedException(pub(super) String);

fn display_line(line: Option<usize>) -> String {
    line.map_or_else(|| "unknown".to_owned(), |line| line.to_string())
}

fn detail_of(error: &minijinja::Error) -> String {
    match error.detail() {
        Some(detail) => format!("{}: {detail}", error.kind()),
        None => error.kind().to_string(),
    }
}

impl ChatTemplateError {
    pub(super) fn from_compile(error: &minijinja::Error) -> Self {
        Self::Syntax { line: error.line(), detail: detail_of(error) }
    }

    pub(super) fn from_render(error: &minijinja::Error) -> Self {
        let mut cause: Option<&(dyn StdError + 'static)> = Some(error);
        while let Some(current) = cause {
            if let Some(raised) = current.downcast_ref::<RaisedException>() {
                return Self::Raised { message: raised.0.clone() };
            }
            cause = current.source();
        }
        Self::Render { line: error.line(), detail: detail_of(error) }
    }
}
