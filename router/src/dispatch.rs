//! Runs one generation on the workers: picks a worker, opens the Generate stream, and retries on
//! another worker while nothing has been sent to the client yet. The returned [`Generation`] owns
//! the gRPC stream: dropping it (because the client went away) cancels the request on the worker.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use canopy_proto::v1::generate_event::Event;
use canopy_proto::v1::worker_client::WorkerClient;
use canopy_proto::v1::{Finished, GenerateEvent, GenerateRequest, Started, TextDelta, Usage};
use tokio::time::Instant;
use tonic::{Code, Status, Streaming};

use crate::metrics::{Metrics, TokenTimer};
use crate::openai::error::ApiError;
use crate::pool::{RouteError, WorkerLease, WorkerPool};

/// How long past the request's deadline the router waits for the worker's own deadline answer
/// before giving up on it: the worker's answer (a final event) is the better one.
const DEADLINE_GRACE: Duration = Duration::from_millis(500);

/// What to generate and under which limits.
#[derive(Debug, Clone)]
pub(crate) struct Dispatch {
    pub(crate) request: GenerateRequest,
    /// The request field holding the input, named in a context-overflow error.
    pub(crate) input_param: &'static str,
    pub(crate) deadline: Option<Instant>,
    /// Workers tried at most: 1 + the configured retries.
    pub(crate) max_attempts: u32,
    /// The consumer holds the output back until the end (a non-streaming answer), so a failure
    /// after some output can still move to another worker: the client has seen nothing yet.
    pub(crate) buffered: bool,
}

/// One step of the worker's output, after it started the request.
#[derive(Debug)]
pub(crate) enum Output {
    Text(TextDelta),
    Usage(Usage),
    Finished(Finished),
    /// The request moved to another worker after some output: drop what was collected so far.
    /// Only a buffered dispatch produces it.
    Restarted,
}

/// Why one attempt on one worker failed.
struct Failure {
    /// Another worker may well succeed.
    retryable: bool,
    error: ApiError,
}

/// A message of the worker's stream that is not an event to act on.
enum Unusable {
    /// An event kind this router does not know.
    Skip,
    Failed(Failure),
}

use Unusable::{Failed, Skip};

/// The gRPC stream of the worker currently serving the request.
struct Attempt {
    lease: WorkerLease,
    events: Streaming<GenerateEvent>,
    /// An event read while waiting for Started that belongs to the output.
    pending: Option<Event>,
}

/// A generation a worker has started.
pub(crate) struct Generation {
    pool: Arc<WorkerPool>,
    metrics: Arc<Metrics>,
    dispatch: Dispatch,
    tried: Vec<usize>,
    attempt: Attempt,
    timer: TokenTimer,
    sent_output: bool,
    /// A failover after output happened and the consumer has not been told yet.
    restarted: bool,
    finished: bool,
}

impl Generation {
    /// Opens the request on the best worker, trying others while workers fail before starting it.
    pub(crate) async fn start(
        pool: Arc<WorkerPool>,
        metrics: Arc<Metrics>,
        dispatch: Dispatch,
        timer: TokenTimer,
    ) -> Result<Self, ApiError> {
        let mut tried = Vec::new();
        let attempt = open_with_retries(&pool, &metrics, &dispatch, &mut tried, None).await?;
        Ok(Self {
            pool,
            metrics,
            dispatch,
            tried,
            attempt,
            timer,
            sent_output: false,
            restarted: false,
            finished: false,
        })
    }

    /// The address of the worker serving the request now.
    pub(crate) fn worker(&self) -> &str {
        &self.attempt.lease.worker.address
    }

    /// The next piece of output, `Ok(None)` after Finished. Fails when the worker fails after
    /// output went out, or when no worker can take over before it did.
    pub(crate) async fn next(&mut self) -> Result<Option<Output>, ApiError> {
        loop {
            if self.finished {
                return Ok(None);
            }
            if std::mem::take(&mut self.restarted) {
                return Ok(Some(Output::Restarted));
            }
            let received = match self.attempt.pending.take() {
                Some(event) => Ok(Some(event)),
                None => self.receive().await?,
            };
            let failure = match received {
                Ok(Some(Event::Text(delta))) => {
                    self.sent_output = true;
                    self.timer.text(&self.metrics, delta.token_ids.len());
                    return Ok(Some(Output::Text(delta)));
                }
                Ok(Some(Event::Usage(usage))) => {
                    self.metrics.record_usage(&usage);
                    return Ok(Some(Output::Usage(usage)));
                }
                Ok(Some(Event::Finished(finished))) => {
                    self.finished = true;
                    return Ok(Some(Output::Finished(finished)));
                }
                Ok(Some(Event::Error(error))) => Failure {
                    retryable: true,
                    error: ApiError::worker_failed(format!("The worker failed: {}", error.message)),
                },
                // Late Queued or Started events, and event kinds of a newer worker, carry nothing
                // this router renders.
                Ok(Some(Event::Queued(_) | Event::Started(_))) | Err(Skip) => continue,
                Ok(None) => Failure {
                    retryable: true,
                    error: ApiError::worker_failed("The worker ended the stream before finishing."),
                },
                Err(Failed(failure)) => failure,
            };
            self.fail_over(failure).await?;
        }
    }

    /// Reads one event: `Err` only when the request's deadline passed.
    async fn receive(&mut self) -> Result<Result<Option<Event>, Unusable>, ApiError> {
        let message = within(self.dispatch.deadline, self.attempt.events.message()).await?;
        Ok(match message {
            Ok(Some(GenerateEvent { event: Some(event) })) => Ok(Some(event)),
            Ok(Some(GenerateEvent { event: None })) => Err(Skip),
            Ok(None) => Ok(None),
            Err(status) => Err(Failed(classify(&status, &self.attempt.lease, self.dispatch.input_param))),
        })
    }

    /// Moves the request to another worker if nothing was sent yet, otherwise reports the failure.
    async fn fail_over(&mut self, failure: Failure) -> Result<(), ApiError> {
        tracing::warn!(request_id = %self.dispatch.request.request_id, worker = %self.worker(),
            error = %failure.error, sent_output = self.sent_output, "generation failed on worker");
        if (self.sent_output && !self.dispatch.buffered) || !failure.retryable {
            return Err(failure.error);
        }
        if self.tried.len() >= self.dispatch.max_attempts as usize {
            self.metrics.record_retries_exhausted();
            return Err(failure.error);
        }
        self.metrics.record_retry(failure.error.code());
        let attempt =
            open_with_retries(&self.pool, &self.metrics, &self.dispatch, &mut self.tried, Some(failure))
                .await?;
        self.attempt = attempt;
        self.restarted = self.sent_output;
        self.sent_output = false;
        Ok(())
    }
}

/// Tries workers until one starts the request, the attempts run out, or a failure is final.
/// `previous` is the failure that led here, answered when no worker is left to try.
async fn open_with_retries(
    pool: &WorkerPool,
    metrics: &Metrics,
    dispatch: &Dispatch,
    tried: &mut Vec<usize>,
    mut previous: Option<Failure>,
) -> Result<Attempt, ApiError> {
    loop {
        let lease = match pool.route(&dispatch.request.model, tried) {
            Ok(lease) => lease,
            Err(route_error) => {
                return Err(match previous {
                    Some(failure) => failure.error,
                    None => route_error_to_api(route_error, &dispatch.request.model),
                });
            }
        };
        tried.push(lease.index);
        match open(lease, dispatch, metrics).await {
            Ok(attempt) => return Ok(attempt),
            Err(failure) if failure.retryable && tried.len() < dispatch.max_attempts as usize => {
                tracing::warn!(request_id = %dispatch.request.request_id, error = %failure.error,
                    "worker failed before starting the request; trying another");
                metrics.record_retry(failure.error.code());
                previous = Some(failure);
            }
            Err(failure) => {
                if failure.retryable {
                    metrics.record_retries_exhausted();
                }
                return Err(failure.error);
            }
        }
    }
}

/// Opens the Generate stream on one worker and reads it until the worker starts the request.
async fn open(lease: WorkerLease, dispatch: &Dispatch, metrics: &Metrics) -> Result<Attempt, Failure> {
    let mut call = tonic::Request::new(dispatch.request.clone());
    if let Some(deadline) = dispatch.deadline {
        call.set_timeout(deadline.saturating_duration_since(Instant::now()));
    }
    let mut client = WorkerClient::new(lease.worker.channel.clone());
    let response = within(dispatch.deadline, client.generate(call)).await.map_err(final_failure)?;
    let mut events = response.map_err(|status| classify(&status, &lease, dispatch.input_param))?.into_inner();
    loop {
        let message = within(dispatch.deadline, events.message()).await.map_err(final_failure)?;
        match message {
            Ok(Some(GenerateEvent { event: Some(Event::Started(started)) })) => {
                record_started(metrics, &started);
                return Ok(Attempt { lease, events, pending: None });
            }
            Ok(Some(GenerateEvent { event: Some(Event::Queued(_)) | None })) => {}
            // Output without Started: the worker skipped it; take the output as the start.
            Ok(Some(GenerateEvent { event: Some(event) })) => {
                return Ok(Attempt { lease, events, pending: Some(event) });
            }
            Ok(None) => {
                return Err(Failure {
                    retryable: true,
                    error: ApiError::worker_failed(
                        "The worker closed the stream before starting the request.",
                    ),
                });
            }
            Err(status) => return Err(classify(&status, &lease, dispatch.input_param)),
        }
    }
}

fn record_started(metrics: &Metrics, started: &Started) {
    metrics.record_queue_time(Duration::from_micros(started.queue_time_us));
}

fn final_failure(error: ApiError) -> Failure {
    Failure { retryable: false, error }
}

/// Awaits `future` until the request's deadline (plus a grace for the worker's own answer).
async fn within<F: Future>(deadline: Option<Instant>, future: F) -> Result<F::Output, ApiError> {
    match deadline {
        None => Ok(future.await),
        Some(deadline) => tokio::time::timeout_at(deadline + DEADLINE_GRACE, future).await.map_err(|_| {
            ApiError::deadline_exceeded("The request did not finish within the request timeout.")
        }),
    }
}

fn route_error_to_api(error: RouteError, model: &str) -> ApiError {
    match error {
        RouteError::UnknownModel => ApiError::model_not_found(model),
        RouteError::NoWorkerAvailable { reason } => {
            ApiError::no_worker_available(format!("No worker can take the request now: {reason}."))
        }
    }
}

/// Maps a worker's gRPC status to the client's error and whether another worker may succeed.
fn classify(status: &Status, lease: &WorkerLease, input_param: &str) -> Failure {
    let worker = &lease.worker;
    let message = status.message();
    let (retryable, error) = match status.code() {
        Code::InvalidArgument => (false, ApiError::rejected_by_worker(message)),
        Code::OutOfRange => (false, ApiError::context_length_exceeded(input_param, message)),
        Code::DeadlineExceeded => {
            (false, ApiError::deadline_exceeded(format!("The worker gave up: {message}")))
        }
        Code::ResourceExhausted => {
            (true, ApiError::queue_full(format!("The workers are at capacity: {message}")))
        }
        Code::FailedPrecondition => {
            // Our idea of the worker's model is out of date.
            worker.mark_info_stale();
            (true, ApiError::no_worker_available(format!("The worker refused the model: {message}")))
        }
        Code::Unavailable | Code::Cancelled | Code::Unknown | Code::Aborted => {
            worker.record_call_failure(message);
            (true, ApiError::no_worker_available(format!("The worker is unavailable: {message}")))
        }
        Code::Internal | Code::DataLoss => {
            (true, ApiError::worker_failed(format!("The worker failed: {message}")))
        }
        Code::Ok
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::Unauthenticated
        | Code::Unimplemented => {
            (false, ApiError::worker_failed(format!("The worker answered {:?}: {message}", status.code())))
        }
    };
    Failure { retryable, error }
}
