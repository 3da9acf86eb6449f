//! Truncated, corrupt and hostile files give typed errors that say what and where, never panics or
//! allocations sized by unchecked fields.

use canopy_models::gguf::{GgmlType, GgufError, GgufFile, ValueType};

use super::raw::{RawGguf, small_file};
use super::testdata;

fn parse(bytes: Vec<u8>) -> GgufError {
    match GgufFile::from_bytes(bytes) {
        Ok(file) => panic!("parsed a broken file: {file:?}"),
        Err(err) => err,
    }
}

fn is_truncation(err: &GgufError) -> bool {
    matches!(
        err,
        GgufError::Truncated { .. } | GgufError::CountTooLarge { .. } | GgufError::TensorOutOfBounds { .. }
    )
}

#[test]
fn every_prefix_of_the_synthetic_file_is_rejected() {
    let bytes = small_file();
    let file = GgufFile::from_bytes(bytes.clone()).unwrap();
    let last = file.tensor("b").unwrap();
    let data_end = (file.data_offset() + last.offset + last.n_bytes()) as usize;
    for len in 0..data_end {
        let err = parse(bytes[..len].to_vec());
        assert!(is_truncation(&err), "prefix {len}: {err}");
    }
    // The padding after the last tensor is optional.
    for len in data_end..bytes.len() {
        assert!(GgufFile::from_bytes(bytes[..len].to_vec()).is_ok(), "prefix {len}");
    }
}

#[test]
fn every_prefix_of_a_real_file_is_rejected() {
    let bytes = std::fs::read(testdata("models/qwen3-tiny-q8_0.gguf")).unwrap();
    let data_offset = GgufFile::from_bytes(bytes.clone()).unwrap().data_offset() as usize;
    // Every prefix through the header and the start of the data, then a sample of the data section
    // (whose bytes the parser never reads), then every prefix near the end.
    let header = 0..data_offset + 64;
    let data = (data_offset + 64..bytes.len() - 64).step_by(509);
    let tail = bytes.len() - 64..bytes.len();
    for len in header.chain(data).chain(tail) {
        let err = parse(bytes[..len].to_vec());
        assert!(is_truncation(&err), "prefix {len}: {err}");
    }
}

#[test]
fn truncation_errors_say_where() {
    let mut raw = RawGguf::header(3, 0, 1);
    raw.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).str("ab");
    let value_start = raw.bytes.len();
    raw.u64(10).extend(b"short");
    let err = parse(raw.build());
    match &err {
        GgufError::Truncated { context, offset, needed: 10, available: 5 } => {
            assert!(context.contains("\"tokenizer.ggml.tokens\""), "{err}");
            assert_eq!(*offset, value_start as u64 + 8);
        }
        _ => panic!("{err}"),
    }
}

#[test]
fn header_errors() {
    let err = parse(b"GGML\x03\0\0\0".to_vec());
    assert!(matches!(err, GgufError::BadMagic { found: [b'G', b'G', b'M', b'L'] }), "{err}");
    let err = parse(RawGguf::header(1, 0, 0).build());
    assert!(matches!(err, GgufError::UnsupportedVersion { version: 1 }), "{err}");
    let err = parse(RawGguf::header(4, 0, 0).build());
    assert!(matches!(err, GgufError::UnsupportedVersion { version: 4 }), "{err}");
    let mut big_endian = b"GGUF".to_vec();
    big_endian.extend_from_slice(&3u32.to_be_bytes());
    big_endian.extend_from_slice(&[0; 16]);
    let err = parse(big_endian);
    assert!(matches!(err, GgufError::BigEndian { version: 3 }), "{err}");
    assert!(GgufFile::from_bytes(RawGguf::header(2, 0, 0).build()).is_ok(), "version 2 is supported");
}

#[test]
fn huge_counts_and_lengths_are_rejected_before_allocating() {
    let mut raw = RawGguf::header(3, 0, 1);
    raw.u64(u64::MAX).extend(b"key, and enough bytes for one entry");
    let err = parse(raw.build());
    assert!(matches!(err, GgufError::Truncated { needed: u64::MAX, offset: 32, .. }), "{err}");

    let mut raw = RawGguf::header(3, 0, 1);
    raw.str("big").u32(9).u32(0);
    let count_at = raw.bytes.len() as u64;
    raw.u64(1 << 60).extend(&[0; 64]);
    let err = parse(raw.build());
    match &err {
        GgufError::CountTooLarge { context, offset, count, .. } => {
            assert!(context.contains("\"big\""), "{err}");
            assert_eq!((*offset, *count), (count_at, 1 << 60));
        }
        _ => panic!("{err}"),
    }

    // Strings take at least their 8-byte length, so 10 of them cannot fit in 79 bytes.
    let mut raw = RawGguf::header(3, 0, 1);
    raw.str("strings").u32(9).u32(8).u64(10).extend(&[0; 79]);
    assert!(matches!(parse(raw.build()), GgufError::CountTooLarge { count: 10, .. }));

    let err = parse(RawGguf::header(3, 1 << 40, 0).build());
    assert!(matches!(err, GgufError::CountTooLarge { count: 0x100_0000_0000, offset: 8, .. }), "{err}");
    let err = parse(RawGguf::header(3, 0, u64::MAX).build());
    assert!(matches!(err, GgufError::CountTooLarge { offset: 16, .. }), "{err}");
}

#[test]
fn alignment_must_be_a_nonzero_power_of_two_u32() {
    for bad in [0, 48, 3] {
        let mut raw = RawGguf::header(3, 0, 1);
        raw.kv_u32("general.alignment", bad);
        let err = parse(raw.build());
        assert!(matches!(err, GgufError::BadAlignment { alignment } if alignment == u64::from(bad)), "{err}");
    }
    let mut raw = RawGguf::header(3, 0, 1);
    raw.str("general.alignment").u32(10).u64(32);
    let err = parse(raw.build());
    assert!(matches!(err, GgufError::WrongType { found: ValueType::U64, .. }), "{err}");
}

#[test]
fn unknown_type_ids_are_named() {
    let mut raw = RawGguf::header(3, 0, 1);
    raw.str("odd.key");
    let type_at = raw.bytes.len() as u64;
    raw.u32(13).u32(0);
    let err = parse(raw.build());
    assert!(
        matches!(err, GgufError::UnknownValueType { id: 13, offset, ref context } if offset == type_at && context.contains("\"odd.key\"")),
        "{err}"
    );

    let mut raw = RawGguf::header(3, 0, 1);
    raw.str("arr").u32(9).u32(99).u64(0);
    assert!(matches!(parse(raw.build()), GgufError::UnknownValueType { id: 99, .. }));

    // Type 4 (Q4_2) was retired from ggml.
    let mut raw = RawGguf::header(3, 1, 0);
    raw.tensor("blk.0.w", &[32], 4, 0).pad(32).extend(&[0; 64]);
    let err = parse(raw.build());
    assert!(
        matches!(err, GgufError::UnknownTensorType { id: 4, ref tensor, .. } if tensor == "blk.0.w"),
        "{err}"
    );
}

#[test]
fn invalid_utf8_is_rejected_wherever_strings_occur() {
    let bad = [b'a', 0xff, b'b'];
    let mut raw = RawGguf::header(3, 0, 1);
    raw.u64(3).extend(&bad).u32(4).u32(0);
    assert!(matches!(parse(raw.build()), GgufError::InvalidUtf8 { offset: 32, .. }));

    let mut raw = RawGguf::header(3, 0, 1);
    raw.str("tokens").u32(9).u32(8).u64(2).str("ok");
    let bad_at = raw.bytes.len() as u64 + 8;
    raw.u64(3).extend(&bad);
    let err = parse(raw.build());
    assert!(
        matches!(err, GgufError::InvalidUtf8 { offset, ref context } if offset == bad_at && context.contains("tokens")),
        "{err}"
    );

    let mut raw = RawGguf::header(3, 1, 0);
    raw.u64(3).extend(&bad).u32(1).u64(1).u32(0).u64(0).pad(32).extend(&[0; 32]);
    let err = parse(raw.build());
    assert!(
        matches!(err, GgufError::InvalidUtf8 { ref context, .. } if context.contains("tensor info #0")),
        "{err}"
    );
}

#[test]
fn duplicates_are_rejected() {
    let mut raw = RawGguf::header(3, 0, 2);
    raw.kv_u32("k", 1);
    let second_at = raw.bytes.len() as u64;
    raw.kv_u32("k", 2);
    let err = parse(raw.build());
    assert!(
        matches!(err, GgufError::DuplicateKey { ref key, offset } if key == "k" && offset == second_at),
        "{err}"
    );

    let mut raw = RawGguf::header(3, 2, 0);
    raw.tensor("t", &[8], 0, 0).tensor("t", &[8], 0, 32).pad(32).extend(&[0; 64]);
    assert!(matches!(parse(raw.build()), GgufError::DuplicateTensor { ref name } if name == "t"));
}

#[test]
fn nesting_is_capped() {
    let nested = |depth: usize| {
        let mut raw = RawGguf::header(3, 0, 1);
        raw.str("deep").u32(9);
        for _ in 1..depth {
            raw.u32(9).u64(1);
        }
        raw.u32(0).u64(0);
        raw.build()
    };
    let file = GgufFile::from_bytes(nested(8)).unwrap();
    let mut value = file.get("deep").unwrap();
    for _ in 1..8 {
        value = &value.as_array().unwrap().values()[0];
    }
    assert_eq!(value.as_array().unwrap().element_type(), ValueType::U8);
    let err = parse(nested(9));
    assert!(matches!(err, GgufError::NestingTooDeep { max_depth: 8, .. }), "{err}");
    assert!(matches!(parse(nested(100_000)), GgufError::NestingTooDeep { .. }));
}

#[test]
fn booleans_must_be_zero_or_one() {
    let mut raw = RawGguf::header(3, 0, 1);
    raw.str("flag").u32(7).extend(&[2]);
    assert!(matches!(parse(raw.build()), GgufError::InvalidBool { byte: 2, .. }));
}

/// A file with one tensor info and `data_len` bytes of data after the aligned header.
fn one_tensor(dims: &[u64], ggml_type: GgmlType, offset: u64, data_len: usize) -> Vec<u8> {
    let mut raw = RawGguf::header(3, 1, 0);
    raw.tensor("t", dims, ggml_type.id(), offset).pad(32).extend(&vec![0; data_len]);
    raw.build()
}

#[test]
fn tensor_shapes_are_checked() {
    let mut raw = RawGguf::header(3, 1, 0);
    raw.str("t").u32(5).extend(&[0; 64]);
    assert!(matches!(parse(raw.build()), GgufError::TooManyDims { n_dims: 5, .. }));
    let mut raw = RawGguf::header(3, 1, 0);
    raw.str("t").u32(u32::MAX).extend(&[0; 64]);
    assert!(matches!(parse(raw.build()), GgufError::TooManyDims { .. }));
    assert!(matches!(parse(one_tensor(&[4, 0], GgmlType::F32, 0, 64)), GgufError::BadShape { .. }));
    let overflow = [u64::MAX, 2];
    assert!(matches!(parse(one_tensor(&overflow, GgmlType::F32, 0, 64)), GgufError::BadShape { .. }));
    let err = parse(one_tensor(&[16, 2], GgmlType::Q8_0, 0, 64));
    assert!(matches!(err, GgufError::PartialBlock { row_len: 16, block_size: 32, .. }), "{err}");
}

#[test]
fn tensor_data_must_be_inside_the_file_aligned_and_disjoint() {
    assert!(GgufFile::from_bytes(one_tensor(&[8], GgmlType::F32, 0, 32)).is_ok());
    let err = parse(one_tensor(&[8], GgmlType::F32, 0, 31));
    assert!(matches!(err, GgufError::TensorOutOfBounds { size: 32, .. }), "{err}");
    let err = parse(one_tensor(&[8], GgmlType::F32, 64, 64));
    assert!(matches!(err, GgufError::TensorOutOfBounds { offset: 64, .. }), "{err}");
    let err = parse(one_tensor(&[8], GgmlType::F32, u64::MAX - 31, 64));
    assert!(matches!(err, GgufError::TensorOutOfBounds { .. }), "{err}");
    let err = parse(one_tensor(&[8], GgmlType::F32, 4, 64));
    assert!(matches!(err, GgufError::MisalignedTensor { offset: 4, alignment: 32, .. }), "{err}");

    let mut raw = RawGguf::header(3, 2, 0);
    raw.tensor("first", &[16], 0, 0).tensor("second", &[8], 0, 32).pad(32).extend(&[0; 96]);
    let err = parse(raw.build());
    assert!(
        matches!(err, GgufError::OverlappingTensors { ref first, ref second } if first == "first" && second == "second"),
        "{err}"
    );
}
