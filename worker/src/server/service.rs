//! The `canopy.v1.Worker` service: requests are checked and turned into jobs here; the engine
//! thread does the rest.

use std::sync::Arc;
use std::time::Instant;

use canopy_models::chat_template::ChatTemplate;
use canopy_models::tokenizer::Tokenizer;
use canopy_proto::v1::{self, worker_server::Worker};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::error::RequestError;
use super::events::GenerateStream;
use super::params;
use super::prompt::Prompter;
use super::state::state_stream;
use crate::engine::GenerateRequest;
use crate::scheduler::{Engine, Job, JobEvent, Rejection, SchedulerConfig};

/// What the worker serves, as `Info` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedModel {
    /// The name clients use in `model`.
    pub model_id: String,
    /// `general.architecture` of the model.
    pub architecture: String,
    /// `cpu` or `cuda`.
    pub backend: String,
    /// The device in words.
    pub device: String,
}

/// The gRPC service of one worker.
pub struct WorkerService {
    engine: Arc<Engine>,
    prompter: Prompter,
    info: v1::WorkerInfo,
}

impl WorkerService {
    /// A service in front of `engine`, which runs with `config`. `template` is the model's
    /// compiled chat template; without one, chat input is refused.
    pub fn new(
        engine: Arc<Engine>,
        tokenizer: Arc<Tokenizer>,
        template: Option<ChatTemplate>,
        model: ServedModel,
        config: SchedulerConfig,
    ) -> Self {
        let limits = engine.limits();
        let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let info = v1::WorkerInfo {
            model_id: model.model_id,
            architecture: model.architecture,
            context_length: count(limits.max_sequence_len),
            vocab_size: count(limits.vocab_size),
            draft_model_id: String::new(),
            draft_residency: v1::DraftResidency::None as i32,
            backend: model.backend,
            device: model.device,
            max_running: count(config.max_running),
            max_queued: count(config.max_queued),
            chat: template.is_some(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        };
        Self { prompter: Prompter::new(tokenizer, template, limits), engine, info }
    }

    /// The engine behind the service.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Refuses requests that name another model.
    fn check_model(&self, asked: &str) -> Result<(), RequestError> {
        if asked.is_empty() || asked == self.info.model_id {
            Ok(())
        } else {
            Err(RequestError::WrongModel { asked: asked.to_owned(), served: self.info.model_id.clone() })
        }
    }

    /// Checks every field of `request` and makes the job that runs it.
    fn job(
        &self,
        request: &v1::GenerateRequest,
        grpc_timeout: Option<&str>,
    ) -> Result<(Job, UnboundedReceiver<JobEvent>), RequestError> {
        if self.engine.load().borrow().draining {
            return Err(Rejection::Draining.into());
        }
        params::check_request_id(&request.request_id)?;
        self.check_model(&request.model)?;
        let sampling = params::sampling(request.sampling.as_ref())?;
        let stop = params::stop_conditions(request)?;
        let top_logprobs = params::top_logprobs(request.top_logprobs)?;
        let deadline = params::deadline(request.deadline.as_ref(), grpc_timeout, Instant::now())?;
        let prompt = self.prompter.generate_input(request.input.as_ref())?;
        let (mut job, events) = Job::new(GenerateRequest { prompt, sampling, stop, top_logprobs });
        job.priority = request.priority;
        job.deadline = deadline;
        Ok((job, events))
    }
}

#[tonic::async_trait]
impl Worker for WorkerService {
    type GenerateStream = GenerateStream;
    type StateStream = ReceiverStream<Result<v1::WorkerState, Status>>;

    async fn generate(
        &self,
        request: Request<v1::GenerateRequest>,
    ) -> Result<Response<GenerateStream>, Status> {
        let grpc_timeout = match request.metadata().get("grpc-timeout") {
            None => None,
            Some(value) => Some(
                value.to_str().map_err(|_| RequestError::invalid("grpc-timeout is not ASCII"))?.to_owned(),
            ),
        };
        let (job, mut events) = self.job(request.get_ref(), grpc_timeout.as_deref())?;
        self.engine.submit(job);
        // The first event says whether the job was taken; a refusal becomes the call's status.
        match events.recv().await {
            None => Err(Status::unavailable("the engine stopped")),
            Some(JobEvent::Rejected(rejection)) => Err(RequestError::Rejected(rejection).into()),
            Some(first) => {
                Ok(Response::new(GenerateStream::new(first, events, Arc::clone(self.prompter.tokenizer()))))
            }
        }
    }

    async fn info(&self, _request: Request<v1::InfoRequest>) -> Result<Response<v1::WorkerInfo>, Status> {
        Ok(Response::new(self.info.clone()))
    }

    async fn state(&self, request: Request<v1::StateRequest>) -> Result<Response<Self::StateStream>, Status> {
        Ok(Response::new(state_stream(self.engine.load(), request.get_ref())))
    }

    async fn count_tokens(
        &self,
        request: Request<v1::CountTokensRequest>,
    ) -> Result<Response<v1::CountTokensResponse>, Status> {
        let request = request.into_inner();
        self.check_model(&request.model)?;
        let tokens = self.prompter.count_input(request.input.as_ref())?;
        Ok(Response::new(v1::CountTokensResponse { tokens: u32::try_from(tokens).unwrap_or(u32::MAX) }))
    }
}
