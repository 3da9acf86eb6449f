//! Property test: randomly corrupted real and synthetic files parse to `Ok` or `Err`, never panic,
//! and whatever parses is self-consistent and survives a write/read round trip.

use std::sync::LazyLock;

use canopy_models::gguf::{GgufFile, GgufWriter, TensorSpec};
use proptest::prelude::*;

use super::raw::small_file;
use super::testdata;

static REAL: LazyLock<Vec<u8>> =
    LazyLock::new(|| std::fs::read(testdata("models/qwen3-tiny-q8_0.gguf")).unwrap());
static SYNTHETIC: LazyLock<Vec<u8>> = LazyLock::new(small_file);

/// One corruption. Positions are fractions of the part of the file the parser reads (header,
/// metadata, tensor infos and a little data), where corruption changes what it sees.
#[derive(Clone, Debug)]
enum Mutation {
    SetByte {
        at: f64,
        byte: u8,
    },
    Fill {
        at: f64,
        len: usize,
        byte: u8,
    },
    /// Overwrites eight bytes with a little-endian `u64`: lengths, counts and offsets.
    SetWord {
        at: f64,
        word: u64,
    },
    Insert {
        at: f64,
        bytes: Vec<u8>,
    },
    Remove {
        at: f64,
        len: usize,
    },
    Truncate {
        at: f64,
    },
}

fn word() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0),
        Just(u64::MAX),
        Just(1 << 40),
        Just(1 << 60),
        0u64..64,
        any::<u64>(),
        (0u32..8).prop_map(|shift| 32 << shift),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = 0.0..1.0f64;
    prop_oneof![
        4 => (at.clone(), any::<u8>()).prop_map(|(at, byte)| Mutation::SetByte { at, byte }),
        1 => (at.clone(), 1usize..64, any::<u8>()).prop_map(|(at, len, byte)| Mutation::Fill { at, len, byte }),
        3 => (at.clone(), word()).prop_map(|(at, word)| Mutation::SetWord { at, word }),
        1 => (at.clone(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        1 => (at.clone(), 1usize..32).prop_map(|(at, len)| Mutation::Remove { at, len }),
        1 => at.prop_map(|at| Mutation::Truncate { at }),
    ]
}

fn apply(bytes: &mut Vec<u8>, parsed_len: usize, mutation: &Mutation) {
    let position = |at: f64| ((at * parsed_len as f64) as usize).min(bytes.len());
    match mutation {
        Mutation::SetByte { at, byte } => {
            let i = position(*at);
            if let Some(b) = bytes.get_mut(i) {
                *b = *byte;
            }
        }
        Mutation::Fill { at, len, byte } => {
            let start = position(*at);
            let end = (start + len).min(bytes.len());
            bytes[start..end].fill(*byte);
        }
        Mutation::SetWord { at, word } => {
            let start = position(*at);
            let end = (start + 8).min(bytes.len());
            bytes[start..end].copy_from_slice(&word.to_le_bytes()[..end - start]);
        }
        Mutation::Insert { at, bytes: inserted } => {
            let i = position(*at);
            bytes.splice(i..i, inserted.iter().copied());
        }
        Mutation::Remove { at, len } => {
            let start = position(*at);
            let end = (start + len).min(bytes.len());
            bytes.drain(start..end);
        }
        Mutation::Truncate { at } => {
            let len = position(*at);
            bytes.truncate(len);
        }
    }
}

fn write(file: &GgufFile) -> Vec<u8> {
    let specs = file.tensors().iter().map(TensorSpec::from).collect();
    let mut writer = GgufWriter::new(Vec::new(), file.metadata(), specs).unwrap();
    for info in file.tensors() {
        writer.write_tensor(&info.name, file.tensor_data(info)).unwrap();
    }
    writer.finish().unwrap()
}

fn check(original: &[u8], mutations: &[Mutation]) {
    let parsed_len = GgufFile::from_bytes(original.to_vec()).unwrap().data_offset() as usize + 64;
    let mut bytes = original.to_vec();
    for mutation in mutations {
        apply(&mut bytes, parsed_len, mutation);
    }
    let Ok(file) = GgufFile::from_bytes(bytes) else { return };
    for info in file.tensors() {
        assert_eq!(file.tensor(&info.name), Some(info));
        assert_eq!(file.tensor_data(info).len() as u64, info.n_bytes());
    }
    // The writer accepts whatever the reader accepts, and its output is a fixed point.
    let written = write(&file);
    let reread = GgufFile::from_bytes(written.clone()).unwrap();
    assert!(write(&reread) == written, "rewriting a written file changed it");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn corrupted_real_file_never_panics(mutations in prop::collection::vec(mutation(), 1..4)) {
        check(&REAL, &mutations);
    }

    #[test]
    fn corrupted_synthetic_file_never_panics(mutations in prop::collection::vec(mutation(), 1..6)) {
        check(&SYNTHETIC, &mutations);
    }
}
