//! A scripted worker: the real generated tonic server of `canopy.v1.Worker` plus the standard gRPC
//! health service, on a loopback port, answering Generate with a script and recording what it saw.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use canopy_proto::v1::generate_event::Event;
use canopy_proto::v1::worker_server::{Worker, WorkerServer};
use canopy_proto::v1::{
    CountTokensRequest, CountTokensResponse, FinishReason, Finished, GenerateEvent, GenerateRequest,
    InfoRequest, Queued, Started, StateRequest, TextDelta, Usage, WorkerInfo, WorkerState,
};
use tokio::sync::{Notify, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

/// One step of a scripted Generate stream.
#[derive(Debug, Clone)]
pub enum Step {
    Send(Event),
    Sleep(Duration),
    /// End the stream with this status.
    Fail(Status),
    /// Send nothing more and wait until the router drops the stream.
    Hang,
}

/// What a worker does with one Generate call: the steps of its stream, or a status at once.
pub type Script = Arc<dyn Fn(&GenerateRequest) -> Result<Vec<Step>, Status> + Send + Sync>;

/// A script that answers every request the same way.
pub fn always(steps: Vec<Step>) -> Script {
    Arc::new(move |_| Ok(steps.clone()))
}

/// A script that refuses every request with `status`.
pub fn refuse(status: Status) -> Script {
    Arc::new(move |_| Err(status.clone()))
}

pub fn started(prompt_tokens: u32) -> Step {
    Step::Send(Event::Started(Started { prompt_tokens, queue_time_us: 1500 }))
}

pub fn queued(position: u32) -> Step {
    Step::Send(Event::Queued(Queued { position }))
}

pub fn text(text: &str, token_id: u32) -> Step {
    Step::Send(Event::Text(TextDelta { text: text.into(), token_ids: vec![token_id], logprobs: vec![] }))
}

pub fn usage(prompt_tokens: u32, completion_tokens: u32) -> Step {
    Step::Send(Event::Usage(Usage { prompt_tokens, completion_tokens }))
}

pub fn finished(reason: FinishReason) -> Step {
    Step::Send(Event::Finished(Finished { reason: reason as i32, ..Finished::default() }))
}

/// Started, one text event per piece, Usage (7 prompt tokens, one per piece) and Finished.
pub fn reply(pieces: &[&str], reason: FinishReason) -> Vec<Step> {
    let mut steps = vec![started(7)];
    steps.extend(pieces.iter().zip(1..).map(|(piece, id)| text(piece, id)));
    steps.push(usage(7, pieces.len() as u32));
    steps.push(finished(reason));
    steps
}

/// What the worker observed, shared with the test.
#[derive(Default)]
struct Observed {
    requests: Mutex<Vec<GenerateRequest>>,
    request_arrived: Notify,
    cancelled: Mutex<usize>,
    cancellation: Notify,
}

pub struct FakeWorker {
    pub address: String,
    observed: Arc<Observed>,
    health: HealthReporter,
    state: watch::Sender<WorkerState>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl FakeWorker {
    /// Serves `model` with a 4096-token context on a free loopback port.
    pub async fn start(model: &str, script: Script) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let address: SocketAddr = listener.local_addr().expect("bound address");
        let observed = Arc::new(Observed::default());
        let (state, state_updates) = watch::channel(WorkerState::default());
        let (health, health_service) = tonic_health::server::health_reporter();
        health.set_serving::<WorkerServer<FakeService>>().await;
        let service = FakeService {
            info: WorkerInfo {
                model_id: model.into(),
                context_length: 4096,
                chat: true,
                ..WorkerInfo::default()
            },
            script,
            observed: observed.clone(),
            state_updates,
        };
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(health_service)
                .add_service(WorkerServer::new(service))
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stop.await;
                }),
        );
        Self { address: format!("grpc://{address}"), observed, health, state, shutdown: Some(shutdown) }
    }

    pub async fn set_serving(&self, serving: bool) {
        let status = if serving { ServingStatus::Serving } else { ServingStatus::NotServing };
        self.health.set_service_status("canopy.v1.Worker", status).await;
    }

    pub fn set_draining(&self, draining: bool) {
        self.state.send_modify(|state| state.draining = draining);
    }

    pub fn generate_calls(&self) -> usize {
        self.observed.requests.lock().unwrap().len()
    }

    pub fn last_request(&self) -> GenerateRequest {
        self.observed.requests.lock().unwrap().last().cloned().expect("the worker got a request")
    }

    /// Waits until the worker has received `count` Generate calls in all.
    pub async fn wait_for_requests(&self, count: usize) {
        wait_for(&self.observed.request_arrived, || self.generate_calls() >= count).await;
    }

    pub fn cancellations(&self) -> usize {
        *self.observed.cancelled.lock().unwrap()
    }

    /// Waits until the router has dropped `count` Generate streams before their end.
    pub async fn wait_for_cancellations(&self, count: usize) {
        wait_for(&self.observed.cancellation, || self.cancellations() >= count).await;
    }
}

impl Drop for FakeWorker {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// Waits on `notify` until `done` holds, failing the test after 10 seconds.
async fn wait_for(notify: &Notify, done: impl Fn() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let notified = notify.notified();
            if done() {
                return;
            }
            notified.await;
        }
    })
    .await;
    assert!(waited.is_ok(), "the fake worker did not see the expected event in time");
}

struct FakeService {
    info: WorkerInfo,
    script: Script,
    observed: Arc<Observed>,
    state_updates: watch::Receiver<WorkerState>,
}

impl Observed {
    fn cancelled(&self) {
        *self.cancelled.lock().unwrap() += 1;
        self.cancellation.notify_waiters();
    }
}

#[tonic::async_trait]
impl Worker for FakeService {
    type GenerateStream = ReceiverStream<Result<GenerateEvent, Status>>;
    type StateStream = ReceiverStream<Result<WorkerState, Status>>;

    async fn generate(
        &self,
        request: Request<GenerateRequest>,
    ) -> Result<Response<Self::GenerateStream>, Status> {
        let request = request.into_inner();
        let script = (self.script)(&request);
        self.observed.requests.lock().unwrap().push(request);
        self.observed.request_arrived.notify_waiters();
        let steps = script?;
        let (events, stream) = mpsc::channel(16);
        let observed = self.observed.clone();
        tokio::spawn(async move {
            for step in steps {
                match step {
                    Step::Send(event) => {
                        if events.send(Ok(GenerateEvent { event: Some(event) })).await.is_err() {
                            return observed.cancelled();
                        }
                    }
                    Step::Sleep(duration) => {
                        tokio::select! {
                            () = tokio::time::sleep(duration) => {}
                            () = events.closed() => return observed.cancelled(),
                        }
                    }
                    Step::Fail(status) => {
                        let _ = events.send(Err(status)).await;
                        return;
                    }
                    Step::Hang => {
                        events.closed().await;
                        return observed.cancelled();
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn info(&self, _request: Request<InfoRequest>) -> Result<Response<WorkerInfo>, Status> {
        Ok(Response::new(self.info.clone()))
    }

    /// Pushes the state at once, on every change, and as a heartbeat every `max_interval_ms`.
    async fn state(&self, request: Request<StateRequest>) -> Result<Response<Self::StateStream>, Status> {
        let heartbeat = Duration::from_millis(u64::from(request.into_inner().max_interval_ms.max(10)));
        let mut updates = self.state_updates.clone();
        let (states, stream) = mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                let state = *updates.borrow_and_update();
                if states.send(Ok(state)).await.is_err() {
                    return;
                }
                tokio::select! {
                    changed = updates.changed() => if changed.is_err() { return },
                    () = tokio::time::sleep(heartbeat) => {}
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn count_tokens(
        &self,
        _request: Request<CountTokensRequest>,
    ) -> Result<Response<CountTokensResponse>, Status> {
        Err(Status::unimplemented("the fake worker does not count tokens"))
    }
}
