//! Files written by `GgufWriter` read back equal; copying a gguf-py file reproduces it byte for byte.

use canopy_models::gguf::{Array, GgmlType, GgufError, GgufFile, GgufWriter, TensorSpec, Value, ValueType};
use indexmap::IndexMap;

use super::testdata;

/// Writes `file`'s metadata and tensors with `GgufWriter`.
fn copy(file: &GgufFile) -> Vec<u8> {
    let specs = file.tensors().iter().map(TensorSpec::from).collect();
    let mut writer = GgufWriter::new(Vec::new(), file.metadata(), specs).unwrap();
    for info in file.tensors() {
        writer.write_tensor(&info.name, file.tensor_data(info)).unwrap();
    }
    writer.finish().unwrap()
}

#[test]
fn model_files_copy_byte_for_byte() {
    for name in [
        "models/qwen3-tiny-q8_0.gguf",
        "models/qwen3-tiny-bf16.gguf",
        "models/qwen3-tiny-f32.gguf",
        "models/qwen3-tiny-dflash-f32.gguf",
        "models/qwen35-tiny-f32.gguf",
    ] {
        let original_bytes = std::fs::read(testdata(name)).unwrap();
        let original = GgufFile::open(testdata(name)).unwrap();
        let copied_bytes = copy(&original);
        // gguf-py lays out a file the same way: tensors in info order, each padded to the alignment.
        assert!(copied_bytes == original_bytes, "{name}: copy differs from the original");

        let copied = GgufFile::from_bytes(copied_bytes).unwrap();
        assert_eq!(copied.metadata(), original.metadata(), "{name}");
        assert_eq!(copied.tensors(), original.tensors(), "{name}");
        for info in original.tensors() {
            assert_eq!(copied.tensor_data(info), original.tensor_data(info), "{name}: {}", info.name);
        }
    }
}

#[test]
fn vocab_file_copies_with_trailing_padding() {
    let name = "vocab/ggml-vocab-llama-spm.gguf";
    let original_bytes = std::fs::read(testdata(name)).unwrap();
    let original = GgufFile::open(testdata(name)).unwrap();
    let copied_bytes = copy(&original);
    // The original ends right after its metadata; the writer pads the header to the alignment.
    assert_eq!(copied_bytes.len() as u64, original.data_offset());
    assert_eq!(&copied_bytes[..original_bytes.len()], &original_bytes[..]);
    assert!(copied_bytes[original_bytes.len()..].iter().all(|&b| b == 0));
    let copied = GgufFile::from_bytes(copied_bytes).unwrap();
    assert_eq!(copied.metadata(), original.metadata());
}

fn every_value_type() -> IndexMap<String, Value> {
    let nested = Array::new(
        ValueType::Array,
        vec![Array::from_u32s([1, 2]).into(), Array::from_strings(["x"]).into()],
    )
    .unwrap();
    [
        ("general.architecture", Value::from("test")),
        ("u8", Value::U8(200)),
        ("i8", Value::I8(-100)),
        ("u16", Value::U16(60000)),
        ("i16", Value::I16(-30000)),
        ("u32", Value::from(4_000_000_000u32)),
        ("i32", Value::from(-2_000_000_000i32)),
        ("f32", Value::from(0.25f32)),
        ("bool", Value::from(true)),
        ("string", Value::from("ünïcödé")),
        ("u64", Value::from(u64::MAX)),
        ("i64", Value::I64(i64::MIN)),
        ("f64", Value::F64(-1.5e300)),
        ("empty", Value::from(Array::from_strings(Vec::<String>::new()))),
        ("nested", Value::from(nested)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

#[test]
fn every_value_type_round_trips_with_custom_alignment() {
    let mut metadata = every_value_type();
    metadata.insert("general.alignment".into(), Value::U32(64));
    let tensors = vec![
        TensorSpec { name: "w".into(), dims: vec![32, 3], ggml_type: GgmlType::Q8_0 },
        TensorSpec { name: "b".into(), dims: vec![5], ggml_type: GgmlType::F32 },
        TensorSpec { name: "s".into(), dims: vec![], ggml_type: GgmlType::F16 },
    ];
    let data: Vec<Vec<u8>> = vec![(0..102).collect(), (0..20).map(|i| 100 + i).collect(), vec![7, 8]];
    let mut writer = GgufWriter::new(Vec::new(), &metadata, tensors).unwrap();
    for (name, bytes) in ["w", "b", "s"].iter().zip(&data) {
        writer.write_tensor(name, bytes).unwrap();
    }
    let file = GgufFile::from_bytes(writer.finish().unwrap()).unwrap();

    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 64);
    assert_eq!(file.data_offset() % 64, 0);
    assert_eq!(file.metadata(), &metadata);
    let offsets: Vec<u64> = file.tensors().iter().map(|t| t.offset).collect();
    assert_eq!(offsets, [0, 128, 192], "102 bytes pad to 128, 20 bytes to 64");
    for (info, bytes) in file.tensors().iter().zip(&data) {
        assert_eq!(file.tensor_data(info), bytes.as_slice(), "{}", info.name);
    }
}

fn one_tensor_writer() -> GgufWriter<Vec<u8>> {
    let tensors = vec![
        TensorSpec { name: "a".into(), dims: vec![2], ggml_type: GgmlType::F32 },
        TensorSpec { name: "b".into(), dims: vec![1], ggml_type: GgmlType::F32 },
    ];
    GgufWriter::new(Vec::new(), &IndexMap::new(), tensors).unwrap()
}

#[test]
fn writer_enforces_order_sizes_and_completeness() {
    let mut writer = one_tensor_writer();
    let err = writer.write_tensor("b", &[0; 4]).unwrap_err();
    assert!(matches!(err, GgufError::UnexpectedTensor { ref found, .. } if found == "b"), "{err}");
    let err = writer.write_tensor("a", &[0; 4]).unwrap_err();
    assert!(matches!(err, GgufError::TensorSizeMismatch { expected: 8, found: 4, .. }), "{err}");
    writer.write_tensor("a", &[0; 8]).unwrap();
    let err = writer.finish().unwrap_err();
    assert!(matches!(err, GgufError::MissingTensorData { ref tensor } if tensor == "b"), "{err}");

    let mut writer = one_tensor_writer();
    writer.write_tensor("a", &[0; 8]).unwrap();
    writer.write_tensor("b", &[0; 4]).unwrap();
    let err = writer.write_tensor("c", &[]).unwrap_err();
    assert!(matches!(err, GgufError::UnexpectedTensor { .. }), "{err}");
    assert!(writer.finish().is_ok());
}

#[test]
fn writer_rejects_invalid_declarations() {
    let spec = |name: &str, dims: Vec<u64>, ggml_type| TensorSpec { name: name.into(), dims, ggml_type };
    let no_metadata = IndexMap::new();
    let duplicate = vec![spec("a", vec![1], GgmlType::F32), spec("a", vec![1], GgmlType::F32)];
    let err = GgufWriter::new(Vec::new(), &no_metadata, duplicate).unwrap_err();
    assert!(matches!(err, GgufError::DuplicateTensor { .. }), "{err}");
    let partial = vec![spec("q", vec![16], GgmlType::Q4_0)];
    let err = GgufWriter::new(Vec::new(), &no_metadata, partial).unwrap_err();
    assert!(matches!(err, GgufError::PartialBlock { .. }), "{err}");
    let too_many_dims = vec![spec("t", vec![1; 5], GgmlType::F32)];
    let err = GgufWriter::new(Vec::new(), &no_metadata, too_many_dims).unwrap_err();
    assert!(matches!(err, GgufError::TooManyDims { .. }), "{err}");

    for (alignment, expected_ok) in [(Value::U32(48), false), (Value::U32(0), false), (Value::U64(64), false)]
    {
        let metadata: IndexMap<String, Value> =
            [("general.alignment".to_owned(), alignment)].into_iter().collect();
        assert_eq!(GgufWriter::new(Vec::new(), &metadata, vec![]).is_ok(), expected_ok);
    }
}
