//! Metadata values: the typed key-value pairs in a GGUF header.

use std::fmt;

use super::error::GgufError;

/// The type of a metadata value, with the ids GGUF stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    /// The id GGUF files store for this type.
    pub const fn id(self) -> u32 {
        match self {
            Self::U8 => 0,
            Self::I8 => 1,
            Self::U16 => 2,
            Self::I16 => 3,
            Self::U32 => 4,
            Self::I32 => 5,
            Self::F32 => 6,
            Self::Bool => 7,
            Self::String => 8,
            Self::Array => 9,
            Self::U64 => 10,
            Self::I64 => 11,
            Self::F64 => 12,
        }
    }

    /// The type with this id, or `None` for an id GGUF does not define.
    pub const fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::U8,
            1 => Self::I8,
            2 => Self::U16,
            3 => Self::I16,
            4 => Self::U32,
            5 => Self::I32,
            6 => Self::F32,
            7 => Self::Bool,
            8 => Self::String,
            9 => Self::Array,
            10 => Self::U64,
            11 => Self::I64,
            12 => Self::F64,
            _ => return None,
        })
    }

    /// The fewest bytes a value of this type takes in a file: a string is at least its length
    /// field, an array at least its element type and count.
    pub(crate) const fn min_encoded_size(self) -> u64 {
        match self {
            Self::U8 | Self::I8 | Self::Bool => 1,
            Self::U16 | Self::I16 => 2,
            Self::U32 | Self::I32 | Self::F32 => 4,
            Self::U64 | Self::I64 | Self::F64 | Self::String => 8,
            Self::Array => 12,
        }
    }

    /// Lower-case name, as in error messages.
    pub const fn name(self) -> &'static str {
        match self {
            Self::U8 => "u8",
            Self::I8 => "i8",
            Self::U16 => "u16",
            Self::I16 => "i16",
            Self::U32 => "u32",
            Self::I32 => "i32",
            Self::F32 => "f32",
            Self::Bool => "bool",
            Self::String => "string",
            Self::Array => "array",
            Self::U64 => "u64",
            Self::I64 => "i64",
            Self::F64 => "f64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// This value's type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Self::U8(_) => ValueType::U8,
            Self::I8(_) => ValueType::I8,
            Self::U16(_) => ValueType::U16,
            Self::I16(_) => ValueType::I16,
            Self::U32(_) => ValueType::U32,
            Self::I32(_) => ValueType::I32,
            Self::F32(_) => ValueType::F32,
            Self::Bool(_) => ValueType::Bool,
            Self::String(_) => ValueType::String,
            Self::Array(_) => ValueType::Array,
            Self::U64(_) => ValueType::U64,
            Self::I64(_) => ValueType::I64,
            Self::F64(_) => ValueType::F64,
        }
    }

    /// The string, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value as an `i128`, if it is an integer of any width and signedness.
    fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Self::U8(v) => v.into(),
            Self::I8(v) => v.into(),
            Self::U16(v) => v.into(),
            Self::I16(v) => v.into(),
            Self::U32(v) => v.into(),
            Self::I32(v) => v.into(),
            Self::U64(v) => v.into(),
            Self::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The value, if it is an integer of any type holding a non-negative value.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_integer().and_then(|v| u64::try_from(v).ok())
    }

    /// The value, if it is an integer of any type that fits in an `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_integer().and_then(|v| i64::try_from(v).ok())
    }

    /// The value, if it is numeric (integer or float); 64-bit integers may round.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            _ => self.as_integer().map(|v| v as f64),
        }
    }

    /// The value, if it is a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Self::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The array, if this is an array.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Self::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// A homogeneous array of values. Elements that are themselves arrays may differ in their own
/// element types, as GGUF stores each nested array's type separately.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    element_type: ValueType,
    values: Vec<Value>,
}

impl Array {
    /// An array of `values`, each of which must have type `element_type`.
    pub fn new(element_type: ValueType, values: Vec<Value>) -> Result<Self, GgufError> {
        if let Some((index, wrong)) = values.iter().enumerate().find(|(_, v)| v.value_type() != element_type)
        {
            return Err(GgufError::MixedArray { element_type, found: wrong.value_type(), index });
        }
        Ok(Self { element_type, values })
    }

    /// Builds an array whose values the caller has already checked to be of `element_type`.
    pub(crate) fn new_unchecked(element_type: ValueType, values: Vec<Value>) -> Self {
        debug_assert!(values.iter().all(|v| v.value_type() == element_type));
        Self { element_type, values }
    }

    /// An array of strings.
    pub fn from_strings(strings: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self::new_unchecked(ValueType::String, strings.into_iter().map(|s| Value::String(s.into())).collect())
    }

    /// An array of `i32`.
    pub fn from_i32s(values: impl IntoIterator<Item = i32>) -> Self {
        Self::new_unchecked(ValueType::I32, values.into_iter().map(Value::I32).collect())
    }

    /// An array of `u32`.
    pub fn from_u32s(values: impl IntoIterator<Item = u32>) -> Self {
        Self::new_unchecked(ValueType::U32, values.into_iter().map(Value::U32).collect())
    }

    /// An array of `f32`.
    pub fn from_f32s(values: impl IntoIterator<Item = f32>) -> Self {
        Self::new_unchecked(ValueType::F32, values.into_iter().map(Value::F32).collect())
    }

    /// The type every element has.
    pub fn element_type(&self) -> ValueType {
        self.element_type
    }

    /// The elements.
    pub fn values(&self) -> &[Value] {
        &self.values
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

macro_rules! value_from {
    ($($rust:ty => $variant:ident),* $(,)?) => {
        $(impl From<$rust> for Value {
            fn from(v: $rust) -> Self {
                Self::$variant(v)
            }
        })*
    };
}

value_from! {
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32, bool => Bool,
    String => String, Array => Array, u64 => U64, i64 => I64, f64 => F64,
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Self::String(v.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_round_trip_and_unknown_ids_are_rejected() {
        let all = [
            ValueType::U8,
            ValueType::I8,
            ValueType::U16,
            ValueType::I16,
            ValueType::U32,
            ValueType::I32,
            ValueType::F32,
            ValueType::Bool,
            ValueType::String,
            ValueType::Array,
            ValueType::U64,
            ValueType::I64,
            ValueType::F64,
        ];
        for (expected_id, t) in all.into_iter().enumerate() {
            assert_eq!(t.id() as usize, expected_id);
            assert_eq!(ValueType::from_id(t.id()), Some(t));
        }
        assert_eq!(ValueType::from_id(13), None);
        assert_eq!(ValueType::from_id(u32::MAX), None);
    }

    #[test]
    fn integer_accessors_convert_across_widths_only_when_the_value_fits() {
        assert_eq!(Value::U8(7).as_u64(), Some(7));
        assert_eq!(Value::I32(-1).as_u64(), None);
        assert_eq!(Value::I32(-1).as_i64(), Some(-1));
        assert_eq!(Value::U64(u64::MAX).as_u64(), Some(u64::MAX));
        assert_eq!(Value::U64(u64::MAX).as_i64(), None);
        assert_eq!(Value::I64(i64::MIN).as_i64(), Some(i64::MIN));
        assert_eq!(Value::F32(1.0).as_u64(), None);
        assert_eq!(Value::Bool(true).as_u64(), None);
        assert_eq!(Value::from("3").as_u64(), None);
    }

    #[test]
    fn float_accessor_accepts_every_numeric_type() {
        assert_eq!(Value::F32(0.5).as_f64(), Some(0.5));
        assert_eq!(Value::F64(-2.25).as_f64(), Some(-2.25));
        assert_eq!(Value::I16(-3).as_f64(), Some(-3.0));
        assert_eq!(Value::U32(1_000_000).as_f64(), Some(1_000_000.0));
        assert_eq!(Value::Bool(false).as_f64(), None);
        assert_eq!(Value::from("1.0").as_f64(), None);
    }

    #[test]
    fn arrays_must_be_homogeneous() {
        let ok = Array::new(ValueType::U32, vec![Value::U32(1), Value::U32(2)]).unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok.element_type(), ValueType::U32);
        let err = Array::new(ValueType::U32, vec![Value::U32(1), Value::I32(2)]).unwrap_err();
        assert!(
            matches!(
                err,
                GgufError::MixedArray { element_type: ValueType::U32, found: ValueType::I32, index: 1 }
            ),
            "{err}"
        );
        assert!(Array::new(ValueType::String, vec![]).unwrap().is_empty());
    }

    #[test]
    fn array_constructors_set_the_element_type() {
        let strings = Array::from_strings(["a", "b"]);
        assert_eq!(strings.element_type(), ValueType::String);
        assert_eq!(strings.values()[1].as_str(), Some("b"));
        assert_eq!(Array::from_i32s([-1]).values(), &[Value::I32(-1)]);
        assert_eq!(Array::from_u32s([1]).values(), &[Value::U32(1)]);
        assert_eq!(Array::from_f32s([0.5]).values(), &[Value::F32(0.5)]);
    }
}
