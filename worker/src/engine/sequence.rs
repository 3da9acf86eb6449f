//! What one sequence does with each row of logits, whoever runs the forward passes: sample the
//! next token, report its log-probabilities, turn it into text and decide whether to stop. The
//! single-sequence [`generate`](super::generate) loop and the batching scheduler both drive it.

use super::error::EngineError;
use super::output::{OutputStep, OutputTracker, StopConditions};
use super::stop::FinishReason;
use canopy_kernels::backend::ARGMAX_NONE;
use canopy_models::tokenizer::Tokenizer;

use crate::sampling::{Sampler, SamplingError, SamplingParams, TokenLogprobs, token_logprobs};

/// One generation: a prompt and how to continue it.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateRequest {
    /// The prompt, already tokenized (chat template applied, BOS added as needed).
    pub prompt: Vec<u32>,
    /// How to pick tokens.
    pub sampling: SamplingParams,
    /// When to stop.
    pub stop: StopConditions,
    /// Log-probabilities of this many most likely tokens to report with each generated token;
    /// `None` reports none.
    pub top_logprobs: Option<usize>,
}

impl GenerateRequest {
    /// Checks the request against a model's vocabulary and sequence length.
    pub fn validate(&self, vocab_size: usize, max_sequence_len: usize) -> Result<(), EngineError> {
        if self.prompt.is_empty() {
            return Err(EngineError::EmptyPrompt);
        }
        if self.prompt.len() > max_sequence_len {
            return Err(EngineError::PromptTooLong { prompt: self.prompt.len(), max: max_sequence_len });
        }
        if self.stop.max_tokens == 0 {
            return Err(EngineError::ZeroMaxTokens);
        }
        if let Some(&id) = self.prompt.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(EngineError::TokenOutOfRange { id, vocab_size });
        }
        self.sampling.validate()?;
        Ok(())
    }
}

/// The outcome of one generated token.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedToken {
    /// The token id (end-of-generation tokens included).
    pub id: u32,
    /// Text ready to show after this token (possibly empty: see [`OutputTracker`]).
    pub text: String,
    /// The token's log-probabilities, when the request asked for them.
    pub logprobs: Option<TokenLogprobs>,
    /// Set when this token ended the generation.
    pub finished: Option<FinishReason>,
}

/// The decoding state of one sequence after its prompt.
pub struct SequenceDecoder<'t> {
    sampler: Sampler,
    tracker: OutputTracker<'t>,
    prompt_len: usize,
    max_sequence_len: usize,
    top_logprobs: Option<usize>,
    tokens: Vec<u32>,
}

impl<'t> SequenceDecoder<'t> {
    /// A decoder for `request` on a model whose sequences hold `max_sequence_len` positions.
    pub fn new(
        tokenizer: &'t Tokenizer,
        request: &GenerateRequest,
        max_sequence_len: usize,
    ) -> Result<Self, EngineError> {
        Ok(Self {
            sampler: Sampler::new(request.sampling.clone())?,
            tracker: OutputTracker::new(tokenizer, &request.stop),
            prompt_len: request.prompt.len(),
            max_sequence_len,
            top_logprobs: request.top_logprobs,
            tokens: Vec::with_capacity(request.stop.max_tokens.min(max_sequence_len)),
        })
    }

    /// Every generated token so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The last generated token, which the next forward pass feeds (empty before the first).
    pub fn next_input(&self) -> &[u32] {
        self.tokens.last().map(std::slice::from_ref).unwrap_or_default()
    }

    /// The position of [`Self::next_input`]: positions already in the KV cache.
    pub fn next_position(&self) -> usize {
        self.prompt_len + self.tokens.len().saturating_sub(1)
    }

    /// Whether the next token is the argmax of the logits and nothing else is read from them
    /// (greedy, no penalties, no log-probabilities), so that a model may pick it where the
    /// logits are ([`crate::engine::CausalLm::forward_argmax`]) and feed it to
    /// [`Self::push_argmax`].
    pub fn needs_only_argmax(&self) -> bool {
        self.sampler.picks_argmax() && self.top_logprobs.is_none()
    }

    /// Takes the logits of the sequence's last position and generates the next token.
    pub fn push_logits(&mut self, logits: &[f32]) -> Result<DecodedToken, EngineError> {
        let id = self.sampler.sample(logits)?;
        let logprobs = self.top_logprobs.map(|top| token_logprobs(logits, id, top));
        self.push_token(id, logprobs)
    }

    /// Takes the argmax of the logits of the sequence's last position as the next token, for a
    /// sequence that [needs only the argmax](Self::needs_only_argmax).
    pub fn push_argmax(&mut self, id: u32) -> Result<DecodedToken, EngineError> {
        if id == ARGMAX_NONE {
            return Err(SamplingError::NoFiniteLogits.into());
        }
        self.push_token(id, None)
    }

    fn push_token(&mut self, id: u32, logprobs: Option<TokenLogprobs>) -> Result<DecodedToken, EngineError> {
        self.sampler.accept(id);
        self.tokens.push(id);
        let (text, finished) = match self.tracker.push(id)? {
            // The token has no position left to be fed back at.
            OutputStep::Continue(mut text) if self.next_position() >= self.max_sequence_len => {
                let (tail, reason) = self.tracker.end(FinishReason::ContextFull)?;
                text.push_str(&tail);
                (text, Some(reason))
            }
            OutputStep::Continue(text) => (text, None),
            OutputStep::Finished { text, reason } => (text, Some(reason)),
        };
        Ok(DecodedToken { id, text, logprobs, finished })
    }

    /// Ends the generation for a reason decided outside (a deadline, a shutdown). Returns the
    /// text still held back and the final reason (a stop string if the held text reaches one).
    pub fn end(&mut self, reason: FinishReason) -> Result<(String, FinishReason), EngineError> {
        Ok(self.tracker.end(reason)?)
    }
}
