//! The gRPC service over real loopback TCP: a tonic server on the tiny Qwen3 and the generated
//! clients.

mod errors;
mod generate;
mod lifecycle;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use canopy_models::chat_template::ChatTemplate;
use canopy_proto::v1::{self, generate_event::Event, worker_client::WorkerClient};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;

use super::{ServeError, ServedModel, WorkerService, serve};
use crate::scheduler::{Engine, SchedulerConfig};
use crate::test_model::{tiny_file, tiny_model, tiny_tokenizer};

/// The model id the test workers serve.
const MODEL_ID: &str = "qwen3-tiny";

/// A worker serving on a loopback port, with clients connected to it.
struct TestWorker {
    client: WorkerClient<Channel>,
    health: HealthClient<Channel>,
    shutdown: Option<oneshot::Sender<()>>,
    server: JoinHandle<Result<(), ServeError>>,
}

impl TestWorker {
    /// A worker running `max_running` sequences with room for `max_queued` more.
    async fn start(max_running: usize, max_queued: usize) -> Self {
        Self::start_with_grace(max_running, max_queued, Duration::from_secs(30)).await
    }

    async fn start_with_grace(max_running: usize, max_queued: usize, drain_grace: Duration) -> Self {
        let tokenizer = Arc::new(tiny_tokenizer());
        let template = ChatTemplate::for_model(&tiny_file(), &tokenizer, None).unwrap();
        let config = SchedulerConfig { max_running, max_queued, prefill_chunk: 32 };
        let engine = Engine::start(Arc::clone(&tokenizer), config, move || {
            Ok::<_, Infallible>(tiny_model(config.max_running, config.max_batch_tokens()))
        })
        .unwrap();
        let model = ServedModel {
            model_id: MODEL_ID.into(),
            architecture: "qwen3".into(),
            backend: "cpu".into(),
            device: "test CPU".into(),
        };
        let service = WorkerService::new(Arc::new(engine), tokenizer, Some(template), model, config);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (shutdown, signal) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, service, drain_grace, async {
            let _ = signal.await;
        }));
        let channel = Channel::from_shared(format!("http://{address}")).unwrap().connect().await.unwrap();
        Self {
            client: WorkerClient::new(channel.clone()),
            health: HealthClient::new(channel),
            shutdown: Some(shutdown),
            server,
        }
    }

    /// Starts the drain, as SIGTERM does.
    fn begin_shutdown(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Waits for the server to finish its drain and close.
    async fn finished(self) -> Result<(), ServeError> {
        self.server.await.unwrap()
    }
}

/// A greedy request for `max_tokens` tokens of `prompt` that ignores end-of-generation tokens.
fn prompt_request(prompt: &str, max_tokens: u32) -> v1::GenerateRequest {
    v1::GenerateRequest {
        input: Some(v1::generate_request::Input::Prompt(prompt.into())),
        max_tokens: Some(max_tokens),
        ignore_eos: true,
        ..v1::GenerateRequest::default()
    }
}

/// Reads a generation to its end; returns every event.
async fn collect(mut stream: tonic::Streaming<v1::GenerateEvent>) -> Vec<Event> {
    let mut events = Vec::new();
    while let Some(event) = stream.message().await.unwrap() {
        events.push(event.event.unwrap());
    }
    events
}

/// The token ids and text of a generation's events.
fn output(events: &[Event]) -> (Vec<u32>, String) {
    let mut ids = Vec::new();
    let mut text = String::new();
    for event in events {
        if let Event::Text(delta) = event {
            ids.extend(&delta.token_ids);
            text.push_str(&delta.text);
        }
    }
    (ids, text)
}

/// The `Finished` event of a generation.
fn finished(events: &[Event]) -> &v1::Finished {
    match events.last() {
        Some(Event::Finished(finished)) => finished,
        other => panic!("the stream ends with {other:?}"),
    }
}
