//! End-to-end tests that start the real `canopy` binary on loopback (router, workers, serve) and
//! talk to it as clients do: HTTP for the OpenAI API, gRPC for the workers' own State. The tests
//! live in `tests/`, a benchmark in `examples/`; this library is their harness.
//!
//! The binary is the one `cargo test --workspace` builds for canopy-cli's own tests; see
//! [`binary`] for how it is found and why a stale one is refused.

// The harness runs inside tests: a failure in it is a failed test, said as plainly as possible.
#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

pub mod binary;
pub mod cluster;
pub mod http;
pub mod process;
pub mod worker_state;

/// The bundled model every test serves.
pub const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/tiny/qwen3-tiny.gguf");

/// The model id the test workers serve it under.
pub const MODEL_ID: &str = "tiny";

/// A greedy chat request that cannot end before `max_tokens` (the end token is ignored), asking
/// for usage at the end of a stream.
pub fn greedy_chat(max_tokens: u32, stream: bool) -> serde_json::Value {
    serde_json::json!({
        "model": MODEL_ID,
        "messages": [{"role": "user", "content": "Write a haiku about trees."}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": true,
        "stream": stream,
        "stream_options": if stream { serde_json::json!({"include_usage": true}) } else { serde_json::Value::Null },
    })
}
