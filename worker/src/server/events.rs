//! A job's events as the `Generate` response stream. Dropping the stream drops the job's
//! receiver, which the engine notices as a cancellation.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use canopy_models::tokenizer::Tokenizer;
use canopy_proto::v1::{self, generate_event::Event};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::Stream;
use tonic::Status;

use super::error::RequestError;
use crate::engine::FinishReason;
use crate::sampling::{Logprob, TokenLogprobs};
use crate::scheduler::{FinishSummary, JobEvent, TokenOutput};

/// The response stream of one `Generate` call.
pub struct GenerateStream {
    events: UnboundedReceiver<JobEvent>,
    tokenizer: Arc<Tokenizer>,
    /// Converted items not yet handed out (one job event can become several).
    ready: VecDeque<Result<v1::GenerateEvent, Status>>,
    /// The job's last event has been converted.
    ended: bool,
}

impl GenerateStream {
    /// The stream of a job whose first event, `first`, was already received.
    pub fn new(first: JobEvent, events: UnboundedReceiver<JobEvent>, tokenizer: Arc<Tokenizer>) -> Self {
        let mut stream = Self { events, tokenizer, ready: VecDeque::new(), ended: false };
        stream.convert(first);
        stream
    }

    fn convert(&mut self, event: JobEvent) {
        let item = |event: Event| Ok(v1::GenerateEvent { event: Some(event) });
        match event {
            JobEvent::Queued { position } => {
                self.ready.push_back(item(Event::Queued(v1::Queued { position: saturate(position) })));
            }
            JobEvent::Started { prompt_tokens, queue_time } => {
                self.ready.push_back(item(Event::Started(v1::Started {
                    prompt_tokens: saturate(prompt_tokens),
                    queue_time_us: micros(queue_time),
                })));
            }
            JobEvent::Token(token) => {
                let delta = self.text_delta(token);
                self.ready.push_back(item(Event::Text(delta)));
            }
            JobEvent::Finished(summary) => {
                self.ended = true;
                self.finish(summary);
            }
            JobEvent::Failed(message) => {
                self.ended = true;
                let code = v1::ErrorCode::Internal as i32;
                self.ready.push_back(item(Event::Error(v1::Error { code, message })));
            }
            JobEvent::Rejected(rejection) => {
                self.ended = true;
                self.ready.push_back(Err(RequestError::Rejected(rejection).into()));
            }
        }
    }

    fn text_delta(&self, token: TokenOutput) -> v1::TextDelta {
        let logprobs = token.logprobs.map(|logprobs| self.token_logprob(&logprobs)).into_iter().collect();
        v1::TextDelta { text: token.text, token_ids: vec![token.id], logprobs }
    }

    fn token_logprob(&self, logprobs: &TokenLogprobs) -> v1::TokenLogprob {
        let top = logprobs
            .top
            .iter()
            .map(|entry| v1::TopLogprob {
                token_id: entry.id,
                token: self.token_text(entry),
                logprob: entry.logprob,
            })
            .collect();
        v1::TokenLogprob {
            token_id: logprobs.chosen.id,
            token: self.token_text(&logprobs.chosen),
            logprob: logprobs.chosen.logprob,
            top,
        }
    }

    /// The text of one token on its own (special tokens spelled out).
    fn token_text(&self, entry: &Logprob) -> String {
        self.tokenizer.decode(&[entry.id], false).unwrap_or_default()
    }

    fn finish(&mut self, summary: FinishSummary) {
        let item = |event: Event| Ok(v1::GenerateEvent { event: Some(event) });
        if !summary.text.is_empty() {
            let delta = v1::TextDelta { text: summary.text, token_ids: Vec::new(), logprobs: Vec::new() };
            self.ready.push_back(item(Event::Text(delta)));
        }
        self.ready.push_back(item(Event::Usage(v1::Usage {
            prompt_tokens: saturate(summary.prompt_tokens),
            completion_tokens: saturate(summary.completion_tokens),
        })));
        let (reason, matched_stop) = finish_reason(summary.reason);
        self.ready.push_back(item(Event::Finished(v1::Finished {
            reason: reason as i32,
            matched_stop,
            prefill_time_us: micros(summary.prefill_time),
            decode_time_us: micros(summary.decode_time),
        })));
    }
}

impl Stream for GenerateStream {
    type Item = Result<v1::GenerateEvent, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(item) = self.ready.pop_front() {
                return Poll::Ready(Some(item));
            }
            if self.ended {
                return Poll::Ready(None);
            }
            match self.events.poll_recv(cx) {
                Poll::Ready(Some(event)) => self.convert(event),
                Poll::Ready(None) => {
                    self.ended = true;
                    return Poll::Ready(Some(Err(Status::internal(
                        "the engine stopped without ending the request",
                    ))));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

fn finish_reason(reason: FinishReason) -> (v1::FinishReason, String) {
    match reason {
        FinishReason::Stop => (v1::FinishReason::Stop, String::new()),
        FinishReason::StopString(stop) => (v1::FinishReason::StopString, stop),
        FinishReason::Length => (v1::FinishReason::Length, String::new()),
        FinishReason::ContextFull => (v1::FinishReason::ContextFull, String::new()),
        FinishReason::Deadline => (v1::FinishReason::Deadline, String::new()),
        FinishReason::Aborted => (v1::FinishReason::Aborted, String::new()),
        // A cancelled job has nobody to tell.
        FinishReason::Cancelled => (v1::FinishReason::Unspecified, String::new()),
    }
}

fn saturate(count: usize) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

fn micros(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
