//! An open GGUF file: metadata and tensor infos parsed up front, tensor data left in place.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use indexmap::IndexMap;
use memmap2::Mmap;

use super::error::GgufError;
use super::parse::{Layout, parse};
use super::tensor::TensorInfo;
use super::value::{Array, Value, ValueType};

/// The bytes of a GGUF file: a read-only memory map, or a buffer.
enum Storage {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Mapped(map) => map,
            Self::Owned(bytes) => bytes,
        }
    }
}

/// A parsed GGUF file (versions 2 and 3, little-endian).
///
/// Opening parses and validates the header, all metadata and all tensor infos, and checks that every
/// tensor's data lies inside the file; the data itself stays in the memory map and
/// [`GgufFile::tensor_data`] hands it out without copying.
pub struct GgufFile {
    storage: Storage,
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: IndexMap<String, Value>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
}

impl GgufFile {
    /// Maps and parses the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let file = File::open(path)?;
        // SAFETY: the map is read-only and private to this value. Like every reader of memory-mapped
        // model files we rely on the file not being truncated or rewritten while it is open; that is
        // outside what this process can enforce.
        let map = unsafe { Mmap::map(&file)? };
        Self::from_storage(Storage::Mapped(map))
    }

    /// Parses a GGUF file held in memory. Unlike a memory map, whose tensor data is aligned in memory
    /// as in the file, the buffer only guarantees byte alignment.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GgufError> {
        Self::from_storage(Storage::Owned(bytes))
    }

    fn from_storage(storage: Storage) -> Result<Self, GgufError> {
        let Layout { version, alignment, data_offset, metadata, tensors, tensor_index } =
            parse(storage.bytes())?;
        Ok(Self { storage, version, alignment, data_offset, metadata, tensors, tensor_index })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment of tensor data (`general.alignment`, else 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the data section, to which tensor offsets are relative. Files without
    /// tensors may end before it.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// All metadata, in file order.
    pub fn metadata(&self) -> &IndexMap<String, Value> {
        &self.metadata
    }

    /// The metadata value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    fn require(&self, key: &str) -> Result<&Value, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey { key: key.to_owned() })
    }

    fn wrong_type(key: &str, expected: &'static str, found: &Value) -> GgufError {
        GgufError::WrongType { key: key.to_owned(), expected, found: found.value_type() }
    }

    /// The string value of `key`.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        let value = self.require(key)?;
        value.as_str().ok_or_else(|| Self::wrong_type(key, "a string", value))
    }

    /// The value of `key`, which must be a non-negative integer of any width.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        let value = self.require(key)?;
        if let Some(v) = value.as_u64() {
            return Ok(v);
        }
        match value.as_i64() {
            Some(negative) => Err(GgufError::NegativeValue { key: key.to_owned(), value: negative }),
            None => Err(Self::wrong_type(key, "an integer", value)),
        }
    }

    /// The value of `key`, which must be an integer of any width that fits in an `i64`.
    pub fn get_i64(&self, key: &str) -> Result<i64, GgufError> {
        let value = self.require(key)?;
        value.as_i64().ok_or_else(|| Self::wrong_type(key, "an integer that fits in i64", value))
    }

    /// The value of `key`, which must be numeric.
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        let value = self.require(key)?;
        value.as_f64().ok_or_else(|| Self::wrong_type(key, "a number", value))
    }

    /// The bool value of `key`.
    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        let value = self.require(key)?;
        value.as_bool().ok_or_else(|| Self::wrong_type(key, "a bool", value))
    }

    /// The array value of `key`.
    pub fn get_array(&self, key: &str) -> Result<&Array, GgufError> {
        let value = self.require(key)?;
        value.as_array().ok_or_else(|| Self::wrong_type(key, "an array", value))
    }

    /// The value of `key`, which must be an array of strings.
    pub fn get_string_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        let array = self.get_array(key)?;
        if array.element_type() != ValueType::String {
            return Err(GgufError::WrongType {
                key: key.to_owned(),
                expected: "an array of strings",
                found: array.element_type(),
            });
        }
        Ok(array.values().iter().filter_map(Value::as_str).collect())
    }

    /// The model architecture, `general.architecture`.
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.get_str("general.architecture")
    }

    /// All tensor infos, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The tensor named `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).and_then(|&i| self.tensors.get(i))
    }

    /// The bytes of a tensor of this file, without copying. Opening checked that they lie inside the
    /// file; an info that does not come from this file and points outside it gets an empty slice.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let range = self.data_offset.checked_add(info.offset).and_then(|start| {
            let end = start.checked_add(info.n_bytes())?;
            Some(usize::try_from(start).ok()?..usize::try_from(end).ok()?)
        });
        range.and_then(|range| self.storage.bytes().get(range)).unwrap_or(&[])
    }
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .field("metadata_entries", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_can_be_shared_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<GgufFile>();
    }

    #[test]
    fn open_reports_missing_and_empty_files() {
        let dir = tempfile::tempdir().unwrap();
        let missing = GgufFile::open(dir.path().join("missing.gguf")).unwrap_err();
        assert!(
            matches!(missing, GgufError::Io(ref e) if e.kind() == std::io::ErrorKind::NotFound),
            "{missing}"
        );
        let empty_path = dir.path().join("empty.gguf");
        std::fs::write(&empty_path, b"").unwrap();
        let empty = GgufFile::open(&empty_path).unwrap_err();
        assert!(matches!(empty, GgufError::Truncated { offset: 0, needed: 4, available: 0, .. }), "{empty}");
    }
}
