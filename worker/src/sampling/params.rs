//! Sampling parameters and their validation.

use thiserror::Error;

/// How to pick each next token. Every field is optional; an unset field turns its step off.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature. `None` or `0` picks the most likely token (greedy decoding).
    pub temperature: Option<f32>,
    /// Keep only the `k` most likely tokens; `0` keeps all, as in llama.cpp and transformers.
    pub top_k: Option<u32>,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`, in `(0, 1]`.
    pub top_p: Option<f32>,
    /// Drop tokens less likely than `min_p` times the most likely one, in `[0, 1]`.
    pub min_p: Option<f32>,
    /// Seed of the random draws; without one every sampler gets a fresh random seed.
    pub seed: Option<u64>,
    /// Divides the positive logits and multiplies the negative ones of every token generated so
    /// far (1 is off; above 1 discourages repeats). Must be positive.
    pub repetition_penalty: Option<f32>,
    /// Subtracted once from the logit of every token generated so far (OpenAI's presence penalty).
    pub presence_penalty: Option<f32>,
    /// Subtracted from each generated token's logit once per time it was generated (OpenAI's
    /// frequency penalty).
    pub frequency_penalty: Option<f32>,
}

/// A sampling parameter outside its domain, or logits that cannot be sampled from.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum SamplingError {
    /// Temperature must be a finite number, zero or more.
    #[error("temperature must be finite and >= 0, got {0}")]
    Temperature(f32),
    /// `top_p` must lie in `(0, 1]`.
    #[error("top_p must be in (0, 1], got {0}")]
    TopP(f32),
    /// `min_p` must lie in `[0, 1]`.
    #[error("min_p must be in [0, 1], got {0}")]
    MinP(f32),
    /// The repetition penalty must be a finite positive number.
    #[error("repetition_penalty must be finite and > 0, got {0}")]
    RepetitionPenalty(f32),
    /// The presence penalty must be finite.
    #[error("presence_penalty must be finite, got {0}")]
    PresencePenalty(f32),
    /// The frequency penalty must be finite.
    #[error("frequency_penalty must be finite, got {0}")]
    FrequencyPenalty(f32),
    /// There were no logits to sample from.
    #[error("cannot sample from an empty logit row")]
    EmptyLogits,
    /// Every logit was `-inf` or NaN, so no token has any probability.
    #[error("no token has a finite logit")]
    NoFiniteLogits,
}

impl SamplingParams {
    /// Greedy decoding: always the most likely token.
    pub fn greedy() -> Self {
        Self::default()
    }

    /// Checks every set field against its domain.
    pub fn validate(&self) -> Result<(), SamplingError> {
        if let Some(t) = self.temperature.filter(|t| !(t.is_finite() && *t >= 0.0)) {
            return Err(SamplingError::Temperature(t));
        }
        if let Some(p) = self.top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
            return Err(SamplingError::TopP(p));
        }
        if let Some(p) = self.min_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return Err(SamplingError::MinP(p));
        }
        if let Some(r) = self.repetition_penalty.filter(|r| !(r.is_finite() && *r > 0.0)) {
            return Err(SamplingError::RepetitionPenalty(r));
        }
        if let Some(p) = self.presence_penalty.filter(|p| !p.is_finite()) {
            return Err(SamplingError::PresencePenalty(p));
        }
        if let Some(f) = self.frequency_penalty.filter(|f| !f.is_finite()) {
            return Err(SamplingError::FrequencyPenalty(f));
        }
        Ok(())
    }

    /// Whether the next token is the argmax (after penalties) rather than a random draw.
    pub fn is_greedy(&self) -> bool {
        self.temperature.is_none_or(|t| t == 0.0)
    }

    /// Whether any penalty changes the logits of tokens generated so far.
    pub fn has_penalties(&self) -> bool {
        self.repetition_penalty.is_some_and(|r| r != 1.0)
            || self.presence_penalty.is_some_and(|p| p != 0.0)
            || self.frequency_penalty.is_some_and(|f| f != 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_greedy() {
        let params = SamplingParams::default();
        assert!(params.validate().is_ok());
        assert!(params.is_greedy());
        assert!(!params.has_penalties());
        assert!(SamplingParams { temperature: Some(0.0), ..Default::default() }.is_greedy());
        assert!(!SamplingParams { temperature: Some(0.7), ..Default::default() }.is_greedy());
    }

    #[test]
    fn out_of_domain_values_are_typed_errors() {
        let check = |params: SamplingParams, expected: SamplingError| {
            assert_eq!(params.validate(), Err(expected));
        };
        let base = SamplingParams::default;
        check(SamplingParams { temperature: Some(-0.1), ..base() }, SamplingError::Temperature(-0.1));
        check(
            SamplingParams { temperature: Some(f32::INFINITY), ..base() },
            SamplingError::Temperature(f32::INFINITY),
        );
        check(SamplingParams { top_p: Some(0.0), ..base() }, SamplingError::TopP(0.0));
        check(SamplingParams { top_p: Some(1.5), ..base() }, SamplingError::TopP(1.5));
        check(SamplingParams { min_p: Some(-0.5), ..base() }, SamplingError::MinP(-0.5));
        check(SamplingParams { min_p: Some(1.01), ..base() }, SamplingError::MinP(1.01));
        check(
            SamplingParams { repetition_penalty: Some(0.0), ..base() },
            SamplingError::RepetitionPenalty(0.0),
        );
        check(
            SamplingParams { presence_penalty: Some(f32::NEG_INFINITY), ..base() },
            SamplingError::PresencePenalty(f32::NEG_INFINITY),
        );
        check(
            SamplingParams { frequency_penalty: Some(f32::INFINITY), ..base() },
            SamplingError::FrequencyPenalty(f32::INFINITY),
        );
    }

    #[test]
    fn nan_is_rejected_everywhere() {
        let base = SamplingParams::default;
        let nan = f32::NAN;
        assert!(SamplingParams { temperature: Some(nan), ..base() }.validate().is_err());
        assert!(SamplingParams { top_p: Some(nan), ..base() }.validate().is_err());
        assert!(SamplingParams { min_p: Some(nan), ..base() }.validate().is_err());
        assert!(SamplingParams { repetition_penalty: Some(nan), ..base() }.validate().is_err());
        assert!(SamplingParams { presence_penalty: Some(nan), ..base() }.validate().is_err());
        assert!(SamplingParams { frequency_penalty: Some(nan), ..base() }.validate().is_err());
    }

    #[test]
    fn boundary_values_are_accepted() {
        let params = SamplingParams {
            temperature: Some(0.0),
            top_k: Some(0),
            top_p: Some(1.0),
            min_p: Some(0.0),
            seed: Some(0),
            repetition_penalty: Some(1.0),
            presence_penalty: Some(-2.0),
            frequency_penalty: Some(2.0),
        };
        assert!(params.validate().is_ok());
        assert!(SamplingParams { min_p: Some(1.0), ..Default::default() }.validate().is_ok());
    }
}
