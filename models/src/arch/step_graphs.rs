//! Recorded forward passes. A decode or verify step launches hundreds of small kernels; recorded
//! once per shape and replayed, it costs one launch. A replay reads the per-step inputs (token
//! ids, positions, KV slots, block tables) from the device buffers they were written to, so
//! only what is baked into the launches themselves keys a recording.

use std::collections::HashMap;

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
}

/// Recorded steps of one model, valid while its per-step buffers stay where they are.
pub(crate) struct StepGraphs<B: Backend> {
    recordings: HashMap<StepShape, B::Graph>,
}

impl<B: Backend> StepGraphs<B> {
    pub fn new() -> Self {
        Self { recordings: HashMap::new() }
    }

    /// Forgets every recording: the buffers they launch on were replaced.
    pub fn invalidate(&mut self) {
        self.recordings.clear();
    }

    /// Runs the step that `ops` submits: replays its recording when there is one, records it
    /// otherwise (where the backend can), or submits it op by op.
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
        if let Some(graph) = backend.record(ops)? {
            backend.replay(&graph)?;
            if self.recordings.len() >= MAX_RECORDINGS {
                self.recordings.clear();
            }
            self.recordings.insert(shape, graph);
        }
        Ok(())
    }
}
