//! The worker's gRPC daemon: the `canopy.v1.Worker` service in front of an
//! [`Engine`](crate::scheduler::Engine), the standard health service, and the drain on shutdown.
//!
//! Every request is checked completely before it is handed to the engine (sampling values, roles,
//! JSON fields, token ids, the prompt's length, the model's name), so that a refusal is a gRPC
//! status with a clear message ([`RequestError`]) and the engine only ever sees runnable jobs.
//! Chat input is rendered through the model's chat template, compiled once at start.

mod chat;
mod error;
mod events;
mod params;
mod prompt;
mod serve;
mod service;
mod state;
#[cfg(test)]
mod tests;

pub use error::RequestError;
pub use events::GenerateStream;
pub use serve::{ServeError, serve, shutdown_signal};
pub use service::{ServedModel, WorkerService};
pub use state::{DEFAULT_MAX_INTERVAL_MS, DEFAULT_MIN_INTERVAL_MS};
