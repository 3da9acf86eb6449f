//! `GET /v1/models` and `GET /v1/models/{id}`: the models the workers serve. Answered from what the
//! workers reported, so a worker that is down never makes the list fail.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::error::ApiError;
use crate::pool::ServedModel;
use crate::state::AppState;

pub(crate) async fn list_models(State(state): State<AppState>) -> Json<Value> {
    let data: Vec<Value> =
        state.pool.models().iter().map(|model| card(model, state.settings.started_at)).collect();
    Json(json!({ "object": "list", "data": data }))
}

/// Model ids may contain slashes ("Qwen/Qwen3-8B"), so the id is the rest of the path.
pub(crate) async fn get_model(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state
        .pool
        .models()
        .iter()
        .find(|model| model.id == id)
        .map(|model| Json(card(model, state.settings.started_at)))
        .ok_or_else(|| ApiError::model_not_found(&id))
}

fn card(model: &ServedModel, created: u64) -> Value {
    json!({
        "id": model.id,
        "object": "model",
        "created": created,
        "owned_by": "canopy",
        "context_length": model.context_length,
        "ready": model.ready_workers > 0,
    })
}
