//! A router and its workers, each a real `canopy` process on a loopback port.

use std::time::Duration;

use serde_json::Value;

use crate::http::Client;
use crate::process::CanopyProcess;
use crate::{MODEL, MODEL_ID};

/// Router flags that notice a worker's health within a fraction of a second.
pub const FAST_HEALTH: &[&str] = &["--health-interval", "100ms", "--state-min-interval", "10ms"];

pub struct Cluster {
    pub router: CanopyProcess,
    pub workers: Vec<CanopyProcess>,
    pub http: Client,
}

impl Cluster {
    /// `workers` CPU workers serving the bundled model as [`MODEL_ID`] (each with `worker_args`
    /// too), and a router in front of them (with `router_args`), ready once the router routes to
    /// every worker.
    pub async fn start(workers: usize, worker_args: &[&str], router_args: &[&str]) -> Self {
        let workers: Vec<CanopyProcess> =
            (0..workers).map(|index| start_worker(index, worker_args)).collect();
        let addresses: Vec<String> =
            workers.iter().map(|worker| format!("grpc://{}", worker.address)).collect();
        let router = CanopyProcess::start(
            "router",
            ["router", "--listen", "127.0.0.1:0", "--workers", &addresses.join(",")]
                .iter()
                .chain(router_args),
        );
        let http = Client::new(&router.address);
        let cluster = Self { router, workers, http };
        cluster.wait_ready(cluster.workers.len()).await;
        cluster
    }

    /// Waits until `/ready` counts `count` ready workers.
    pub async fn wait_ready(&self, count: usize) {
        let what = format!("{count} ready workers");
        self.http
            .wait_until(&what, || async {
                let ready: Value = self.http.get("/ready").await.json().await.unwrap();
                ready["ready_workers"].as_u64() == Some(count as u64)
            })
            .await;
    }

    /// The worker that announced `address` (as `x-canopy-worker` names it, with or without
    /// `grpc://`).
    pub fn worker_at(&mut self, address: &str) -> &mut CanopyProcess {
        let address = address.trim_start_matches("grpc://");
        self.workers.iter_mut().find(|worker| worker.address == address).unwrap()
    }
}

/// A CPU worker serving the bundled model on a free port.
pub fn start_worker(index: usize, extra: &[&str]) -> CanopyProcess {
    let args =
        ["worker", "--model", MODEL, "--model-id", MODEL_ID, "--listen", "127.0.0.1:0", "--backend", "cpu"];
    CanopyProcess::start(&format!("worker {index}"), args.iter().chain(extra))
}

/// Generous for anything a test waits on: the machine may be a loaded 2-core CI box running
/// debug builds.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// `canopy serve` on a free port with the bundled model as [`MODEL_ID`], on the CPU whatever the
/// machine has (one worker), plus `extra` flags.
pub fn start_serve(extra: &[&str]) -> CanopyProcess {
    let args =
        ["serve", "--model", MODEL, "--model-id", MODEL_ID, "--listen", "127.0.0.1:0", "--backend", "cpu"];
    CanopyProcess::start("serve", args.iter().chain(extra))
}
