//! The router's Prometheus metrics. Each router owns its registry (nothing global), so several
//! routers can run in one process, as the tests do.

use std::sync::Arc;
use std::time::Duration;

use canopy_proto::v1::Usage;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use crate::pool::WorkerPool;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    route: String,
    method: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkerLabels {
    worker: String,
}

/// Durations from 1 ms to about 2 minutes (time to first token, queue time, request duration).
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

/// Durations from 0.25 ms to about 4 s (the time between two tokens).
fn token_gap_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.00025, 2.0, 15))
}

/// Every series the router exports, registered under the `canopy_router_` prefix.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    http_requests: Family<HttpLabels, Counter>,
    http_duration: Family<RouteLabels, Histogram, fn() -> Histogram>,
    errors: Family<CodeLabels, Counter>,
    in_flight: Gauge,
    client_disconnects: Counter,
    time_to_first_token: Histogram,
    inter_token_latency: Histogram,
    queue_time: Histogram,
    prompt_tokens: Counter,
    completion_tokens: Counter,
    retries: Family<CodeLabels, Counter>,
    retries_exhausted: Counter,
    worker_healthy: Family<WorkerLabels, Gauge>,
    worker_ready: Family<WorkerLabels, Gauge>,
    worker_draining: Family<WorkerLabels, Gauge>,
    worker_outstanding: Family<WorkerLabels, Gauge>,
    worker_queued: Family<WorkerLabels, Gauge>,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("canopy_router");
        let metrics = Self {
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(latency_histogram),
            errors: Family::default(),
            in_flight: Gauge::default(),
            client_disconnects: Counter::default(),
            time_to_first_token: latency_histogram(),
            inter_token_latency: token_gap_histogram(),
            queue_time: latency_histogram(),
            prompt_tokens: Counter::default(),
            completion_tokens: Counter::default(),
            retries: Family::default(),
            retries_exhausted: Counter::default(),
            worker_healthy: Family::default(),
            worker_ready: Family::default(),
            worker_draining: Family::default(),
            worker_outstanding: Family::default(),
            worker_queued: Family::default(),
            registry: Registry::default(),
        };
        registry.register(
            "http_requests",
            "HTTP requests answered, by route, method and status",
            metrics.http_requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "Time until the response headers were sent, by route",
            metrics.http_duration.clone(),
        );
        registry.register(
            "errors",
            "Error responses and failed streams, by error code",
            metrics.errors.clone(),
        );
        registry.register(
            "requests_in_flight",
            "Generation requests being handled",
            metrics.in_flight.clone(),
        );
        registry.register(
            "client_disconnects",
            "Generation requests whose client went away before the end",
            metrics.client_disconnects.clone(),
        );
        registry.register(
            "time_to_first_token_seconds",
            "Time from the request's arrival to its first output",
            metrics.time_to_first_token.clone(),
        );
        registry.register(
            "inter_token_latency_seconds",
            "Time between two outputs, per token",
            metrics.inter_token_latency.clone(),
        );
        registry.register(
            "queue_time_seconds",
            "Time requests waited in a worker's queue",
            metrics.queue_time.clone(),
        );
        registry.register("prompt_tokens", "Prompt tokens processed", metrics.prompt_tokens.clone());
        registry.register("completion_tokens", "Tokens generated", metrics.completion_tokens.clone());
        registry.register(
            "retries",
            "Requests moved to another worker before their first token, by the error that caused it",
            metrics.retries.clone(),
        );
        registry.register(
            "retries_exhausted",
            "Requests that failed after every allowed worker was tried",
            metrics.retries_exhausted.clone(),
        );
        registry.register(
            "worker_healthy",
            "1 while the worker passes its health checks",
            metrics.worker_healthy.clone(),
        );
        registry.register(
            "worker_ready",
            "1 while the worker takes new requests (healthy, serving, not draining)",
            metrics.worker_ready.clone(),
        );
        registry.register(
            "worker_draining",
            "1 while the worker reports that it is draining",
            metrics.worker_draining.clone(),
        );
        registry.register(
            "worker_outstanding_requests",
            "Requests this router has open on the worker",
            metrics.worker_outstanding.clone(),
        );
        registry.register(
            "worker_queued_requests",
            "Requests waiting in the worker's queue, as it last reported",
            metrics.worker_queued.clone(),
        );
        Self { registry, ..metrics }
    }

    /// Counts one HTTP response.
    pub(crate) fn record_http(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        self.http_requests
            .get_or_create(&HttpLabels { route: route.to_string(), method: method.to_string(), status })
            .inc();
        self.http_duration
            .get_or_create(&RouteLabels { route: route.to_string() })
            .observe(elapsed.as_secs_f64());
    }

    pub(crate) fn record_error(&self, code: &str) {
        self.errors.get_or_create(&CodeLabels { code: code.to_string() }).inc();
    }

    pub(crate) fn record_retry(&self, code: &str) {
        self.retries.get_or_create(&CodeLabels { code: code.to_string() }).inc();
    }

    pub(crate) fn record_retries_exhausted(&self) {
        self.retries_exhausted.inc();
    }

    pub(crate) fn record_queue_time(&self, waited: Duration) {
        self.queue_time.observe(waited.as_secs_f64());
    }

    pub(crate) fn record_usage(&self, usage: &Usage) {
        self.prompt_tokens.inc_by(u64::from(usage.prompt_tokens));
        self.completion_tokens.inc_by(u64::from(usage.completion_tokens));
    }

    /// Counts a generation request as in flight until the returned guard is dropped.
    pub(crate) fn track_request(self: &Arc<Self>) -> RequestGuard {
        self.in_flight.inc();
        RequestGuard { metrics: self.clone(), completed: false }
    }

    /// The Prometheus text exposition, with the workers' gauges read from the pool now.
    pub(crate) fn render(&self, pool: &WorkerPool) -> String {
        for worker in pool.snapshots() {
            let labels = WorkerLabels { worker: worker.address };
            self.worker_healthy.get_or_create(&labels).set(i64::from(worker.healthy));
            self.worker_ready.get_or_create(&labels).set(i64::from(worker.routable));
            self.worker_draining.get_or_create(&labels).set(i64::from(worker.draining));
            self.worker_outstanding
                .get_or_create(&labels)
                .set(i64::try_from(worker.outstanding).unwrap_or(i64::MAX));
            self.worker_queued.get_or_create(&labels).set(i64::from(worker.reported_queued.unwrap_or(0)));
        }
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// A generation request in flight. Dropped without [`RequestGuard::complete`], it counts as a
/// client that went away (the handler or the stream was dropped mid-way).
#[derive(Debug)]
pub(crate) struct RequestGuard {
    metrics: Arc<Metrics>,
    completed: bool,
}

impl RequestGuard {
    pub(crate) fn complete(mut self) {
        self.completed = true;
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.metrics.in_flight.dec();
        if !self.completed {
            self.metrics.client_disconnects.inc();
        }
    }
}

/// Times the outputs of one request: the first against the request's arrival, later ones against
/// the previous output, spread over the tokens they carry (a speculative step yields several).
#[derive(Debug)]
pub(crate) struct TokenTimer {
    arrived: Instant,
    last_output: Option<Instant>,
}

impl TokenTimer {
    pub(crate) fn new(arrived: Instant) -> Self {
        Self { arrived, last_output: None }
    }

    pub(crate) fn text(&mut self, metrics: &Metrics, tokens: usize) {
        let now = Instant::now();
        match self.last_output {
            None => metrics.time_to_first_token.observe((now - self.arrived).as_secs_f64()),
            Some(last) => {
                let per_token = (now - last).as_secs_f64() / tokens.max(1) as f64;
                metrics.inter_token_latency.observe(per_token);
            }
        }
        self.last_output = Some(now);
    }
}
