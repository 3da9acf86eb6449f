//! `/health` (liveness), `/ready` (readiness) and `/metrics`. All answer from memory at once, so
//! probes stay fast however busy the router is.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::state::AppState;

/// 200 while the process runs.
pub(crate) async fn live() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// 200 when at least one worker takes requests, else 503 with the reason and each worker's state.
pub(crate) async fn ready(State(state): State<AppState>) -> Response {
    let workers = state.pool.snapshots();
    let ready = workers.iter().filter(|worker| worker.routable).count();
    if ready > 0 {
        return Json(json!({"status": "ready", "ready_workers": ready, "workers": workers.len()}))
            .into_response();
    }
    let reason = if workers.is_empty() {
        "no workers are configured".to_string()
    } else {
        format!("none of the {} workers is ready", workers.len())
    };
    let details: Vec<Value> = workers
        .iter()
        .map(|worker| {
            json!({
                "address": worker.address,
                "model": worker.model_id,
                "healthy": worker.healthy,
                "draining": worker.draining,
                "last_error": worker.last_error,
            })
        })
        .collect();
    let body = json!({"status": "not_ready", "reason": reason, "workers": details});
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

/// The Prometheus (OpenMetrics) text exposition.
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let text = state.metrics.render(&state.pool);
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], text)
        .into_response()
}
