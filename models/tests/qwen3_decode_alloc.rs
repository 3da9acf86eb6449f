//! Once warm, a decode step of Qwen3 on the CPU backend allocates nothing on the heap, on any
//! thread: a global allocator counts every allocation in the process while the steps run.
//!
//! This binary holds a single test, so that no other test allocates while it counts.

#![allow(clippy::unwrap_used)]

mod qwen3_common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use canopy_kernels::backend::{Backend, Mask, TREE_ROOT};
use canopy_models::arch::{LogitRows, SequenceInput};
use canopy_models::kv::SeqId;
use qwen3_common::{Harness, VOCAB, prompt_ids};

/// Counts allocations (including reallocations) while [`COUNTING`] is set.
struct CountingAllocator;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

fn note_allocation() {
    if COUNTING.load(Ordering::Relaxed) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards its arguments unchanged to the system allocator, so the contract
// of `GlobalAlloc` is the system allocator's; counting only touches atomics and never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller upholds `alloc`'s contract, which is passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// Heap allocations made by every thread of the process while `f` runs.
fn allocations_during(f: impl FnOnce()) -> usize {
    ALLOCATIONS.store(0, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    f();
    COUNTING.store(false, Ordering::SeqCst);
    ALLOCATIONS.load(Ordering::SeqCst)
}

/// Greedy decoding of a few sequences at once, one token each per step.
struct Decoder {
    harness: Harness,
    sequences: Vec<SeqId>,
    /// The next input token of each sequence.
    next: Vec<u32>,
}

impl Decoder {
    /// Prefills the fixture's prompt, cut at a different length for each sequence.
    fn new(gguf: &str, n_sequences: usize) -> Self {
        let mut harness = Harness::open(gguf);
        let prompt = prompt_ids();
        let mut sequences = Vec::new();
        for i in 0..n_sequences {
            let seq = harness.cache.create_sequence();
            harness.causal(seq, &prompt[..prompt.len() - 3 * i]);
            sequences.push(seq);
        }
        let next = vec![prompt[0]; n_sequences];
        Self { harness, sequences, next }
    }

    /// One decode step: every sequence gets its next token and picks the following one.
    fn step(&mut self) {
        let h = &mut self.harness;
        let inputs: [SequenceInput<'_>; 2] = std::array::from_fn(|i| SequenceInput {
            seq: self.sequences[i.min(self.sequences.len() - 1)],
            tokens: std::slice::from_ref(&self.next[i.min(self.next.len() - 1)]),
            mask: Mask::Causal,
        });
        let batch = &inputs[..self.sequences.len()];
        let output =
            h.model.forward(&h.backend, &mut h.cache, batch, LogitRows::LastPerSequence, false).unwrap();
        h.backend.argmax_rows(h.model.logits(), output.n_logit_rows, VOCAB, &mut self.next).unwrap();
    }

    /// Verifies a small draft tree after the first sequence's context, then drops it again, as a
    /// speculative step that accepts nothing would.
    fn verify_tree(&mut self) {
        const PARENTS: [u32; 6] = [TREE_ROOT, 0, 0, 1, 3, 2];
        let h = &mut self.harness;
        let seq = self.sequences[0];
        let n_past = h.cache.len(seq).unwrap();
        let tokens = [self.next[0]; PARENTS.len()];
        let batch = [SequenceInput { seq, tokens: &tokens, mask: Mask::Tree(&PARENTS) }];
        h.model.forward(&h.backend, &mut h.cache, &batch, LogitRows::All, false).unwrap();
        h.cache.truncate(seq, n_past).unwrap();
    }

    /// The length of every sequence.
    fn lengths(&self) -> Vec<usize> {
        self.sequences.iter().map(|&seq| self.harness.cache.len(seq).unwrap()).collect()
    }

    /// Truncates every sequence back to the lengths [`Self::lengths`] gave.
    fn rewind(&mut self, lengths: &[usize]) {
        for (&seq, &len) in self.sequences.iter().zip(lengths) {
            self.harness.cache.truncate(seq, len).unwrap();
        }
    }

    /// Runs a step and a tree verification on every rayon thread in turn, each thread alone: the
    /// others wait on the lock, outside rayon, so the one holding it runs a piece of every op
    /// itself and grows its per-thread buffers to this model's sizes. Which thread later picks up
    /// which piece is the scheduler's choice, so every thread must be ready for any.
    fn warm_every_thread(self) -> Self {
        let decoder = Mutex::new(self);
        rayon::broadcast(|_| {
            let mut decoder = decoder.lock().unwrap();
            decoder.step();
            decoder.verify_tree();
        });
        decoder.into_inner().unwrap()
    }
}

/// Decode steps measured from inside the pool, and again from outside.
const MEASURED_STEPS: usize = 16;
const MEASURED_TREES: usize = 4;

#[test]
fn warm_decode_steps_allocate_nothing() {
    for (gguf, n_sequences) in [("qwen3-tiny-f32.gguf", 1), ("qwen3-tiny-q8_0.gguf", 2)] {
        let mut decoder = Decoder::new(gguf, n_sequences);
        // The warm-up decodes every position the measured steps will, then goes back: the block
        // tables of the sequences and of the attention batch grow (by doubling, so a sequence
        // grows them a few times in its life) only when a sequence first gets longer than ever.
        let prompt_lengths = decoder.lengths();
        for _ in 0..2 * MEASURED_STEPS {
            decoder.step();
            decoder.verify_tree();
        }
        let mut decoder = decoder.warm_every_thread();
        decoder.rewind(&prompt_lengths);

        // Driven from a rayon thread, as a step recorded by the backend runs, the ops' jobs go
        // to that thread's own queue and nothing allocates at all. The counting starts and ends
        // inside the pool, after the one job that carries the closure there.
        let (decode, verify) = rayon::scope(|_| {
            let decode = allocations_during(|| (0..MEASURED_STEPS).for_each(|_| decoder.step()));
            let verify = allocations_during(|| (0..MEASURED_TREES).for_each(|_| decoder.verify_tree()));
            (decode, verify)
        });
        assert_eq!(decode, 0, "{gguf}: decode steps of {n_sequences} sequences allocated {decode} times");
        assert_eq!(verify, 0, "{gguf}: tree verifications allocated {verify} times");

        // Driven from a thread outside the pool, as the engine thread does, every op that splits
        // its work sends one job into rayon's shared injector queue (crossbeam-deque), which
        // allocates a block for each 63 jobs it has seen. A step makes fewer than 63 backend
        // calls (19 per layer of this 2-layer model, and 5 more), so at most one block per step.
        let outside = allocations_during(|| (0..MEASURED_STEPS).for_each(|_| decoder.step()));
        assert!(
            outside <= MEASURED_STEPS,
            "{gguf}: {MEASURED_STEPS} decode steps driven from outside rayon allocated {outside} times"
        );
    }
}
