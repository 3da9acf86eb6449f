//! Model files for canopy.
//!
//! - [`gguf`]: the GGUF model file format, reader and writer.
//! - [`synth`]: random-weight GGUF models at real shapes, for tests and benchmarks.

pub mod gguf;
pub mod synth;
