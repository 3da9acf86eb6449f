//! Binding the listener, assembling the app, and serving until shutdown.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use crate::config::RouterConfig;
use crate::metrics::Metrics;
use crate::middleware;
use crate::openai;
use crate::openai::error::ApiError;
use crate::pool::{InvalidWorkerAddress, WorkerPool};
use crate::probes;
use crate::state::{AppState, Settings};

/// Why the router could not start or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    #[error(transparent)]
    InvalidWorkerAddress(#[from] InvalidWorkerAddress),
    #[error("cannot listen on {address}: {source}")]
    Bind { address: SocketAddr, source: io::Error },
    #[error("serving HTTP failed: {0}")]
    Serve(io::Error),
}

/// A router whose listener is bound and whose worker monitors run, ready to serve.
pub struct BoundRouter {
    listener: TcpListener,
    local_addr: SocketAddr,
    app: Router,
    pool: Arc<WorkerPool>,
    /// The worker monitor tasks; dropped (and so stopped) when serving ends.
    monitors: JoinSet<()>,
}

impl std::fmt::Debug for BoundRouter {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("BoundRouter").field("local_addr", &self.local_addr).finish_non_exhaustive()
    }
}

/// Binds the listen address and starts watching the workers. Workers that are down do not make
/// this fail; a malformed worker address or a busy port does.
pub async fn bind(config: RouterConfig) -> Result<BoundRouter, RouterError> {
    let pool = Arc::new(WorkerPool::new(&config)?);
    if config.workers.is_empty() {
        tracing::warn!("no workers configured: every generation request will get 503");
    }
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| RouterError::Bind { address: config.listen, source })?;
    let local_addr =
        listener.local_addr().map_err(|source| RouterError::Bind { address: config.listen, source })?;
    let monitors = pool.spawn_monitors(&config);
    let state = AppState {
        pool: pool.clone(),
        metrics: Arc::new(Metrics::new()),
        settings: Arc::new(Settings::from_config(&config, openai_now())),
    };
    Ok(BoundRouter { listener, local_addr, app: app(state), pool, monitors })
}

impl BoundRouter {
    /// The address actually bound (the real port when the configured one was 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// How many workers take requests now: their health check and Info answered, and they
    /// are serving and not draining. The monitors run from [`bind`] on, so this rises before
    /// [`run`](Self::run), which lets an embedder wait for its workers before it announces itself.
    pub fn ready_workers(&self) -> usize {
        self.pool.snapshots().iter().filter(|worker| worker.routable).count()
    }

    /// Serves until `shutdown` completes, then stops accepting and waits for open requests.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), RouterError> {
        let Self { listener, app, monitors, .. } = self;
        // Without TCP_NODELAY, Nagle's algorithm can hold the last bytes of an answer or an SSE
        // event until the client's delayed ACK (about 40 ms on Linux).
        let listener = listener.tap_io(|connection| {
            if let Err(error) = connection.set_nodelay(true) {
                tracing::debug!(%error, "cannot set TCP_NODELAY on a connection");
            }
        });
        let served = axum::serve(listener, app).with_graceful_shutdown(shutdown).await;
        drop(monitors);
        served.map_err(RouterError::Serve)
    }
}

/// Binds, prints `listening on ADDR` once bound, and serves until `shutdown` completes: what
/// `canopy router` runs, and what other commands embed.
pub async fn serve(
    config: RouterConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), RouterError> {
    let router = bind(config).await?;
    println!("listening on {}", router.local_addr());
    tracing::info!(address = %router.local_addr(), "router listening");
    router.run(shutdown).await
}

fn app(state: AppState) -> Router {
    Router::new()
        .route("/health", get(probes::live))
        .route("/ready", get(probes::ready))
        .route("/metrics", get(probes::metrics))
        .merge(openai::routes())
        .fallback(middleware::unknown_route)
        .method_not_allowed_fallback(middleware::method_not_allowed)
        .layer(DefaultBodyLimit::max(state.settings.max_body_bytes))
        .layer(CatchPanicLayer::custom(panic_response))
        .layer(axum::middleware::from_fn_with_state(state.clone(), middleware::record_http))
        .layer(axum::middleware::from_fn(middleware::assign_request_id))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::internal("The router failed while handling this request.").into_response()
}

fn openai_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs())
}
