//! The bundled tiny Qwen3 on the CPU backend, for tests.

use canopy_kernels::backend::cpu::CpuBackend;
use canopy_models::gguf::GgufFile;
use canopy_models::tokenizer::Tokenizer;

use crate::engine::{Qwen3Lm, Qwen3LmOptions};

/// The bundled tiny model.
pub const TINY_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tiny/qwen3-tiny.gguf");

/// Positions per sequence in tests: the whole context, so that a generation meant to be cancelled
/// cannot run out of room first (the tiny model's KV is 512 bytes per position).
pub const TEST_SEQUENCE_LEN: usize = 4096;

/// The tiny model's file.
pub fn tiny_file() -> GgufFile {
    GgufFile::open(TINY_MODEL).unwrap()
}

/// The tiny model's tokenizer.
pub fn tiny_tokenizer() -> Tokenizer {
    Tokenizer::from_gguf(&tiny_file()).unwrap()
}

/// The tiny model with room for `max_sequences` sequences and `max_batch_tokens` per forward pass.
pub fn tiny_model(max_sequences: usize, max_batch_tokens: usize) -> Qwen3Lm<CpuBackend> {
    let options =
        Qwen3LmOptions { max_sequence_len: Some(TEST_SEQUENCE_LEN), max_batch_tokens, max_sequences };
    Qwen3Lm::load(CpuBackend::new(), &tiny_file(), options).unwrap()
}
