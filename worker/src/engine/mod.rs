//! The generation engine: from a prompt to streamed text with one model on one device.
//!
//! [`generate`] drives a [`CausalLm`] through one sequence: the prompt in prefill chunks, then
//! one token per step. What a sequence does with each row of logits lives in a
//! [`SequenceDecoder`]: sample with a [`crate::sampling::Sampler`], turn the token into text with
//! an [`OutputTracker`] that also applies the stop conditions, and stop at the context window.
//! Forward passes take a batch of [`SequenceChunk`]s, so the batching scheduler
//! ([`crate::scheduler`]) drives many decoders with one forward pass per step.
//! [`Qwen3Lm`] puts a Qwen3 model and its paged KV cache behind [`CausalLm`].

mod error;
mod generate;
mod model;
mod output;
mod qwen3;
mod sequence;
mod stop;
#[cfg(test)]
mod tests;

pub use error::EngineError;
pub use generate::{DEFAULT_PREFILL_CHUNK, Generation, Timing, TokenEvent, generate};
pub use model::{CausalLm, KvUsage, SequenceChunk};
pub use output::{OutputStep, OutputTracker, StopConditions};
pub use qwen3::{KV_BLOCK_SIZE, Qwen3Lm, Qwen3LmOptions};
pub use sequence::{DecodedToken, GenerateRequest, SequenceDecoder};
pub use stop::{FinishReason, StopScan, StopStrings};
