//! Model files for canopy.
//!
//! - [`gguf`]: the GGUF model file format, reader and writer.

pub mod gguf;
