//! The generation loop for one sequence: chunked prefill, then token-by-token decoding.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use canopy_models::tokenizer::Tokenizer;

use super::error::EngineError;
use super::model::{CausalLm, SequenceChunk};
use super::sequence::{DecodedToken, GenerateRequest, SequenceDecoder};
use super::stop::FinishReason;
use crate::sampling::TokenLogprobs;

/// Prompt tokens per prefill forward pass when the caller does not say.
pub const DEFAULT_PREFILL_CHUNK: usize = 512;

/// One generated token as it is streamed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenEvent<'a> {
    /// The token id (end-of-generation tokens included).
    pub id: u32,
    /// Text ready to show after this token; empty while text is held back (an incomplete
    /// character or a possible stop string) and for tokens inside a stop string.
    pub text: &'a str,
    /// The token's log-probabilities, when the request asked for them.
    pub logprobs: Option<&'a TokenLogprobs>,
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

/// Runs `request` on `model` as sequence 0 of its cache, `prefill_chunk` prompt tokens per
/// prefill forward pass, calling `on_token` after every generated token; returning
/// [`ControlFlow::Break`] from it ends the generation with [`FinishReason::Cancelled`].
pub fn generate<M: CausalLm>(
    model: &mut M,
    tokenizer: &Tokenizer,
    request: &GenerateRequest,
    prefill_chunk: usize,
    mut on_token: impl FnMut(TokenEvent<'_>) -> ControlFlow<()>,
) -> Result<Generation, EngineError> {
    request.validate(model.vocab_size(), model.max_sequence_len())?;
    if prefill_chunk == 0 {
        return Err(EngineError::ZeroPrefillChunk);
    }
    let mut sequence = SequenceDecoder::new(tokenizer, request, model.max_sequence_len())?;
    let mut next = NextToken::for_sequence(&sequence, model.vocab_size());
    let prompt = &request.prompt;

    let prefill_start = Instant::now();
    for (index, chunk) in prompt.chunks(prefill_chunk).enumerate() {
        let n_past = index * prefill_chunk;
        let want_logits = n_past + chunk.len() == prompt.len();
        next.forward(model, n_past, chunk, want_logits)?;
    }
    let mut timing =
        Timing { prompt_tokens: prompt.len(), prompt_time: prefill_start.elapsed(), ..Timing::default() };

    let decode_start = Instant::now();
    let mut text = String::new();
    let finish_reason = loop {
        let token = next.push_to(&mut sequence)?;
        text.push_str(&token.text);
        let event = TokenEvent { id: token.id, text: &token.text, logprobs: token.logprobs.as_ref() };
        let flow = on_token(event);
        if let Some(reason) = token.finished {
            break reason;
        }
        if flow.is_break() {
            break FinishReason::Cancelled;
        }
        next.forward(model, sequence.next_position(), sequence.next_input(), true)?;
        timing.decode_steps += 1;
    };
    timing.decode_time = decode_start.elapsed();
    Ok(Generation { tokens: sequence.tokens().to_vec(), text, finish_reason, timing })
}

/// What a forward pass of sequence 0 leaves for picking its next token: the row of logits, or
/// only the argmax where that is all the sequence reads (then the row never leaves the device).
enum NextToken {
    Logits(Vec<f32>),
    Argmax([u32; 1]),
}

impl NextToken {
    fn for_sequence(sequence: &SequenceDecoder<'_>, vocab_size: usize) -> Self {
        if sequence.needs_only_argmax() { Self::Argmax([0]) } else { Self::Logits(vec![0.0; vocab_size]) }
    }

    /// One forward pass of sequence 0.
    fn forward<M: CausalLm>(
        &mut self,
        model: &mut M,
        n_past: usize,
        tokens: &[u32],
        want_logits: bool,
    ) -> Result<(), EngineError> {
        let batch = [SequenceChunk { sequence: 0, n_past, tokens, want_logits }];
        match self {
            Self::Logits(logits) => model.forward(&batch, logits),
            Self::Argmax(id) => model.forward_argmax(&batch, id),
        }
        .map_err(|err| EngineError::Model(Box::new(err)))
    }

    /// Generates `sequence`'s next token from what the last forward pass left.
    fn push_to(&self, sequence: &mut SequenceDecoder<'_>) -> Result<DecodedToken, EngineError> {
        match self {
            Self::Logits(logits) => sequence.push_logits(logits),
            Self::Argmax([id]) => sequence.push_argmax(*id),
        }
    }
}
