//! The forward pass's batch contract: captured hidden states, logit row selection, mixed batches
//! of trees and prefill, and typed errors that leave the KV cache as it was.

#![allow(clippy::unwrap_used)]

mod qwen3_common;

use canopy_kernels::backend::cpu::CpuBackend;
use canopy_kernels::backend::{Backend, Mask, TREE_ROOT};
use canopy_models::arch::qwen3::{Qwen3, Qwen3Options};
use canopy_models::arch::{ArchError, LogitRows, SequenceInput};
use canopy_models::gguf::GgufFile;
use canopy_models::kv::{KvCache, KvError};
use qwen3_common::{Harness, VOCAB, prompt_ids, reference, relative_l2, testdata};

const HIDDEN: usize = 64;

#[test]
fn captured_layer_outputs_match_the_dflash_fixture_features() {
    // Rows of the fixture are [output of layer 0 | output of layer 1] per prompt token, from an
    // independent float64 forward.
    let bytes = std::fs::read(testdata("qwen3-tiny-dflash.a46.features.f32")).unwrap();
    let features: Vec<f32> =
        bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
    let prompt = prompt_ids();
    assert_eq!(features.len(), prompt.len() * 2 * HIDDEN);

    let backend = CpuBackend::new();
    let file = GgufFile::open(testdata("qwen3-tiny-f32.gguf")).unwrap();
    let options = Qwen3Options { max_batch_tokens: 64, max_logit_rows: 1, capture_layers: vec![1, 0] };
    let mut model = Qwen3::load(&backend, &file, options).unwrap();
    let mut cache = KvCache::new(&backend, model.config().kv_config(16, 8)).unwrap();
    let seq = cache.create_sequence();
    let input = SequenceInput { seq, tokens: &prompt, mask: Mask::Causal };
    let output = model.forward(&backend, &mut cache, &[input], LogitRows::LastPerSequence, true).unwrap();
    assert_eq!((output.n_rows, output.n_logit_rows), (prompt.len(), 1));
    for (capture_index, layer) in [(0, 1), (1, 0)] {
        let mut captured = vec![0.0; prompt.len() * HIDDEN];
        backend.download(model.captured(capture_index).unwrap(), &mut captured).unwrap();
        let expected: Vec<f32> = features
            .chunks(2 * HIDDEN)
            .flat_map(|row| &row[layer * HIDDEN..(layer + 1) * HIDDEN])
            .copied()
            .collect();
        let error = relative_l2(&captured, &expected);
        println!("layer {layer}: relative L2 error {error:.3e} against the float64 features");
        assert!(error < 1e-5, "layer {layer}: relative L2 error {error:e}");
    }
    assert!(model.captured(2).is_none());
}

#[test]
fn selected_logit_rows_are_those_rows_of_the_full_logits() {
    let prompt = prompt_ids();
    let mut harness = Harness::open(&reference("f32").gguf);
    let all_seq = harness.cache.create_sequence();
    let all = harness.causal(all_seq, &prompt[..12]);
    let picked_seq = harness.cache.create_sequence();
    let rows = [11, 0, 5];
    let input = SequenceInput { seq: picked_seq, tokens: &prompt[..12], mask: Mask::Causal };
    let picked = harness.forward(&[input], LogitRows::Rows(&rows));
    for (i, &row) in rows.iter().enumerate() {
        let row = row as usize;
        assert!(picked[i * VOCAB..(i + 1) * VOCAB] == all[row * VOCAB..(row + 1) * VOCAB], "row {row}");
    }
    let none_seq = harness.cache.create_sequence();
    let input = SequenceInput { seq: none_seq, tokens: &prompt[..12], mask: Mask::Causal };
    assert!(harness.forward(&[input], LogitRows::None).is_empty());
    assert_eq!(harness.cache.len(none_seq).unwrap(), 12);
}

#[test]
fn a_tree_batched_with_a_prefill_matches_the_tree_alone() {
    let prompt = prompt_ids();
    let parents = [TREE_ROOT, 0, 0, 1, TREE_ROOT, 4];
    let tree_tokens = [5, 17, 900, 3, 64, 512];
    let mut logits = Vec::new();
    for with_prefill in [false, true] {
        let mut harness = Harness::open(&reference("f32").gguf);
        let tree_seq = harness.cache.create_sequence();
        harness.causal(tree_seq, &prompt[..10]);
        let tree = SequenceInput { seq: tree_seq, tokens: &tree_tokens, mask: Mask::Tree(&parents) };
        let other = harness.cache.create_sequence();
        let prefill = SequenceInput { seq: other, tokens: &prompt[3..30], mask: Mask::Causal };
        let batch = if with_prefill { vec![prefill, tree] } else { vec![tree] };
        let out = harness.forward(&batch, LogitRows::All);
        logits.push(out[out.len() - tree_tokens.len() * VOCAB..].to_vec());
    }
    assert!(logits[0] == logits[1], "batching a tree with a prefill changed its logits");
}

#[test]
fn running_out_of_kv_blocks_is_a_typed_error_that_changes_nothing() {
    let prompt = prompt_ids();
    let backend = CpuBackend::new();
    let file = GgufFile::open(testdata("qwen3-tiny-f32.gguf")).unwrap();
    let options = Qwen3Options { max_batch_tokens: 64, max_logit_rows: 64, capture_layers: vec![] };
    let mut model = Qwen3::load(&backend, &file, options).unwrap();
    // 3 blocks of 4 positions: room for 12 tokens.
    let mut cache = KvCache::new(&backend, model.config().kv_config(4, 3)).unwrap();
    let (a, b) = (cache.create_sequence(), cache.create_sequence());
    let first = SequenceInput { seq: a, tokens: &prompt[..5], mask: Mask::Causal };
    model.forward(&backend, &mut cache, &[first], LogitRows::All, false).unwrap();
    let free_before = cache.memory();
    let batch = [
        SequenceInput { seq: a, tokens: &prompt[5..7], mask: Mask::Causal },
        SequenceInput { seq: b, tokens: &prompt[..9], mask: Mask::Causal },
    ];
    let err = model.forward(&backend, &mut cache, &batch, LogitRows::All, false).unwrap_err();
    assert!(matches!(err, ArchError::Kv(KvError::OutOfBlocks { .. })), "{err}");
    assert_eq!((cache.len(a).unwrap(), cache.len(b).unwrap()), (5, 0));
    assert_eq!(cache.memory(), free_before);
}

#[test]
fn unusable_batches_are_typed_errors() {
    let prompt = prompt_ids();
    let mut harness = Harness::open(&reference("f32").gguf);
    let seq = harness.cache.create_sequence();
    let Harness { backend, model, cache } = &mut harness;
    let mut run =
        |batch: &[SequenceInput<'_>], rows: LogitRows<'_>| model.forward(backend, cache, batch, rows, false);
    let causal = |tokens| SequenceInput { seq, tokens, mask: Mask::Causal };
    let cases: [(&[SequenceInput<'_>], LogitRows<'_>); 5] = [
        (&[], LogitRows::All),
        (&[causal(&[VOCAB as u32])], LogitRows::All),
        (&[causal(&prompt[..2]), causal(&prompt[2..4])], LogitRows::All),
        (&[causal(&prompt[..2])], LogitRows::Rows(&[2])),
        (&[causal(&[1; 129])], LogitRows::None),
    ];
    for (batch, rows) in cases {
        let err = run(batch, rows).unwrap_err();
        assert!(matches!(err, ArchError::Batch(_)), "{err}");
    }
    let bad_tree = SequenceInput { seq, tokens: &prompt[..2], mask: Mask::Tree(&[1, TREE_ROOT]) };
    assert!(matches!(run(&[bad_tree], LogitRows::All), Err(ArchError::Backend(_))));
    assert_eq!(cache.len(seq).unwrap(), 0);
}
