//! The continuous-batching scheduler: between steps jobs join and leave; each step runs one
//! forward pass over every running sequence (prefill chunks of new jobs and one token of each
//! decoding job), then samples each sequence from its own row of logits.

use std::time::Instant;

use canopy_models::tokenizer::Tokenizer;
use thiserror::Error;

use super::job::{Job, JobEvent, Rejection, TokenOutput};
use super::load::{EngineLoad, RateWindow};
use super::queue::WaitQueue;
use super::running::Running;
use crate::engine::{CausalLm, FinishReason, SequenceChunk, SequenceDecoder};

/// How much the scheduler runs at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Sequences running at once; the model's KV cache must hold this many.
    pub max_running: usize,
    /// Jobs that may wait for a slot.
    pub max_queued: usize,
    /// Prompt tokens run per step, shared by the jobs being prefilled.
    pub prefill_chunk: usize,
}

impl SchedulerConfig {
    /// The most new tokens of one forward pass: a full prefill chunk plus one token for every
    /// other running sequence. The model must accept batches this large.
    pub fn max_batch_tokens(&self) -> usize {
        self.prefill_chunk + self.max_running
    }
}

/// A configuration the scheduler cannot run with.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SchedulerError {
    /// At least one sequence must be able to run.
    #[error("max_running must be at least 1")]
    ZeroMaxRunning,
    /// Prefill must make progress.
    #[error("the prefill chunk must be at least 1 token")]
    ZeroPrefillChunk,
}

/// How a running job ends.
enum Ending {
    Finished { reason: FinishReason, text: String },
    Failed(String),
    Cancelled,
}

/// One sequence's part of the next forward pass.
struct Planned {
    /// Index into the running jobs.
    index: usize,
    n_past: usize,
    len: usize,
    prefill: bool,
    want_logits: bool,
}

/// Owns the model and runs its jobs, one [`Self::step`] at a time.
pub struct Scheduler<'t, M: CausalLm> {
    model: M,
    tokenizer: &'t Tokenizer,
    config: SchedulerConfig,
    queue: WaitQueue,
    /// Running jobs in the order they started, which is the order prefill budget goes in.
    running: Vec<Running<'t>>,
    free_slots: Vec<usize>,
    logits: Vec<f32>,
    /// The argmax of each row, for steps whose sequences read nothing else from their logits.
    argmax_ids: Vec<u32>,
    /// The counters and the draining flag; the rest is filled in by [`Self::load`].
    totals: EngineLoad,
    rates: RateWindow,
}

impl<'t, M: CausalLm> Scheduler<'t, M> {
    /// A scheduler for `model`, whose KV cache must hold `config.max_running` sequences.
    pub fn new(model: M, tokenizer: &'t Tokenizer, config: SchedulerConfig) -> Result<Self, SchedulerError> {
        if config.max_running == 0 {
            return Err(SchedulerError::ZeroMaxRunning);
        }
        if config.prefill_chunk == 0 {
            return Err(SchedulerError::ZeroPrefillChunk);
        }
        Ok(Self {
            logits: vec![0.0; config.max_running * model.vocab_size()],
            argmax_ids: vec![0; config.max_running],
            model,
            tokenizer,
            config,
            queue: WaitQueue::default(),
            running: Vec::with_capacity(config.max_running),
            // Reversed so that slot 0 is handed out first.
            free_slots: (0..config.max_running).rev().collect(),
            totals: EngineLoad::default(),
            rates: RateWindow::default(),
        })
    }

    /// Takes a job into the queue, or rejects it at once (draining, queue full, invalid).
    pub fn submit(&mut self, job: Job) {
        let invalid = job.request.validate(self.model.vocab_size(), self.model.max_sequence_len()).err();
        let rejection = if self.totals.draining {
            Some(Rejection::Draining)
        } else if let Some(error) = invalid {
            Some(Rejection::invalid(&error))
        } else if self.queue.len() >= self.config.max_queued + self.free_slots.len() {
            Some(Rejection::QueueFull { max_queued: self.config.max_queued })
        } else {
            None
        };
        match rejection {
            Some(rejection) => {
                let _ = job.events.send(JobEvent::Rejected(rejection));
            }
            None => self.queue.push(job, Instant::now()),
        }
    }

    /// Stops taking jobs; the ones already taken run to their end.
    pub fn drain(&mut self) {
        self.totals.draining = true;
    }

    /// Ends every job now: running ones finish with [`FinishReason::Aborted`], waiting ones are
    /// rejected.
    pub fn abort(&mut self) {
        self.queue.reject_all(&Rejection::Aborted);
        let now = Instant::now();
        while let Some(last) = self.running.len().checked_sub(1) {
            let ending = self.ending_from_outside(last, FinishReason::Aborted);
            self.retire(last, ending, now);
        }
        self.rates.clear();
    }

    /// Whether no job waits or runs.
    pub fn is_idle(&self) -> bool {
        self.queue.len() == 0 && self.running.is_empty()
    }

    /// The current load.
    pub fn load(&self) -> EngineLoad {
        let kv = self.model.kv_usage();
        let (step_rate, decode_tokens_per_second) = self.rates.rates();
        EngineLoad {
            queued: self.queue.len(),
            running: self.running.len(),
            kv_blocks_used: kv.used_blocks,
            kv_blocks_total: kv.total_blocks,
            decode_tokens_per_second,
            step_rate,
            ..self.totals
        }
    }

    /// One iteration: drop cancelled jobs, end expired ones, start waiting jobs in free slots,
    /// tell waiting jobs their places, then run one forward pass over every running sequence.
    pub fn step(&mut self) {
        let now = Instant::now();
        self.totals.requests_cancelled += self.queue.drop_cancelled() as u64;
        self.queue.expire(now);
        for index in (0..self.running.len()).rev() {
            let job = &self.running[index];
            if job.events.is_closed() {
                self.retire(index, Ending::Cancelled, now);
            } else if job.deadline.is_some_and(|deadline| deadline <= now) {
                let ending = self.ending_from_outside(index, FinishReason::Deadline);
                self.retire(index, ending, now);
            }
        }
        self.admit(now);
        self.queue.report_positions();
        if self.running.is_empty() {
            self.rates.clear();
        } else {
            self.run_batch();
        }
    }

    /// Moves waiting jobs into free slots, best first.
    fn admit(&mut self, now: Instant) {
        while let Some(&slot) = self.free_slots.last() {
            let Some(waiting) = self.queue.pop() else { return };
            let max_len = self.model.max_sequence_len();
            match SequenceDecoder::new(self.tokenizer, &waiting.job.request, max_len) {
                Ok(decoder) => {
                    self.free_slots.pop();
                    self.totals.requests_started += 1;
                    self.running.push(Running::start(waiting, slot, decoder, now));
                }
                Err(error) => {
                    let _ = waiting.job.events.send(JobEvent::Rejected(Rejection::invalid(&error)));
                }
            }
        }
    }

    /// Runs one forward pass over the running sequences and samples each one that has logits.
    fn run_batch(&mut self) {
        let plan = self.plan();
        let batch: Vec<SequenceChunk<'_>> = plan
            .iter()
            .map(|planned| {
                let job = &self.running[planned.index];
                let tokens = if planned.prefill {
                    &job.prompt[planned.n_past..planned.n_past + planned.len]
                } else {
                    job.decoder.next_input()
                };
                SequenceChunk {
                    sequence: job.slot,
                    n_past: planned.n_past,
                    tokens,
                    want_logits: planned.want_logits,
                }
            })
            .collect();
        // When every row is picked by its argmax, the rows of logits need not leave the model.
        let argmax_only = plan
            .iter()
            .filter(|planned| planned.want_logits)
            .all(|planned| self.running[planned.index].decoder.needs_only_argmax());
        let result = if argmax_only {
            self.model.forward_argmax(&batch, &mut self.argmax_ids)
        } else {
            self.model.forward(&batch, &mut self.logits)
        };
        drop(batch);
        let now = Instant::now();
        let mut endings = match result {
            Ok(()) => self.sample(&plan, argmax_only, now),
            Err(error) => {
                let message = format!("forward pass: {error}");
                plan.iter().map(|planned| (planned.index, Ending::Failed(message.clone()))).collect()
            }
        };
        // Descending indices keep the remaining ones valid and the start order intact.
        endings.sort_by_key(|(index, _)| std::cmp::Reverse(*index));
        for (index, ending) in endings {
            self.retire(index, ending, now);
        }
    }

    /// What each running sequence contributes to the next forward pass: one token per decoding
    /// sequence, and prefill chunks from the prefill budget in start order.
    fn plan(&self) -> Vec<Planned> {
        let mut budget = self.config.prefill_chunk;
        let mut plan = Vec::with_capacity(self.running.len());
        for (index, job) in self.running.iter().enumerate() {
            if job.is_prefilling() {
                let len = budget.min(job.prompt.len() - job.prefilled);
                if len == 0 {
                    continue;
                }
                budget -= len;
                let want_logits = job.prefilled + len == job.prompt.len();
                plan.push(Planned { index, n_past: job.prefilled, len, prefill: true, want_logits });
            } else {
                let n_past = job.decoder.next_position();
                plan.push(Planned { index, n_past, len: 1, prefill: false, want_logits: true });
            }
        }
        plan
    }

    /// Feeds each planned sequence its row of logits, or its argmax after an argmax-only step;
    /// returns the jobs that ended.
    fn sample(&mut self, plan: &[Planned], argmax_only: bool, now: Instant) -> Vec<(usize, Ending)> {
        let vocab = self.model.vocab_size();
        let mut rows = self.logits.chunks_exact(vocab);
        let mut ids = self.argmax_ids.iter();
        let mut endings = Vec::new();
        let mut generated = 0;
        for planned in plan {
            let job = &mut self.running[planned.index];
            if planned.prefill {
                job.prefilled += planned.len;
            }
            if !planned.want_logits {
                continue;
            }
            let pushed = if argmax_only {
                ids.next().map(|&id| job.decoder.push_argmax(id))
            } else {
                rows.next().map(|row| job.decoder.push_logits(row))
            };
            let Some(pushed) = pushed else {
                endings.push((planned.index, Ending::Failed("the model returned too few logit rows".into())));
                continue;
            };
            match pushed {
                Ok(token) => {
                    generated += 1;
                    job.note_token(now);
                    let output = TokenOutput { id: token.id, text: token.text, logprobs: token.logprobs };
                    let _ = job.events.send(JobEvent::Token(output));
                    if let Some(reason) = token.finished {
                        endings.push((planned.index, Ending::Finished { reason, text: String::new() }));
                    }
                }
                Err(error) => endings.push((planned.index, Ending::Failed(error.to_string()))),
            }
        }
        self.totals.tokens_generated += generated as u64;
        self.rates.record(now, generated);
        endings
    }

    /// How running job `index` ends for a reason decided outside its tokens.
    fn ending_from_outside(&mut self, index: usize, reason: FinishReason) -> Ending {
        match self.running[index].decoder.end(reason) {
            Ok((text, reason)) => Ending::Finished { reason, text },
            Err(error) => Ending::Failed(error.to_string()),
        }
    }

    /// Removes running job `index`, frees its slot and sends its last event.
    fn retire(&mut self, index: usize, ending: Ending, now: Instant) {
        let job = self.running.remove(index);
        self.model.release(job.slot);
        self.free_slots.push(job.slot);
        self.totals.requests_finished += 1;
        let event = match ending {
            Ending::Finished { reason, text } => JobEvent::Finished(job.summary(reason, text, now)),
            Ending::Failed(message) => JobEvent::Failed(message),
            Ending::Cancelled => {
                self.totals.requests_cancelled += 1;
                return;
            }
        };
        let _ = job.events.send(event);
    }
}
