//! Errors of the GGUF reader and writer.

use canopy_kernels::quant::GgmlType;

use super::value::ValueType;

/// Everything that can go wrong reading or writing a GGUF file.
///
/// Variants about a file's contents say where: the byte offset, and the metadata key or tensor name
/// (or what part of the file) being read, as `context`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// Reading or writing the underlying file failed.
    #[error("GGUF I/O error: {0}")]
    Io(#[from] std::io::Error),

    /// The file does not start with the bytes `GGUF`.
    #[error("not a GGUF file: magic bytes are {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The first four bytes of the file.
        found: [u8; 4],
    },

    /// The file is a big-endian GGUF file; only little-endian files are supported.
    #[error("big-endian GGUF file (version {version} byte-swapped); only little-endian files are supported")]
    BigEndian {
        /// The version, read as big-endian.
        version: u32,
    },

    /// The GGUF version is not 2 or 3.
    #[error("unsupported GGUF version {version}; versions 2 and 3 are supported")]
    UnsupportedVersion {
        /// The version the header states.
        version: u32,
    },

    /// The file ends before a field that the file's own structure says is there.
    #[error(
        "truncated GGUF file: {context} needs {needed} bytes at offset {offset}, but only {available} remain"
    )]
    Truncated {
        /// What was being read.
        context: String,
        /// Byte offset of the field.
        offset: u64,
        /// Bytes the field needs.
        needed: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },

    /// A count (of metadata entries, tensors or array elements) cannot fit in the rest of the file.
    #[error(
        "{context}: count {count} at offset {offset} needs at least {min_bytes} bytes, but only {available} remain"
    )]
    CountTooLarge {
        /// What was being counted.
        context: String,
        /// Byte offset of the count field.
        offset: u64,
        /// The count the file states.
        count: u64,
        /// The fewest bytes that many entries take.
        min_bytes: u128,
        /// Bytes left in the file after the count.
        available: u64,
    },

    /// A string is not valid UTF-8.
    #[error("{context}: string at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// What was being read.
        context: String,
        /// Byte offset of the string's bytes.
        offset: u64,
    },

    /// A metadata value type id is not one GGUF defines.
    #[error("{context}: unknown metadata value type id {id} at offset {offset}")]
    UnknownValueType {
        /// What was being read.
        context: String,
        /// Byte offset of the type id.
        offset: u64,
        /// The type id.
        id: u32,
    },

    /// A boolean value is neither 0 nor 1.
    #[error("{context}: boolean at offset {offset} has byte value {byte}, expected 0 or 1")]
    InvalidBool {
        /// What was being read.
        context: String,
        /// Byte offset of the value.
        offset: u64,
        /// The byte found.
        byte: u8,
    },

    /// Arrays nest deeper than the reader allows.
    #[error("{context}: arrays nested deeper than {max_depth} levels at offset {offset}")]
    NestingTooDeep {
        /// What was being read.
        context: String,
        /// Byte offset of the array that is too deep.
        offset: u64,
        /// The deepest nesting allowed.
        max_depth: usize,
    },

    /// Two metadata entries have the same key.
    #[error("duplicate metadata key {key:?} at offset {offset}")]
    DuplicateKey {
        /// The repeated key.
        key: String,
        /// Byte offset of the second occurrence.
        offset: u64,
    },

    /// Two tensors have the same name.
    #[error("duplicate tensor name {name:?}")]
    DuplicateTensor {
        /// The repeated name.
        name: String,
    },

    /// `general.alignment` is zero or not a power of two.
    #[error("invalid general.alignment {alignment}: must be a nonzero power of two")]
    BadAlignment {
        /// The alignment stated.
        alignment: u64,
    },

    /// A tensor's type id is not a GGML type this build knows.
    #[error("tensor {tensor:?}: unknown GGML type id {id} at offset {offset}")]
    UnknownTensorType {
        /// The tensor's name.
        tensor: String,
        /// Byte offset of the type id.
        offset: u64,
        /// The type id.
        id: u32,
    },

    /// A tensor has more dimensions than GGML supports.
    #[error("tensor {tensor:?}: {n_dims} dimensions, at most {max} are supported")]
    TooManyDims {
        /// The tensor's name.
        tensor: String,
        /// The number of dimensions stated.
        n_dims: u64,
        /// The most GGML supports.
        max: usize,
    },

    /// A tensor's shape is unusable: a zero dimension, or an element count that overflows.
    #[error("tensor {tensor:?}: invalid shape {dims:?}: {reason}")]
    BadShape {
        /// The tensor's name.
        tensor: String,
        /// The dimensions, GGML order.
        dims: Vec<u64>,
        /// What is wrong with them.
        reason: &'static str,
    },

    /// A tensor's rows are not a whole number of its type's blocks.
    #[error(
        "tensor {tensor:?}: row length {row_len} is not a multiple of the {ggml_type} block size {block_size}"
    )]
    PartialBlock {
        /// The tensor's name.
        tensor: String,
        /// The row length (`dims[0]`).
        row_len: u64,
        /// The tensor's type.
        ggml_type: GgmlType,
        /// The type's block size.
        block_size: usize,
    },

    /// A tensor's data offset is not a multiple of the file's alignment.
    #[error("tensor {tensor:?}: data offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        /// The tensor's name.
        tensor: String,
        /// The offset, relative to the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },

    /// A tensor's data extends past the end of the file.
    #[error(
        "tensor {tensor:?}: data at {offset}..+{size} (relative to the data section at {data_offset}) extends past the end of the file ({file_len} bytes)"
    )]
    TensorOutOfBounds {
        /// The tensor's name.
        tensor: String,
        /// The offset, relative to the data section.
        offset: u64,
        /// The tensor's size in bytes.
        size: u64,
        /// Absolute offset of the data section.
        data_offset: u64,
        /// The file's length.
        file_len: u64,
    },

    /// Two tensors' data ranges overlap.
    #[error("tensors {first:?} and {second:?} have overlapping data")]
    OverlappingTensors {
        /// The tensor whose data starts first.
        first: String,
        /// The tensor whose data starts inside the first's.
        second: String,
    },

    /// A metadata key that was asked for is absent.
    #[error("missing metadata key {key:?}")]
    MissingKey {
        /// The key.
        key: String,
    },

    /// A metadata value has a different type than was asked for.
    #[error("metadata key {key:?}: expected {expected}, found {found}")]
    WrongType {
        /// The key.
        key: String,
        /// What was asked for.
        expected: &'static str,
        /// The type the value has.
        found: ValueType,
    },

    /// A metadata integer is negative where an unsigned value was asked for.
    #[error("metadata key {key:?}: expected a non-negative integer, found {value}")]
    NegativeValue {
        /// The key.
        key: String,
        /// The value.
        value: i64,
    },

    /// An array was built from values of a different type than its element type.
    #[error("array of {element_type} holds a {found} at index {index}")]
    MixedArray {
        /// The array's element type.
        element_type: ValueType,
        /// The type of the offending value.
        found: ValueType,
        /// Its index.
        index: usize,
    },

    /// The writer was given tensor data out of the declared order, or for an unknown tensor.
    #[error("tensor data out of order: expected {expected}, got {found:?}")]
    UnexpectedTensor {
        /// The next declared tensor, or a note that all were written.
        expected: String,
        /// The name passed to the writer.
        found: String,
    },

    /// The writer was given tensor data of the wrong length.
    #[error("tensor {tensor:?}: data is {found} bytes, its shape and type need {expected}")]
    TensorSizeMismatch {
        /// The tensor's name.
        tensor: String,
        /// The bytes its shape and type need.
        expected: u64,
        /// The bytes given.
        found: u64,
    },

    /// The writer was finished before every declared tensor's data was written.
    #[error("tensor {tensor:?} was declared but its data was never written")]
    MissingTensorData {
        /// The first tensor without data.
        tensor: String,
    },
}
