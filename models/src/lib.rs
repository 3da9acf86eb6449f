//! Model files for canopy.
//!
//! - [`gguf`]: the GGUF model file format, reader and writer.
//! - [`tokenizer`]: tokenizers rebuilt from GGUF metadata or loaded from `tokenizer.json`.

pub mod gguf;
pub mod tokenizer;
