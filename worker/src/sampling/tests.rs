//! Sampler behaviour against an independent reference: exact checks for the deterministic paths
//! and frequency checks for the random ones.

use super::{Sampler, SamplingError, SamplingParams};

const LOGITS: [f32; 12] = [1.0, 2.5, -0.5, 2.5, 0.3, 3.1, -2.0, 1.7, 0.0, 2.9, -1.0, 1.2];

fn params(temperature: f32) -> SamplingParams {
    SamplingParams { temperature: Some(temperature), seed: Some(1234), ..Default::default() }
}

/// The distribution the sampler must draw from, computed in f64 the plain way: sort everything,
/// cut by top-k, by top-p over the softmax of what is left, by min-p, then apply temperature.
fn reference_distribution(logits: &[f32], params: &SamplingParams) -> Vec<f64> {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].partial_cmp(&logits[a]).unwrap().then(a.cmp(&b)));
    if let Some(k) = params.top_k.filter(|&k| k > 0) {
        order.truncate(k as usize);
    }
    let softmax = |ids: &[usize], temperature: f64| -> Vec<f64> {
        let weights: Vec<f64> = ids.iter().map(|&i| (f64::from(logits[i]) / temperature).exp()).collect();
        let total: f64 = weights.iter().sum();
        weights.iter().map(|w| w / total).collect()
    };
    if let Some(top_p) = params.top_p {
        let probs = softmax(&order, 1.0);
        let mut mass = 0.0;
        let keep = probs.iter().position(|p| {
            mass += p;
            mass >= f64::from(top_p) - 1e-12
        });
        order.truncate(keep.map_or(order.len(), |i| i + 1));
    }
    if let Some(min_p) = params.min_p {
        let probs = softmax(&order, 1.0);
        let best = probs[0];
        let kept: Vec<usize> = order
            .iter()
            .zip(&probs)
            .filter(|(_, p)| **p >= f64::from(min_p) * best)
            .map(|(&i, _)| i)
            .collect();
        order = kept;
    }
    let probs = softmax(&order, f64::from(params.temperature.unwrap_or(1.0)));
    let mut distribution = vec![0.0; logits.len()];
    for (&id, p) in order.iter().zip(probs) {
        distribution[id] = p;
    }
    distribution
}

/// Draws `n` tokens and checks each token's frequency against `expected`: tokens of probability
/// zero must never appear; the others within 5 standard deviations of a binomial count.
fn assert_frequencies(sampler: &mut Sampler, logits: &[f32], expected: &[f64], n: usize) {
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..n {
        counts[sampler.sample(logits).unwrap() as usize] += 1;
    }
    for (id, (&count, &p)) in counts.iter().zip(expected).enumerate() {
        let frequency = count as f64 / n as f64;
        if p == 0.0 {
            assert_eq!(count, 0, "token {id} was filtered out but drawn {count} times");
        } else {
            let sigma = (p * (1.0 - p) / n as f64).sqrt();
            assert!(
                (frequency - p).abs() <= 5.0 * sigma + 1e-9,
                "token {id}: frequency {frequency}, expected {p}"
            );
        }
    }
}

#[test]
fn greedy_picks_the_argmax_with_the_lowest_id_on_ties() {
    let mut sampler = Sampler::new(SamplingParams::greedy()).unwrap();
    assert_eq!(sampler.sample(&LOGITS).unwrap(), 5);
    assert_eq!(sampler.sample(&[0.0, 4.0, f32::NAN, 4.0]).unwrap(), 1);
    assert_eq!(sampler.sample(&[f32::NEG_INFINITY, -7.0]).unwrap(), 1);
    let mut zero_temperature = Sampler::new(params(0.0)).unwrap();
    assert_eq!(zero_temperature.sample(&LOGITS).unwrap(), 5);
}

/// Long rows take argmax's vectorised path: ties across lanes and chunks, NaN, +inf tied with
/// f32::MAX, and rows with nothing finite, against a plain scan.
#[test]
fn argmax_of_long_rows_matches_a_plain_scan() {
    fn plain(logits: &[f32]) -> Option<u32> {
        let sanitized = |logit: f32| if logit.is_nan() { f32::NEG_INFINITY } else { logit.min(f32::MAX) };
        let mut best: Option<(usize, f32)> = None;
        for (id, &logit) in logits.iter().enumerate() {
            let logit = sanitized(logit);
            if logit > f32::NEG_INFINITY && best.is_none_or(|(_, b)| logit > b) {
                best = Some((id, logit));
            }
        }
        best.map(|(id, _)| id as u32)
    }
    let mut rng = super::Xoshiro256::from_seed(7);
    for len in [1, 15, 16, 17, 33, 1000, 151_936] {
        let mut logits: Vec<f32> = (0..len).map(|_| (rng.next_f64() * 8.0 - 4.0) as f32).collect();
        for special in [f32::NAN, f32::NEG_INFINITY, 5.0, 5.0] {
            let at = (rng.next_f64() * len as f64) as usize;
            logits[at.min(len - 1)] = special;
        }
        assert_eq!(super::argmax(&logits), plain(&logits), "{len} values");
        logits[len - 1] = f32::INFINITY;
        logits[len / 2] = f32::MAX;
        assert_eq!(super::argmax(&logits), plain(&logits), "{len} values with +inf");
        let nothing_finite: Vec<f32> =
            (0..len).map(|i| if i % 2 == 0 { f32::NAN } else { f32::NEG_INFINITY }).collect();
        assert_eq!(super::argmax(&nothing_finite), None, "{len} values, none finite");
    }
}

#[test]
fn unusable_logit_rows_are_errors() {
    let mut greedy = Sampler::new(SamplingParams::greedy()).unwrap();
    assert_eq!(greedy.sample(&[]), Err(SamplingError::EmptyLogits));
    assert_eq!(greedy.sample(&[f32::NAN, f32::NEG_INFINITY]), Err(SamplingError::NoFiniteLogits));
    let mut random = Sampler::new(params(1.0)).unwrap();
    assert_eq!(random.sample(&[f32::NEG_INFINITY; 3]), Err(SamplingError::NoFiniteLogits));
}

#[test]
fn invalid_parameters_are_refused_at_construction() {
    let err = Sampler::new(SamplingParams { top_p: Some(0.0), ..Default::default() }).unwrap_err();
    assert_eq!(err, SamplingError::TopP(0.0));
    assert!(Sampler::new(params(-1.0)).is_err());
}

#[test]
fn top_k_of_one_is_the_argmax_at_any_temperature() {
    let mut sampler = Sampler::new(SamplingParams { top_k: Some(1), ..params(5.0) }).unwrap();
    for _ in 0..200 {
        assert_eq!(sampler.sample(&LOGITS).unwrap(), 5);
    }
}

#[test]
fn tiny_top_p_and_full_min_p_keep_only_the_best_token() {
    let mut nucleus = Sampler::new(SamplingParams { top_p: Some(1e-6), ..params(3.0) }).unwrap();
    let mut relative = Sampler::new(SamplingParams { min_p: Some(1.0), ..params(3.0) }).unwrap();
    for _ in 0..200 {
        assert_eq!(nucleus.sample(&LOGITS).unwrap(), 5);
        assert_eq!(relative.sample(&LOGITS).unwrap(), 5);
    }
}

#[test]
fn temperature_alone_draws_from_the_scaled_softmax() {
    for temperature in [0.5, 1.0, 2.0] {
        let params = params(temperature);
        let expected = reference_distribution(&LOGITS, &params);
        assert_frequencies(&mut Sampler::new(params).unwrap(), &LOGITS, &expected, 100_000);
    }
}

#[test]
fn each_filter_draws_from_the_renormalised_survivors() {
    let cases = [
        SamplingParams { top_k: Some(4), ..params(1.0) },
        SamplingParams { top_p: Some(0.7), ..params(1.0) },
        SamplingParams { min_p: Some(0.2), ..params(1.0) },
        SamplingParams { top_k: Some(6), top_p: Some(0.8), min_p: Some(0.3), ..params(0.8) },
        SamplingParams { top_k: Some(3), top_p: Some(0.99), ..params(1.5) },
    ];
    for params in cases {
        let expected = reference_distribution(&LOGITS, &params);
        let survivors = expected.iter().filter(|&&p| p > 0.0).count();
        assert!(survivors > 1 && survivors < LOGITS.len(), "{params:?} should filter something");
        assert_frequencies(&mut Sampler::new(params).unwrap(), &LOGITS, &expected, 100_000);
    }
}

#[test]
fn top_p_on_a_large_vocabulary_matches_the_reference() {
    // Enough tokens that the nucleus reaches past the first lazily sorted chunk.
    let logits: Vec<f32> = (0..400).map(|i| ((i * 127) % 401) as f32 / 200.0).collect();
    let params = SamplingParams { top_p: Some(0.9), ..params(1.0) };
    let expected = reference_distribution(&logits, &params);
    assert!(expected.iter().filter(|&&p| p > 0.0).count() > 64);
    assert_frequencies(&mut Sampler::new(params).unwrap(), &logits, &expected, 20_000);
}

#[test]
fn a_seed_reproduces_the_same_tokens() {
    let draw = |seed| {
        let params = SamplingParams { seed: Some(seed), top_p: Some(0.95), ..params(1.0) };
        let mut sampler = Sampler::new(params).unwrap();
        (0..64).map(|_| sampler.sample(&LOGITS).unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(draw(7), draw(7));
    assert_ne!(draw(7), draw(8));
}

#[test]
fn repetition_penalty_scales_logits_of_generated_tokens() {
    let logits = [2.0, 1.5, -1.0, -1.2];
    let mut sampler =
        Sampler::new(SamplingParams { repetition_penalty: Some(2.0), ..Default::default() }).unwrap();
    assert_eq!(sampler.sample(&logits).unwrap(), 0);
    sampler.accept(0);
    // Token 0 now scores 1.0 < 1.5.
    assert_eq!(sampler.sample(&logits).unwrap(), 1);
    sampler.accept(1);
    // 1.0 and 0.75 for the seen tokens; the unseen negative ones stay below.
    assert_eq!(sampler.sample(&logits).unwrap(), 0);
    let negative = [-1.0, -1.5];
    let mut sampler =
        Sampler::new(SamplingParams { repetition_penalty: Some(2.0), ..Default::default() }).unwrap();
    sampler.accept(0);
    // A negative logit is multiplied: -2.0 < -1.5.
    assert_eq!(sampler.sample(&negative).unwrap(), 1);
}

#[test]
fn presence_and_frequency_penalties_subtract_as_in_openai() {
    let logits = [3.0, 2.0, 1.4];
    let mut presence =
        Sampler::new(SamplingParams { presence_penalty: Some(0.5), ..Default::default() }).unwrap();
    for _ in 0..5 {
        presence.accept(0);
    }
    // 3.0 - 0.5 = 2.5 still beats 2.0 however often token 0 was generated.
    assert_eq!(presence.sample(&logits).unwrap(), 0);

    let mut frequency =
        Sampler::new(SamplingParams { frequency_penalty: Some(0.4), ..Default::default() }).unwrap();
    frequency.accept(0);
    frequency.accept(0);
    // 3.0 - 0.8 = 2.2 > 2.0.
    assert_eq!(frequency.sample(&logits).unwrap(), 0);
    frequency.accept(0);
    // 3.0 - 1.2 = 1.8 < 2.0.
    assert_eq!(frequency.sample(&logits).unwrap(), 1);
    frequency.accept(1);
    frequency.accept(1);
    // 1.8 vs 2.0 - 0.8 = 1.2 vs 1.4.
    assert_eq!(frequency.sample(&logits).unwrap(), 0);
}

#[test]
fn penalties_shape_the_sampled_distribution() {
    let mut sampler = Sampler::new(SamplingParams {
        repetition_penalty: Some(1.5),
        presence_penalty: Some(0.3),
        frequency_penalty: Some(0.2),
        ..params(1.0)
    })
    .unwrap();
    for id in [5, 5, 9, 1] {
        sampler.accept(id);
    }
    let mut penalised = LOGITS;
    for (id, count) in [(5usize, 2.0f32), (9, 1.0), (1, 1.0)] {
        let logit = penalised[id] / 1.5;
        penalised[id] = logit - 0.3 - 0.2 * count;
    }
    let expected = reference_distribution(&penalised, &params(1.0));
    assert_frequencies(&mut sampler, &LOGITS, &expected, 100_000);
}
