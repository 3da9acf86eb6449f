//! Layers around every route: request ids, HTTP metrics, and OpenAI-shaped answers for unknown
//! paths and methods.

use std::convert::Infallible;

use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, Method, Uri};
use axum::middleware::Next;
use axum::response::Response;
use tokio::time::Instant;

use crate::ids::random_hex;
use crate::openai::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// The header carrying a request's id in and out.
pub(crate) static REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id passed on (worker.proto allows 128 bytes).
const MAX_REQUEST_ID_BYTES: usize = 128;

/// The id of the request being handled: the client's `x-request-id` when it is usable, otherwise
/// one the router made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RequestId(String);

impl RequestId {
    fn generate() -> Self {
        Self(format!("req-{}", random_hex()))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(parts.extensions.get::<RequestId>().cloned().unwrap_or_else(RequestId::generate))
    }
}

/// Visible ASCII only, so the id is safe in logs, headers and gRPC metadata.
fn usable_request_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_REQUEST_ID_BYTES && id.bytes().all(|byte| byte.is_ascii_graphic())
}

/// Gives every request an id and echoes it in the response's `x-request-id`.
pub(crate) async fn assign_request_id(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(&REQUEST_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|id| usable_request_id(id))
        .map(|id| RequestId(id.to_string()))
        .unwrap_or_else(RequestId::generate);
    request.extensions_mut().insert(id.clone());
    let mut response = next.run(request).await;
    if let Ok(value) = HeaderValue::from_str(id.as_str()) {
        response.headers_mut().insert(REQUEST_ID_HEADER.clone(), value);
    }
    response
}

/// Counts responses by route, method and status, and error responses by code. Labels come from
/// fixed sets (route templates, known methods) so that clients cannot grow the metrics.
pub(crate) async fn record_http(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route =
        request.extensions().get::<MatchedPath>().map_or("unmatched", MatchedPath::as_str).to_string();
    let method = match *request.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    };
    let started = Instant::now();
    let response = next.run(request).await;
    state.metrics.record_http(&route, method, response.status().as_u16(), started.elapsed());
    if let Some(ErrorCode(code)) = response.extensions().get::<ErrorCode>() {
        state.metrics.record_error(code);
    }
    response
}

/// Answers paths no route serves.
pub(crate) async fn unknown_route(method: Method, uri: Uri) -> ApiError {
    ApiError::unknown_route(method.as_str(), uri.path())
}

/// Answers known paths asked with the wrong method.
pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), uri.path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_must_be_short_visible_ascii() {
        assert!(usable_request_id("abc-123_X.y"));
        assert!(!usable_request_id(""));
        assert!(!usable_request_id("has space"));
        assert!(!usable_request_id("naïve"));
        assert!(!usable_request_id(&"x".repeat(129)));
        assert!(usable_request_id(&"x".repeat(128)));
    }
}
