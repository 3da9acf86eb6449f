//! The `gguf` Python package (gguf-py) as an independent oracle: it reads files our writer produces,
//! and we read files its writer produces.
//!
//! Runs `$CANOPY_PYTHON` (default `python3`). Without a Python that can `import gguf` the tests are
//! skipped, unless `CANOPY_REQUIRE_ORACLE=1`, which makes that a failure.

use std::path::Path;
use std::process::Command;

use canopy_models::gguf::{Array, GgmlType, GgufFile, GgufWriter, TensorSpec, Value, ValueType};
use indexmap::IndexMap;
use serde_json::json;

/// The Python to use, or `None` (after saying so) when gguf-py is unavailable and not required.
fn oracle_python() -> Option<String> {
    let python = std::env::var("CANOPY_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let importable = Command::new(&python)
        .args(["-c", "import gguf, numpy"])
        .output()
        .map(|out| out.status.success())
        .unwrap_or(false);
    if importable {
        return Some(python);
    }
    if std::env::var("CANOPY_REQUIRE_ORACLE").as_deref() == Ok("1") {
        panic!("CANOPY_REQUIRE_ORACLE=1 but {python} cannot import gguf and numpy");
    }
    println!("skipped: {python} cannot import gguf and numpy");
    None
}

fn run_python(python: &str, script: &str, path: &Path) -> String {
    let out = Command::new(python).args(["-c", script]).arg(path).output().unwrap();
    assert!(out.status.success(), "python failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Prints what gguf-py's reader sees in the file at argv[1], as JSON.
const DUMP_SCRIPT: &str = r#"
import json, sys, gguf
r = gguf.GGUFReader(sys.argv[1])
fields = {k: {"types": [t.name for t in f.types], "value": f.contents()}
          for k, f in r.fields.items() if not k.startswith("GGUF.")}
tensors = [[t.name, t.tensor_type.name, [int(d) for d in t.shape], int(t.data_offset - r.data_offset),
            t.data.tobytes().hex()] for t in r.tensors]
print(json.dumps({"alignment": int(r.alignment), "data_offset": int(r.data_offset),
                  "fields": fields, "tensors": tensors}))
"#;

#[test]
fn gguf_py_reads_what_we_write() {
    let Some(python) = oracle_python() else { return };
    let metadata: IndexMap<String, Value> = [
        ("general.architecture", Value::from("oracle")),
        ("general.alignment", Value::U32(64)),
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
        ("tokens", Value::from(Array::from_strings(["<s>", "hello", "wörld"]))),
        ("scores", Value::from(Array::from_f32s([0.5, -1.0]))),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let tensors = vec![
        TensorSpec { name: "w".into(), dims: vec![32, 3], ggml_type: GgmlType::Q8_0 },
        TensorSpec { name: "b".into(), dims: vec![5], ggml_type: GgmlType::F32 },
        TensorSpec { name: "h".into(), dims: vec![2, 2], ggml_type: GgmlType::F16 },
    ];
    let w: Vec<u8> = (0..102).collect();
    let b: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let h: Vec<u8> = [0x3c00u16, 0x4000, 0xc000, 0x0000].iter().flat_map(|v| v.to_le_bytes()).collect();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ours.gguf");
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut writer = GgufWriter::new(file, &metadata, tensors).unwrap();
    writer.write_tensor("w", &w).unwrap();
    writer.write_tensor("b", &b).unwrap();
    writer.write_tensor("h", &h).unwrap();
    writer.finish().unwrap();

    let seen: serde_json::Value = serde_json::from_str(&run_python(&python, DUMP_SCRIPT, &path)).unwrap();
    assert_eq!(seen["alignment"], 64);
    assert_eq!(seen["data_offset"].as_u64().unwrap() % 64, 0);
    let expected_fields = json!({
        "general.architecture": {"types": ["STRING"], "value": "oracle"},
        "general.alignment": {"types": ["UINT32"], "value": 64},
        "u8": {"types": ["UINT8"], "value": 200},
        "i8": {"types": ["INT8"], "value": -100},
        "u16": {"types": ["UINT16"], "value": 60000},
        "i16": {"types": ["INT16"], "value": -30000},
        "u32": {"types": ["UINT32"], "value": 4_000_000_000u32},
        "i32": {"types": ["INT32"], "value": -2_000_000_000},
        "f32": {"types": ["FLOAT32"], "value": 0.25},
        "bool": {"types": ["BOOL"], "value": true},
        "string": {"types": ["STRING"], "value": "ünïcödé"},
        "u64": {"types": ["UINT64"], "value": u64::MAX},
        "i64": {"types": ["INT64"], "value": i64::MIN},
        "f64": {"types": ["FLOAT64"], "value": -1.5e300},
        "tokens": {"types": ["ARRAY", "STRING"], "value": ["<s>", "hello", "wörld"]},
        "scores": {"types": ["ARRAY", "FLOAT32"], "value": [0.5, -1.0]},
    });
    assert_eq!(seen["fields"], expected_fields);
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let expected_tensors = json!([
        ["w", "Q8_0", [32, 3], 0, hex(&w)],
        ["b", "F32", [5], 128, hex(&b)],
        ["h", "F16", [2, 2], 192, hex(&h)],
    ]);
    assert_eq!(seen["tensors"], expected_tensors);
}

/// Writes, with gguf-py's `GGUFWriter`, a file of every value type and three tensors to argv[1].
const WRITE_SCRIPT: &str = r#"
import sys, numpy as np, gguf
w = gguf.GGUFWriter(sys.argv[1], "pyarch")
w.add_custom_alignment(64)
w.add_uint8("u8", 200); w.add_int8("i8", -100); w.add_uint16("u16", 60000); w.add_int16("i16", -30000)
w.add_uint32("u32", 4000000000); w.add_int32("i32", -2000000000); w.add_float32("f32", 0.25)
w.add_bool("bool", False); w.add_string("string", "ünïcödé"); w.add_uint64("u64", 2**64 - 1)
w.add_int64("i64", -2**63); w.add_float64("f64", -1.5e300)
w.add_array("strings", ["a", "bc"]); w.add_array("ints", [3, -4]); w.add_array("nested", [[1, 2], ["x"]])
w.add_tensor("f", np.arange(6, dtype=np.float32).reshape(2, 3))
w.add_tensor("q", np.arange(68, dtype=np.uint8).reshape(2, 34), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
w.add_tensor("h", np.array([1.0, -2.0], dtype=np.float16))
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
"#;

#[test]
fn we_read_what_gguf_py_writes() {
    let Some(python) = oracle_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("theirs.gguf");
    run_python(&python, WRITE_SCRIPT, &path);
    let file = GgufFile::open(&path).unwrap();

    assert_eq!(file.version(), 3);
    assert_eq!(file.alignment(), 64);
    let keys: Vec<&str> = file.metadata().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "general.architecture",
            "general.alignment",
            "u8",
            "i8",
            "u16",
            "i16",
            "u32",
            "i32",
            "f32",
            "bool",
            "string",
            "u64",
            "i64",
            "f64",
            "strings",
            "ints",
            "nested"
        ]
    );
    let expected = [
        ("general.architecture", Value::from("pyarch")),
        ("general.alignment", Value::U32(64)),
        ("u8", Value::U8(200)),
        ("i8", Value::I8(-100)),
        ("u16", Value::U16(60000)),
        ("i16", Value::I16(-30000)),
        ("u32", Value::U32(4_000_000_000)),
        ("i32", Value::I32(-2_000_000_000)),
        ("f32", Value::F32(0.25)),
        ("bool", Value::Bool(false)),
        ("string", Value::from("ünïcödé")),
        ("u64", Value::U64(u64::MAX)),
        ("i64", Value::I64(i64::MIN)),
        ("f64", Value::F64(-1.5e300)),
        ("strings", Array::from_strings(["a", "bc"]).into()),
        ("ints", Array::from_i32s([3, -4]).into()),
        (
            "nested",
            Array::new(
                ValueType::Array,
                vec![Array::from_i32s([1, 2]).into(), Array::from_strings(["x"]).into()],
            )
            .unwrap()
            .into(),
        ),
    ];
    for (key, value) in expected {
        assert_eq!(file.get(key), Some(&value), "{key}");
    }

    let f = file.tensor("f").unwrap();
    assert_eq!((f.dims.as_slice(), f.ggml_type, f.offset), (&[3u64, 2][..], GgmlType::F32, 0));
    let floats: Vec<f32> =
        file.tensor_data(f).chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(floats, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let q = file.tensor("q").unwrap();
    assert_eq!((q.dims.as_slice(), q.ggml_type, q.offset), (&[32u64, 2][..], GgmlType::Q8_0, 64));
    assert_eq!(file.tensor_data(q), (0..68).collect::<Vec<u8>>());
    let h = file.tensor("h").unwrap();
    assert_eq!(
        (h.dims.as_slice(), h.ggml_type, h.offset),
        (&[2u64][..], GgmlType::F16, 192),
        "68 bytes of q pad to 128"
    );
    assert_eq!(file.tensor_data(h), [0x00, 0x3c, 0x00, 0xc0]);
}
