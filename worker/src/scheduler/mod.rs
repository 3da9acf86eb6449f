//! Continuous batching: many generations share one model, one forward pass per step.
//!
//! An [`Engine`] starts the one thread that owns the model and its device and runs a
//! [`Scheduler`] there. Callers hand it [`Job`]s and read each job's [`JobEvent`]s from a
//! channel of its own; dropping that channel's receiver cancels the job within one step and frees
//! its sequence slot. Jobs wait in a bounded queue (priority first, then arrival order) until one
//! of `max_running` sequence slots is free; every step runs one forward pass over the prefill
//! chunks of starting jobs and one token of each decoding job, and each sequence samples from
//! its own row of logits through a [`crate::engine::SequenceDecoder`], exactly as a
//! single-sequence [`crate::engine::generate`] would. The load ([`EngineLoad`]) is published on a
//! watch channel after every change.

mod batcher;
mod engine;
mod job;
mod load;
mod queue;
mod running;
#[cfg(test)]
mod tests;

pub use batcher::{Scheduler, SchedulerConfig, SchedulerError};
pub use engine::{Engine, EngineStartError, ModelLimits};
pub use job::{FinishSummary, Job, JobEvent, Rejection, TokenOutput};
pub use load::EngineLoad;
