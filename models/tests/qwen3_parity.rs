//! Qwen3 on the CPU backend against the fixture's reference logits (HF transformers, float32, on
//! the weights as each GGUF stores them) and greedy continuations.

#![allow(clippy::unwrap_used)]

mod qwen3_common;

use canopy_kernels::backend::Mask;
use canopy_models::arch::{LogitRows, SequenceInput};
use qwen3_common::{Harness, VOCAB, argmax, prompt_ids, reference, relative_l2};

const KINDS: [&str; 3] = ["f32", "bf16", "q8_0"];
const TOLERANCE: f64 = 1e-4;

/// Largest per-position relative L2 error of `logits` (rows from position 0) against the reference.
fn max_error(logits: &[f32], reference: &[f32]) -> f64 {
    logits.chunks(VOCAB).zip(reference.chunks(VOCAB)).map(|(a, b)| relative_l2(a, b)).fold(0.0, f64::max)
}

#[test]
fn prompt_logits_match_the_reference_at_every_position() {
    let prompt = prompt_ids();
    for kind in KINDS {
        let reference = reference(kind);
        let mut harness = Harness::open(&reference.gguf);
        let seq = harness.cache.create_sequence();
        let logits = harness.causal(seq, &prompt);
        assert_eq!(logits.len(), prompt.len() * VOCAB);
        let error = max_error(&logits, &reference.logits);
        println!("{kind}: max per-position relative L2 error {error:.3e}");
        assert!(error < TOLERANCE, "{kind}: relative L2 error {error:e}");
        let argmaxes: Vec<u32> = logits.chunks(VOCAB).map(argmax).collect();
        assert_eq!(argmaxes, reference.argmax, "{kind}");
    }
}

#[test]
fn greedy_decoding_with_the_kv_cache_matches_the_reference() {
    let prompt = prompt_ids();
    for kind in KINDS {
        let reference = reference(kind);
        let mut harness = Harness::open(&reference.gguf);
        let seq = harness.cache.create_sequence();
        let input = SequenceInput { seq, tokens: &prompt, mask: Mask::Causal };
        let last = harness.forward(&[input], LogitRows::LastPerSequence);
        assert_eq!(last.len(), VOCAB);
        let first = argmax(&last);
        let (rest, _) = harness.decode_greedy(seq, first, reference.greedy.len() - 1);
        let mut continuation = vec![first];
        continuation.extend(rest);
        assert_eq!(continuation, reference.greedy, "{kind}");
        assert_eq!(harness.cache.len(seq).unwrap(), prompt.len() + reference.greedy.len() - 1);
    }
}

#[test]
fn chunked_prefill_gives_the_same_logits_as_one_pass() {
    let prompt = prompt_ids();
    let reference = reference("f32");
    let mut harness = Harness::open(&reference.gguf);
    let whole = harness.cache.create_sequence();
    let single = harness.causal(whole, &prompt);
    let chunked_seq = harness.cache.create_sequence();
    let mut chunked = harness.causal(chunked_seq, &prompt[..7]);
    chunked.extend(harness.causal(chunked_seq, &prompt[7..]));
    assert!(max_error(&chunked, &reference.logits) < TOLERANCE);
    assert!(chunked == single, "chunked prefill differs from a single pass");
}

#[test]
fn two_sequences_in_one_batch_match_each_run_alone() {
    let prompt = prompt_ids();
    let reference = reference("f32");
    let mut harness = Harness::open(&reference.gguf);
    let (long, short) = (harness.cache.create_sequence(), harness.cache.create_sequence());
    let batch = [
        SequenceInput { seq: short, tokens: &prompt[..19], mask: Mask::Causal },
        SequenceInput { seq: long, tokens: &prompt, mask: Mask::Causal },
    ];
    let logits = harness.forward(&batch, LogitRows::All);
    let (short_logits, long_logits) = logits.split_at(19 * VOCAB);
    assert!(max_error(short_logits, &reference.logits) < TOLERANCE);
    assert!(max_error(long_logits, &reference.logits) < TOLERANCE);
    let alone = harness.cache.create_sequence();
    assert!(harness.causal(alone, &prompt) == long_logits, "batching changed a sequence's logits");

    // Decode both together: the long sequence must follow the reference's greedy continuation,
    // and the short one must decode exactly as it does alone.
    let mut short_alone = Harness::open(&reference.gguf);
    let short_solo = short_alone.cache.create_sequence();
    short_alone.causal(short_solo, &prompt[..19]);
    let mut next = [reference.greedy[0], reference.argmax[18]];
    for step in 1..reference.greedy.len() {
        let batch = [
            SequenceInput { seq: long, tokens: &next[..1], mask: Mask::Causal },
            SequenceInput { seq: short, tokens: &next[1..], mask: Mask::Causal },
        ];
        let logits = harness.forward(&batch, LogitRows::LastPerSequence);
        let solo = short_alone.causal(short_solo, &next[1..]);
        assert!(logits[VOCAB..] == solo[..], "step {step}: batched decode differs from decoding alone");
        next = [argmax(&logits[..VOCAB]), argmax(&logits[VOCAB..])];
        assert_eq!(next[0], reference.greedy[step], "step {step}");
    }
}
