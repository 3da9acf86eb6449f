//! The canopy router: a stateless axum front end speaking the OpenAI API (Anthropic's comes later)
//! that forwards each request over gRPC to a worker daemon. It never links model or kernel code.
//!
//! Embed it with [`serve`] (or [`bind`] then [`BoundRouter::run`] to learn the bound port first):
//!
//! ```no_run
//! # async fn run() -> Result<(), canopy_router::RouterError> {
//! let config = canopy_router::RouterConfig::with_workers(vec!["grpc://127.0.0.1:50051".into()]);
//! canopy_router::serve(config, async { let _ = tokio::signal::ctrl_c().await; }).await
//! # }
//! ```

mod config;
mod dispatch;
mod ids;
mod metrics;
mod middleware;
mod openai;
mod pool;
mod probes;
mod server;
mod state;

pub use config::{RouterConfig, parse_duration};
pub use pool::InvalidWorkerAddress;
pub use server::{BoundRouter, RouterError, bind, serve};
