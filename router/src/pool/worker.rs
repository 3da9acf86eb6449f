//! One worker as the router knows it: its connection, what it serves, its health and its load.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use canopy_proto::v1::{WorkerInfo, WorkerState};
use tonic::transport::{Channel, Endpoint};

use super::health::{Health, HealthTracker};

/// A worker address that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("worker address `{address}`: {reason}")]
pub struct InvalidWorkerAddress {
    /// The address as configured.
    pub address: String,
    /// Why it cannot be used.
    pub reason: String,
}

/// What the router learned about a worker from its checks, its Info and its State stream.
#[derive(Debug, Clone)]
pub(crate) struct WorkerStatus {
    /// The worker's answer to Info; kept while the worker is down so its model stays known.
    pub(crate) info: Option<WorkerInfo>,
    pub(crate) tracker: HealthTracker,
    /// The last answered health check said SERVING.
    pub(crate) serving: bool,
    /// The worker's last pushed load; `None` while no State stream is open.
    pub(crate) load: Option<WorkerState>,
    /// Info must be asked again (the worker came back, or refused a request for its model).
    pub(crate) info_stale: bool,
    /// The last failure, for /ready and the logs.
    pub(crate) last_error: Option<String>,
}

impl WorkerStatus {
    /// Whether new requests may go to this worker.
    pub(crate) fn routable(&self) -> bool {
        self.info.is_some()
            && self.tracker.health() == Health::Healthy
            && self.serving
            && !self.load.as_ref().is_some_and(|load| load.draining)
    }

    pub(crate) fn draining(&self) -> bool {
        self.load.as_ref().is_some_and(|load| load.draining)
    }
}

/// One configured worker, shared by the request handlers and its monitor tasks.
#[derive(Debug)]
pub(crate) struct Worker {
    /// The address as configured, used as its label in metrics and messages.
    pub(crate) address: String,
    pub(crate) channel: Channel,
    outstanding: AtomicUsize,
    status: Mutex<WorkerStatus>,
}

impl Worker {
    /// Prepares a lazily connected channel: nothing is dialed until the first call, and a broken
    /// connection is dialed again by the channel itself on the next call.
    pub(crate) fn new(
        address: &str,
        connect_timeout: Duration,
        tracker: HealthTracker,
    ) -> Result<Self, InvalidWorkerAddress> {
        let invalid = |reason: String| InvalidWorkerAddress { address: address.to_string(), reason };
        let uri = http_uri(address).map_err(invalid)?;
        let endpoint = Endpoint::from_shared(uri)
            .map_err(|err| invalid(err.to_string()))?
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            // Pings find a worker that vanished without closing its connection (power loss, a
            // partitioned network) while a stream is open and silent.
            .http2_keep_alive_interval(Duration::from_secs(10))
            .keep_alive_timeout(Duration::from_secs(5))
            .keep_alive_while_idle(true);
        Ok(Self {
            address: address.to_string(),
            channel: endpoint.connect_lazy(),
            outstanding: AtomicUsize::new(0),
            status: Mutex::new(WorkerStatus {
                info: None,
                tracker,
                serving: false,
                load: None,
                info_stale: true,
                last_error: None,
            }),
        })
    }

    /// The status, locked for a short read or update. A poisoned lock still holds a consistent
    /// status (every update is a plain field write), so it is used as is.
    pub(crate) fn status(&self) -> MutexGuard<'_, WorkerStatus> {
        self.status.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// Records a failed call seen by a request (not by the monitor), so that a dead worker leaves
    /// the rotation after `failure_threshold` failed requests even between two checks.
    pub(crate) fn record_call_failure(&self, error: &str) {
        let mut status = self.status();
        status.last_error = Some(error.to_string());
        if status.tracker.record_failure() {
            tracing::warn!(worker = %self.address, error, "worker marked unhealthy after failed requests");
        }
    }

    /// Asks the monitor to fetch Info again, e.g. after the worker refused our idea of its model.
    pub(crate) fn mark_info_stale(&self) {
        self.status().info_stale = true;
    }
}

/// A request's claim on a worker: counts as outstanding until dropped.
#[derive(Debug)]
pub(crate) struct WorkerLease {
    pub(crate) index: usize,
    pub(crate) worker: Arc<Worker>,
}

impl WorkerLease {
    pub(crate) fn new(index: usize, worker: Arc<Worker>) -> Self {
        worker.outstanding.fetch_add(1, Ordering::Relaxed);
        Self { index, worker }
    }
}

impl Drop for WorkerLease {
    fn drop(&mut self) {
        self.worker.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Turns a configured address into the http:// URI tonic dials. gRPC addresses are often written
/// grpc://host:port or as a bare host:port; TLS is not offered yet, so https and grpcs are refused
/// rather than silently sent in clear text.
fn http_uri(address: &str) -> Result<String, String> {
    let address = address.trim();
    let rest = match address.split_once("://") {
        Some(("grpc" | "http", rest)) => rest,
        Some(("grpcs" | "https", _)) => return Err("TLS to workers is not supported yet".into()),
        Some((scheme, _)) => return Err(format!("unknown scheme `{scheme}` (use grpc://host:port)")),
        None => address,
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') || !rest.contains(':') {
        return Err("expected grpc://host:port".into());
    }
    Ok(format!("http://{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_accept_grpc_http_and_bare_forms() {
        assert_eq!(http_uri("grpc://10.0.0.1:50051").as_deref(), Ok("http://10.0.0.1:50051"));
        assert_eq!(http_uri("http://worker-0:7000/").as_deref(), Ok("http://worker-0:7000"));
        assert_eq!(http_uri(" localhost:1 ").as_deref(), Ok("http://localhost:1"));
        assert_eq!(http_uri("grpc://[::1]:9").as_deref(), Ok("http://[::1]:9"));
    }

    #[test]
    fn addresses_without_port_or_with_tls_are_refused() {
        assert!(http_uri("grpc://worker").is_err());
        assert!(http_uri("grpcs://worker:1").is_err());
        assert!(http_uri("ftp://worker:1").is_err());
        assert!(http_uri("grpc://worker:1/path").is_err());
        assert!(http_uri("").is_err());
    }

    #[tokio::test]
    async fn a_lease_counts_as_outstanding_until_dropped() {
        let worker = Arc::new(
            Worker::new("grpc://127.0.0.1:1", Duration::from_secs(1), HealthTracker::new(1, 1)).unwrap(),
        );
        let first = WorkerLease::new(0, worker.clone());
        let second = WorkerLease::new(0, worker.clone());
        assert_eq!(worker.outstanding(), 2);
        drop(first);
        drop(second);
        assert_eq!(worker.outstanding(), 0);
    }
}
