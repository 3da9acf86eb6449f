//! Shared by the qwen3 tests: the tiny fixture, a loaded model with its KV cache, and helpers that
//! drive forward passes and compare logits.

#![allow(clippy::unwrap_used, dead_code)]

use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::backend::{Backend, Mask};
use canopy_models::arch::qwen3::{Qwen3, Qwen3Options};
use canopy_models::arch::{ForwardOutput, LogitRows, SequenceInput};
use canopy_models::gguf::GgufFile;
use canopy_models::kv::{KvCache, SeqId};

pub const VOCAB: usize = 1024;

/// A fixture file. The crate directory is read at run time first, so that a test binary built
/// here also runs from a copy of the tree elsewhere (`CARGO_MANIFEST_DIR=<copy>/models`).
pub fn testdata(name: &str) -> String {
    let crate_dir =
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
    format!("{crate_dir}/testdata/models/{name}")
}

/// The fixture's description of one file type (`f32`, `bf16`, `q8_0`).
pub struct Reference {
    pub gguf: String,
    pub logits: Vec<f32>,
    pub greedy: Vec<u32>,
    pub argmax: Vec<u32>,
}

pub fn prompt_ids() -> Vec<u32> {
    let json = fixture_json();
    serde_json::from_value(json["prompt_ids"].clone()).unwrap()
}

fn fixture_json() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(testdata("qwen3-tiny.json")).unwrap()).unwrap()
}

pub fn reference(kind: &str) -> Reference {
    let json = fixture_json();
    let file = &json["files"][kind];
    assert_eq!(file["logits_shape"], serde_json::json!([46, VOCAB]));
    let bytes = std::fs::read(testdata(file["logits"].as_str().unwrap())).unwrap();
    let logits = bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    Reference {
        gguf: file["gguf"].as_str().unwrap().to_owned(),
        logits,
        greedy: serde_json::from_value(file["greedy_continuation_ids"].clone()).unwrap(),
        argmax: serde_json::from_value(file["argmax_per_position"].clone()).unwrap(),
    }
}

/// A model with a KV cache of small blocks, so that sequences span several; on the CPU backend
/// unless built with [`Harness::on`].
pub struct Harness<B: Backend = CpuBackend> {
    pub backend: B,
    pub model: Qwen3<B>,
    pub cache: KvCache<B>,
}

pub const BLOCK_SIZE: usize = 4;

impl Harness {
    pub fn open(gguf: &str) -> Self {
        Self::from_file(&GgufFile::open(testdata(gguf)).unwrap())
    }

    pub fn from_file(file: &GgufFile) -> Self {
        Harness::on(CpuBackend::new(), file)
    }
}

impl<B: Backend> Harness<B> {
    pub fn on(backend: B, file: &GgufFile) -> Self {
        let options = Qwen3Options { max_batch_tokens: 128, max_logit_rows: 128, capture_layers: vec![] };
        let model = Qwen3::load(&backend, file, options).unwrap();
        let cache = KvCache::new(&backend, model.config().kv_config(BLOCK_SIZE, 128)).unwrap();
        Self { backend, model, cache }
    }

    /// Runs one forward pass and downloads its logits.
    pub fn forward(&mut self, batch: &[SequenceInput<'_>], rows: LogitRows<'_>) -> Vec<f32> {
        let output: ForwardOutput =
            self.model.forward(&self.backend, &mut self.cache, batch, rows, false).unwrap();
        self.model.download_logits(&self.backend, &output).unwrap()
    }

    /// Causal forward of `tokens` for one sequence; logits of every row.
    pub fn causal(&mut self, seq: SeqId, tokens: &[u32]) -> Vec<f32> {
        self.forward(&[SequenceInput { seq, tokens, mask: Mask::Causal }], LogitRows::All)
    }

    /// Greedy decoding of `n` tokens after `first`, one token per forward pass; returns the
    /// tokens after `first` and the logits of every step.
    pub fn decode_greedy(&mut self, seq: SeqId, first: u32, n: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
        let mut token = first;
        let mut tokens = Vec::new();
        let mut all_logits = Vec::new();
        for _ in 0..n {
            let logits = self.causal(seq, &[token]);
            let mut next = [0u32];
            self.backend.argmax_rows(self.model.logits(), 1, VOCAB, &mut next).unwrap();
            token = next[0];
            tokens.push(token);
            all_logits.push(logits);
        }
        (tokens, all_logits)
    }
}

/// `|a - b| / |b|` over two equally long vectors, in f64.
pub fn relative_l2(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let diff: f64 = a.iter().zip(b).map(|(&x, &y)| (x as f64 - y as f64).powi(2)).sum();
    let norm: f64 = b.iter().map(|&y| (y as f64).powi(2)).sum();
    (diff / norm).sqrt()
}

pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best as u32
}
