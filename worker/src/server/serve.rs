//! Serving a [`WorkerService`] with the gRPC health service, and the drain that ends it: on the
//! shutdown signal health turns NOT_SERVING and new requests are refused, the requests in flight
//! get a grace period to finish (then they are aborted), the engine stops, and the server closes.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use canopy_proto::v1::worker_server::{SERVICE_NAME, WorkerServer};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use super::service::WorkerService;
use crate::scheduler::Engine;

/// The longest wait for open connections (say, a client's health watch) once the engine has
/// stopped; past it the server closes them.
const CONNECTION_LINGER: Duration = Duration::from_secs(2);

/// Why serving ended other than by a drain.
#[derive(Debug, Error)]
pub enum ServeError {
    /// The gRPC transport failed.
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// The server task panicked or was cancelled.
    #[error("gRPC server task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Serves `service` and the health service on `listener` until `shutdown` completes, then
/// drains: in-flight requests get `drain_grace` to finish before they are aborted. Returns once
/// the engine has stopped and the server has closed.
pub async fn serve(
    listener: TcpListener,
    service: WorkerService,
    drain_grace: Duration,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let engine = Arc::clone(service.engine());
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, ServingStatus::Serving).await;
    let (close, closed) = oneshot::channel::<()>();
    let mut server = tokio::spawn(
        Server::builder()
            .add_service(health_service)
            .add_service(WorkerServer::new(service))
            // Without TCP_NODELAY, Nagle's algorithm holds a response's last small frames until
            // the client's delayed ACK: about 40 ms added to every short request on Linux.
            .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), async {
                // A dropped sender closes the server as well.
                let _ = closed.await;
            }),
    );
    tokio::select! {
        () = shutdown => {}
        result = &mut server => {
            // The server ended by itself: a transport failure.
            stop_engine(engine).await?;
            return Ok(result??);
        }
    }

    // Refuse new requests before announcing it: the engine takes the drain ahead of any request
    // submitted after it, so a client that sees NOT_SERVING is never served.
    engine.drain();
    set_health(&health, ServingStatus::NotServing).await;
    finish_in_flight(&engine, drain_grace).await;
    stop_engine(engine).await?;
    let _ = close.send(());
    match tokio::time::timeout(CONNECTION_LINGER, &mut server).await {
        Ok(result) => Ok(result??),
        Err(_) => {
            server.abort();
            Ok(())
        }
    }
}

/// Waits for the SIGTERM or Ctrl-C that starts a drain.
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    })
}

async fn set_health(health: &HealthReporter, status: ServingStatus) {
    health.set_service_status("", status).await;
    health.set_service_status(SERVICE_NAME, status).await;
}

/// Waits until the requests in flight of a draining engine end, aborting them after `grace`.
async fn finish_in_flight(engine: &Engine, grace: Duration) {
    let mut load = engine.load();
    let drained = tokio::time::timeout(grace, load.wait_for(|load| load.draining && load.is_idle())).await;
    if drained.is_err() {
        engine.abort();
    }
}

/// Stops the engine thread without blocking the runtime.
async fn stop_engine(engine: Arc<Engine>) -> Result<(), ServeError> {
    Ok(tokio::task::spawn_blocking(move || engine.stop()).await?)
}
