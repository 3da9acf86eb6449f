//! Truncation of the candidate set: top-k, top-p (nucleus) and min-p.
//!
//! The candidates are a reused buffer of `(id, logit)` pairs. Filters keep a prefix of the
//! candidates in "most likely first" order (ties broken by the lower id), so the surviving set
//! never depends on the sort algorithm. Sorting is lazy: only as much of the buffer is ordered as
//! a filter needs to look at.

use std::cmp::Ordering;

/// One token still in the running.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Candidate {
    pub id: u32,
    pub logit: f32,
}

/// Most likely first, then lower id first: a total order over distinct ids.
fn most_likely_first(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Moves the `count` best of `candidates` to the front, in order. Returns how many leading
/// candidates are now sorted.
fn sort_front(candidates: &mut [Candidate], count: usize) -> usize {
    let count = count.min(candidates.len());
    if count == 0 {
        return 0;
    }
    if count < candidates.len() {
        candidates.select_nth_unstable_by(count - 1, most_likely_first);
    }
    candidates[..count].sort_unstable_by(most_likely_first);
    count
}

/// Keeps the `k` most likely candidates, sorted best first.
pub(crate) fn top_k(candidates: &mut Vec<Candidate>, k: usize) {
    let kept = sort_front(candidates, k);
    candidates.truncate(kept);
}

/// Keeps the candidates at least `min_p` times as likely as the best (`logit >= max + ln min_p`),
/// in their current order. The best candidate always stays.
pub(crate) fn min_p(candidates: &mut Vec<Candidate>, max_logit: f32, min_p: f32) {
    let threshold = max_logit + min_p.ln();
    candidates.retain(|c| c.logit >= threshold || c.logit == max_logit);
}

/// Keeps the smallest set of most likely candidates whose probability mass reaches `top_p`,
/// where a candidate's probability is `exp(logit - max_logit) / normalizer`. The normalizer is
/// passed in so that it can cover candidates an earlier filter already dropped. The first
/// `sorted` candidates must already be in order; the kept ones end up sorted best first.
pub(crate) fn top_p(
    candidates: &mut Vec<Candidate>,
    mut sorted: usize,
    max_logit: f32,
    normalizer: f64,
    top_p: f32,
) {
    const FIRST_CHUNK: usize = 64;
    let target = f64::from(top_p);
    let mut mass = 0.0;
    let mut checked = 0;
    let mut chunk = FIRST_CHUNK;
    while checked < candidates.len() {
        if checked == sorted {
            sorted += sort_front(&mut candidates[sorted..], chunk);
            chunk = chunk.saturating_mul(8);
        }
        mass += f64::from((candidates[checked].logit - max_logit).exp()) / normalizer;
        checked += 1;
        if mass >= target {
            candidates.truncate(checked);
            return;
        }
    }
}

/// `sum(exp(logit - max_logit))` over the candidates.
pub(crate) fn softmax_normalizer(candidates: &[Candidate], max_logit: f32) -> f64 {
    candidates.iter().map(|c| f64::from((c.logit - max_logit).exp())).sum()
}

/// The largest logit, or `None` when there is no finite one (`-inf` everywhere).
pub(crate) fn max_logit(candidates: &[Candidate]) -> Option<f32> {
    let max = candidates.iter().map(|c| c.logit).fold(f32::NEG_INFINITY, f32::max);
    max.is_finite().then_some(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidates(logits: &[f32]) -> Vec<Candidate> {
        logits.iter().enumerate().map(|(id, &logit)| Candidate { id: id as u32, logit }).collect()
    }

    fn ids(candidates: &[Candidate]) -> Vec<u32> {
        candidates.iter().map(|c| c.id).collect()
    }

    #[test]
    fn top_k_keeps_the_best_sorted_with_lower_ids_first_on_ties() {
        let mut c = candidates(&[0.5, 2.0, -1.0, 2.0, 1.0, 0.0]);
        top_k(&mut c, 3);
        assert_eq!(ids(&c), vec![1, 3, 4]);
        let mut all = candidates(&[0.5, 2.0]);
        top_k(&mut all, 10);
        assert_eq!(ids(&all), vec![1, 0]);
    }

    #[test]
    fn min_p_keeps_tokens_relative_to_the_best() {
        // Probabilities relative to the best: 1, e^-1 ~ 0.37, e^-2 ~ 0.14, e^-3 ~ 0.05.
        let mut c = candidates(&[-1.0, 0.0, -3.0, -2.0]);
        min_p(&mut c, 0.0, 0.1);
        assert_eq!(ids(&c), vec![0, 1, 3]);
        let mut strict = candidates(&[-1.0, 0.0, -3.0, -2.0]);
        min_p(&mut strict, 0.0, 1.0);
        assert_eq!(ids(&strict), vec![1]);
    }

    #[test]
    fn top_p_keeps_the_smallest_prefix_reaching_the_mass() {
        // Probabilities 0.5, 0.25, 0.15, 0.1 in shuffled order.
        let probs = [0.15f32, 0.5, 0.1, 0.25];
        let logits: Vec<f32> = probs.iter().map(|p| p.ln()).collect();
        let run = |p: f32| {
            let mut c = candidates(&logits);
            let max = max_logit(&c).unwrap();
            let z = softmax_normalizer(&c, max);
            top_p(&mut c, 0, max, z, p);
            ids(&c)
        };
        assert_eq!(run(0.4), vec![1]);
        assert_eq!(run(0.5), vec![1]);
        assert_eq!(run(0.6), vec![1, 3]);
        assert_eq!(run(0.8), vec![1, 3, 0]);
        assert_eq!(run(0.95), vec![1, 3, 0, 2]);
    }

    #[test]
    fn top_p_sorts_lazily_across_chunks() {
        // 1000 equally likely tokens: reaching 0.5 needs 500 of them, beyond the first chunk.
        let mut c = candidates(&vec![0.0; 1000]);
        c.reverse();
        let z = softmax_normalizer(&c, 0.0);
        top_p(&mut c, 0, 0.0, z, 0.5);
        assert!((499..=501).contains(&c.len()), "{}", c.len());
        assert_eq!(ids(&c), (0..c.len() as u32).collect::<Vec<_>>());
    }

    #[test]
    fn max_logit_ignores_negative_infinity() {
        assert_eq!(max_logit(&candidates(&[f32::NEG_INFINITY, -3.0])), Some(-3.0));
        assert_eq!(max_logit(&candidates(&[f32::NEG_INFINITY])), None);
        assert_eq!(max_logit(&[]), None);
    }
}
