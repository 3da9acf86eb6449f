//! Draft-tree verification on the CPU backend: every tree node's logits equal those of a plain
//! causal forward over the context and the node's root-to-node path, and compacting the KV cache
//! to an accepted path leaves a cache that decodes exactly like one built by plain decoding.

#![allow(clippy::unwrap_used)]

mod qwen3_common;

use canopy_kernels::backend::{Mask, TREE_ROOT};
use canopy_models::arch::{LogitRows, SequenceInput};
use qwen3_common::{Harness, VOCAB, argmax, prompt_ids, reference};

const CONTEXT: usize = 21;
const TREE_NODES: usize = 15;

/// A small deterministic generator (64-bit LCG), so that the tree is the same on every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// A random tree with parents before children: node 0 hangs off the context, later nodes off the
/// context (rarely) or any earlier node, and random tokens.
fn random_tree(seed: u64) -> (Vec<u32>, Vec<u32>) {
    let mut rng = Lcg(seed);
    let parents = (0..TREE_NODES)
        .map(|i| if i == 0 || rng.below(6) == 0 { TREE_ROOT } else { rng.below(i) as u32 })
        .collect();
    let tokens = (0..TREE_NODES).map(|_| rng.below(VOCAB) as u32).collect();
    (parents, tokens)
}

/// Node indices from a child of the context down to `node`.
fn path_to(parents: &[u32], node: usize) -> Vec<u32> {
    let mut path = vec![node as u32];
    while parents[*path.last().unwrap() as usize] != TREE_ROOT {
        path.push(parents[*path.last().unwrap() as usize]);
    }
    path.reverse();
    path
}

fn tokens_of(tokens: &[u32], nodes: &[u32]) -> Vec<u32> {
    nodes.iter().map(|&node| tokens[node as usize]).collect()
}

/// Prefills the first `CONTEXT` prompt tokens and verifies a random tree after them; returns the
/// harness, the sequence, the tree and its logits.
fn verified_tree(seed: u64) -> (Harness, canopy_models::kv::SeqId, Vec<u32>, Vec<u32>, Vec<f32>) {
    let prompt = prompt_ids();
    let mut harness = Harness::open(&reference("f32").gguf);
    let seq = harness.cache.create_sequence();
    harness.causal(seq, &prompt[..CONTEXT]);
    let (parents, tokens) = random_tree(seed);
    let input = SequenceInput { seq, tokens: &tokens, mask: Mask::Tree(&parents) };
    let logits = harness.forward(&[input], LogitRows::All);
    (harness, seq, parents, tokens, logits)
}

#[test]
fn every_tree_node_matches_a_causal_forward_over_its_path() {
    let prompt = prompt_ids();
    for seed in [1, 2, 3] {
        let (mut harness, _, parents, tokens, tree_logits) = verified_tree(seed);
        assert!(parents.iter().skip(1).any(|&p| p != TREE_ROOT), "the tree should have depth");
        for node in 0..TREE_NODES {
            let path = path_to(&parents, node);
            let mut sequence = prompt[..CONTEXT].to_vec();
            sequence.extend(tokens_of(&tokens, &path));
            let plain = harness.cache.create_sequence();
            let input = SequenceInput { seq: plain, tokens: &sequence, mask: Mask::Causal };
            let causal = harness.forward(&[input], LogitRows::LastPerSequence);
            let tree_row = &tree_logits[node * VOCAB..(node + 1) * VOCAB];
            assert!(tree_row == causal, "seed {seed}, node {node} (path {path:?}): logits differ");
            harness.cache.release(plain).unwrap();
        }
    }
}

#[test]
fn compacting_an_accepted_path_continues_like_plain_decoding() {
    let prompt = prompt_ids();
    for seed in [4, 5] {
        let (mut tree, seq, parents, tokens, tree_logits) = verified_tree(seed);
        // Accept the deepest root-to-leaf path (the one that moves the most nodes).
        let leaf = (0..TREE_NODES).max_by_key(|&node| path_to(&parents, node).len()).unwrap();
        let accepted = path_to(&parents, leaf);
        assert!(accepted.iter().enumerate().any(|(j, &node)| node as usize != j), "nothing would move");
        let blocks_before = tree.cache.memory().free_blocks;
        tree.cache.compact(&tree.backend, seq, CONTEXT, &accepted).unwrap();
        assert_eq!(tree.cache.len(seq).unwrap(), CONTEXT + accepted.len());
        assert!(tree.cache.memory().free_blocks >= blocks_before);
        let bonus = argmax(&tree_logits[leaf * VOCAB..(leaf + 1) * VOCAB]);
        let (tree_tokens, tree_steps) = tree.decode_greedy(seq, bonus, 8);

        let mut plain = Harness::open(&reference("f32").gguf);
        let plain_seq = plain.cache.create_sequence();
        let mut sequence = prompt[..CONTEXT].to_vec();
        sequence.extend(tokens_of(&tokens, &accepted));
        plain.causal(plain_seq, &sequence);
        let (plain_tokens, plain_steps) = plain.decode_greedy(plain_seq, bonus, 8);
        assert_eq!(tree_tokens, plain_tokens, "seed {seed}");
        assert!(tree_steps == plain_steps, "seed {seed}: logits after compaction differ from plain decoding");
        assert_eq!(tree.cache.memory(), plain.cache.memory(), "seed {seed}: blocks held differ");
    }
}
