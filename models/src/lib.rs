//! Model files for canopy.
//!
//! - [`gguf`]: the GGUF model file format, reader and writer.
//! - [`tokenizer`]: tokenizers built from GGUF metadata (or a `tokenizer.json`).
//! - [`chat_template`]: Hugging Face chat templates rendered like transformers does.
//! - [`synth`]: random-weight models with the tensors and metadata of real converted ones.

pub mod chat_template;
pub mod gguf;
pub mod synth;
pub mod tokenizer;
