//! The `State` stream: the engine's load pushed at once, then on every change (coalesced to at
//! most one push per `min_interval`) and at least every `max_interval` as a heartbeat.

use std::time::Duration;

use canopy_proto::v1;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use crate::scheduler::EngineLoad;

/// Fewest milliseconds between two pushes when the client does not say.
pub const DEFAULT_MIN_INTERVAL_MS: u32 = 100;
/// Most milliseconds between two pushes when the client does not say.
pub const DEFAULT_MAX_INTERVAL_MS: u32 = 1000;

/// The push intervals a client asked for, defaults filled in.
fn intervals(request: &v1::StateRequest) -> (Duration, Duration) {
    let or_default =
        |ms: u32, default: u32| Duration::from_millis(u64::from(if ms == 0 { default } else { ms }));
    let min = or_default(request.min_interval_ms, DEFAULT_MIN_INTERVAL_MS);
    let max = or_default(request.max_interval_ms, DEFAULT_MAX_INTERVAL_MS).max(min);
    (min, max)
}

/// The response stream of one `State` call; it ends when the engine stops.
pub fn state_stream(
    mut load: watch::Receiver<EngineLoad>,
    request: &v1::StateRequest,
) -> ReceiverStream<Result<v1::WorkerState, Status>> {
    let (min, max) = intervals(request);
    let (sender, receiver) = mpsc::channel(1);
    tokio::spawn(async move {
        loop {
            let state = worker_state(&load.borrow_and_update());
            if sender.send(Ok(state)).await.is_err() {
                return;
            }
            tokio::select! {
                () = sender.closed() => return,
                () = tokio::time::sleep(min) => {}
            }
            tokio::select! {
                () = sender.closed() => return,
                changed = load.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(max - min) => {}
            }
        }
    });
    ReceiverStream::new(receiver)
}

fn worker_state(load: &EngineLoad) -> v1::WorkerState {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    v1::WorkerState {
        queued: count(load.queued),
        running: count(load.running),
        kv_blocks_used: load.kv_blocks_used as u64,
        kv_blocks_total: load.kv_blocks_total as u64,
        decode_tokens_per_second: load.decode_tokens_per_second,
        step_rate: load.step_rate,
        draining: load.draining,
        requests_started: load.requests_started,
        requests_finished: load.requests_finished,
        requests_cancelled: load.requests_cancelled,
        tokens_generated: load.tokens_generated,
    }
}
