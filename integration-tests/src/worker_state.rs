//! A worker's own view of its load, from its gRPC `State` stream: what shows that a request
//! really stopped on the worker, not only in the router.

use canopy_proto::v1::worker_client::WorkerClient;
use canopy_proto::v1::{StateRequest, WorkerState};
use tonic::Streaming;

use crate::cluster::PATIENCE;

pub struct StateWatch {
    stream: Streaming<WorkerState>,
    /// The last state the worker pushed.
    pub last: WorkerState,
}

impl StateWatch {
    /// Subscribes to the State of the worker at `address` (`host:port`), pushed at most every
    /// 10 ms on a change.
    pub async fn connect(address: &str) -> Self {
        let mut client = WorkerClient::connect(format!("http://{address}")).await.unwrap();
        let request = StateRequest { min_interval_ms: 10, max_interval_ms: 1000 };
        let mut stream = client.state(request).await.unwrap().into_inner();
        let last = stream.message().await.unwrap().unwrap();
        Self { stream, last }
    }

    /// Waits until the worker reports a state for which `condition` holds, and returns it.
    pub async fn wait_for(&mut self, what: &str, condition: impl Fn(&WorkerState) -> bool) -> WorkerState {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !condition(&self.last) {
            let next = tokio::time::timeout_at(deadline, self.stream.message()).await;
            let next = next.unwrap_or_else(|_| panic!("timed out waiting for {what}; last: {:?}", self.last));
            self.last = next.unwrap().unwrap_or_else(|| panic!("the State stream ended before {what}"));
        }
        self.last
    }
}
