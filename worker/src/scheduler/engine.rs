//! The engine thread: the one thread that owns the model and its device. Everything else talks to
//! it through an [`Engine`] handle: jobs and control commands go in through a channel, each job's
//! events come back through its own channel, and the load is published on a watch channel.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use canopy_models::tokenizer::Tokenizer;
use thiserror::Error;
use tokio::sync::watch;

use super::batcher::{Scheduler, SchedulerConfig, SchedulerError};
use super::job::{Job, JobEvent, Rejection};
use super::load::EngineLoad;
use crate::engine::CausalLm;

/// What the engine thread is asked to do.
enum Command {
    Submit(Job),
    Drain,
    Abort,
    Stop,
}

/// The limits of the model the engine serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelLimits {
    /// Length of a row of logits: token ids must be below it.
    pub vocab_size: usize,
    /// Positions one sequence may hold, prompt and output together.
    pub max_sequence_len: usize,
}

/// Why the engine did not start.
#[derive(Debug, Error)]
pub enum EngineStartError {
    /// The model did not load.
    #[error("loading the model")]
    Load(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The scheduler configuration is unusable.
    #[error(transparent)]
    Config(#[from] SchedulerError),
    /// The operating system refused a thread.
    #[error("starting the engine thread")]
    Thread(#[from] std::io::Error),
    /// The thread ended without saying whether the model loaded (it panicked).
    #[error("the engine thread stopped while loading the model")]
    Died,
}

/// A handle to the engine thread; share it behind an [`Arc`].
pub struct Engine {
    commands: Sender<Command>,
    load: watch::Receiver<EngineLoad>,
    limits: ModelLimits,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Engine {
    /// Starts the engine thread, loads the model there with `load_model` (so the device is only
    /// ever touched by that thread) and waits until it is loaded.
    pub fn start<M, E, F>(
        tokenizer: Arc<Tokenizer>,
        config: SchedulerConfig,
        load_model: F,
    ) -> Result<Self, EngineStartError>
    where
        M: CausalLm,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
        F: FnOnce() -> Result<M, E> + Send + 'static,
    {
        let (commands, inbox) = mpsc::channel();
        let (ready_sender, ready) = mpsc::channel();
        let (load_sender, load) = watch::channel(EngineLoad::default());
        let thread = std::thread::Builder::new().name("canopy-engine".into()).spawn(move || {
            let model = match load_model() {
                Ok(model) => model,
                Err(error) => {
                    let _ = ready_sender.send(Err(EngineStartError::Load(error.into())));
                    return;
                }
            };
            let limits =
                ModelLimits { vocab_size: model.vocab_size(), max_sequence_len: model.max_sequence_len() };
            match Scheduler::new(model, &tokenizer, config) {
                Ok(scheduler) => {
                    publish(&load_sender, scheduler.load());
                    let _ = ready_sender.send(Ok(limits));
                    run(scheduler, &inbox, &load_sender);
                }
                Err(error) => {
                    let _ = ready_sender.send(Err(error.into()));
                }
            }
        })?;
        let limits = ready.recv().map_err(|_| EngineStartError::Died)??;
        Ok(Self { commands, load, limits, thread: Mutex::new(Some(thread)) })
    }

    /// The limits of the served model.
    pub fn limits(&self) -> ModelLimits {
        self.limits
    }

    /// Hands a job to the engine. Its events tell what became of it; once the engine has
    /// stopped the job is rejected as aborted.
    pub fn submit(&self, job: Job) {
        if let Err(mpsc::SendError(Command::Submit(job))) = self.commands.send(Command::Submit(job)) {
            let _ = job.events.send(JobEvent::Rejected(Rejection::Aborted));
        }
    }

    /// Stops taking jobs; the ones taken run to their end.
    pub fn drain(&self) {
        let _ = self.commands.send(Command::Drain);
    }

    /// Ends every job now (see [`Scheduler::abort`]).
    pub fn abort(&self) {
        let _ = self.commands.send(Command::Abort);
    }

    /// The engine's load, updated whenever it changes.
    pub fn load(&self) -> watch::Receiver<EngineLoad> {
        self.load.clone()
    }

    /// Aborts every job, stops the thread and waits for it (blocking), which frees the model.
    pub fn stop(&self) {
        let _ = self.commands.send(Command::Stop);
        let thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(thread) = thread {
            // A panic of the engine thread has already ended every job's channel.
            let _ = thread.join();
        }
    }
}

/// The engine thread's loop: take commands (waiting for one while idle), step, publish the load.
fn run<M: CausalLm>(
    mut scheduler: Scheduler<'_, M>,
    inbox: &Receiver<Command>,
    load: &watch::Sender<EngineLoad>,
) {
    loop {
        let waited = if scheduler.is_idle() {
            match inbox.recv() {
                Ok(command) => Some(command),
                Err(mpsc::RecvError) => return,
            }
        } else {
            None
        };
        for command in waited.into_iter().chain(inbox.try_iter()) {
            match command {
                Command::Submit(job) => scheduler.submit(job),
                Command::Drain => scheduler.drain(),
                Command::Abort => scheduler.abort(),
                Command::Stop => {
                    scheduler.abort();
                    publish(load, scheduler.load());
                    return;
                }
            }
        }
        scheduler.step();
        publish(load, scheduler.load());
    }
}

fn publish(sender: &watch::Sender<EngineLoad>, load: EngineLoad) {
    sender.send_if_modified(|current| {
        let changed = *current != load;
        *current = load;
        changed
    });
}
