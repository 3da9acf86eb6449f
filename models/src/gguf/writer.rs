//! A streaming GGUF writer: header and tensor infos first, then tensor data one tensor at a time.

use std::collections::HashSet;
use std::io::Write;

use indexmap::IndexMap;

use super::error::GgufError;
use super::parse::alignment_of;
use super::tensor::{TensorSpec, checked_byte_size};
use super::value::Value;
use super::{MAGIC, WRITE_VERSION};

/// Source of padding bytes; larger alignments are padded in several writes.
const ZEROS: [u8; 4096] = [0; 4096];

/// A declared tensor and the size its data must have.
struct PlannedTensor {
    name: String,
    n_bytes: u64,
}

/// Writes a GGUF version 3 file to `W`.
///
/// [`GgufWriter::new`] writes the header, metadata and tensor infos; the caller then passes each
/// tensor's data to [`GgufWriter::write_tensor`] in the declared order and calls
/// [`GgufWriter::finish`]. Only the header is buffered, so memory stays bounded however large the
/// model. Wrap a file in a `BufWriter`. After an I/O error the output is incomplete and the writer
/// should be dropped. Metadata arrays nested deeper than [`MAX_ARRAY_NESTING`](super::MAX_ARRAY_NESTING)
/// are written as given, but the reader rejects them.
pub struct GgufWriter<W: Write> {
    out: W,
    alignment: u64,
    tensors: Vec<PlannedTensor>,
    next_tensor: usize,
}

impl<W: Write> GgufWriter<W> {
    /// Writes the header, metadata and tensor infos (offsets computed with `general.alignment` from
    /// the metadata if present, else 32). Version 3.
    pub fn new(
        mut out: W,
        metadata: &IndexMap<String, Value>,
        tensors: Vec<TensorSpec>,
    ) -> Result<Self, GgufError> {
        let alignment = alignment_of(metadata)?;
        let mut names = HashSet::with_capacity(tensors.len());
        let mut header = Vec::new();
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&WRITE_VERSION.to_le_bytes());
        header.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&(metadata.len() as u64).to_le_bytes());
        for (key, value) in metadata {
            encode_string(&mut header, key);
            header.extend_from_slice(&value.value_type().id().to_le_bytes());
            encode_value(&mut header, value);
        }
        let mut planned = Vec::with_capacity(tensors.len());
        let mut offset = 0u64;
        for spec in tensors {
            if !names.insert(spec.name.clone()) {
                return Err(GgufError::DuplicateTensor { name: spec.name });
            }
            let n_bytes = checked_byte_size(&spec.name, &spec.dims, spec.ggml_type)?;
            encode_string(&mut header, &spec.name);
            header.extend_from_slice(&(spec.dims.len() as u32).to_le_bytes());
            for dim in &spec.dims {
                header.extend_from_slice(&dim.to_le_bytes());
            }
            header.extend_from_slice(&spec.ggml_type.id().to_le_bytes());
            header.extend_from_slice(&offset.to_le_bytes());
            offset = offset
                .checked_add(n_bytes)
                .and_then(|end| end.checked_next_multiple_of(alignment))
                .ok_or_else(|| GgufError::BadShape {
                    tensor: spec.name.clone(),
                    dims: spec.dims.clone(),
                    reason: "the data section size overflows",
                })?;
            planned.push(PlannedTensor { name: spec.name, n_bytes });
        }
        out.write_all(&header)?;
        let mut writer = Self { out, alignment, tensors: planned, next_tensor: 0 };
        writer.pad_after(header.len() as u64)?;
        Ok(writer)
    }

    /// Writes the data of the next declared tensor, which must be named `name`; `data` must be
    /// exactly the tensor's byte size.
    pub fn write_tensor(&mut self, name: &str, data: &[u8]) -> Result<(), GgufError> {
        let Some(tensor) = self.tensors.get(self.next_tensor) else {
            return Err(GgufError::UnexpectedTensor {
                expected: "no more tensors".to_owned(),
                found: name.to_owned(),
            });
        };
        if tensor.name != name {
            return Err(GgufError::UnexpectedTensor {
                expected: format!("{:?}", tensor.name),
                found: name.to_owned(),
            });
        }
        if data.len() as u64 != tensor.n_bytes {
            return Err(GgufError::TensorSizeMismatch {
                tensor: name.to_owned(),
                expected: tensor.n_bytes,
                found: data.len() as u64,
            });
        }
        self.out.write_all(data)?;
        self.pad_after(tensor.n_bytes)?;
        self.next_tensor += 1;
        Ok(())
    }

    /// Checks that every declared tensor was written, flushes, and returns the output.
    pub fn finish(mut self) -> Result<W, GgufError> {
        if let Some(missing) = self.tensors.get(self.next_tensor) {
            return Err(GgufError::MissingTensorData { tensor: missing.name.clone() });
        }
        self.out.flush()?;
        Ok(self.out)
    }

    /// Writes zeros after a section of `len` bytes, up to the next multiple of the alignment. Every
    /// section starts aligned, so this keeps the file position aligned.
    fn pad_after(&mut self, len: u64) -> Result<(), GgufError> {
        let mut padding = len.next_multiple_of(self.alignment) - len;
        while padding > 0 {
            let chunk = padding.min(ZEROS.len() as u64);
            self.out.write_all(&ZEROS[..chunk as usize])?;
            padding -= chunk;
        }
        Ok(())
    }
}

impl<W: Write> std::fmt::Debug for GgufWriter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufWriter")
            .field("alignment", &self.alignment)
            .field("tensors", &self.tensors.len())
            .field("next_tensor", &self.tensors.get(self.next_tensor).map(|t| &t.name))
            .finish_non_exhaustive()
    }
}

fn encode_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn encode_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => encode_string(out, s),
        Value::Array(array) => {
            out.extend_from_slice(&array.element_type().id().to_le_bytes());
            out.extend_from_slice(&(array.len() as u64).to_le_bytes());
            for element in array.values() {
                encode_value(out, element);
            }
        }
    }
}
