//! [`CausalLm`] for a Qwen3 model: the model, its paged KV cache and the backend in one value.

use canopy_kernels::backend::{Backend, Mask};
use canopy_models::arch::qwen3::{Qwen3, Qwen3Options};
use canopy_models::arch::{ArchError, LogitRows, SequenceInput};
use canopy_models::gguf::GgufFile;
use canopy_models::kv::{KvCache, SeqId};

use super::model::{CausalLm, KvUsage, SequenceChunk};

/// KV positions per cache block.
pub const KV_BLOCK_SIZE: usize = 16;

/// How much memory a [`Qwen3Lm`] sets aside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Qwen3LmOptions {
    /// The most positions of a sequence: the KV cache holds this many per sequence. Capped at the
    /// model's context length; `None` takes the context length.
    pub max_sequence_len: Option<usize>,
    /// The most new tokens of one forward pass (the prefill chunk, the largest verify batch).
    pub max_batch_tokens: usize,
    /// Sequences the cache holds at once.
    pub max_sequences: usize,
}

/// A Qwen3 model ready for the engine.
pub struct Qwen3Lm<B: Backend> {
    backend: B,
    model: Qwen3<B>,
    cache: KvCache<B>,
    /// The cache sequence of each engine sequence slot, created on first use.
    sequences: Vec<Option<SeqId>>,
    max_sequence_len: usize,
    /// Rows of the batch that get logits, reused across steps.
    logit_rows: Vec<u32>,
}

impl<B: Backend> Qwen3Lm<B> {
    /// Loads the model from `file` onto `backend` with a cache sized by `options`.
    pub fn load(backend: B, file: &GgufFile, options: Qwen3LmOptions) -> Result<Self, ArchError> {
        if options.max_sequences == 0 {
            return Err(ArchError::Batch("max_sequences must be at least 1".to_owned()));
        }
        let model_options = Qwen3Options {
            max_batch_tokens: options.max_batch_tokens,
            max_logit_rows: options.max_sequences.min(options.max_batch_tokens),
            capture_layers: Vec::new(),
        };
        let model = Qwen3::load(&backend, file, model_options)?;
        let context = model.config().context_length;
        let max_sequence_len = options.max_sequence_len.map_or(context, |len| len.min(context));
        let blocks_per_sequence = max_sequence_len.div_ceil(KV_BLOCK_SIZE);
        let n_blocks = blocks_per_sequence
            .checked_mul(options.max_sequences)
            .ok_or_else(|| ArchError::Batch("the KV cache size overflows".to_owned()))?;
        let cache = KvCache::new(&backend, model.config().kv_config(KV_BLOCK_SIZE, n_blocks))?;
        Ok(Self {
            backend,
            model,
            cache,
            sequences: vec![None; options.max_sequences],
            max_sequence_len,
            logit_rows: Vec::new(),
        })
    }

    /// The backend the model runs on.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The loaded model.
    pub fn model(&self) -> &Qwen3<B> {
        &self.model
    }

    /// Runs the forward pass of `batch`, leaving the logits of the chunks that want them in the
    /// model's logits buffer; returns how many rows that is.
    fn run(&mut self, batch: &[SequenceChunk<'_>]) -> Result<usize, ArchError> {
        let mut inputs = Vec::with_capacity(batch.len());
        self.logit_rows.clear();
        let mut row = 0u32;
        for chunk in batch {
            if chunk.n_past + chunk.tokens.len() > self.max_sequence_len {
                let detail = format!(
                    "{} positions exceed the sequence limit {}",
                    chunk.n_past + chunk.tokens.len(),
                    self.max_sequence_len
                );
                return Err(ArchError::Batch(detail));
            }
            let seq = self.sequence_at(chunk.sequence, chunk.n_past)?;
            inputs.push(SequenceInput { seq, tokens: chunk.tokens, mask: Mask::Causal });
            row += chunk.tokens.len() as u32;
            if chunk.want_logits && row > 0 {
                self.logit_rows.push(row - 1);
            }
        }
        let rows =
            if self.logit_rows.is_empty() { LogitRows::None } else { LogitRows::Rows(&self.logit_rows) };
        let output = self.model.forward(&self.backend, &mut self.cache, &inputs, rows, false)?;
        Ok(output.n_logit_rows)
    }

    /// The cache sequence of engine slot `slot` after dropping its positions from `n_past` on.
    fn sequence_at(&mut self, slot: usize, n_past: usize) -> Result<SeqId, ArchError> {
        let n_slots = self.sequences.len();
        let entry = self
            .sequences
            .get_mut(slot)
            .ok_or_else(|| ArchError::Batch(format!("sequence slot {slot} of {n_slots}")))?;
        let seq = *entry.get_or_insert_with(|| self.cache.create_sequence());
        let len = self.cache.len(seq)?;
        if n_past > len {
            return Err(ArchError::Batch(format!("n_past {n_past} beyond the {len} cached positions")));
        }
        if n_past < len {
            self.cache.truncate(seq, n_past)?;
        }
        Ok(seq)
    }
}

impl<B: Backend> CausalLm for Qwen3Lm<B> {
    type Error = ArchError;

    fn vocab_size(&self) -> usize {
        self.model.config().vocab_size
    }

    fn max_sequence_len(&self) -> usize {
        self.max_sequence_len
    }

    fn forward(&mut self, batch: &[SequenceChunk<'_>], logits: &mut [f32]) -> Result<(), ArchError> {
        let n_values = self.run(batch)? * self.vocab_size();
        let available = logits.len();
        let out = logits.get_mut(..n_values).ok_or_else(|| {
            ArchError::Batch(format!("a logits buffer of {available} for {n_values} values"))
        })?;
        self.backend.download(self.model.logits(), out)?;
        Ok(())
    }

    fn forward_argmax(&mut self, batch: &[SequenceChunk<'_>], ids: &mut [u32]) -> Result<(), ArchError> {
        let n_rows = self.run(batch)?;
        let available = ids.len();
        let out = ids
            .get_mut(..n_rows)
            .ok_or_else(|| ArchError::Batch(format!("an ids buffer of {available} for {n_rows} rows")))?;
        self.backend.argmax_rows(self.model.logits(), n_rows, self.vocab_size(), out)?;
        Ok(())
    }

    fn release(&mut self, sequence: usize) {
        if let Some(seq) = self.sequences.get_mut(sequence).and_then(Option::take) {
            // The only failure is an id the cache does not know, which holds nothing to free.
            let _ = self.cache.release(seq);
        }
    }

    fn kv_usage(&self) -> KvUsage {
        let memory = self.cache.memory();
        KvUsage { used_blocks: memory.used_blocks(), total_blocks: memory.total_blocks }
    }
}

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;

    use canopy_kernels::backend::ARGMAX_NONE;
    use canopy_kernels::backend::cpu::CpuBackend;
    use canopy_models::tokenizer::Tokenizer;

    use super::*;
    use crate::engine::{FinishReason, GenerateRequest, StopConditions, generate};
    use crate::sampling::{SamplingParams, argmax};

    const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/testdata/models");

    /// The reference prompt ids and greedy continuation of one file of the tiny model.
    fn reference(file_type: &str) -> (Vec<u32>, Vec<u32>) {
        let text = std::fs::read_to_string(format!("{MODELS}/qwen3-tiny.json")).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let ids = |value: &serde_json::Value| serde_json::from_value(value.clone()).unwrap();
        (ids(&json["prompt_ids"]), ids(&json["files"][file_type]["greedy_continuation_ids"]))
    }

    fn load(file_type: &str, max_batch_tokens: usize) -> (Qwen3Lm<CpuBackend>, Tokenizer) {
        let file = GgufFile::open(format!("{MODELS}/qwen3-tiny-{file_type}.gguf")).unwrap();
        let options = Qwen3LmOptions { max_sequence_len: Some(256), max_batch_tokens, max_sequences: 1 };
        (Qwen3Lm::load(CpuBackend::new(), &file, options).unwrap(), Tokenizer::from_gguf(&file).unwrap())
    }

    fn run(
        model: &mut Qwen3Lm<CpuBackend>,
        tokenizer: &Tokenizer,
        prompt: Vec<u32>,
        sampling: SamplingParams,
        max_tokens: usize,
        prefill_chunk: usize,
    ) -> Vec<u32> {
        let stop = StopConditions { ignore_eos: true, ..StopConditions::max_tokens(max_tokens) };
        let request = GenerateRequest { prompt, sampling, stop, top_logprobs: None };
        let generation =
            generate(model, tokenizer, &request, prefill_chunk, |_| ControlFlow::Continue(())).unwrap();
        assert_eq!(generation.finish_reason, FinishReason::Length);
        generation.tokens
    }

    #[test]
    fn greedy_generation_reproduces_the_reference_continuation() {
        let (prompt, expected) = reference("f32");
        for prefill_chunk in [64, 7] {
            let (mut model, tokenizer) = load("f32", prefill_chunk);
            let tokens = run(
                &mut model,
                &tokenizer,
                prompt.clone(),
                SamplingParams::greedy(),
                expected.len(),
                prefill_chunk,
            );
            assert_eq!(tokens, expected, "prefill chunk {prefill_chunk}");
        }
    }

    #[test]
    fn the_model_can_run_a_second_generation_on_the_same_cache() {
        let (prompt, expected) = reference("f32");
        let (mut model, tokenizer) = load("f32", 64);
        let first = run(&mut model, &tokenizer, prompt.clone(), SamplingParams::greedy(), 5, 64);
        assert_eq!(first, expected[..5]);
        let second = run(&mut model, &tokenizer, prompt, SamplingParams::greedy(), expected.len(), 64);
        assert_eq!(second, expected);
    }

    #[test]
    fn seeded_sampling_on_the_model_is_reproducible() {
        let (prompt, greedy) = reference("f32");
        let (mut model, tokenizer) = load("f32", 64);
        let mut sample = |seed| {
            let sampling = SamplingParams { temperature: Some(1.0), seed: Some(seed), ..Default::default() };
            run(&mut model, &tokenizer, prompt.clone(), sampling, 16, 64)
        };
        let first = sample(9);
        assert_eq!(first, sample(9));
        assert_ne!(first, sample(10));
        assert_ne!(first, greedy[..16]);
    }

    #[test]
    fn argmax_forward_picks_the_argmax_of_each_row_of_logits() {
        let file = GgufFile::open(format!("{MODELS}/qwen3-tiny-f32.gguf")).unwrap();
        let options = Qwen3LmOptions { max_sequence_len: Some(64), max_batch_tokens: 16, max_sequences: 2 };
        let mut model = Qwen3Lm::load(CpuBackend::new(), &file, options).unwrap();
        let vocab = model.vocab_size();
        let (first, second) = ([5u32, 9, 13], [7u32, 2]);
        let batch = [
            SequenceChunk { sequence: 0, n_past: 0, tokens: &first, want_logits: true },
            SequenceChunk { sequence: 1, n_past: 0, tokens: &second, want_logits: true },
        ];
        let mut logits = vec![0.0; 2 * vocab];
        model.forward(&batch, &mut logits).unwrap();
        let expected: Vec<u32> = logits.chunks_exact(vocab).map(|row| argmax(row).unwrap()).collect();
        // n_past 0 again: both sequences start over, so the same logits are picked from.
        let mut ids = [ARGMAX_NONE; 3];
        model.forward_argmax(&batch, &mut ids).unwrap();
        assert_eq!(ids[..2], expected);
        assert_eq!(ids[2], ARGMAX_NONE, "only rows that want logits are written");
        assert!(model.forward_argmax(&batch, &mut [0; 1]).is_err(), "an ids buffer too short");
    }

    #[test]
    fn positions_beyond_the_cache_are_refused() {
        let (mut model, _) = load("f32", 64);
        assert_eq!(model.max_sequence_len(), 256);
        let mut logits = vec![0.0; model.vocab_size()];
        let tokens = [1u32; 8];
        let chunk = SequenceChunk { sequence: 0, n_past: 0, tokens: &tokens, want_logits: true };
        model.forward(&[chunk], &mut logits).unwrap();
        let beyond = SequenceChunk { n_past: 9, ..chunk };
        assert!(model.forward(&[beyond], &mut logits).is_err());
        let past_limit = SequenceChunk { n_past: 250, ..chunk };
        assert!(model.forward(&[past_limit], &mut logits).is_err());
        let other_slot = SequenceChunk { sequence: 1, ..chunk };
        assert!(model.forward(&[other_slot], &mut logits).is_err());
    }
}
