//! The generation engine: from a prompt to streamed text with one model on one device.
//!
//! [`generate`] drives a [`CausalLm`] through one sequence: the prompt in prefill chunks, then
//! one token per step, sampled by a [`crate::sampling::Sampler`] and turned into text by an
//! [`OutputTracker`] that also applies the stop conditions. Forward passes take a batch of
//! [`SequenceChunk`]s, so continuous batching can later put several sequences in one step.
//! [`Qwen3Lm`] puts a Qwen3 model and its paged KV cache behind [`CausalLm`].

mod error;
mod generate;
mod model;
mod output;
mod qwen3;
mod stop;
#[cfg(test)]
mod tests;

pub use error::EngineError;
pub use generate::{DEFAULT_PREFILL_CHUNK, GenerateRequest, Generation, Timing, TokenEvent, generate};
pub use model::{CausalLm, SequenceChunk};
pub use output::{OutputStep, OutputTracker, StopConditions};
pub use qwen3::{KV_BLOCK_SIZE, Qwen3Lm, Qwen3LmOptions};
pub use stop::{FinishReason, StopScan, StopStrings};
