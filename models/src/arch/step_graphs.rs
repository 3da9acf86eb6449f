//! Recorded forward passes. A decode or verify step launches hundreds of small kernels; recorded
//! once per shape and replayed, it costs one launch. A replay reads the per-step inputs (token
//! ids, positions, KV slots, block tables) from the device buffers they were written to, so
//! only what is baked into the launches themselves keys a recording.
//!
//! A shape is recorded the second time it runs, not the first: the first run is submitted op by
//! op so that whatever a backend creates lazily (scratch buffers, library workspaces) exists
//! before a recording bakes in its addresses; it cannot be allocated during a capture.

use std::collections::{HashMap, HashSet};

use canopy_kernels::backend::{Backend, BackendError};

/// Steps with more new tokens than this run op by op: prefill chunks vary in size and each
/// shape would need its own recording, while their launches are few next to their work.
const MAX_RECORDED_TOKENS: usize = 64;

/// Recordings kept at most; past it the cache starts over rather than tracking use.
const MAX_RECORDINGS: usize = 64;

/// Everything a recorded step bakes into its launches besides buffer addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct StepShape {
    /// New tokens of the step, over all sequences.
    pub tokens: usize,
    /// Sequences in the step.
    pub sequences: usize,
    /// Rows that get logits, `None` for every row.
    pub logit_rows: Option<usize>,
    /// Whether the step copies out the hidden states of the capture layers.
    pub capture: bool,
    /// The KV cache the step writes to ([`crate::kv::KvCache::instance`]).
    pub cache: u64,
    /// The class of its context lengths whose attention launches the step records
    /// ([`Backend::attention_context_class`]).
    pub context_class: usize,
}

/// Recorded steps of one model, valid while its per-step buffers stay where they are.
pub(crate) struct StepGraphs<B: Backend> {
    recordings: HashMap<StepShape, B::Graph>,
    /// Shapes that have run once, op by op.
    seen: HashSet<StepShape>,
}

impl<B: Backend> StepGraphs<B> {
    pub fn new() -> Self {
        Self { recordings: HashMap::new(), seen: HashSet::new() }
    }

    /// Forgets every recording: the buffers they launch on were replaced.
    pub fn invalidate(&mut self) {
        self.recordings.clear();
        self.seen.clear();
    }

    /// Runs the step that `ops` submits: replays its recording when there is one; otherwise
    /// submits it op by op the first time and records it (where the backend can) the second.
    pub fn run<E: From<BackendError>>(
        &mut self,
        backend: &B,
        shape: StepShape,
        ops: impl FnOnce() -> Result<(), E>,
    ) -> Result<(), E> {
        if shape.tokens > MAX_RECORDED_TOKENS {
            return ops();
        }
        if let Some(graph) = self.recordings.get(&shape) {
            return Ok(backend.replay(graph)?);
        }
        if self.seen.insert(shape) {
            return ops();
        }
        if let Some(graph) = backend.record(ops)? {
            backend.replay(&graph)?;
            if self.recordings.len() >= MAX_RECORDINGS {
                self.recordings.clear();
                self.seen.clear();
            }
            self.recordings.insert(shape, graph);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use canopy_kernels::backend::cpu::CpuBackend;

    use super::*;

    #[test]
    fn every_run_submits_its_ops_exactly_once_where_the_backend_cannot_record() {
        let backend = CpuBackend::new();
        let mut graphs = StepGraphs::<CpuBackend>::new();
        for tokens in [1, MAX_RECORDED_TOKENS + 1] {
            let shape = StepShape {
                tokens,
                sequences: 1,
                logit_rows: None,
                capture: false,
                cache: 0,
                context_class: 0,
            };
            let mut runs = 0;
            for _ in 0..3 {
                graphs
                    .run(&backend, shape, || {
                        runs += 1;
                        Ok::<(), BackendError>(())
                    })
                    .unwrap();
            }
            assert_eq!(runs, 3, "{tokens} tokens");
        }
    }
}
