//! HTTP-level tests: the real router on a loopback port in front of scripted fake workers that
//! run the real generated gRPC server.

// Test helpers outside #[test] functions unwrap too: a failure there is a failed test.
#![allow(clippy::unwrap_used)]

mod chat;
mod completions;
mod errors;
mod failover;
mod fake_worker;
mod harness;
mod metrics;
mod models;
