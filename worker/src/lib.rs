//! The canopy worker: the engine that owns one GPU and one target + drafter model pair, and the gRPC
//! daemon that serves it.
//!
//! - [`sampling`]: turning logits into tokens.
//! - [`engine`]: prompt in, streamed text out: prefill, decode, stop conditions.
//! - [`scheduler`]: continuous batching of many requests on the engine thread.
//! - [`server`]: the `canopy.v1.Worker` gRPC service, health and drain.
//! - [`bench`]: prefill, decode and forward-pass throughput of a model.

pub mod bench;
pub mod engine;
pub mod sampling;
pub mod scheduler;
pub mod server;
#[cfg(test)]
mod test_model;
