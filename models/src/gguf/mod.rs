//! GGUF model files: a reader and a streaming writer.
//!
//! GGUF (versions 2 and 3, little-endian) is a header (`GGUF`, version, tensor count, metadata
//! count), typed metadata key-value pairs, tensor infos (name, dimensions, [`GgmlType`], offset),
//! padding to `general.alignment`, then the tensor data.
//!
//! [`GgufFile`] memory-maps a file and parses everything but the tensor data up front. Every length,
//! count and offset is checked against the file before it is used, so a truncated, corrupt or
//! hostile file gives a [`GgufError`] saying what is wrong and where, never a panic or an allocation
//! sized by an unchecked field. [`GgufWriter`] writes version 3 files, streaming tensor data so that
//! memory stays bounded by the largest tensor the caller holds.

mod cursor;
mod error;
mod file;
mod parse;
mod tensor;
mod value;
mod writer;

pub use canopy_kernels::quant::GgmlType;
pub use error::GgufError;
pub use file::GgufFile;
pub use tensor::{MAX_DIMS, TensorInfo, TensorSpec};
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;

/// The first four bytes of every GGUF file.
pub const MAGIC: &[u8; 4] = b"GGUF";
/// The version [`GgufWriter`] writes.
pub const WRITE_VERSION: u32 = 3;
/// The metadata key stating the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// The data alignment of files without `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// How deep arrays may nest in a file the reader accepts (an array of arrays is depth 2).
pub const MAX_ARRAY_NESTING: usize = 8;
