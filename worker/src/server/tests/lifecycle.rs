//! State pushes, health, cancellation by a dropped stream, and the drain on shutdown.

use std::time::Duration;

use canopy_proto::v1::{self, generate_event::Event};
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;

use super::{TestWorker, collect, finished, prompt_request};

/// A State stream that pushes changes within 5 ms and a heartbeat every 200 ms.
async fn state(worker: &mut TestWorker) -> tonic::Streaming<v1::WorkerState> {
    let request = v1::StateRequest { min_interval_ms: 5, max_interval_ms: 200 };
    worker.client.state(request).await.unwrap().into_inner()
}

/// Reads pushes until one satisfies `done`.
async fn state_until(
    states: &mut tonic::Streaming<v1::WorkerState>,
    done: impl Fn(&v1::WorkerState) -> bool,
) -> v1::WorkerState {
    loop {
        let state = states.message().await.unwrap().expect("the state stream goes on");
        if done(&state) {
            return state;
        }
    }
}

#[tokio::test]
async fn state_pushes_follow_a_request_and_dropping_its_stream_cancels_it() {
    let mut worker = TestWorker::start(2, 4).await;
    let mut states = state(&mut worker).await;
    let first = states.message().await.unwrap().unwrap();
    assert_eq!((first.running, first.queued, first.requests_started), (0, 0, 0));
    assert!(first.kv_blocks_total > 0 && !first.draining);

    let events =
        collect(worker.client.generate(prompt_request("hello", 5)).await.unwrap().into_inner()).await;
    assert_eq!(finished(&events).reason(), v1::FinishReason::Length);
    let done = state_until(&mut states, |state| state.requests_finished == 1).await;
    assert_eq!((done.requests_started, done.tokens_generated, done.running), (1, 5, 0));

    // A long generation, dropped after its first token, is cancelled and leaves its slot.
    let mut stream = worker.client.generate(prompt_request("hello", 10_000)).await.unwrap().into_inner();
    while !matches!(stream.message().await.unwrap().unwrap().event, Some(Event::Text(_))) {}
    let busy = state_until(&mut states, |state| state.running == 1).await;
    assert!(busy.kv_blocks_used > 0);
    drop(stream);
    let after = state_until(&mut states, |state| state.requests_cancelled == 1).await;
    assert_eq!((after.running, after.requests_finished, after.kv_blocks_used), (0, 2, 0));
}

#[tokio::test]
async fn a_state_heartbeat_comes_without_changes() {
    let mut worker = TestWorker::start(1, 1).await;
    let request = v1::StateRequest { min_interval_ms: 1, max_interval_ms: 20 };
    let mut states = worker.client.state(request).await.unwrap().into_inner();
    for _ in 0..3 {
        assert_eq!(states.message().await.unwrap().unwrap().requests_started, 0);
    }
}

async fn health_of(worker: &mut TestWorker, service: &str) -> ServingStatus {
    let request = HealthCheckRequest { service: service.into() };
    worker.health.check(request).await.unwrap().into_inner().status()
}

#[tokio::test]
async fn drain_refuses_new_requests_and_lets_running_ones_finish() {
    let mut worker = TestWorker::start(2, 4).await;
    assert_eq!(health_of(&mut worker, "").await, ServingStatus::Serving);
    assert_eq!(health_of(&mut worker, "canopy.v1.Worker").await, ServingStatus::Serving);
    let mut watch =
        worker.health.watch(HealthCheckRequest { service: String::new() }).await.unwrap().into_inner();
    assert_eq!(watch.message().await.unwrap().unwrap().status(), ServingStatus::Serving);

    let mut running = worker.client.generate(prompt_request("hello", 40)).await.unwrap().into_inner();
    assert!(matches!(running.message().await.unwrap().unwrap().event, Some(Event::Started(_))));
    worker.begin_shutdown();
    assert_eq!(watch.message().await.unwrap().unwrap().status(), ServingStatus::NotServing);
    let refused = worker.client.generate(prompt_request("hi", 2)).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");

    let events = collect(running).await;
    assert_eq!(finished(&events).reason(), v1::FinishReason::Length);
    drop(watch);
    worker.finished().await.unwrap();
}

#[tokio::test]
async fn requests_past_the_drain_grace_are_aborted() {
    let mut worker = TestWorker::start_with_grace(1, 4, Duration::from_millis(50)).await;
    let mut running = worker.client.generate(prompt_request("hello", 100_000)).await.unwrap().into_inner();
    assert!(matches!(running.message().await.unwrap().unwrap().event, Some(Event::Started(_))));
    let waiting = worker.client.generate(prompt_request("hi", 2)).await.unwrap().into_inner();
    worker.begin_shutdown();
    let events = collect(running).await;
    assert_eq!(finished(&events).reason(), v1::FinishReason::Aborted);
    let mut waiting = waiting;
    let mut status = None;
    loop {
        match waiting.message().await {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(error) => {
                status = Some(error.code());
                break;
            }
        }
    }
    assert_eq!(status, Some(Code::Unavailable));
    worker.finished().await.unwrap();
}
