//! Starts the real router on a loopback port and talks to it over HTTP.

use std::future::Future;
use std::time::Duration;

use canopy_router::{RouterConfig, RouterError};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// An address nothing listens on: a port bound then released.
pub async fn unreachable_address() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
    let address = listener.local_addr().expect("bound address");
    drop(listener);
    format!("grpc://{address}")
}

pub struct TestRouter {
    pub base: String,
    pub client: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), RouterError>>>,
}

/// Fast checks so the tests see health changes within a few tens of milliseconds.
pub fn fast_config(workers: &[&str]) -> RouterConfig {
    let mut config = RouterConfig::with_workers(workers.iter().map(|worker| worker.to_string()).collect());
    config.listen = "127.0.0.1:0".parse().expect("loopback address");
    config.health_interval = Duration::from_millis(25);
    config.health_timeout = Duration::from_millis(500);
    config.health_failure_threshold = 2;
    config.health_success_threshold = 1;
    config.connect_timeout = Duration::from_millis(500);
    config.state_min_interval = Duration::from_millis(5);
    config.state_max_interval = Duration::from_millis(500);
    config.sse_keep_alive = Duration::from_millis(100);
    config
}

impl TestRouter {
    pub async fn start(workers: &[&str]) -> Self {
        Self::start_with(fast_config(workers)).await
    }

    pub async fn start_with(config: RouterConfig) -> Self {
        let router = canopy_router::bind(config).await.expect("the router binds");
        let base = format!("http://{}", router.local_addr());
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(router.run(async {
            let _ = stop.await;
        }));
        Self { base, client: reqwest::Client::new(), shutdown: Some(shutdown), task: Some(task) }
    }

    /// Stops accepting, lets open requests finish, and returns what `run` returned.
    pub async fn stop(mut self) -> Result<(), RouterError> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let task = self.task.take().expect("running");
        task.await.expect("the router task does not panic")
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.expect("GET reaches the router")
    }

    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client.post(self.url(path)).json(body).send().await.expect("POST reaches the router")
    }

    /// Waits until `/ready` answers 200.
    pub async fn wait_ready(&self) {
        self.wait_until("the router to be ready", || async { self.get("/ready").await.status() == 200 })
            .await;
    }

    /// Waits until the metrics exposition holds `line`.
    pub async fn wait_for_metric(&self, line: &str) {
        self.wait_until(line, || async { self.metrics().await.lines().any(|found| found == line) }).await;
    }

    pub async fn metrics(&self) -> String {
        self.get("/metrics").await.text().await.expect("metrics text")
    }

    /// Polls `condition` (a cheap loopback request) every 10 ms for at most 10 seconds.
    pub async fn wait_until<F, Fut>(&self, what: &str, condition: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !condition().await {
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for TestRouter {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// The `data:` payloads of an SSE body, in order (comments and blank lines skipped).
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .flat_map(|event| event.lines())
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| data.trim_start().to_string())
        .collect()
}

/// The JSON payloads of an SSE body, without the final `[DONE]`.
pub fn sse_json(body: &str) -> Vec<Value> {
    sse_data(body)
        .iter()
        .filter(|data| data.as_str() != "[DONE]")
        .map(|data| serde_json::from_str(data).expect("every data line but [DONE] is JSON"))
        .collect()
}

/// Asserts an OpenAI error body with this status and code, and returns the error object.
pub async fn expect_error(response: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.expect("an error body is JSON");
    let error = body["error"].clone();
    assert_eq!(error["code"], code, "{body}");
    assert!(error["message"].as_str().is_some_and(|message| !message.is_empty()), "{body}");
    assert!(error.get("type").is_some_and(Value::is_string) && error.get("param").is_some(), "{body}");
    error
}
