//! Parsing of the GGUF header, metadata and tensor infos, with every count, length and offset
//! checked against the file.

use std::collections::HashMap;

use canopy_kernels::quant::GgmlType;
use indexmap::IndexMap;

use super::cursor::{Context, Cursor};
use super::error::GgufError;
use super::tensor::{MAX_DIMS, TensorInfo, checked_byte_size};
use super::value::{Array, Value, ValueType};
use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_ARRAY_NESTING};

/// Fewest bytes of one metadata entry: key length, value type, and a one-byte value.
const MIN_METADATA_ENTRY_BYTES: u64 = 8 + 4 + 1;
/// Fewest bytes of one tensor info: name length, dimension count, type and offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// Everything a GGUF file holds besides the tensor data.
pub(crate) struct Layout {
    pub(crate) version: u32,
    pub(crate) alignment: u64,
    pub(crate) data_offset: u64,
    pub(crate) metadata: IndexMap<String, Value>,
    pub(crate) tensors: Vec<TensorInfo>,
    pub(crate) tensor_index: HashMap<String, usize>,
}

/// Parses and validates everything up to the data section, and checks that every tensor's data lies
/// inside `bytes`, aligned and without overlap.
pub(crate) fn parse(bytes: &[u8]) -> Result<Layout, GgufError> {
    let mut cursor = Cursor::new(bytes);
    let magic = cursor.take(4)?;
    if magic != MAGIC {
        let mut found = [0; 4];
        found.copy_from_slice(magic);
        return Err(GgufError::BadMagic { found });
    }
    let version = read_version(&mut cursor)?;
    let tensor_count_offset = cursor.position();
    let tensor_count = cursor.read_u64()?;
    let metadata_count_offset = cursor.position();
    let metadata_count = cursor.read_u64()?;

    let metadata = read_metadata(&mut cursor, metadata_count, metadata_count_offset)?;
    let alignment = alignment_of(&metadata)?;
    let (tensors, tensor_index) = read_tensor_infos(&mut cursor, tensor_count, tensor_count_offset)?;
    let data_offset = cursor.position().next_multiple_of(alignment);
    check_tensor_ranges(&tensors, alignment, data_offset, bytes.len() as u64)?;
    Ok(Layout { version, alignment, data_offset, metadata, tensors, tensor_index })
}

fn read_version(cursor: &mut Cursor<'_>) -> Result<u32, GgufError> {
    let version = cursor.read_u32()?;
    match version {
        2 | 3 => Ok(version),
        // Versions are small, so a big-endian file shows its version in the high half-word.
        _ if version & 0xffff == 0 => Err(GgufError::BigEndian { version: version.swap_bytes() }),
        _ => Err(GgufError::UnsupportedVersion { version }),
    }
}

fn read_metadata(
    cursor: &mut Cursor<'_>,
    count: u64,
    count_offset: u64,
) -> Result<IndexMap<String, Value>, GgufError> {
    let count = cursor.bounded_count(count, count_offset, MIN_METADATA_ENTRY_BYTES)?;
    let mut metadata = IndexMap::with_capacity(count);
    for index in 0..count as u64 {
        cursor.context = Context::MetadataKey { index };
        let key_offset = cursor.position();
        let key = cursor.read_string()?;
        if metadata.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key, offset: key_offset });
        }
        cursor.context = Context::MetadataValue { key: key.clone() };
        let value_type = read_value_type(cursor)?;
        let value = read_value(cursor, value_type, 0)?;
        metadata.insert(key, value);
    }
    Ok(metadata)
}

fn read_value_type(cursor: &mut Cursor<'_>) -> Result<ValueType, GgufError> {
    let offset = cursor.position();
    let id = cursor.read_u32()?;
    ValueType::from_id(id).ok_or_else(|| GgufError::UnknownValueType {
        context: cursor.context.to_string(),
        offset,
        id,
    })
}

/// One value of type `value_type`; `depth` counts the arrays it is nested in.
fn read_value(cursor: &mut Cursor<'_>, value_type: ValueType, depth: usize) -> Result<Value, GgufError> {
    Ok(match value_type {
        ValueType::U8 => Value::U8(cursor.read_u8()?),
        ValueType::I8 => Value::I8(cursor.read_i8()?),
        ValueType::U16 => Value::U16(cursor.read_u16()?),
        ValueType::I16 => Value::I16(cursor.read_i16()?),
        ValueType::U32 => Value::U32(cursor.read_u32()?),
        ValueType::I32 => Value::I32(cursor.read_i32()?),
        ValueType::F32 => Value::F32(cursor.read_f32()?),
        ValueType::U64 => Value::U64(cursor.read_u64()?),
        ValueType::I64 => Value::I64(cursor.read_i64()?),
        ValueType::F64 => Value::F64(cursor.read_f64()?),
        ValueType::Bool => {
            let offset = cursor.position();
            match cursor.read_u8()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                byte => {
                    return Err(GgufError::InvalidBool { context: cursor.context.to_string(), offset, byte });
                }
            }
        }
        ValueType::String => Value::String(cursor.read_string()?),
        ValueType::Array => Value::Array(read_array(cursor, depth + 1)?),
    })
}

fn read_array(cursor: &mut Cursor<'_>, depth: usize) -> Result<Array, GgufError> {
    let array_offset = cursor.position();
    if depth > MAX_ARRAY_NESTING {
        return Err(GgufError::NestingTooDeep {
            context: cursor.context.to_string(),
            offset: array_offset,
            max_depth: MAX_ARRAY_NESTING,
        });
    }
    let element_type = read_value_type(cursor)?;
    let count_offset = cursor.position();
    let count = cursor.read_u64()?;
    let count = cursor.bounded_count(count, count_offset, element_type.min_encoded_size())?;
    let mut values = Vec::with_capacity(count);
    for _ in 0..count {
        values.push(read_value(cursor, element_type, depth)?);
    }
    Ok(Array::new_unchecked(element_type, values))
}

/// The data alignment `general.alignment` states, or the default.
pub(crate) fn alignment_of(metadata: &IndexMap<String, Value>) -> Result<u64, GgufError> {
    match metadata.get(ALIGNMENT_KEY) {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(&Value::U32(alignment)) if alignment.is_power_of_two() => Ok(alignment.into()),
        Some(&Value::U32(alignment)) => Err(GgufError::BadAlignment { alignment: alignment.into() }),
        Some(other) => Err(GgufError::WrongType {
            key: ALIGNMENT_KEY.to_owned(),
            expected: "u32",
            found: other.value_type(),
        }),
    }
}

type TensorTable = (Vec<TensorInfo>, HashMap<String, usize>);

fn read_tensor_infos(
    cursor: &mut Cursor<'_>,
    count: u64,
    count_offset: u64,
) -> Result<TensorTable, GgufError> {
    cursor.context = Context::Header;
    let count = cursor.bounded_count(count, count_offset, MIN_TENSOR_INFO_BYTES)?;
    let mut tensors = Vec::with_capacity(count);
    let mut index = HashMap::with_capacity(count);
    for position in 0..count {
        cursor.context = Context::TensorInfo { index: position as u64 };
        let info = read_tensor_info(cursor)?;
        if index.contains_key(&info.name) {
            return Err(GgufError::DuplicateTensor { name: info.name });
        }
        index.insert(info.name.clone(), position);
        tensors.push(info);
    }
    Ok((tensors, index))
}

fn read_tensor_info(cursor: &mut Cursor<'_>) -> Result<TensorInfo, GgufError> {
    let name = cursor.read_string()?;
    cursor.context = Context::NamedTensorInfo { name: name.clone() };
    let n_dims = cursor.read_u32()?;
    if n_dims as usize > MAX_DIMS {
        return Err(GgufError::TooManyDims { tensor: name, n_dims: n_dims.into(), max: MAX_DIMS });
    }
    let dims = (0..n_dims).map(|_| cursor.read_u64()).collect::<Result<Vec<_>, _>>()?;
    let type_offset = cursor.position();
    let type_id = cursor.read_u32()?;
    let ggml_type = GgmlType::from_id(type_id).ok_or(GgufError::UnknownTensorType {
        tensor: name.clone(),
        offset: type_offset,
        id: type_id,
    })?;
    let offset = cursor.read_u64()?;
    checked_byte_size(&name, &dims, ggml_type)?;
    Ok(TensorInfo { name, dims, ggml_type, offset })
}

fn check_tensor_ranges(
    tensors: &[TensorInfo],
    alignment: u64,
    data_offset: u64,
    file_len: u64,
) -> Result<(), GgufError> {
    let data_len = file_len.saturating_sub(data_offset);
    for info in tensors {
        if !info.offset.is_multiple_of(alignment) {
            return Err(GgufError::MisalignedTensor {
                tensor: info.name.clone(),
                offset: info.offset,
                alignment,
            });
        }
        let size = info.n_bytes();
        if info.offset.checked_add(size).is_none_or(|end| end > data_len) {
            return Err(GgufError::TensorOutOfBounds {
                tensor: info.name.clone(),
                offset: info.offset,
                size,
                data_offset,
                file_len,
            });
        }
    }
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().collect();
    by_offset.sort_by_key(|info| info.offset);
    for pair in by_offset.windows(2) {
        if let [first, second] = pair
            && first.offset + first.n_bytes() > second.offset
        {
            return Err(GgufError::OverlappingTensors {
                first: first.name.clone(),
                second: second.name.clone(),
            });
        }
    }
    Ok(())
}
