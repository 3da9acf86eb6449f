//! What the engine needs from a model: batched forward passes over new tokens of sequences whose
//! earlier tokens sit in the model's KV cache.

use canopy_kernels::backend::ARGMAX_NONE;

use crate::sampling::argmax;

/// New tokens of one sequence in a batched forward pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SequenceChunk<'a> {
    /// Which sequence (a slot of the model's KV cache).
    pub sequence: usize,
    /// Positions of this sequence already in the cache; the new tokens follow them. A value
    /// below what the cache holds drops the positions from there on (a fresh sequence is 0).
    pub n_past: usize,
    /// The new tokens.
    pub tokens: &'a [u32],
    /// Whether to produce the logits of the last new token.
    pub want_logits: bool,
}

/// KV cache blocks in use and in all.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvUsage {
    /// Blocks held by sequences.
    pub used_blocks: usize,
    /// Blocks in the cache.
    pub total_blocks: usize,
}

/// A causal language model with its KV cache, driven by the engine.
pub trait CausalLm {
    /// What a forward pass can fail with.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Length of one row of logits.
    fn vocab_size(&self) -> usize;

    /// The most positions one sequence may hold (the context window or the cache's capacity).
    fn max_sequence_len(&self) -> usize;

    /// Runs the new tokens of every chunk, stores their keys and values, and writes one row of
    /// `vocab_size` logits per chunk that wants them, in batch order, to the front of `logits`.
    fn forward(&mut self, batch: &[SequenceChunk<'_>], logits: &mut [f32]) -> Result<(), Self::Error>;

    /// Runs `batch` like [`Self::forward`], but writes to the front of `ids`, for each chunk
    /// that wants logits, the id of the largest logit instead of the row ([`ARGMAX_NONE`] where
    /// no logit is above -inf). A model that picks on its device moves one id per row to the host
    /// instead of a row of `vocab_size` logits. This default goes through [`Self::forward`] and
    /// the host, with room for `ids.len()` rows of logits.
    fn forward_argmax(&mut self, batch: &[SequenceChunk<'_>], ids: &mut [u32]) -> Result<(), Self::Error> {
        let vocab_size = self.vocab_size();
        let mut logits = vec![0.0; ids.len() * vocab_size];
        self.forward(batch, &mut logits)?;
        let rows = batch.iter().filter(|chunk| chunk.want_logits && !chunk.tokens.is_empty()).count();
        for (id, row) in ids.iter_mut().zip(logits.chunks_exact(vocab_size.max(1))).take(rows) {
            *id = argmax(row).unwrap_or(ARGMAX_NONE);
        }
        Ok(())
    }

    /// Frees the KV memory of sequence slot `sequence`; its next forward pass starts it afresh.
    fn release(&mut self, sequence: usize);

    /// How much of the KV cache is in use.
    fn kv_usage(&self) -> KvUsage;
}
