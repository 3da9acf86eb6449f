//! The generation loop against a scripted model whose next token is a known function of the
//! tokens in its cache, so the expected output is computed independently of the engine.

use std::ops::ControlFlow;

use canopy_models::gguf::GgufFile;
use canopy_models::tokenizer::Tokenizer;

use super::*;
use crate::sampling::{SamplingError, SamplingParams};

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/testdata/models/qwen3-tiny-f32.gguf");
const VOCAB: usize = 1024;

fn tokenizer() -> Tokenizer {
    Tokenizer::from_gguf(&GgufFile::open(MODEL).unwrap()).unwrap()
}

#[derive(Debug, thiserror::Error)]
#[error("scripted failure")]
struct ScriptedFailure;

/// The model's favourite next token after `tokens`: never a special token of the tiny vocab.
fn favourite(tokens: &[u32]) -> u32 {
    let weighted: usize = tokens.iter().enumerate().map(|(i, &t)| (i + 1) * t as usize).sum();
    (weighted % 1000) as u32
}

/// A model that keeps the token ids as its "KV cache" and favours `favourite(cache)`.
struct ScriptedModel {
    cache: Vec<u32>,
    max_len: usize,
    /// (n_past, new tokens, want_logits) of every forward pass.
    calls: Vec<(usize, usize, bool)>,
    /// Favour this token once the cache holds this many tokens.
    forced: Option<(usize, u32)>,
    fail_at_call: Option<usize>,
    /// Every logit NaN: nothing for a sampler to pick.
    nan_logits: bool,
}

impl ScriptedModel {
    fn new(max_len: usize) -> Self {
        Self {
            cache: Vec::new(),
            max_len,
            calls: Vec::new(),
            forced: None,
            fail_at_call: None,
            nan_logits: false,
        }
    }
}

impl CausalLm for ScriptedModel {
    type Error = ScriptedFailure;

    fn vocab_size(&self) -> usize {
        VOCAB
    }

    fn max_sequence_len(&self) -> usize {
        self.max_len
    }

    fn forward(&mut self, batch: &[SequenceChunk<'_>], logits: &mut [f32]) -> Result<(), ScriptedFailure> {
        if self.fail_at_call == Some(self.calls.len()) {
            return Err(ScriptedFailure);
        }
        let [chunk] = batch else { panic!("one sequence per batch, got {}", batch.len()) };
        assert_eq!(chunk.sequence, 0);
        assert!(chunk.n_past <= self.cache.len(), "n_past beyond the cache");
        self.cache.truncate(chunk.n_past);
        self.cache.extend_from_slice(chunk.tokens);
        assert!(self.cache.len() <= self.max_len, "forward past the context window");
        self.calls.push((chunk.n_past, chunk.tokens.len(), chunk.want_logits));
        if chunk.want_logits {
            let next = match self.forced {
                Some((len, token)) if len == self.cache.len() => token,
                _ => favourite(&self.cache),
            };
            for (id, logit) in logits[..VOCAB].iter_mut().enumerate() {
                *logit = if self.nan_logits {
                    f32::NAN
                } else if id as u32 == next {
                    4.0
                } else {
                    (id % 7) as f32 * 0.4
                };
            }
        }
        Ok(())
    }

    fn release(&mut self, _sequence: usize) {
        self.cache.clear();
    }

    fn kv_usage(&self) -> KvUsage {
        KvUsage::default()
    }
}

/// The greedy continuation of `prompt` under the scripted model, computed directly.
fn expected_greedy(prompt: &[u32], n: usize) -> Vec<u32> {
    let mut tokens = prompt.to_vec();
    for _ in 0..n {
        tokens.push(favourite(&tokens));
    }
    tokens.split_off(prompt.len())
}

/// A greedy request and its prefill chunk size.
fn request(prompt: Vec<u32>, max_tokens: usize, prefill_chunk: usize) -> (GenerateRequest, usize) {
    let request = GenerateRequest {
        prompt,
        sampling: SamplingParams::greedy(),
        stop: StopConditions::max_tokens(max_tokens),
        top_logprobs: None,
    };
    (request, prefill_chunk)
}

fn run(
    model: &mut ScriptedModel,
    (request, prefill_chunk): &(GenerateRequest, usize),
) -> (Generation, String, usize) {
    let tokenizer = tokenizer();
    let mut streamed = String::new();
    let mut events = 0;
    let generation = generate(model, &tokenizer, request, *prefill_chunk, |event| {
        streamed.push_str(event.text);
        events += 1;
        ControlFlow::Continue(())
    })
    .unwrap();
    (generation, streamed, events)
}

const PROMPT: [u32; 10] = [318, 220, 581, 916, 82, 402, 7, 287, 81, 306];

#[test]
fn greedy_generation_follows_the_model_after_a_chunked_prefill() {
    let mut model = ScriptedModel::new(4096);
    let (generation, streamed, events) = run(&mut model, &request(PROMPT.to_vec(), 6, 4));
    assert_eq!(generation.tokens, expected_greedy(&PROMPT, 6));
    assert_eq!(generation.finish_reason, FinishReason::Length);
    assert_eq!(events, 6);
    assert_eq!(streamed, generation.text);
    assert_eq!(generation.text, tokenizer().decode(&generation.tokens, true).unwrap());
    let prefill = [(0, 4, false), (4, 4, false), (8, 2, true)];
    let decode = (10..15).map(|n_past| (n_past, 1, true));
    assert_eq!(model.calls, prefill.into_iter().chain(decode).collect::<Vec<_>>());
    assert_eq!(generation.timing.prompt_tokens, 10);
    assert_eq!(generation.timing.decode_steps, 5);
}

#[test]
fn the_prefill_chunk_size_does_not_change_the_output() {
    let expected = expected_greedy(&PROMPT, 8);
    for chunk in [1, 3, 10, 512] {
        let mut model = ScriptedModel::new(4096);
        let (generation, _, _) = run(&mut model, &request(PROMPT.to_vec(), 8, chunk));
        assert_eq!(generation.tokens, expected, "chunk {chunk}");
        assert_eq!(model.calls.len(), PROMPT.len().div_ceil(chunk) + 7, "chunk {chunk}");
    }
}

#[test]
fn a_full_context_window_ends_the_generation() {
    let mut model = ScriptedModel::new(PROMPT.len() + 3);
    let (generation, _, events) = run(&mut model, &request(PROMPT.to_vec(), 100, 512));
    // One token from the prefill, then one per free position.
    assert_eq!(generation.tokens, expected_greedy(&PROMPT, 4));
    assert_eq!(generation.finish_reason, FinishReason::ContextFull);
    assert_eq!(events, 4);
}

#[test]
fn an_end_of_generation_token_ends_the_generation() {
    let tokenizer = tokenizer();
    let eos = tokenizer.special().eos.as_ref().unwrap().id;
    let mut model = ScriptedModel::new(4096);
    model.forced = Some((PROMPT.len() + 3, eos));
    let (generation, _, _) = run(&mut model, &request(PROMPT.to_vec(), 100, 512));
    let mut expected = expected_greedy(&PROMPT, 3);
    expected.push(eos);
    assert_eq!(generation.tokens, expected);
    assert_eq!(generation.finish_reason, FinishReason::Stop);
    assert_eq!(generation.text, tokenizer.decode(&expected[..3], true).unwrap());
}

#[test]
fn a_stop_string_ends_the_generation_without_its_text() {
    let tokenizer = tokenizer();
    let tokens = expected_greedy(&PROMPT, 12);
    let full = tokenizer.decode(&tokens, true).unwrap();
    // A stop string made of text the model will produce, across a token boundary.
    let first = tokenizer.decode(&tokens[..5], true).unwrap();
    let stop: String = full[first.len() - 1..].chars().take(3).collect();
    let cut = full.find(&stop).unwrap();
    let mut request = request(PROMPT.to_vec(), 100, 512);
    request.0.stop.stop_strings = vec![stop.clone()];
    let (generation, streamed, _) = run(&mut ScriptedModel::new(4096), &request);
    assert_eq!(generation.finish_reason, FinishReason::StopString(stop));
    assert_eq!(generation.text, full[..cut]);
    assert_eq!(streamed, generation.text);
    assert!(generation.tokens.len() < 12);
}

#[test]
fn seeded_sampling_is_reproducible() {
    let sampled = |seed| {
        let mut request = request(PROMPT.to_vec(), 20, 512);
        request.0.sampling =
            SamplingParams { temperature: Some(1.5), seed: Some(seed), ..Default::default() };
        run(&mut ScriptedModel::new(4096), &request).0.tokens
    };
    assert_eq!(sampled(11), sampled(11));
    assert_ne!(sampled(11), sampled(12));
    assert_ne!(sampled(11), expected_greedy(&PROMPT, 20));
}

#[test]
fn the_callback_can_cancel() {
    let tokenizer = tokenizer();
    let mut seen = 0;
    let (request, chunk) = request(PROMPT.to_vec(), 50, 512);
    let generation = generate(&mut ScriptedModel::new(4096), &tokenizer, &request, chunk, |_| {
        seen += 1;
        if seen == 2 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    })
    .unwrap();
    assert_eq!(generation.finish_reason, FinishReason::Cancelled);
    assert_eq!(generation.tokens.len(), 2);
}

#[test]
fn bad_requests_and_model_failures_are_errors() {
    let tokenizer = tokenizer();
    let attempt = |model: &mut ScriptedModel, (request, chunk): (GenerateRequest, usize)| {
        generate(model, &tokenizer, &request, chunk, |_| ControlFlow::Continue(())).unwrap_err()
    };
    let mut model = ScriptedModel::new(8);
    assert!(matches!(attempt(&mut model, request(vec![], 5, 4)), EngineError::EmptyPrompt));
    assert!(matches!(
        attempt(&mut model, request(vec![1; 9], 5, 4)),
        EngineError::PromptTooLong { prompt: 9, max: 8 }
    ));
    assert!(matches!(attempt(&mut model, request(vec![1], 0, 4)), EngineError::ZeroMaxTokens));
    assert!(matches!(attempt(&mut model, request(vec![1], 5, 0)), EngineError::ZeroPrefillChunk));
    assert!(matches!(
        attempt(&mut model, request(vec![1, 1024], 5, 4)),
        EngineError::TokenOutOfRange { id: 1024, vocab_size: VOCAB }
    ));
    let mut bad_sampling = request(vec![1], 5, 4);
    bad_sampling.0.sampling.top_p = Some(2.0);
    assert!(matches!(attempt(&mut model, bad_sampling), EngineError::Sampling(_)));
    assert!(model.calls.is_empty(), "nothing runs before the request is validated");
    model.fail_at_call = Some(1);
    assert!(matches!(attempt(&mut model, request(vec![1, 2, 3], 5, 2)), EngineError::Model(_)));
}

#[test]
fn only_greedy_sequences_without_penalties_or_logprobs_pick_by_argmax() {
    let tokenizer = tokenizer();
    let needs_only_argmax = |sampling: SamplingParams, top_logprobs| {
        let stop = StopConditions::max_tokens(4);
        let request = GenerateRequest { prompt: PROMPT.to_vec(), sampling, stop, top_logprobs };
        SequenceDecoder::new(&tokenizer, &request, 4096).unwrap().needs_only_argmax()
    };
    assert!(needs_only_argmax(SamplingParams::greedy(), None));
    assert!(needs_only_argmax(SamplingParams { temperature: Some(0.0), ..Default::default() }, None));
    assert!(!needs_only_argmax(SamplingParams::greedy(), Some(2)));
    assert!(!needs_only_argmax(SamplingParams { temperature: Some(0.7), ..Default::default() }, None));
    assert!(!needs_only_argmax(SamplingParams { repetition_penalty: Some(1.1), ..Default::default() }, None));
}

#[test]
fn greedy_tokens_are_the_same_picked_by_argmax_or_from_the_logits() {
    let (mut with_logprobs, chunk) = request(PROMPT.to_vec(), 12, 4);
    with_logprobs.top_logprobs = Some(1);
    let (from_logits, _, _) = run(&mut ScriptedModel::new(4096), &(with_logprobs, chunk));
    assert!(from_logits.tokens.len() == 12);
    let (by_argmax, _, _) = run(&mut ScriptedModel::new(4096), &request(PROMPT.to_vec(), 12, 4));
    assert_eq!(by_argmax.tokens, from_logits.tokens);
    assert_eq!(by_argmax.tokens, expected_greedy(&PROMPT, 12));
}

#[test]
fn logits_with_nothing_finite_are_an_error_on_either_path() {
    let tokenizer = tokenizer();
    for top_logprobs in [None, Some(1)] {
        let mut model = ScriptedModel::new(4096);
        model.nan_logits = true;
        let (mut request, chunk) = request(PROMPT.to_vec(), 5, 512);
        request.top_logprobs = top_logprobs;
        let error =
            generate(&mut model, &tokenizer, &request, chunk, |_| ControlFlow::Continue(())).unwrap_err();
        assert!(
            matches!(error, EngineError::Sampling(SamplingError::NoFiniteLogits)),
            "top_logprobs {top_logprobs:?}: {error}"
        );
    }
}
