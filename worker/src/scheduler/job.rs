//! What goes into the scheduler (a [`Job`]) and what comes back out of it ([`JobEvent`]s).

use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::engine::{EngineError, FinishReason, GenerateRequest};
use crate::sampling::TokenLogprobs;

/// One request for the scheduler.
#[derive(Debug)]
pub struct Job {
    /// What to generate.
    pub request: GenerateRequest,
    /// Higher runs earlier among waiting jobs; equal priorities run in arrival order.
    pub priority: i32,
    /// After this instant the job is rejected (while waiting) or finished (while running).
    pub deadline: Option<Instant>,
    /// Where the job's events go. Once the receiver is dropped the job is cancelled.
    pub events: UnboundedSender<JobEvent>,
}

impl Job {
    /// A job with default priority and no deadline, and the receiver of its events.
    ///
    /// The channel is unbounded so that the engine thread never waits for one slow reader; what
    /// it can hold is bounded by the job's token limit and the context window.
    pub fn new(request: GenerateRequest) -> (Self, UnboundedReceiver<JobEvent>) {
        let (events, receiver) = unbounded_channel();
        (Self { request, priority: 0, deadline: None, events }, receiver)
    }
}

/// What happens to a job, in order: zero or more `Queued`, then either `Rejected`, or `Started`
/// followed by `Token`s and exactly one `Finished` or `Failed`.
#[derive(Clone, Debug, PartialEq)]
pub enum JobEvent {
    /// The job waits for a sequence slot behind `position` others.
    Queued {
        /// Jobs ahead of this one (0: next to run).
        position: usize,
    },
    /// The job left the queue; its prompt is being processed.
    Started {
        /// Tokens of the prompt.
        prompt_tokens: usize,
        /// Time spent waiting.
        queue_time: Duration,
    },
    /// One generated token.
    Token(TokenOutput),
    /// The generation ended.
    Finished(FinishSummary),
    /// The generation failed after it started (a device failure, a bug).
    Failed(String),
    /// The job ended before it started.
    Rejected(Rejection),
}

/// One generated token and the text it released.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenOutput {
    /// The token id.
    pub id: u32,
    /// Text ready to show (possibly empty while text is held back).
    pub text: String,
    /// Log-probabilities, when the request asked for them.
    pub logprobs: Option<TokenLogprobs>,
}

/// How a generation ended and what it cost.
#[derive(Clone, Debug, PartialEq)]
pub struct FinishSummary {
    /// Why it ended.
    pub reason: FinishReason,
    /// Text released by the end (held-back characters); may be empty.
    pub text: String,
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// From the start to the first generated token.
    pub prefill_time: Duration,
    /// From the first generated token to the end.
    pub decode_time: Duration,
}

/// Why a job ended before it started.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum Rejection {
    /// The queue already holds as many jobs as allowed.
    #[error("the queue is full ({max_queued} requests wait already)")]
    QueueFull {
        /// The queue's capacity.
        max_queued: usize,
    },
    /// The worker is draining and takes no new jobs.
    #[error("the worker is shutting down")]
    Draining,
    /// The deadline passed while the job waited.
    #[error("the deadline passed while the request waited in the queue")]
    DeadlineExceeded,
    /// The worker shut down before the job left the queue.
    #[error("the worker shut down before the request started")]
    Aborted,
    /// The job does not fit the model (checked again by the engine).
    #[error("{0}")]
    Invalid(String),
}

impl Rejection {
    /// The rejection of a job the engine cannot run.
    pub fn invalid(error: &EngineError) -> Self {
        Self::Invalid(error.to_string())
    }
}
