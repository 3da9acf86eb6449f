//! A bounds-checked little-endian reader over the bytes of a GGUF file.

use std::fmt;

use super::error::GgufError;

/// What part of the file is being read, for error messages.
#[derive(Clone, Debug)]
pub(crate) enum Context {
    Header,
    MetadataKey { index: u64 },
    MetadataValue { key: String },
    TensorInfo { index: u64 },
    NamedTensorInfo { name: String },
}

impl fmt::Display for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header => f.write_str("header"),
            Self::MetadataKey { index } => write!(f, "key of metadata entry #{index}"),
            Self::MetadataValue { key } => write!(f, "value of metadata key {key:?}"),
            Self::TensorInfo { index } => write!(f, "name of tensor info #{index}"),
            Self::NamedTensorInfo { name } => write!(f, "tensor info of {name:?}"),
        }
    }
}

/// Reads fields front to back; every read checks that the bytes are there and never panics.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    position: usize,
    pub(crate) context: Context,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, position: 0, context: Context::Header }
    }

    /// Offset of the next byte to read.
    pub(crate) fn position(&self) -> u64 {
        self.position as u64
    }

    /// Bytes left after the position.
    pub(crate) fn remaining(&self) -> u64 {
        (self.bytes.len() - self.position) as u64
    }

    /// The next `len` bytes.
    pub(crate) fn take(&mut self, len: u64) -> Result<&'a [u8], GgufError> {
        let available = self.remaining();
        if len > available {
            return Err(GgufError::Truncated {
                context: self.context.to_string(),
                offset: self.position(),
                needed: len,
                available,
            });
        }
        // `len <= available`, which is a `usize`, so the cast is lossless and the range in bounds.
        let start = self.position;
        self.position += len as usize;
        Ok(&self.bytes[start..self.position])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], GgufError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N as u64)?);
        Ok(out)
    }

    pub(crate) fn read_u8(&mut self) -> Result<u8, GgufError> {
        Ok(u8::from_le_bytes(self.array()?))
    }

    pub(crate) fn read_i8(&mut self) -> Result<i8, GgufError> {
        Ok(i8::from_le_bytes(self.array()?))
    }

    pub(crate) fn read_u16(&mut self) -> Result<u16, GgufError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn read_i16(&mut self) -> Result<i16, GgufError> {
        Ok(i16::from_le_bytes(self.array()?))
    }

    pub(crate) fn read_u32(&mut self) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn read_i32(&mut self) -> Result<i32, GgufError> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    pub(crate) fn read_u64(&mut self) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub(crate) fn read_i64(&mut self) -> Result<i64, GgufError> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    pub(crate) fn read_f32(&mut self) -> Result<f32, GgufError> {
        Ok(f32::from_le_bytes(self.array()?))
    }

    pub(crate) fn read_f64(&mut self) -> Result<f64, GgufError> {
        Ok(f64::from_le_bytes(self.array()?))
    }

    /// A string: `u64` byte length, then that many bytes of UTF-8.
    pub(crate) fn read_string(&mut self) -> Result<String, GgufError> {
        let len = self.read_u64()?;
        let start = self.position();
        let bytes = self.take(len)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 { context: self.context.to_string(), offset: start }),
        }
    }

    /// Checks that `count` entries of at least `min_entry_bytes` each fit in the rest of the file, so
    /// that a hostile count cannot drive an allocation; `count_offset` is where the count was read.
    pub(crate) fn bounded_count(
        &self,
        count: u64,
        count_offset: u64,
        min_entry_bytes: u64,
    ) -> Result<usize, GgufError> {
        let min_bytes = u128::from(count) * u128::from(min_entry_bytes);
        let available = self.remaining();
        if min_bytes > u128::from(available) {
            return Err(GgufError::CountTooLarge {
                context: self.context.to_string(),
                offset: count_offset,
                count,
                min_bytes,
                available,
            });
        }
        // Each entry takes at least one byte of the in-memory file, so `count` fits in a `usize`.
        Ok(usize::try_from(count).unwrap_or(usize::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_little_endian_fields_in_order() {
        let bytes = [1, 0x34, 0x12, 0xff, 0xff, 0xff, 0xff, 0, 0, 0x80, 0x3f];
        let mut cursor = Cursor::new(&bytes);
        assert_eq!(cursor.read_u8().unwrap(), 1);
        assert_eq!(cursor.read_u16().unwrap(), 0x1234);
        assert_eq!(cursor.read_i32().unwrap(), -1);
        assert_eq!(cursor.read_f32().unwrap(), 1.0);
        assert_eq!(cursor.remaining(), 0);
    }

    #[test]
    fn short_read_reports_offset_and_sizes() {
        let mut cursor = Cursor::new(&[0, 1, 2]);
        cursor.read_u8().unwrap();
        let err = cursor.read_u32().unwrap_err();
        assert!(
            matches!(err, GgufError::Truncated { offset: 1, needed: 4, available: 2, ref context } if context == "header"),
            "{err}"
        );
        assert_eq!(cursor.position(), 1, "a failed read consumes nothing");
    }

    #[test]
    fn string_length_beyond_the_end_is_truncation_not_allocation() {
        let mut bytes = u64::MAX.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        let err = Cursor::new(&bytes).read_string().unwrap_err();
        assert!(
            matches!(err, GgufError::Truncated { offset: 8, needed: u64::MAX, available: 3, .. }),
            "{err}"
        );
    }

    #[test]
    fn invalid_utf8_is_reported_with_its_offset() {
        let mut bytes = 2u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[0xc3, 0x28]);
        let mut cursor = Cursor::new(&bytes);
        cursor.context = Context::MetadataValue { key: "k".into() };
        let err = cursor.read_string().unwrap_err();
        assert!(
            matches!(err, GgufError::InvalidUtf8 { offset: 8, ref context } if context.contains("\"k\"")),
            "{err}"
        );
    }

    #[test]
    fn counts_are_bounded_by_the_remaining_bytes() {
        let cursor = Cursor::new(&[0; 16]);
        assert_eq!(cursor.bounded_count(2, 0, 8).unwrap(), 2);
        assert!(matches!(cursor.bounded_count(3, 0, 8), Err(GgufError::CountTooLarge { count: 3, .. })));
        assert!(matches!(cursor.bounded_count(u64::MAX, 0, 12), Err(GgufError::CountTooLarge { .. })));
    }
}
