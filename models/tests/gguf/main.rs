//! Tests of the GGUF reader and writer against real files, the `gguf` Python package, and hostile
//! input.

// Test helpers outside `#[test]` functions fail loudly on purpose.
#![allow(clippy::unwrap_used)]

mod fixtures;
mod fuzz;
mod hostile;
mod oracle;
mod raw;
mod round_trip;
mod version2;

use std::path::PathBuf;

/// Path of a file under `models/testdata`.
fn testdata(relative: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/testdata")).join(relative)
}
