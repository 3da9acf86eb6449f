//! The workers the router forwards to: their background monitoring and the choice of a worker for
//! each request.

mod balance;
mod health;
mod monitor;
mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::task::JoinSet;

use crate::config::RouterConfig;
use balance::{Load, least_loaded};
use health::{Health, HealthTracker};
pub use worker::InvalidWorkerAddress;
pub(crate) use worker::{Worker, WorkerLease};

/// Why no worker could take a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RouteError {
    /// No worker serves this model, as far as the workers that answered Info say.
    UnknownModel,
    /// Workers serve the model (or no worker answered yet), but none can take a request now.
    NoWorkerAvailable { reason: String },
}

/// One model as the fleet serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServedModel {
    pub(crate) id: String,
    /// The smallest context window among the workers serving it: what fits everywhere.
    pub(crate) context_length: u32,
    pub(crate) ready_workers: usize,
}

/// A point-in-time view of one worker, for /ready and /metrics.
#[derive(Debug, Clone)]
pub(crate) struct WorkerSnapshot {
    pub(crate) address: String,
    pub(crate) model_id: Option<String>,
    pub(crate) healthy: bool,
    pub(crate) routable: bool,
    pub(crate) draining: bool,
    pub(crate) outstanding: usize,
    pub(crate) reported_queued: Option<u32>,
    pub(crate) last_error: Option<String>,
}

/// The configured workers. Each one's health, model and load is kept current by its monitor tasks.
#[derive(Debug)]
pub(crate) struct WorkerPool {
    workers: Vec<Arc<Worker>>,
    rotation: AtomicUsize,
}

impl WorkerPool {
    /// Prepares a lazily connected worker per address; fails only on a malformed address.
    pub(crate) fn new(config: &RouterConfig) -> Result<Self, InvalidWorkerAddress> {
        let workers = config
            .workers
            .iter()
            .map(|address| address.trim())
            .filter(|address| !address.is_empty())
            .map(|address| {
                let tracker =
                    HealthTracker::new(config.health_failure_threshold, config.health_success_threshold);
                Worker::new(address, config.connect_timeout, tracker).map(Arc::new)
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { workers, rotation: AtomicUsize::new(0) })
    }

    /// Starts the monitor tasks of every worker; they stop when the returned set is dropped.
    pub(crate) fn spawn_monitors(&self, config: &RouterConfig) -> JoinSet<()> {
        let settings = monitor::MonitorSettings::from_config(config);
        let mut tasks = JoinSet::new();
        for worker in &self.workers {
            monitor::spawn(&mut tasks, worker.clone(), settings.clone());
        }
        tasks
    }

    /// Leases the least loaded routable worker serving `model`, skipping the workers in `exclude`
    /// (those that already failed this request).
    pub(crate) fn route(&self, model: &str, exclude: &[usize]) -> Result<WorkerLease, RouteError> {
        let mut model_known = false;
        let mut candidates = Vec::new();
        let mut loads = Vec::new();
        for (index, worker) in self.workers.iter().enumerate() {
            let status = worker.status();
            let Some(info) = &status.info else { continue };
            if info.model_id != model {
                continue;
            }
            model_known = true;
            if status.routable() && !exclude.contains(&index) {
                let reported_depth =
                    status.load.as_ref().map_or(0, |load| load.queued.saturating_add(load.running));
                candidates.push(index);
                loads.push(Load { outstanding: worker.outstanding(), reported_depth });
            }
        }
        let rotation = self.rotation.fetch_add(1, Ordering::Relaxed);
        if let Some(choice) = least_loaded(&loads, rotation) {
            let index = candidates[choice];
            return Ok(WorkerLease::new(index, self.workers[index].clone()));
        }
        let any_model_known = self.workers.iter().any(|worker| worker.status().info.is_some());
        if any_model_known && !model_known {
            return Err(RouteError::UnknownModel);
        }
        let reason = if self.workers.is_empty() {
            "the router has no workers configured".to_string()
        } else if !any_model_known {
            "no worker has answered yet".to_string()
        } else if exclude.is_empty() {
            format!("every worker serving `{model}` is down, draining or starting")
        } else {
            format!("every worker serving `{model}` failed this request or is unavailable")
        };
        Err(RouteError::NoWorkerAvailable { reason })
    }

    /// Every model some worker has reported, sorted by id.
    pub(crate) fn models(&self) -> Vec<ServedModel> {
        let mut models: Vec<ServedModel> = Vec::new();
        for worker in &self.workers {
            let status = worker.status();
            let Some(info) = &status.info else { continue };
            let ready = usize::from(status.routable());
            match models.iter_mut().find(|model| model.id == info.model_id) {
                Some(model) => {
                    model.context_length = model.context_length.min(info.context_length);
                    model.ready_workers += ready;
                }
                None => models.push(ServedModel {
                    id: info.model_id.clone(),
                    context_length: info.context_length,
                    ready_workers: ready,
                }),
            }
        }
        models.sort_by(|a, b| a.id.cmp(&b.id));
        models
    }

    pub(crate) fn snapshots(&self) -> Vec<WorkerSnapshot> {
        self.workers
            .iter()
            .map(|worker| {
                let status = worker.status();
                WorkerSnapshot {
                    address: worker.address.clone(),
                    model_id: status.info.as_ref().map(|info| info.model_id.clone()),
                    healthy: status.tracker.health() == Health::Healthy,
                    routable: status.routable(),
                    draining: status.draining(),
                    outstanding: worker.outstanding(),
                    reported_queued: status.load.as_ref().map(|load| load.queued),
                    last_error: status.last_error.clone(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use canopy_proto::v1::{WorkerInfo, WorkerState};

    use super::*;

    /// A pool of never-dialed workers whose status the test sets by hand.
    fn pool(count: usize) -> WorkerPool {
        let addresses = (0..count).map(|index| format!("grpc://127.0.0.1:{}", 1 + index)).collect();
        WorkerPool::new(&RouterConfig::with_workers(addresses)).unwrap()
    }

    fn serve(pool: &WorkerPool, index: usize, model: &str, context_length: u32) {
        let mut status = pool.workers[index].status();
        status.info = Some(WorkerInfo { model_id: model.into(), context_length, ..WorkerInfo::default() });
        status.serving = true;
        status.tracker.record_success();
    }

    #[tokio::test]
    async fn nothing_known_yet_is_unavailable_not_unknown() {
        let pool = pool(2);
        assert!(matches!(pool.route("tiny", &[]), Err(RouteError::NoWorkerAvailable { .. })));
    }

    #[tokio::test]
    async fn a_model_no_worker_reported_is_unknown() {
        let pool = pool(2);
        serve(&pool, 0, "tiny", 100);
        assert_eq!(pool.route("other", &[]).unwrap_err(), RouteError::UnknownModel);
    }

    #[tokio::test]
    async fn a_known_model_whose_workers_are_down_is_unavailable() {
        let pool = pool(1);
        serve(&pool, 0, "tiny", 100);
        pool.workers[0].status().serving = false;
        assert!(matches!(pool.route("tiny", &[]), Err(RouteError::NoWorkerAvailable { .. })));
    }

    #[tokio::test]
    async fn routing_skips_draining_and_excluded_workers_and_prefers_the_idle() {
        let pool = pool(3);
        for index in 0..3 {
            serve(&pool, index, "tiny", 100);
        }
        pool.workers[0].status().load = Some(WorkerState { draining: true, ..WorkerState::default() });
        let busy = pool.route("tiny", &[2]).unwrap();
        assert_eq!(busy.index, 1);
        // Worker 1 now has a request open, so the idle worker 2 goes next, again and again.
        for _ in 0..3 {
            assert_eq!(pool.route("tiny", &[]).unwrap().index, 2);
        }
        drop(busy);
        assert!(matches!(pool.route("tiny", &[1, 2]), Err(RouteError::NoWorkerAvailable { .. })));
    }

    #[tokio::test]
    async fn models_are_listed_once_with_the_smallest_context() {
        let pool = pool(3);
        serve(&pool, 0, "tiny", 4096);
        serve(&pool, 1, "tiny", 2048);
        serve(&pool, 2, "big", 8192);
        pool.workers[2].status().serving = false;
        let models = pool.models();
        assert_eq!(
            models,
            vec![
                ServedModel { id: "big".into(), context_length: 8192, ready_workers: 0 },
                ServedModel { id: "tiny".into(), context_length: 2048, ready_workers: 2 },
            ]
        );
    }
}
