//! Model files for canopy.
//!
//! - [`gguf`]: the GGUF model file format, reader and writer.
//! - [`tokenizer`]: tokenizers built from GGUF metadata (or a `tokenizer.json`).
//! - [`chat_template`]: Hugging Face chat templates rendered like transformers does.
//! - [`synth`]: random-weight models with the tensors and metadata of real converted ones.
//! - [`arch`]: model architectures (Qwen3 dense) over the compute backend.
//! - [`kv`]: the paged KV cache the architectures read and write.

pub mod arch;
pub mod chat_template;
pub mod gguf;
pub mod kv;
pub mod synth;
pub mod tokenizer;
