//! The path every generation takes, whatever its API: start it on a worker, then either stream its
//! output as server-sent events or collect it into one answer. The endpoint supplies the JSON.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use canopy_proto::Timestamp;
use canopy_proto::v1::{FinishReason, Finished, GenerateRequest, TextDelta, TokenLogprob, Usage};
use futures_util::{StreamExt, stream};
use serde_json::Value;
use tokio::time::Instant;

use super::error::ApiError;
use crate::dispatch::{Dispatch, Generation, Output};
use crate::metrics::{Metrics, RequestGuard, TokenTimer};
use crate::middleware::RequestId;
use crate::state::AppState;

/// The response header naming the worker that served a request, so a client or an operator can
/// see where it went.
const WORKER_HEADER: &str = "x-canopy-worker";

/// Renders one endpoint's stream chunks.
pub(crate) trait ChunkRenderer: Send + 'static {
    /// Chunks sent as soon as a worker started the request (e.g. the assistant role).
    fn opening(&mut self) -> Vec<Value>;
    /// The chunk for new text, if it has anything to show.
    fn text(&mut self, delta: &TextDelta) -> Option<Value>;
    /// The chunks that end the stream before `[DONE]`.
    fn closing(&mut self, finished: &Finished, usage: Option<&Usage>) -> Vec<Value>;
}

/// Everything a generation produced, for a non-streaming answer.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    pub(crate) text: String,
    pub(crate) logprobs: Vec<TokenLogprob>,
    pub(crate) usage: Usage,
    pub(crate) finished: Finished,
    pub(crate) worker: String,
}

/// A generation to run: the worker request and the request field holding its input.
pub(crate) struct Job {
    pub(crate) request: GenerateRequest,
    pub(crate) input_param: &'static str,
}

async fn start(
    state: &AppState,
    request_id: &RequestId,
    job: Job,
    buffered: bool,
) -> Result<Generation, ApiError> {
    let arrived = Instant::now();
    let mut request = job.request;
    request.request_id = request_id.as_str().to_string();
    let timeout = state.settings.request_timeout;
    request.deadline = timeout.map(|timeout| Timestamp::from(SystemTime::now() + timeout));
    let dispatch = Dispatch {
        request,
        input_param: job.input_param,
        deadline: timeout.map(|timeout| arrived + timeout),
        max_attempts: state.settings.max_retries.saturating_add(1),
        buffered,
    };
    Generation::start(state.pool.clone(), state.metrics.clone(), dispatch, TokenTimer::new(arrived)).await
}

/// Runs the job and collects its whole output. Dropping the returned future (the client went
/// away) drops the worker stream, which cancels the request there.
pub(crate) async fn collect(
    state: &AppState,
    request_id: &RequestId,
    job: Job,
) -> Result<Collected, ApiError> {
    let guard = state.metrics.track_request();
    let result = collect_output(state, request_id, job).await;
    guard.complete();
    result
}

async fn collect_output(state: &AppState, request_id: &RequestId, job: Job) -> Result<Collected, ApiError> {
    let mut generation = start(state, request_id, job, true).await?;
    let mut collected = Collected::default();
    while let Some(output) = generation.next().await? {
        match output {
            Output::Text(delta) => {
                collected.text.push_str(&delta.text);
                collected.logprobs.extend(delta.logprobs);
            }
            Output::Usage(usage) => collected.usage = usage,
            Output::Finished(finished) => collected.finished = finished,
            Output::Restarted => collected = Collected::default(),
        }
    }
    collected.worker = generation.worker().to_string();
    Ok(collected)
}

/// Runs the job and answers with an SSE stream once a worker started it; failures before that
/// are answered with their HTTP status, failures after it as a final `{"error": ...}` event.
pub(crate) async fn stream(
    state: &AppState,
    request_id: &RequestId,
    job: Job,
    renderer: impl ChunkRenderer,
) -> Result<Response, ApiError> {
    let guard = state.metrics.track_request();
    let generation = match start(state, request_id, job, false).await {
        Ok(generation) => generation,
        Err(error) => {
            guard.complete();
            return Err(error);
        }
    };
    let worker = generation.worker().to_owned();
    let metrics = state.metrics.clone();
    let body =
        SseBody { generation, renderer, guard: Some(guard), usage: None, phase: Phase::Opening, metrics };
    let events = stream::unfold(body, SseBody::step).flat_map(stream::iter).map(Ok::<Event, Infallible>);
    let mut response =
        Sse::new(events).keep_alive(KeepAlive::new().interval(state.settings.sse_keep_alive)).into_response();
    // Tells nginx-style proxies not to buffer the stream.
    response.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(with_worker_header(response, &worker))
}

/// A non-streaming answer: `body` as JSON, naming the worker that produced it.
pub(crate) fn json_answer(body: Value, worker: &str) -> Response {
    with_worker_header(axum::Json(body).into_response(), worker)
}

fn with_worker_header(mut response: Response, worker: &str) -> Response {
    if let Ok(worker) = HeaderValue::from_str(worker) {
        response.headers_mut().insert(WORKER_HEADER, worker);
    }
    response
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Opening,
    Running,
    Done,
}

/// The state of a streaming response body. It owns the generation, so dropping the body (the
/// client disconnected) drops the worker stream.
struct SseBody<R> {
    generation: Generation,
    renderer: R,
    guard: Option<RequestGuard>,
    usage: Option<Usage>,
    phase: Phase,
    metrics: Arc<Metrics>,
}

impl<R: ChunkRenderer> SseBody<R> {
    /// Produces the events of one step of the generation (possibly none) and the next state.
    async fn step(mut self) -> Option<(Vec<Event>, Self)> {
        let events = match self.phase {
            Phase::Done => return None,
            Phase::Opening => {
                self.phase = Phase::Running;
                self.renderer.opening().iter().map(json_event).collect()
            }
            Phase::Running => match self.generation.next().await {
                Ok(Some(Output::Text(delta))) => self.renderer.text(&delta).iter().map(json_event).collect(),
                Ok(Some(Output::Usage(usage))) => {
                    self.usage = Some(usage);
                    Vec::new()
                }
                Ok(Some(Output::Finished(finished))) => {
                    let mut events: Vec<Event> = self
                        .renderer
                        .closing(&finished, self.usage.as_ref())
                        .iter()
                        .map(json_event)
                        .collect();
                    events.push(Event::default().data("[DONE]"));
                    self.finish();
                    events
                }
                // A streamed dispatch is not buffered, so it never restarts after output.
                Ok(Some(Output::Restarted)) => Vec::new(),
                Ok(None) => {
                    self.finish();
                    vec![Event::default().data("[DONE]")]
                }
                Err(error) => {
                    self.metrics.record_error(error.code());
                    self.finish();
                    vec![json_event(&error.to_json())]
                }
            },
        };
        Some((events, self))
    }

    fn finish(&mut self) {
        self.phase = Phase::Done;
        if let Some(guard) = self.guard.take() {
            guard.complete();
        }
    }
}

fn json_event(value: &Value) -> Event {
    Event::default().data(value.to_string())
}

/// OpenAI's `finish_reason` for a worker's. A deadline or a shutdown cut the output short like a
/// length limit does; "length" tells clients the text is incomplete without inventing a value
/// that strict clients would reject.
pub(crate) fn finish_reason(finished: &Finished) -> &'static str {
    match finished.reason() {
        FinishReason::Unspecified | FinishReason::Stop | FinishReason::StopString => "stop",
        FinishReason::Length | FinishReason::ContextFull | FinishReason::Deadline | FinishReason::Aborted => {
            "length"
        }
    }
}

/// `{"prompt_tokens", "completion_tokens", "total_tokens"}`.
pub(crate) fn usage_json(usage: &Usage) -> Value {
    serde_json::json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": u64::from(usage.prompt_tokens) + u64::from(usage.completion_tokens),
    })
}

/// Seconds since the Unix epoch, for `created`.
pub(crate) fn unix_seconds() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs())
}
