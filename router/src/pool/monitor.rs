//! The background tasks that keep one worker's status current: periodic health checks (which also
//! fetch Info when needed) and a subscription to the worker's pushed load.

use std::sync::Arc;
use std::time::Duration;

use canopy_proto::v1::worker_client::WorkerClient;
use canopy_proto::v1::{InfoRequest, StateRequest, WorkerInfo};
use tokio::task::JoinSet;
use tokio::time::{MissedTickBehavior, sleep, timeout};
use tonic::Code;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::worker::Worker;
use crate::config::RouterConfig;
use crate::ids::jitter;

/// The health service name under which workers report their readiness (see worker.proto).
const WORKER_SERVICE: &str = "canopy.v1.Worker";

/// Shortest and longest wait before subscribing to a worker's State again.
const STATE_BACKOFF_MIN: Duration = Duration::from_millis(100);
const STATE_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Heartbeats a State stream may miss before the router gives up on it and subscribes again.
const MISSED_HEARTBEATS: u32 = 3;

#[derive(Debug, Clone)]
pub(super) struct MonitorSettings {
    health_interval: Duration,
    health_timeout: Duration,
    state_min_interval: Duration,
    state_max_interval: Duration,
}

impl MonitorSettings {
    pub(super) fn from_config(config: &RouterConfig) -> Self {
        Self {
            health_interval: config.health_interval,
            health_timeout: config.health_timeout,
            state_min_interval: config.state_min_interval,
            state_max_interval: config.state_max_interval,
        }
    }
}

pub(super) fn spawn(tasks: &mut JoinSet<()>, worker: Arc<Worker>, settings: MonitorSettings) {
    tasks.spawn(check_health(worker.clone(), settings.clone()));
    tasks.spawn(follow_state(worker, settings));
}

/// The outcome of one round of checks.
enum Probe {
    /// The worker answered its health check (and Info, when it was asked).
    Answered {
        serving: bool,
        info: Option<WorkerInfo>,
    },
    Failed(String),
}

async fn check_health(worker: Arc<Worker>, settings: MonitorSettings) {
    let mut health = HealthClient::new(worker.channel.clone());
    let mut client = WorkerClient::new(worker.channel.clone());
    let mut ticker = tokio::time::interval(settings.health_interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let probe = probe(&worker, &mut health, &mut client, settings.health_timeout).await;
        apply(&worker, probe);
    }
}

async fn probe(
    worker: &Worker,
    health: &mut HealthClient<Channel>,
    client: &mut WorkerClient<Channel>,
    deadline: Duration,
) -> Probe {
    let serving = match serving_status(health, deadline).await {
        Ok(status) => status == ServingStatus::Serving,
        Err(error) => return Probe::Failed(error),
    };
    // A loading worker may not answer Info yet; ask once it serves.
    if !serving || !worker.status().info_stale {
        return Probe::Answered { serving, info: None };
    }
    match timeout(deadline, client.info(InfoRequest {})).await {
        Ok(Ok(response)) => Probe::Answered { serving, info: Some(response.into_inner()) },
        Ok(Err(status)) => Probe::Failed(format!("Info failed: {}", status.message())),
        Err(_) => Probe::Failed(format!("Info took longer than {deadline:?}")),
    }
}

/// Asks the worker's own service name first, then the whole server's ("") for workers that only
/// report that one.
async fn serving_status(
    health: &mut HealthClient<Channel>,
    deadline: Duration,
) -> Result<ServingStatus, String> {
    let mut last_error = String::new();
    for service in [WORKER_SERVICE, ""] {
        let request = HealthCheckRequest { service: service.to_string() };
        match timeout(deadline, health.check(request)).await {
            Ok(Ok(response)) => {
                return Ok(
                    ServingStatus::try_from(response.into_inner().status).unwrap_or(ServingStatus::Unknown)
                );
            }
            Ok(Err(status)) if status.code() == Code::NotFound => last_error = status.message().to_string(),
            Ok(Err(status)) => return Err(format!("health check failed: {}", status.message())),
            Err(_) => return Err(format!("health check took longer than {deadline:?}")),
        }
    }
    Err(format!("health check failed: {last_error}"))
}

fn apply(worker: &Worker, probe: Probe) {
    let mut status = worker.status();
    match probe {
        Probe::Answered { serving, info } => {
            if let Some(info) = info {
                if status.info.as_ref().is_none_or(|known| known.model_id != info.model_id) {
                    tracing::info!(worker = %worker.address, model = %info.model_id,
                        context_length = info.context_length, "worker serves model");
                }
                status.info = Some(info);
                status.info_stale = false;
            }
            if status.serving != serving {
                tracing::info!(worker = %worker.address, serving, "worker readiness changed");
            }
            status.serving = serving;
            if status.tracker.record_success() {
                tracing::info!(worker = %worker.address, "worker healthy");
            }
        }
        Probe::Failed(error) => {
            if status.tracker.record_failure() {
                tracing::warn!(worker = %worker.address, %error, "worker unhealthy");
                // It may come back with another model: ask again then.
                status.info_stale = true;
            }
            status.last_error = Some(error);
        }
    }
}

async fn follow_state(worker: Arc<Worker>, settings: MonitorSettings) {
    let mut client = WorkerClient::new(worker.channel.clone());
    let request = StateRequest {
        min_interval_ms: millis(settings.state_min_interval),
        max_interval_ms: millis(settings.state_max_interval),
    };
    let silence_limit = settings.state_max_interval * MISSED_HEARTBEATS;
    let mut backoff = STATE_BACKOFF_MIN;
    loop {
        if let Ok(response) = client.state(request).await {
            let mut stream = response.into_inner();
            while let Ok(Ok(Some(state))) = timeout(silence_limit, stream.message()).await {
                backoff = STATE_BACKOFF_MIN;
                let mut status = worker.status();
                if status.draining() != state.draining {
                    tracing::info!(worker = %worker.address, draining = state.draining, "worker drain state changed");
                }
                status.load = Some(state);
            }
        }
        // Without a live stream the load is unknown; stale numbers would mislead the balancer.
        worker.status().load = None;
        sleep(jitter(backoff)).await;
        backoff = (backoff * 2).min(STATE_BACKOFF_MAX);
    }
}

fn millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}
