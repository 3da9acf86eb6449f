//! An HTTP client for the router, and the SSE and metrics formats it answers in.

use std::future::Future;
use std::time::Duration;

use serde_json::Value;

use crate::cluster::PATIENCE;

pub struct Client {
    pub base: String,
    pub inner: reqwest::Client,
}

impl Client {
    /// A client for the router at `address` (`host:port`).
    pub fn new(address: &str) -> Self {
        Self { base: format!("http://{address}"), inner: reqwest::Client::new() }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.inner.get(self.url(path)).send().await.unwrap()
    }

    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.inner.post(self.url(path)).json(body).send().await.unwrap()
    }

    /// POSTs a body that need not be JSON.
    pub async fn post_raw(&self, path: &str, body: &'static str) -> reqwest::Response {
        let request = self.inner.post(self.url(path)).header("content-type", "application/json");
        request.body(body).send().await.unwrap()
    }

    /// The metrics exposition.
    pub async fn metrics(&self) -> String {
        self.get("/metrics").await.text().await.unwrap()
    }

    /// The value of the metric sample named exactly `sample` (with its labels), if exposed.
    pub async fn metric(&self, sample: &str) -> Option<f64> {
        self.metrics().await.lines().find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == sample).then(|| value.parse().ok()).flatten()
        })
    }

    /// Polls `condition` (a cheap loopback request) every 20 ms until it holds, for at most
    /// [`PATIENCE`].
    pub async fn wait_until<F, Fut>(&self, what: &str, condition: F)
    where
        F: Fn() -> Fut,
        Fut: Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !condition().await {
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The `data:` payloads of an SSE body, in order (comments and blank lines skipped).
pub fn sse_data(body: &str) -> Vec<String> {
    body.lines().filter_map(|line| line.strip_prefix("data:")).map(|data| data.trim().to_owned()).collect()
}

/// The JSON events of an SSE body, after checking that it ends with `data: [DONE]`.
pub fn sse_events(body: &str) -> Vec<Value> {
    let data = sse_data(body);
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{body}");
    data[..data.len() - 1].iter().map(|event| serde_json::from_str(event).unwrap()).collect()
}

/// Reads a streaming response until `condition` holds for the body so far (or it ends).
pub async fn read_until(response: &mut reqwest::Response, condition: impl Fn(&str) -> bool) -> String {
    let mut body = String::new();
    while !condition(&body) {
        let chunk = tokio::time::timeout(PATIENCE, response.chunk()).await.unwrap().unwrap();
        let Some(chunk) = chunk else { break };
        body.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    body
}

/// Asserts an OpenAI error body with this status and code, and returns the error object.
pub async fn expect_error(response: reqwest::Response, status: u16, code: &str) -> Value {
    assert_eq!(response.status(), status);
    let body: Value = response.json().await.unwrap();
    let error = body["error"].clone();
    assert_eq!(error["code"], code, "{body}");
    assert!(error["message"].as_str().is_some_and(|message| !message.is_empty()), "{body}");
    error
}
