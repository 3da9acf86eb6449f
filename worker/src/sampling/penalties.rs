//! Penalties on tokens already generated: repetition (as in transformers and llama.cpp), presence
//! and frequency (as in the OpenAI API).

use super::SamplingParams;

/// How often each token has been generated, kept densely by id with the list of distinct ids,
/// so applying penalties costs one step per distinct token rather than one per vocabulary entry.
#[derive(Clone, Debug, Default)]
pub(crate) struct TokenHistory {
    counts: Vec<u32>,
    distinct: Vec<u32>,
}

/// The penalty factors, with neutral values for the unset ones.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Penalties {
    repetition: f32,
    presence: f32,
    frequency: f32,
}

impl Penalties {
    pub(crate) fn from_params(params: &SamplingParams) -> Self {
        Self {
            repetition: params.repetition_penalty.unwrap_or(1.0),
            presence: params.presence_penalty.unwrap_or(0.0),
            frequency: params.frequency_penalty.unwrap_or(0.0),
        }
    }

    /// The logit of a token generated `count > 0` times.
    pub(crate) fn apply(&self, logit: f32, count: u32) -> f32 {
        let repeated = if logit > 0.0 { logit / self.repetition } else { logit * self.repetition };
        repeated - self.presence - self.frequency * count as f32
    }
}

impl TokenHistory {
    /// Records one generated token.
    pub(crate) fn push(&mut self, id: u32) {
        let index = id as usize;
        if index >= self.counts.len() {
            self.counts.resize(index + 1, 0);
        }
        if self.counts[index] == 0 {
            self.distinct.push(id);
        }
        self.counts[index] += 1;
    }

    /// Each distinct generated token with how often it was generated, in first-seen order.
    pub(crate) fn counts(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.distinct.iter().map(|&id| (id, self.counts[id as usize]))
    }

    /// Prepares room for ids below `vocab_size`, so pushing them never reallocates.
    pub(crate) fn reserve_vocab(&mut self, vocab_size: usize) {
        if self.counts.len() < vocab_size {
            self.counts.resize(vocab_size, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetition_divides_positive_and_multiplies_negative_logits() {
        let penalties = Penalties { repetition: 2.0, presence: 0.0, frequency: 0.0 };
        assert_eq!(penalties.apply(3.0, 1), 1.5);
        assert_eq!(penalties.apply(-3.0, 5), -6.0);
        assert_eq!(penalties.apply(0.0, 1), 0.0);
    }

    #[test]
    fn presence_counts_once_and_frequency_per_occurrence() {
        let penalties = Penalties { repetition: 1.0, presence: 0.5, frequency: 0.25 };
        assert_eq!(penalties.apply(1.0, 1), 0.25);
        assert_eq!(penalties.apply(1.0, 4), -0.5);
    }

    #[test]
    fn history_counts_distinct_tokens_in_first_seen_order() {
        let mut history = TokenHistory::default();
        for id in [5, 2, 5, 9, 5, 2] {
            history.push(id);
        }
        assert_eq!(history.counts().collect::<Vec<_>>(), vec![(5, 3), (2, 2), (9, 1)]);
    }
}
