//! `canopy inspect`: what a GGUF file holds.

use std::path::PathBuf;

use anyhow::Context;
use canopy_models::gguf::{Array, GgufFile, TensorInfo, Value};
use serde_json::{Map, Value as Json, json};

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file.
    #[arg(env = "CANOPY_MODEL")]
    file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long, env = "CANOPY_JSON")]
    json: bool,
    /// Print arrays in full instead of their first elements.
    #[arg(long, env = "CANOPY_FULL_ARRAYS")]
    full_arrays: bool,
}

/// Arrays longer than this are summarised unless `--full-arrays` is given.
const ARRAY_PREVIEW: usize = 8;

pub fn run(args: &Args) -> anyhow::Result<()> {
    let file = GgufFile::open(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let limit = if args.full_arrays { usize::MAX } else { ARRAY_PREVIEW };
    let report = if args.json { json_report(&file, limit)? } else { text_report(&file, limit) };
    println!("{report}");
    Ok(())
}

fn text_report(file: &GgufFile, limit: usize) -> String {
    let mut out = String::new();
    let architecture = file.architecture().unwrap_or("(not stated)");
    out += &format!("architecture: {architecture}\n");
    out += &format!(
        "gguf version {}, alignment {}, tensor data at byte {}\n",
        file.version(),
        file.alignment(),
        file.data_offset()
    );
    out += &format!("\nmetadata ({} keys):\n", file.metadata().len());
    for (key, value) in file.metadata() {
        out += &format!("  {key} = {}\n", text_value(value, limit));
    }
    let total_bytes: u64 = file.tensors().iter().map(TensorInfo::n_bytes).sum();
    let total_elements: u64 = file.tensors().iter().map(TensorInfo::n_elements).sum();
    out += &format!(
        "\ntensors ({}, {} elements, {}):\n",
        file.tensors().len(),
        total_elements,
        human_bytes(total_bytes)
    );
    let name_width = file.tensors().iter().map(|t| t.name.len()).max().unwrap_or(0);
    for tensor in file.tensors() {
        let dims: Vec<String> = tensor.dims.iter().map(u64::to_string).collect();
        out += &format!(
            "  {:<name_width$}  {:<7}  {:<20}  offset {:>12}  {}\n",
            tensor.name,
            tensor.ggml_type.name(),
            format!("[{}]", dims.join(", ")),
            tensor.offset,
            human_bytes(tensor.n_bytes()),
        );
    }
    out.pop();
    out
}

fn text_value(value: &Value, limit: usize) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Array(array) => {
            let shown: Vec<String> =
                array.values().iter().take(limit).map(|v| text_value(v, limit)).collect();
            let more = if array.len() > shown.len() { ", ..." } else { "" };
            format!("[{}; {}] [{}{more}]", array.element_type().name(), array.len(), shown.join(", "))
        }
        other => json_scalar(other).to_string(),
    }
}

fn json_report(file: &GgufFile, limit: usize) -> anyhow::Result<String> {
    let metadata: Map<String, Json> =
        file.metadata().iter().map(|(key, value)| (key.clone(), json_value(value, limit))).collect();
    let tensors: Vec<Json> = file
        .tensors()
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "type": t.ggml_type.name(),
                "dims": t.dims,
                "offset": t.offset,
                "bytes": t.n_bytes(),
            })
        })
        .collect();
    let report = json!({
        "architecture": file.architecture().ok(),
        "version": file.version(),
        "alignment": file.alignment(),
        "data_offset": file.data_offset(),
        "metadata": metadata,
        "tensors": tensors,
    });
    Ok(serde_json::to_string_pretty(&report)?)
}

/// Arrays become `{"type", "len", "values"}` so that a summarised array says how long it really is.
fn json_value(value: &Value, limit: usize) -> Json {
    match value {
        Value::Array(array) => json_array(array, limit),
        other => json_scalar(other),
    }
}

fn json_array(array: &Array, limit: usize) -> Json {
    let values: Vec<Json> = array.values().iter().take(limit).map(|v| json_value(v, limit)).collect();
    json!({
        "type": array.element_type().name(),
        "len": array.len(),
        "values": values,
        "truncated": array.len() > limit,
    })
}

fn json_scalar(value: &Value) -> Json {
    match value {
        Value::U8(v) => json!(v),
        Value::I8(v) => json!(v),
        Value::U16(v) => json!(v),
        Value::I16(v) => json!(v),
        Value::U32(v) => json!(v),
        Value::I32(v) => json!(v),
        Value::U64(v) => json!(v),
        Value::I64(v) => json!(v),
        Value::F32(v) => shortest_f32(*v),
        Value::F64(v) => json!(v),
        Value::Bool(v) => json!(v),
        Value::String(v) => json!(v),
        Value::Array(array) => json_array(array, usize::MAX),
    }
}

/// An f32 as the shortest decimal that reads back to it (`1e-6`, not `9.999999974752427e-7`).
fn shortest_f32(value: f32) -> Json {
    value
        .to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Json::Null, Json::Number)
}

fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 { format!("{bytes} B") } else { format!("{value:.2} {}", UNITS[unit]) }
}
