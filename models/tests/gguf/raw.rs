//! Builds GGUF bytes field by field, independently of the crate's writer, so that tests can state
//! exactly what a file contains, including things no valid writer produces.

/// A GGUF file under construction.
pub struct RawGguf {
    pub bytes: Vec<u8>,
}

impl RawGguf {
    /// Magic, version and the two counts, stated as given.
    pub fn header(version: u32, tensor_count: u64, metadata_count: u64) -> Self {
        let mut raw = Self { bytes: b"GGUF".to_vec() };
        raw.u32(version).u64(tensor_count).u64(metadata_count);
        raw
    }

    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64);
        self.bytes.extend_from_slice(s.as_bytes());
        self
    }

    /// A metadata entry holding a `u32`.
    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(4).u32(v)
    }

    /// A metadata entry holding a string.
    pub fn kv_str(&mut self, key: &str, v: &str) -> &mut Self {
        self.str(key).u32(8).str(v)
    }

    /// A tensor info.
    pub fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(type_id).u64(offset)
    }

    /// Zeros up to the next multiple of `alignment`.
    pub fn pad(&mut self, alignment: usize) -> &mut Self {
        let len = self.bytes.len().next_multiple_of(alignment);
        self.bytes.resize(len, 0);
        self
    }

    /// Appends raw bytes.
    pub fn extend(&mut self, bytes: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(bytes);
        self
    }

    pub fn build(&self) -> Vec<u8> {
        self.bytes.clone()
    }
}

/// A small valid file: two metadata entries and two F32 tensors of 4 and 6 elements, with the data
/// section at 32-byte alignment and each tensor at an aligned offset.
pub fn small_file() -> Vec<u8> {
    let mut raw = RawGguf::header(3, 2, 2);
    raw.kv_str("general.architecture", "tiny").kv_u32("tiny.block_count", 1);
    raw.tensor("a", &[4], 0, 0).tensor("b", &[3, 2], 0, 32);
    raw.pad(32);
    let a: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let b: Vec<u8> = (0..6).flat_map(|i| (i as f32 * 0.5).to_le_bytes()).collect();
    raw.extend(&a).pad(32).extend(&b).pad(32);
    raw.build()
}
