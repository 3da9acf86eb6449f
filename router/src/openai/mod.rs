//! The OpenAI-compatible API: chat completions, completions and models.

mod chat;
mod chat_request;
mod completions;
pub(crate) mod error;
pub(crate) mod json;
mod logprobs;
mod models;
mod params;
mod respond;

use axum::Router;
use axum::routing::{get, post};

use crate::state::AppState;

/// The `/v1/...` routes.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/models", get(models::list_models))
        .route("/v1/models/{*id}", get(models::get_model))
}
