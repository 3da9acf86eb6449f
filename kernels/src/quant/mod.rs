//! GGML tensor element types and their block layouts.
//!
//! Every type stores a row as consecutive blocks of `block_size()` elements taking `type_size()`
//! bytes each. The numeric ids are the ones GGUF files store (ggml's `ggml_type`); ids that ggml has
//! retired are not listed, so a file naming one is rejected by [`GgmlType::from_id`].

mod types;

pub use types::GgmlType;
