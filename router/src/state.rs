//! What every handler shares.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRef;

use crate::config::RouterConfig;
use crate::metrics::Metrics;
use crate::openai::json::BodyLimit;
use crate::pool::WorkerPool;

/// Per-request settings taken from the configuration.
#[derive(Debug)]
pub(crate) struct Settings {
    pub(crate) max_body_bytes: usize,
    pub(crate) request_timeout: Option<Duration>,
    pub(crate) max_retries: u32,
    pub(crate) sse_keep_alive: Duration,
    /// When the router started, in Unix seconds: the `created` of the models it lists.
    pub(crate) started_at: u64,
}

impl Settings {
    pub(crate) fn from_config(config: &RouterConfig, started_at: u64) -> Self {
        Self {
            max_body_bytes: config.max_body_bytes,
            request_timeout: config.request_timeout,
            max_retries: config.max_retries,
            sse_keep_alive: config.sse_keep_alive,
            started_at,
        }
    }
}

/// The state of the axum app: cheap to clone, everything behind `Arc`s.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    pub(crate) pool: Arc<WorkerPool>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) settings: Arc<Settings>,
}

impl FromRef<AppState> for BodyLimit {
    fn from_ref(state: &AppState) -> Self {
        BodyLimit(state.settings.max_body_bytes)
    }
}
