//! Token sampling.
//!
//! A [`Sampler`] turns one row of logits into a token id in a fixed order of steps: penalties over
//! the tokens generated so far (repetition, presence, frequency), top-k, top-p over the softmax of
//! what top-k kept, min-p relative to the most likely token, temperature, then a draw from a
//! seeded xoshiro256** stream. Temperature zero (or unset) is greedy decoding: the argmax after
//! penalties. Equal seeds and equal logits give equal tokens. [`token_logprobs`] reports what the
//! model thought of the generated tokens.

mod filters;
mod logprobs;
mod params;
mod penalties;
mod rng;
mod sampler;
#[cfg(test)]
mod tests;

pub use logprobs::{Logprob, TokenLogprobs, token_logprobs};
pub use params::{SamplingError, SamplingParams};
pub use rng::Xoshiro256;
pub use sampler::{Sampler, argmax};
