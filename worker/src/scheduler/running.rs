//! A job that holds a sequence slot: its prompt, how much of it is prefilled, its decoder and its
//! clock.

use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::job::{FinishSummary, JobEvent};
use super::queue::Waiting;
use crate::engine::{FinishReason, SequenceDecoder};

/// A running job.
pub(super) struct Running<'t> {
    pub(super) events: UnboundedSender<JobEvent>,
    pub(super) deadline: Option<Instant>,
    /// The model's sequence slot.
    pub(super) slot: usize,
    pub(super) prompt: Vec<u32>,
    /// Prompt tokens already in the KV cache.
    pub(super) prefilled: usize,
    pub(super) decoder: SequenceDecoder<'t>,
    started: Instant,
    first_token: Option<Instant>,
}

impl<'t> Running<'t> {
    /// Starts a waiting job in `slot` with its decoder and tells it so.
    pub(super) fn start(waiting: Waiting, slot: usize, decoder: SequenceDecoder<'t>, now: Instant) -> Self {
        let Waiting { job, arrived, .. } = waiting;
        let started = JobEvent::Started {
            prompt_tokens: job.request.prompt.len(),
            queue_time: now.saturating_duration_since(arrived),
        };
        // A closed receiver is noticed as a cancellation at the next step.
        let _ = job.events.send(started);
        Self {
            events: job.events,
            deadline: job.deadline,
            slot,
            prompt: job.request.prompt,
            prefilled: 0,
            decoder,
            started: now,
            first_token: None,
        }
    }

    /// Whether part of the prompt is still to be run.
    pub(super) fn is_prefilling(&self) -> bool {
        self.prefilled < self.prompt.len()
    }

    /// Records that a token was generated at `now`.
    pub(super) fn note_token(&mut self, now: Instant) {
        self.first_token.get_or_insert(now);
    }

    /// The summary of a generation that ends at `now` for `reason`, releasing `text`.
    pub(super) fn summary(&self, reason: FinishReason, text: String, now: Instant) -> FinishSummary {
        let first_token = self.first_token.unwrap_or(now);
        FinishSummary {
            reason,
            text,
            prompt_tokens: self.prompt.len(),
            completion_tokens: self.decoder.tokens().len(),
            prefill_time: first_token.saturating_duration_since(self.started),
            decode_time: now.saturating_duration_since(first_token),
        }
    }
}
