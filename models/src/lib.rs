//! Model files for canopy.
//!
//! - [`gguf`]: the GGUF model file format, reader and writer.
//! - [`tokenizer`]: tokenizers built from GGUF metadata (or a `tokenizer.json`).
//! - [`chat_template`]: Hugging Face chat templates rendered like transformers does.

pub mod chat_template;
pub mod gguf;
pub mod tokenizer;
