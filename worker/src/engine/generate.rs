//! The generation loop for one sequence: chunked prefill, then token-by-token decoding.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use canopy_models::tokenizer::Tokenizer;

use super::error::EngineError;
use super::model::{CausalLm, SequenceChunk};
use super::output::{OutputStep, OutputTracker, StopConditions};
use super::stop::FinishReason;
use crate::sampling::{Sampler, SamplingParams};

/// Prompt tokens per prefill forward pass when the caller does not say.
pub const DEFAULT_PREFILL_CHUNK: usize = 512;

/// One generation: the prompt's token ids and how to continue it.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateRequest {
    /// The prompt, already tokenized (chat template applied, BOS added as needed).
    pub prompt: Vec<u32>,
    /// How to pick tokens.
    pub sampling: SamplingParams,
    /// When to stop.
    pub stop: StopConditions,
    /// Prompt tokens per prefill forward pass.
    pub prefill_chunk: usize,
}

/// One generated token as it is streamed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenEvent<'a> {
    /// The token id (end-of-generation tokens included).
    pub id: u32,
    /// Text ready to show after this token; empty while text is held back (an incomplete
    /// character or a possible stop string) and for tokens inside a stop string.
    pub text: &'a str,
}

/// Where the time of a generation went.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timing {
    /// Prompt tokens run through the model.
    pub prompt_tokens: usize,
    /// Wall time of the prefill, up to the logits of the first new token.
    pub prompt_time: Duration,
    /// Single-token decode forward passes (one fewer than the new tokens: the first comes from
    /// the prefill's logits and the last needs no forward pass).
    pub decode_steps: usize,
    /// Wall time of the decode steps, sampling included.
    pub decode_time: Duration,
}

impl Timing {
    /// Prompt tokens per second of prefill.
    pub fn prompt_tokens_per_second(&self) -> f64 {
        rate(self.prompt_tokens, self.prompt_time)
    }

    /// Decode steps per second.
    pub fn decode_tokens_per_second(&self) -> f64 {
        rate(self.decode_steps, self.decode_time)
    }
}

fn rate(count: usize, time: Duration) -> f64 {
    if time.is_zero() { 0.0 } else { count as f64 / time.as_secs_f64() }
}

/// The result of a finished generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// Every generated token id, the end-of-generation token included.
    pub tokens: Vec<u32>,
    /// The emitted text (without a matched stop string).
    pub text: String,
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// Where the time went.
    pub timing: Timing,
}

/// Runs `request` on `model` as sequence 0 of its cache, calling `on_token` after every
/// generated token; returning [`ControlFlow::Break`] from it ends the generation with
/// [`FinishReason::Cancelled`].
pub fn generate<M: CausalLm>(
    model: &mut M,
    tokenizer: &Tokenizer,
    request: &GenerateRequest,
    mut on_token: impl FnMut(TokenEvent<'_>) -> ControlFlow<()>,
) -> Result<Generation, EngineError> {
    validate(model, request)?;
    let mut sampler = Sampler::new(request.sampling.clone())?;
    let mut tracker = OutputTracker::new(tokenizer, &request.stop);
    let mut logits = vec![0.0; model.vocab_size()];
    let prompt = &request.prompt;

    let prefill_start = Instant::now();
    for (index, chunk) in prompt.chunks(request.prefill_chunk).enumerate() {
        let n_past = index * request.prefill_chunk;
        let want_logits = n_past + chunk.len() == prompt.len();
        forward(model, n_past, chunk, want_logits, &mut logits)?;
    }
    let mut timing =
        Timing { prompt_tokens: prompt.len(), prompt_time: prefill_start.elapsed(), ..Timing::default() };

    let decode_start = Instant::now();
    let mut tokens = Vec::with_capacity(request.stop.max_tokens.min(model.max_sequence_len()));
    let mut text = String::new();
    let finish_reason = loop {
        let token = sampler.sample(&logits)?;
        sampler.accept(token);
        tokens.push(token);
        let position = prompt.len() + tokens.len() - 1;
        let (piece, finished) = match tracker.push(token)? {
            OutputStep::Continue(mut piece) if position >= model.max_sequence_len() => {
                let (tail, reason) = tracker.end(FinishReason::ContextFull)?;
                piece.push_str(&tail);
                (piece, Some(reason))
            }
            OutputStep::Continue(piece) => (piece, None),
            OutputStep::Finished { text: piece, reason } => (piece, Some(reason)),
        };
        text.push_str(&piece);
        let flow = on_token(TokenEvent { id: token, text: &piece });
        if let Some(reason) = finished {
            break reason;
        }
        if flow.is_break() {
            break FinishReason::Cancelled;
        }
        forward(model, position, std::slice::from_ref(&token), true, &mut logits)?;
        timing.decode_steps += 1;
    };
    timing.decode_time = decode_start.elapsed();
    Ok(Generation { tokens, text, finish_reason, timing })
}

fn validate<M: CausalLm>(model: &M, request: &GenerateRequest) -> Result<(), EngineError> {
    let max = model.max_sequence_len();
    if request.prompt.is_empty() {
        return Err(EngineError::EmptyPrompt);
    }
    if request.prompt.len() > max {
        return Err(EngineError::PromptTooLong { prompt: request.prompt.len(), max });
    }
    if request.stop.max_tokens == 0 {
        return Err(EngineError::ZeroMaxTokens);
    }
    if request.prefill_chunk == 0 {
        return Err(EngineError::ZeroPrefillChunk);
    }
    let vocab_size = model.vocab_size();
    match request.prompt.iter().find(|&&id| id as usize >= vocab_size) {
        Some(&id) => Err(EngineError::TokenOutOfRange { id, vocab_size }),
        None => Ok(()),
    }
}

/// One forward pass of sequence 0.
fn forward<M: CausalLm>(
    model: &mut M,
    n_past: usize,
    tokens: &[u32],
    want_logits: bool,
    logits: &mut [f32],
) -> Result<(), EngineError> {
    let batch = [SequenceChunk { sequence: 0, n_past, tokens, want_logits }];
    model.forward(&batch, logits).map_err(|err| EngineError::Model(Box::new(err)))
}
