//! Jobs waiting for a sequence slot: highest priority first, then first come, first served, with
//! each job told its place whenever it changes.

use std::time::Instant;

use super::job::{Job, JobEvent, Rejection};

/// A job in the queue.
#[derive(Debug)]
pub(super) struct Waiting {
    pub(super) job: Job,
    /// When it arrived.
    pub(super) arrived: Instant,
    /// The position it was last told; `None` before the first report.
    reported: Option<usize>,
}

/// The waiting jobs, best first.
#[derive(Debug, Default)]
pub(super) struct WaitQueue {
    entries: Vec<Waiting>,
}

impl WaitQueue {
    /// Jobs waiting.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Adds a job behind every job of its priority or higher.
    pub(super) fn push(&mut self, job: Job, arrived: Instant) {
        let at = self.entries.partition_point(|waiting| waiting.job.priority >= job.priority);
        self.entries.insert(at, Waiting { job, arrived, reported: None });
    }

    /// Takes the job to run next.
    pub(super) fn pop(&mut self) -> Option<Waiting> {
        (!self.entries.is_empty()).then(|| self.entries.remove(0))
    }

    /// Drops the jobs whose receiver is gone; returns how many.
    pub(super) fn drop_cancelled(&mut self) -> usize {
        let before = self.entries.len();
        self.entries.retain(|waiting| !waiting.job.events.is_closed());
        before - self.entries.len()
    }

    /// Ends the jobs whose deadline is not after `now` with `DeadlineExceeded`.
    pub(super) fn expire(&mut self, now: Instant) {
        self.reject_where(
            |waiting| waiting.job.deadline.is_some_and(|deadline| deadline <= now),
            || Rejection::DeadlineExceeded,
        );
    }

    /// Ends every waiting job with `rejection`.
    pub(super) fn reject_all(&mut self, rejection: &Rejection) {
        self.reject_where(|_| true, || rejection.clone());
    }

    fn reject_where(&mut self, mut expired: impl FnMut(&Waiting) -> bool, rejection: impl Fn() -> Rejection) {
        self.entries.retain(|waiting| {
            let keep = !expired(waiting);
            if !keep {
                // A closed receiver means nobody waits for the answer.
                let _ = waiting.job.events.send(JobEvent::Rejected(rejection()));
            }
            keep
        });
    }

    /// Tells every job whose place changed since its last report where it stands now.
    pub(super) fn report_positions(&mut self) {
        for (position, waiting) in self.entries.iter_mut().enumerate() {
            if waiting.reported != Some(position) {
                waiting.reported = Some(position);
                let _ = waiting.job.events.send(JobEvent::Queued { position });
            }
        }
    }
}
