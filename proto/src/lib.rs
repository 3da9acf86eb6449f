//! The `canopy.v1` worker protocol: protobuf definitions and generated tonic code.
//!
//! The service definition arrives with the serving path; until then this crate only fixes its place in
//! the dependency graph (`router -> proto`, `worker -> proto`).
