//! What the router costs: the same one-token chat request sent straight to a worker over gRPC
//! and through the router over HTTP, on loopback with the bundled model. Prints latency
//! percentiles of sequential requests (the router's added latency is the difference) and
//! requests/s under concurrency. A measurement, not a test: nothing is asserted.
//!
//! ```sh
//! cargo build --release -p canopy-cli
//! cargo run --release -p canopy-integration-tests --example router_overhead -- [REQUESTS] [CONCURRENCY]
//! ```

// A benchmark harness: any failure should stop it loudly.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use canopy_integration_tests::MODEL_ID;
use canopy_integration_tests::cluster::Cluster;
use canopy_proto::v1::generate_event::Event;
use canopy_proto::v1::worker_client::WorkerClient;
use canopy_proto::v1::{self, chat_message, generate_request};
use serde_json::{Value, json};
use tonic::transport::Channel;

const PROMPT: &str = "Write a haiku about trees.";

fn grpc_request() -> v1::GenerateRequest {
    v1::GenerateRequest {
        model: MODEL_ID.to_owned(),
        input: Some(generate_request::Input::Chat(v1::ChatInput {
            messages: vec![v1::ChatMessage {
                role: "user".to_owned(),
                content: Some(chat_message::Content::Text(PROMPT.to_owned())),
                ..v1::ChatMessage::default()
            }],
            ..v1::ChatInput::default()
        })),
        max_tokens: Some(1),
        ..v1::GenerateRequest::default()
    }
}

fn http_request() -> Value {
    json!({"model": MODEL_ID, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 1})
}

/// One request straight to the worker, read to its Finished event.
async fn direct(mut client: WorkerClient<Channel>) {
    let mut stream = client.generate(grpc_request()).await.unwrap().into_inner();
    let mut finished = false;
    while let Some(event) = stream.message().await.unwrap() {
        finished |= matches!(event.event, Some(Event::Finished(_)));
    }
    assert!(finished, "the worker finished the request");
}

/// One request through the router, read to the end of its JSON answer.
async fn routed(client: reqwest::Client, url: String) {
    let response = client.post(url).json(&http_request()).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["usage"]["completion_tokens"], 1);
}

/// Latencies of `count` sequential calls, sorted.
async fn sequential<F, Fut>(count: usize, call: F) -> Vec<Duration>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        let started = Instant::now();
        call().await;
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

/// Requests per second with `concurrency` callers sending `count` requests in all.
async fn throughput<F, Fut>(count: usize, concurrency: usize, call: F) -> f64
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let started = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..concurrency {
        let share = count / concurrency + usize::from(caller < count % concurrency);
        let calls: Vec<Fut> = (0..share).map(|_| call()).collect();
        callers.spawn(async move {
            for request in calls {
                request.await;
            }
        });
    }
    callers.join_all().await;
    count as f64 / started.elapsed().as_secs_f64()
}

fn percentile(sorted: &[Duration], fraction: f64) -> f64 {
    let index = ((sorted.len() - 1) as f64 * fraction).round() as usize;
    sorted[index].as_secs_f64() * 1e3
}

fn report(name: &str, latencies: &[Duration]) {
    let mean = latencies.iter().sum::<Duration>().as_secs_f64() * 1e3 / latencies.len() as f64;
    println!(
        "{name:<22} mean {mean:6.3} ms  p50 {:6.3} ms  p90 {:6.3} ms  p99 {:6.3} ms",
        percentile(latencies, 0.5),
        percentile(latencies, 0.9),
        percentile(latencies, 0.99)
    );
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1).map(|arg| {
        arg.parse::<usize>()
            .map_err(|_| format!("usage: router_overhead [REQUESTS] [CONCURRENCY]; {arg:?} is not a count"))
    });
    let requests = args.next().transpose()?.unwrap_or(1000);
    let concurrency = args.next().transpose()?.unwrap_or(16);
    let cluster = Cluster::start(1, &["--max-running", "16"], &[]).await;
    let worker = format!("http://{}", cluster.workers[0].address);
    let grpc = WorkerClient::new(Channel::from_shared(worker).unwrap().connect().await.unwrap());
    let http = reqwest::Client::new();
    let url = cluster.http.url("/v1/chat/completions");
    let direct_call = || direct(grpc.clone());
    let routed_call = || routed(http.clone(), url.clone());

    // Warm up both paths (connections, allocator, caches).
    sequential(50, direct_call).await;
    sequential(50, routed_call).await;
    println!("{requests} one-token chat requests each way, one CPU worker, loopback");
    let direct_latency = sequential(requests, direct_call).await;
    let routed_latency = sequential(requests, routed_call).await;
    report("worker (gRPC)", &direct_latency);
    report("router (HTTP -> gRPC)", &routed_latency);
    println!(
        "router adds            p50 {:6.3} ms  mean {:6.3} ms",
        percentile(&routed_latency, 0.5) - percentile(&direct_latency, 0.5),
        (routed_latency.iter().sum::<Duration>().as_secs_f64()
            - direct_latency.iter().sum::<Duration>().as_secs_f64())
            * 1e3
            / requests as f64
    );
    let direct_rate = throughput(requests, concurrency, direct_call).await;
    let routed_rate = throughput(requests, concurrency, routed_call).await;
    println!(
        "{concurrency} concurrent callers: worker {direct_rate:7.0} req/s, router {routed_rate:7.0} req/s"
    );
    Ok(())
}
