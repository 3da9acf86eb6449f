//! Log-probabilities of generated tokens, as the OpenAI `logprobs` / `top_logprobs` options report
//! them: the log-softmax of the model's raw logits, before penalties, truncation and temperature.

/// One token with its log-probability.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Logprob {
    /// The token id.
    pub id: u32,
    /// Its natural-log probability under the model.
    pub logprob: f32,
}

/// The log-probability of a generated token and of the most likely alternatives at its position.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    /// The token that was generated.
    pub chosen: Logprob,
    /// The most likely tokens, most likely first (ties by lower id).
    pub top: Vec<Logprob>,
}

/// The log-probability of `chosen` and of the `top` most likely tokens of one row of logits.
/// NaN logits count as `-inf`.
pub fn token_logprobs(logits: &[f32], chosen: u32, top: usize) -> TokenLogprobs {
    let clean = |logit: f32| if logit.is_nan() { f32::NEG_INFINITY } else { logit };
    let max = logits.iter().copied().map(clean).fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&logit| f64::from(clean(logit) - max).exp()).sum();
    let log_normalizer = max + sum.ln() as f32;
    let logprob =
        |id: u32| logits.get(id as usize).map_or(f32::NEG_INFINITY, |&logit| clean(logit) - log_normalizer);

    let mut ranked: Vec<u32> = (0..logits.len() as u32).collect();
    let best_first = |a: &u32, b: &u32| logprob(*b).total_cmp(&logprob(*a)).then(a.cmp(b));
    let top = top.min(ranked.len());
    if top > 0 && top < ranked.len() {
        ranked.select_nth_unstable_by(top - 1, best_first);
    }
    ranked.truncate(top);
    ranked.sort_unstable_by(best_first);
    TokenLogprobs {
        chosen: Logprob { id: chosen, logprob: logprob(chosen) },
        top: ranked.into_iter().map(|id| Logprob { id, logprob: logprob(id) }).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_the_log_softmax_of_the_logits() {
        let logits = [1.0, 3.0, f32::NAN, 3.0, 0.5];
        let result = token_logprobs(&logits, 4, 3);
        let total: f32 = [1.0f32, 3.0, 3.0, 0.5].iter().map(|l| l.exp()).sum();
        let expected = |logit: f32| (logit.exp() / total).ln();
        assert!((result.chosen.logprob - expected(0.5)).abs() < 1e-6);
        let ids: Vec<u32> = result.top.iter().map(|entry| entry.id).collect();
        assert_eq!(ids, [1, 3, 0]);
        assert!((result.top[0].logprob - expected(3.0)).abs() < 1e-6);
        assert!((result.top[2].logprob - expected(1.0)).abs() < 1e-6);
    }

    #[test]
    fn asking_for_more_than_the_vocabulary_returns_every_token() {
        let result = token_logprobs(&[0.0, 0.0], 0, 5);
        assert_eq!(result.top.len(), 2);
        assert!(token_logprobs(&[0.0, 0.0], 0, 0).top.is_empty());
        assert_eq!(token_logprobs(&[0.0], 7, 1).chosen.logprob, f32::NEG_INFINITY);
    }
}
