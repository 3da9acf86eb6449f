//! The canopy router: a stateless axum front end speaking the OpenAI and Anthropic APIs that forwards
//! requests over gRPC to workers. It never links model or kernel code.
